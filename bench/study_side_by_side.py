"""A study's wall time at two commits, side by side (one sitting, one machine, each from a fresh clone), and how
far its claims moved.

For each commit (old first): a fresh clone set up with ``make setup`` (``bench/clones.py``, not timed), then
``python -m tiebias study --profile PROFILE`` into a new run folder inside the clone, timed. Prints each notebook's
time (the executed notebooks' papermill cell durations), the wall times and their ratio new / old, then every
claim number that differs between the two runs, in units of that claim's seed sd (``scripts/compare_claims.py``;
a change that leaves the numerics alone prints "identical"). Run it on an otherwise quiet machine::

    python bench/study_side_by_side.py 5803a75 HEAD [--profile default] [--keep DIR]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from clones import REPO, clones_root, commits_parser, fresh_clone, short

sys.path.insert(0, str(REPO / "scripts"))
from compare_claims import claims_of, differences  # noqa: E402


def notebook_seconds(run: Path) -> dict[str, float]:
    """Seconds each executed notebook of ``run`` spent in its cells (papermill's per-cell durations)."""
    out = {}
    for nb in sorted((run / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        out[nb.stem] = sum(c.get("metadata", {}).get("papermill", {}).get("duration") or 0 for c in cells)
    return out


def timed_study(commit: str, root: Path, profile: str) -> tuple[float, Path]:
    """Clone and set up ``commit`` in ``root``, run the study there; (wall seconds, run folder)."""
    clone = fresh_clone(commit, root)
    run = clone / "runs" / profile
    with (clone / "study.log").open("w") as log:
        t0 = time.perf_counter()
        res = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-m", "tiebias", "study", "--profile", profile,
                              "--run-dir", str(run)], cwd=clone, stdout=log, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - t0
    if res.returncode:
        sys.exit(f"{commit}: the study failed (exit {res.returncode}); see {clone / 'study.log'}")
    return wall, run


def main() -> None:
    ap = commits_parser(__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default", help="the study's profile (default: default)")
    args = ap.parse_args()
    short(args.old, "old")  # both checked before anything is cloned
    new = short(args.new)
    with clones_root(args.keep, "tiebias-study-") as root:
        (old_wall, old_run), (new_wall, new_run) = (timed_study(c, root, args.profile) for c in (args.old, new))
        old_nb, new_nb = notebook_seconds(old_run), notebook_seconds(new_run)
        for name in sorted(set(old_nb) | set(new_nb)):
            a, b = old_nb.get(name, 0.0), new_nb.get(name, 0.0)
            print(f"{name}: {args.old} {a:.0f} s, {new} {b:.0f} s" + (f", ratio {b / a:.2f}" if a else ""))
        print(f"study ({args.profile}), wall: {args.old} {old_wall:.0f} s, {new} {new_wall:.0f} s, "
              f"ratio {new_wall / old_wall:.2f}")
        diffs = differences(claims_of(new_run / "summary.json"), claims_of(old_run / "summary.json"))
        print("claims: " + ("identical" if not diffs else f"{len(diffs)} numbers differ (new vs old)"))
        for line in diffs:
            print("  " + line)


if __name__ == "__main__":
    main()
