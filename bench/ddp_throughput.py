"""Single- vs multi-process training throughput of tiebias.train.trainer on this machine (CPU, gloo).

Trains the same model and global batch once in one process and once under torchrun with N processes,
and reports tokens/s of each from the runs' summaries (training loop only, as tiebias.train.trainer reports it).

    python bench/ddp_throughput.py [--preset small] [--steps 40] [--procs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from tiebias.run.folder import Run
from tiebias.train.trainer import TrainConfig

WORKER = Path(__file__).resolve().parents[1] / "tests" / "_ddp_worker.py"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    cfg = TrainConfig(preset=args.preset, steps=args.steps, eval_every=args.steps, eval_tokens=4096,
                      checkpoint_every=args.steps, warmup_steps=5)
    with tempfile.TemporaryDirectory() as tmp:
        base = Run.prepare(Path(tmp) / "base", vocab_size=4096)
        results = {}
        for procs in (1, args.procs):
            run_dir = Path(tmp) / f"p{procs}"
            shutil.copytree(base.path, run_dir)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            threads = max(1, (os.cpu_count() or 1) // procs)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
                   "--master_addr", "127.0.0.1", "--master_port", str(port), str(WORKER), str(run_dir), "tied",
                   json.dumps(asdict(cfg))]
            env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
            subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            s = Run(run_dir).summary("tied", 0)
            results[procs] = s["tokens_per_second"]
            print(f"{procs} process(es) x {threads} thread(s): {s['tokens_per_second']:.0f} tokens/s", flush=True)
    print(f"multi / single process throughput: {results[args.procs] / results[1]:.2f}x "
          f"({os.cpu_count()} CPU cores, preset {args.preset}, global batch {cfg.batch_size} x {cfg.seq_len})")


if __name__ == "__main__":
    main()
