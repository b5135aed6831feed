"""Two CPU processes (gloo) reach the single-process weights and provenance for the same global batch."""

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tiebias.run.folder import Run
from tiebias.train.trainer import TrainConfig, make_accelerator, train

WORKER = Path(__file__).with_name("_ddp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("variant", ["tied_in5", "untied"])
def test_two_processes_match_one(fresh_run: Run, tiny_config: TrainConfig, tmp_path: Path, variant: str) -> None:
    cfg = replace(tiny_config, steps=6, checkpoint_every=3, eval_every=3)
    multi = Run(tmp_path / "multi")
    shutil.copytree(fresh_run.path, multi.path)
    train(fresh_run, variant, 0, cfg, progress=False, device="cpu")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), str(WORKER), str(multi.path), variant, json.dumps(asdict(cfg))]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "(2 processes" in res.stdout
    a = load_file(str(fresh_run.model_dir(variant, 0) / "model.safetensors"))
    b = load_file(str(multi.model_dir(variant, 0) / "model.safetensors"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)
    ma, mb = fresh_run.metrics(variant, 0), multi.metrics(variant, 0)
    for col in ("loss", "input_norm", "output_norm", "output_share", "cosine"):
        torch.testing.assert_close(torch.tensor(ma[col].values), torch.tensor(mb[col].values), rtol=1e-3, atol=1e-5)
    assert (ma.input_rows == mb.input_rows).all()
    assert multi.summary(variant, 0)["processes"] == 2


def test_bad_precision_and_memory(fresh_run: Run, tiny_config: TrainConfig) -> None:
    with pytest.raises(ValueError, match="precision: 'bf16' needs a CUDA GPU"):
        make_accelerator("bf16", "cpu")
    with pytest.raises(ValueError, match="precision: unknown value 'fp8'"):
        replace(tiny_config, precision="fp8").validate()
    huge = replace(tiny_config, preset="gpu-150m", batch_size=4096, seq_len=2048)
    with pytest.raises(ValueError, match="preset: 'gpu-150m'.*GiB"):
        train(fresh_run, "tied", 0, huge, progress=False, device="cpu")
    assert not fresh_run.model_dir("tied", 0).joinpath("checkpoints", "step-0").exists()


def test_a_process_group_is_destroyed_at_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launched process's group is torn down by an exit hook, not by interpreter finalisation, where gloo can abort
    a process whose training succeeded."""
    from tiebias.train import trainer

    trainer._destroy_group()  # no group: nothing to do
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert torch.distributed.is_initialized()
    trainer._destroy_group()
    assert not torch.distributed.is_initialized()
