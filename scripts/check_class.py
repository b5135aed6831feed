"""Before a class: is this machine ready, and fast enough, for the lesson? Run by ``make check-class`` (after
``make setup``).

Checks, each on one line with what to do when it fails: the Python and its packages (torch, transformers, tuned-lens,
JupyterLab), Chromium (optional: only the walkthrough's PNGs and the browser test need it), the environment's size on
disk and what building it downloads, and a plumbing run, the smoke study of all four notebooks in a temporary folder.
It ends with a verdict (:func:`verdict`): this machine's plumbing time against the reference
plumbing time that ``scripts/time_class.py`` measured together with the class run (``notebooks/class_timing.json``),
the class time predicted here, and whether each notebook ends within its block of TEACHING.md's plan.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
PACKAGES = ("torch", "transformers", "tuned_lens", "jupyterlab", "papermill", "plotly", "ipywidgets")


def folder_bytes(path: Path) -> int:
    """Bytes of every regular file under ``path`` (links not followed)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def verdict(plumbing_seconds: float, timing: dict) -> tuple[bool, list[str]]:
    """``make check-class``'s verdict: (ready, lines) from this machine's plumbing time against the stored one, the
    class time predicted from their ratio, and whether each notebook fits its block."""
    from tiebias.teach import schedule

    ref = float(timing["plumbing_seconds"])
    slowdown = plumbing_seconds / ref
    seconds = {k: float(v) for k, v in timing["class_seconds"].items()}
    predicted = sum(seconds.values()) * slowdown
    lines = [f"plumbing run: {plumbing_seconds:.0f} s here, {ref:.0f} s on the machine that measured the class run "
             f"({timing['cpu']}): this machine takes {slowdown:.2f}x as long",
             f"class run predicted here: {predicted / 60:.1f} min ("
             + ", ".join(f"{k} {v * slowdown:.0f} s" for k, v in seconds.items())
             + f"; measured there: {sum(seconds.values()) / 60:.1f} min)"]
    late = schedule.check(seconds, slowdown)
    if late:
        lines += [f"too slow for the plan's minute marks: {x}" for x in late]
        lines.append("on this machine, run the class study before the lesson (make study PROFILE=class) and open "
                     "its executed notebooks (runs/class/notebooks/) in the lesson instead of running them")
    else:
        lines.append("every notebook ends within its block of TEACHING.md's plan")
    return not late, lines


def main() -> int:
    from tiebias.teach import schedule

    ok = True
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    print(f"python {sys.version.split()[0]} at {sys.executable}: "
          + ("packages ok" if not missing else f"missing {', '.join(missing)}: run make setup"))
    ok &= not missing
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    print(f"chromium: {chromium or 'not found (optional: only the walkthrough PNGs and the browser test need it)'}")
    try:
        timing = schedule.load_timing()
    except ValueError as e:
        print(f"no reference timing: {e}")
        timing = None
    if timing:
        fields = schedule.timing_fields(timing)
        print(f"disk: the environment takes {folder_bytes(Path(sys.prefix)) / 1e9:.1f} GB here ({fields['venv']} "
              f"where the class run was measured); building it downloads {fields['download']}: students should run "
              "make check-class before the lesson")
    with tempfile.TemporaryDirectory(prefix="tiebias-check-") as tmp:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "tiebias", "study", "--profile", "smoke", "--run-dir",
                            str(Path(tmp) / "smoke")], capture_output=True, text=True, cwd=ROOT)
        took = time.perf_counter() - t0
    if p.returncode:
        print(f"plumbing run failed (exit {p.returncode}) after {took:.0f} s:\n{(p.stdout + p.stderr)[-2000:]}")
        ok = False
    elif timing:
        fits, lines = verdict(took, timing)
        print("\n".join(lines))
        ok &= fits
    else:
        print(f"plumbing run (smoke profile, all four notebooks): ok in {took:.0f} s; no reference to compare with")
    print("VERDICT: ready for the class: make lab" if ok else "VERDICT: NOT ready: see the lines above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
