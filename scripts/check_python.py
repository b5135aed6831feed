"""Whether a Python can run the kit, and whether .venv was made by the Python asked for; runs on Python 3.6 or newer.

    python3 scripts/check_python.py            exit 0, or 1 with what to install when this Python is too old
    python3 scripts/check_python.py --venv .venv
                                                exit 0 when .venv's Python has this one's version, else 3 (rebuild it)

`make setup` calls both before it creates or reuses .venv, so an old Python stops with a plain message instead of pip's
``ResolutionImpossible``, and a .venv left by another Python is made again. The version needed is pyproject.toml's
``requires-python``.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def required():
    """(major, minor) from pyproject.toml's requires-python = ">=X.Y"."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        m = re.search(r'^requires-python\s*=\s*">=\s*(\d+)\.(\d+)', f.read(), re.MULTILINE)
    if not m:
        raise SystemExit("pyproject.toml: no requires-python = \">=X.Y\" line")
    return int(m.group(1)), int(m.group(2))


def too_old(found, need):
    """The message for a Python older than the kit needs, or None."""
    if tuple(found) >= tuple(need):
        return None
    want = f"{need[0]}.{need[1]}"
    return (f"make setup needs Python >= {want}; this one ({sys.executable}) is {found[0]}.{found[1]}. Install Python "
            f"{want} or newer (e.g. `uv python install {want}`, `pyenv install {want}`, `conda create -n tiebias "
            f"python={want}`, or your system's python{want} package), then run: make setup PYTHON=python{want}")


def venv_version(venv):
    """(major, minor) of the venv's Python, or None when it is missing or does not run."""
    exe = os.path.join(venv, "bin", "python")
    if not os.access(exe, os.X_OK):
        return None
    try:
        out = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=60).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def main(argv):
    found = tuple(int(x) for x in argv[argv.index("--version") + 1].split(".")[:2]) if "--version" in argv \
        else sys.version_info[:2]
    if "--venv" in argv:
        venv = argv[argv.index("--venv") + 1]
        have = venv_version(venv)
        if have is not None and have != tuple(found):
            print(f"{venv} was made with Python {have[0]}.{have[1]}, not this one ({found[0]}.{found[1]}): making it "
                  "again")
            return 3
        return 0
    msg = too_old(found, required())
    if msg:
        print(msg, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
