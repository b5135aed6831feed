"""Measure the numbers the exercises' answers quote, from a class run and each exercise's own run, then render the
notebooks' exercise cells with them.

Usage: python scripts/exercise_answers.py [--base runs/class] [--runs runs] [--base-only]
  Each exercise's run is <runs>/ex-<id> (what `make exercise ID=<id>` writes). A run whose profile or changed
  parameter is not the exercise's is refused, so an answer never quotes a run of something else.
  --base-only measures the class run again and keeps each exercise's stored numbers (its run is not needed): after a
  new class run, e.g. one measured by scripts/time_class.py.
Writes notebooks/exercise_numbers.json and TEACHING.md (the lesson plan, lib/tiebias/teach/lesson.md filled from the
class run), and updates the notebooks (as scripts/exercises.py does).
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from tiebias.config.paths import NOTEBOOKS, notebooks_dir, repo_root, runs_dir  # noqa: E402
from tiebias.run.files import write_text_atomic  # noqa: E402
from tiebias.run.folder import Run  # noqa: E402
from tiebias.study import parse_set  # noqa: E402
from tiebias.teach import answers, exercises  # noqa: E402


def provenance(run_dir: Path) -> dict:
    """Which run the numbers come from: its folder, profile, changed parameters and summary.json's digest."""
    run = Run(run_dir)
    summary = (run.path / "summary.json").read_bytes()
    where = run_dir.resolve()
    shown = where.relative_to(repo_root()) if where.is_relative_to(repo_root()) else where  # as in the walkthrough
    return {"run": shown.as_posix(), "profile": run.profile,
            "summary_sha256": hashlib.sha256(summary).hexdigest()}


def check_belongs(ex: exercises.Exercise, run_dir: Path, profile: str) -> dict:
    """The run's numbers, refusing a folder that is not this exercise's: another profile, or a changed parameter whose
    value the run's own outputs (models, tables) do not show."""
    if not (run_dir / "summary.json").exists():
        raise SystemExit(f"{run_dir}: no summary.json; run `make exercise ID={ex.id}` first")
    run = Run(run_dir)
    if run.profile != profile:
        raise SystemExit(f"{run_dir}: profile {run.profile!r}, the exercises use {profile!r}")
    measured = answers.quantities(run_dir)
    for name, value in parse_set(list(ex.set)).items():
        if name not in measured:
            raise SystemExit(f"{run_dir}: cannot tell {name} from the run's outputs; add it to teach.answers")
        if measured[name] != value:
            raise SystemExit(f"{run_dir}: {name} = {measured[name]!r} in its outputs, exercise {ex.id} sets {value!r}")
    return measured


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="runs/class")
    ap.add_argument("--runs", default=str(runs_dir()))
    ap.add_argument("--base-only", action="store_true", help="keep the exercises' stored numbers")
    args = ap.parse_args(argv)
    header, known = exercises.load()
    base = Path(args.base)
    if Run(base).profile != header["profile"]:
        raise SystemExit(f"{base}: not a {header['profile']!r} run")
    out = {"profile": header["profile"], "base_run": provenance(base), "base": answers.quantities(base),
           "exercises": {}}
    stored = exercises.load_numbers(exercises.numbers_path())["exercises"] if args.base_only else {}
    for ex in known:
        run_dir = Path(args.runs) / f"ex-{ex.id}"
        out["exercises"][ex.id] = stored.get(ex.id) or {**provenance(run_dir),
                                                        "ex": check_belongs(ex, run_dir, header["profile"])}
        exercises.answer(ex, out)  # every field of the template is there
    path = exercises.numbers_path()
    write_text_atomic(path, json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")
    teaching = Path(__file__).resolve().parents[1] / "TEACHING.md"
    write_text_atomic(teaching, answers.lesson(out["base"]))
    print(f"wrote {teaching}")
    for name in NOTEBOOKS:
        if exercises.sync(notebooks_dir() / f"{name}.ipynb"):
            print(f"updated {name}.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
