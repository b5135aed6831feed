"""Before a class: is this machine ready to run the four notebooks? Run by ``make check-class`` (after ``make setup``).

Checks, each on one line with what to do when it fails: the Python and its packages (torch, transformers, tuned-lens,
JupyterLab), the embedded corpus, Chromium (optional: only the walkthrough's PNGs and the browser test need it), and a
plumbing run, the smoke study of all four notebooks in a temporary folder (about a minute or two). It ends with the
class run's time as the walkthrough measured it, read from ``walkthrough/README.md``.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("torch", "transformers", "tuned_lens", "jupyterlab", "papermill", "plotly", "ipywidgets")


def class_seconds() -> int | None:
    """The walkthrough's class run: the sum of its notebooks' run times (None when the index has none)."""
    index = ROOT / "walkthrough" / "README.md"
    times = re.findall(r"^\| \[\d\d_\w+\]\(\d\d_\w+\.md\) \| .* \| (\d+) s \|$", index.read_text(encoding="utf-8"),
                       re.MULTILINE) if index.is_file() else []
    return sum(map(int, times)) if times else None


def main() -> int:
    ok = True
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    print(f"python {sys.version.split()[0]} at {sys.executable}: "
          + ("packages ok" if not missing else f"missing {', '.join(missing)}: run make setup"))
    ok &= not missing
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    print(f"chromium: {chromium or 'not found (optional: only the walkthrough PNGs and the browser test need it)'}")
    with tempfile.TemporaryDirectory(prefix="tiebias-check-") as tmp:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "tiebias", "study", "--profile", "smoke", "--run-dir",
                            str(Path(tmp) / "smoke")], capture_output=True, text=True, cwd=ROOT)
        took = time.perf_counter() - t0
        if p.returncode == 0:
            print(f"plumbing run (smoke profile, all four notebooks): ok in {took:.0f} s")
        else:
            ok = False
            print(f"plumbing run failed (exit {p.returncode}) after {took:.0f} s:\n{(p.stdout + p.stderr)[-2000:]}")
    secs = class_seconds()
    if secs is not None:
        print(f"the class profile took {secs // 60} min {secs % 60} s for all four notebooks in the walkthrough's run; "
              "a slower machine scales about as the plumbing run does")
    print("ready for the class: make lab" if ok else "NOT ready: fix the lines above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
