"""Whether the CPU thread count changes a run's numbers: two run folders of the same profile, compared file by file.

By default it runs two smoke studies, one with ``TIEBIAS_THREADS=1`` and one with ``=2`` (about 4 minutes on 2
cores), then prints which models and lenses are the same bit for bit, how far the differing lenses' weights are
apart, and how far 04's row-1 penalty table moves beside its spread over seeds. ``--runs A B`` compares two existing
run folders instead (e.g. two default studies made under other loads). Usage::

    python bench/thread_bits.py [--out /tmp/thread-bits] [--runs A B]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch


def study(out: Path, threads: int) -> Path:
    run = out / f"smoke-t{threads}"
    env = {**os.environ, "TIEBIAS_THREADS": str(threads)}
    subprocess.run([sys.executable, "-m", "tiebias", "study", "--profile", "smoke", "--run-dir", str(run)], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return run


def compare(a: Path, b: Path) -> dict:
    claims = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "compare_claims.py"),
                             str(a / "summary.json"), str(b / "summary.json")], capture_output=True, text=True).stdout
    models = sorted(p.relative_to(a) for p in (a / "models").rglob("model.safetensors") if "checkpoints" not in p.parts)
    lenses = sorted(p.relative_to(a) for p in (a / "models").rglob("params.pt"))
    differ = [p for p in lenses if not filecmp.cmp(a / p, b / p, shallow=False)]
    weight_gap, weight_max = 0.0, 0.0
    for p in differ:
        x, y = (torch.load(r / p, weights_only=True) for r in (a, b))
        weight_gap = max(weight_gap, *((x[k] - y[k]).abs().max().item() for k in x))
        weight_max = max(weight_max, *(x[k].abs().max().item() for k in x))
    ta, tb = (pd.read_csv(r / "metrics" / "lens_row1_penalty_k.csv") for r in (a, b))
    moved = (ta.penalty - tb.penalty).abs()
    return {"claims (scripts/compare_claims.py)": claims.strip().split(":")[0],
            "models identical": f"{sum(filecmp.cmp(a / p, b / p, shallow=False) for p in models)} of {len(models)}",
            "lenses identical": f"{len(lenses) - len(differ)} of {len(lenses)}",
            "largest weight difference in a differing lens": weight_gap,
            "largest weight in those lenses": weight_max,
            "row-1 penalty rows that moved": f"{int((moved > 0).sum())} of {len(moved)}",
            "largest move (bits)": float(moved.max()),
            "at (bits, a / b)": [float(ta.penalty[moved.idxmax()]), float(tb.penalty[moved.idxmax()])],
            "sd over seeds per k (bits, a)": ta.groupby("k").penalty.std().round(3).to_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/thread-bits"))
    ap.add_argument("--runs", type=Path, nargs=2, metavar=("A", "B"))
    args = ap.parse_args()
    a, b = args.runs or (study(args.out, 1), study(args.out, 2))
    print(json.dumps({"a": str(a), "b": str(b), **compare(a, b)}, indent=1))


if __name__ == "__main__":
    main()
