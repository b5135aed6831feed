"""Measure what a lecturer needs to plan the lesson, on this machine, in one go: the plumbing run (the smoke study
`make check-class` runs) and the class run, one after the other, so the two times share the machine's state; the
size of the environment on disk and what pip downloads to build it.

Usage: python scripts/time_class.py [--run-dir runs/class] [--output notebooks/class_timing.json] [--no-download]
  The class run goes to --run-dir (it must not exist yet: the notebooks train from scratch, as in a lesson); its
  notebook times are those summary.json records. The lesson plan (scripts/exercise_answers.py) lays out its minute
  marks from them, and scripts/check_class.py compares a machine's plumbing time with the one stored here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from tiebias.output.reproduction_page import cpu_model  # noqa: E402
from tiebias.run.files import read_json, write_text_atomic  # noqa: E402
from tiebias.teach.schedule import TIMING_FILE  # noqa: E402


def study(profile: str, run_dir: Path) -> float:
    """Run the study of ``profile`` into ``run_dir``; its wall time in seconds (stops on failure)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tiebias", "study", "--profile", profile, "--run-dir", str(run_dir)],
                       cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"the {profile} study failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return took


def folder_bytes(path: Path) -> int:
    """Bytes of every regular file under ``path`` (links not followed)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def download_bytes() -> dict:
    """What pip fetches to build the environment from nothing (Makefile: torch, then the project with its test
    extras, under the lock file): ``pip install --dry-run --ignore-installed --report``, then each chosen file's size
    (a local file's on disk, a remote one's Content-Length)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                            "--report", str(report), "-c", str(ROOT / "constraints.txt"), "torch==2.13.0",
                            "-e", f"{ROOT}[test]"], capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"pip could not resolve the environment:\n{p.stderr[-2000:]}")
        items = json.loads(report.read_text())["install"]
    total, files = 0, {}
    for it in items:
        url = it.get("download_info", {}).get("url", "")
        if "dir_info" in it.get("download_info", {}):
            continue  # the project itself, from the checkout
        u = urlparse(url)
        if u.scheme == "file":
            size = Path(unquote(u.path)).stat().st_size
        else:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
                size = int(r.headers["Content-Length"])
        files[Path(unquote(u.path)).name] = size
        total += size
    torch_wheel = next((n for n in files if n.startswith("torch-")), None)
    return {"bytes": total, "files": len(files), "torch_wheel": torch_wheel}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", default="runs/class")
    ap.add_argument("--output", default=str(TIMING_FILE.relative_to(ROOT)))
    ap.add_argument("--no-download", action="store_true", help="skip measuring what pip downloads")
    args = ap.parse_args(argv)
    run_dir = Path(args.run_dir)
    if (ROOT / run_dir).exists():
        raise SystemExit(f"--run-dir: {run_dir} exists; the class run must train from scratch (move it away first)")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tiebias-time-") as tmp:
        plumbing = study("smoke", Path(tmp) / "smoke")
    class_wall = study("class", run_dir)
    load_after = os.getloadavg()
    summary = read_json(ROOT / run_dir / "summary.json", "rerun the class study")
    out = {"measured_by": "scripts/time_class.py", "cpu": cpu_model(), "cores": os.cpu_count(),
           "load_average_1min": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
           "plumbing_seconds": round(plumbing, 1), "class_wall_seconds": round(class_wall, 1),
           "class_seconds": {k: round(v, 3) for k, v in summary["timings_seconds"].items()},  # 0.1 s would round twice
           "class_run": run_dir.as_posix(), "venv_bytes": folder_bytes(Path(sys.prefix))}
    if not args.no_download:
        out["download"] = download_bytes()
    write_text_atomic(ROOT / args.output, json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
