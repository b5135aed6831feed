"""Training of one model variant inside a run folder: AdamW, warmup + cosine, clipping, checkpoints.

Deterministic by construction: the batch of step ``s`` is drawn from a generator seeded by
``(seed, s)``, so a run resumed from any checkpoint sees the same batches as an uninterrupted one and
ends with the same weights (bit for bit on CPU). Every checkpoint is a Hugging Face model folder
written to a temporary name and renamed, so an interruption never leaves a half-written checkpoint.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from .gradients import GradientProvenance
from .models import build, count_parameters, get_preset
from .runs import Run, Variant, diff_config, model_key, write_json_atomic

TRAIN_FIELDS = ["step", "loss", "lr", "grad_norm", "tokens", "elapsed_s", "input_norm", "output_norm",
                "output_share", "cosine", "input_rows", "input_factor", "output_factor"]


@dataclass
class TrainConfig:
    """Everything that determines a trained model besides its variant and seed."""

    preset: str = "small"
    family: str = "llama"
    steps: int = 400
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_tokens: int = 16384
    checkpoint_every: int = 50
    record_provenance: bool = True

    def validate(self) -> TrainConfig:
        """Stop at once on a bad value, naming the parameter, the value and what is allowed."""
        get_preset(self.preset)
        if self.family not in ("llama", "neox"):
            raise ValueError(f"family: unknown value {self.family!r}; allowed: 'llama', 'neox'")
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_tokens", "checkpoint_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}: {v!r} is not allowed; need an integer > 0")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps: {self.warmup_steps!r} is not allowed; need an integer >= 0")
        for name in ("lr", "grad_clip"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name}: {v!r} is not allowed; need a finite number > 0")
        for name in ("min_lr_ratio", "weight_decay", "beta1", "beta2"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"{name}: {v!r} is not allowed; need a number in [0, 1]")
        if self.seq_len > get_preset(self.preset).max_positions:
            raise ValueError(f"seq_len: {self.seq_len} exceeds preset {self.preset!r}'s "
                             f"{get_preset(self.preset).max_positions} positions")
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"train config: unknown parameter(s) {sorted(unknown)}; allowed: {sorted(names)}")
        return cls(**d)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimiser step ``step`` (0-based): linear warmup, then cosine to min_lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def checkpoint_steps(steps: int, every: int) -> list[int]:
    """Steps with a checkpoint: 0, powers of two (log-spaced, for evolution plots), every ``every``, last."""
    s = {0, steps}
    p = 1
    while p < steps:
        s.add(p)
        p *= 2
    s.update(range(every, steps, every))
    return sorted(s)


def batch_for_step(ids: torch.Tensor, step: int, seed: int, batch_size: int, seq_len: int) -> torch.Tensor:
    """The training batch of a step: random windows drawn from a generator seeded by (seed, step)."""
    if ids.numel() <= seq_len:
        raise ValueError(f"seq_len: {seq_len} is not shorter than the training split ({ids.numel()} tokens)")
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, ids.numel() - seq_len, (batch_size,), generator=g)
    return torch.stack([ids[s:s + seq_len] for s in starts.tolist()])


@torch.no_grad()
def evaluate_loss(model: PreTrainedModel, ids: torch.Tensor, *, seq_len: int, max_tokens: int,
                  batch_size: int = 16, device: torch.device | str = "cpu") -> float:
    """Mean next-token cross-entropy (nats) on consecutive windows of a token stream."""
    n = min(ids.numel(), max_tokens) // seq_len
    if n == 0:
        raise ValueError(f"eval: the evaluation split ({ids.numel()} tokens) is shorter than seq_len={seq_len}")
    windows = ids[: n * seq_len].view(n, seq_len)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, n, batch_size):
        x = windows[i:i + batch_size].to(device)
        out = model(input_ids=x, labels=x)
        k = x.shape[0] * (seq_len - 1)
        total += out.loss.item() * k
        count += k
    model.train(was_training)
    return total / count


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device to train on: the one asked for, else CUDA when available, else CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _save_checkpoint(model: PreTrainedModel, ckpt_root: Path, step: int, state: dict | None) -> None:
    """Write ``step-N`` atomically; only the newest checkpoint keeps the optimiser state."""
    tmp = ckpt_root / f".tmp-step-{step}"
    final = ckpt_root / f"step-{step}"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    if state is not None:
        torch.save(state, tmp / "trainer_state.pt")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if state is not None:
        for d in ckpt_root.glob("step-*"):
            if d != final and (d / "trainer_state.pt").exists():
                (d / "trainer_state.pt").unlink()


def _latest_resumable(ckpt_root: Path) -> tuple[int, Path] | None:
    best = None
    for d in ckpt_root.glob("step-*"):
        if (d / "trainer_state.pt").exists() and (d / "config.json").exists():
            s = int(d.name.split("-")[1])
            if best is None or s > best[0]:
                best = (s, d)
    return best


def _rewrite_csv(path: Path, header: list[str], max_step: int) -> None:
    """Keep the rows up to ``max_step`` (the resumed checkpoint) so the log continues without gaps."""
    rows = []
    if path.exists():
        with path.open() as f:
            rows = [r for r in csv.DictReader(f) if int(r["step"]) <= max_step]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)


def train(run: Run | str | Path, variant: str | Variant, seed: int, config: TrainConfig | None = None, *,
          resume: bool = True, overwrite: bool = False, progress: bool = True, stop_at: int | None = None,
          device: str | torch.device | None = None) -> dict:
    """Train one model (variant, seed) in a run folder and return its summary.

    A finished model with the same config is not trained again. An unfinished one resumes from its
    newest checkpoint. A model folder made with a different config stops with an error unless
    ``overwrite=True``. ``stop_at`` ends this call after that many optimiser steps (as an
    interruption would); calling again resumes.
    """
    run = run if isinstance(run, Run) else Run(run)
    hf_logging.disable_progress_bar()  # one bar per checkpoint write would drown the training bar
    v = Variant.parse(variant)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: {seed!r} is not allowed; need an integer >= 0")
    cfg = (config or TrainConfig()).validate()
    key = model_key(v, seed)
    mdir = run.model_dir(v, seed)
    ckpt_root = mdir / "checkpoints"
    metrics_path = run.metrics_dir / f"{key}.csv"
    val_path = run.metrics_dir / f"{key}_val.csv"
    wanted = {"variant": v.name, "seed": seed, "vocab_size": run.config["tokenizer_size"], **asdict(cfg)}

    cfg_file = mdir / "train_config.json"
    if cfg_file.exists():
        import json

        have = json.loads(cfg_file.read_text())
        diff = diff_config(have, wanted)
        if diff and not overwrite:
            detail = "; ".join(f"{k}: folder has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
            raise ValueError(f"model {key} in {run.path} was trained with a different config ({detail}); "
                             "pass overwrite=True to retrain it, or use another run folder")
        if diff or not resume:
            shutil.rmtree(mdir)
            for p in (metrics_path, val_path):
                p.unlink(missing_ok=True)
        elif (mdir / "complete.json").exists():
            return run.summary(v, seed)
    elif mdir.exists():
        shutil.rmtree(mdir)  # a folder without its config was never started properly
    mdir.mkdir(parents=True, exist_ok=True)
    ckpt_root.mkdir(exist_ok=True)
    run.metrics_dir.mkdir(exist_ok=True)
    write_json_atomic(cfg_file, wanted)

    dev = pick_device(device)
    tok = run.tokenizer()
    train_ids = run.tokens("train")
    val_ids = run.tokens("validation")
    model = build(cfg.preset, family=cfg.family, tied=v.tied, vocab_size=len(tok), seed=seed,
                  eos_token_id=tok.eos_token_id).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=True)
    start, elapsed = 0, 0.0
    resumed = _latest_resumable(ckpt_root) if resume else None
    if resumed is not None:
        start, path = resumed
        state = torch.load(path / "trainer_state.pt", map_location=dev, weights_only=False)
        sd = load_file(str(path / "model.safetensors"), device=str(dev))
        missing, unexpected = model.load_state_dict(sd, strict=False)
        out_w = model.get_output_embeddings().weight
        allowed_missing = {n for n, p in model.named_parameters(remove_duplicate=False) if p is out_w} if v.tied else set()
        if unexpected or set(missing) - allowed_missing:
            raise RuntimeError(f"checkpoint {path} does not match the model: missing {missing}, unexpected {unexpected}")
        opt.load_state_dict(state["optimizer"])
        elapsed = state.get("elapsed_s", 0.0)
    for p in ckpt_root.glob(".tmp-step-*"):
        shutil.rmtree(p)
    _rewrite_csv(metrics_path, TRAIN_FIELDS, start)
    _rewrite_csv(val_path, ["step", "val_loss"], start)
    schedule = set(checkpoint_steps(cfg.steps, cfg.checkpoint_every))
    n_params = count_parameters(model)
    if start == 0:
        _save_checkpoint(model, ckpt_root, 0, {"optimizer": opt.state_dict(), "step": 0, "elapsed_s": 0.0})

    def val_loss() -> float:
        return evaluate_loss(model, val_ids, seq_len=cfg.seq_len, max_tokens=cfg.eval_tokens,
                             batch_size=cfg.batch_size, device=dev)

    mf = metrics_path.open("a", newline="")
    vf = val_path.open("a", newline="")
    mw = csv.DictWriter(mf, fieldnames=TRAIN_FIELDS)
    vw = csv.writer(vf)
    if start == 0:
        vw.writerow([0, val_loss()])
        vf.flush()
    # a plain run (nothing to record, nothing to scale) does not patch the model at all
    plain = not cfg.record_provenance and v.input_factor == 1.0 and v.output_factor == 1.0
    prov = None if plain else GradientProvenance(model, input_factor=v.input_factor,
                                                 output_factor=v.output_factor, record=cfg.record_provenance)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    bar = tqdm(total=cfg.steps, initial=start, desc=key, disable=not progress, dynamic_ncols=True)
    last = None
    t0 = time.perf_counter() - elapsed
    try:
        with prov if prov is not None else contextlib.nullcontext():
            model.train()
            for step in range(start, cfg.steps):
                if stop_at is not None and step >= stop_at:
                    return {"key": key, "complete": False, "step": step}
                lr = lr_at(step, cfg)
                for g in opt.param_groups:
                    g["lr"] = lr
                x = batch_for_step(train_ids, step, seed, cfg.batch_size, cfg.seq_len).to(dev)
                loss = model(input_ids=x, labels=x).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                stats = prov.pop() if prov is not None else None
                gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                done = step + 1
                last = loss.item()
                row = {"step": done, "loss": last, "lr": lr, "grad_norm": gnorm.item(),
                       "tokens": done * tokens_per_step, "elapsed_s": time.perf_counter() - t0}
                if stats is not None:
                    row.update(stats.as_dict())
                mw.writerow(row)
                if done % cfg.eval_every == 0 or done == cfg.steps:
                    vw.writerow([done, val_loss()])
                    vf.flush()
                if done in schedule:
                    mf.flush()
                    _save_checkpoint(model, ckpt_root, done, {"optimizer": opt.state_dict(), "step": done,
                                                              "elapsed_s": time.perf_counter() - t0})
                bar.update(1)
                bar.set_postfix(loss=f"{last:.3f}")
    finally:
        bar.close()
        mf.close()
        vf.close()
    total_s = time.perf_counter() - t0
    # final model: files written to a temporary folder, moved in, then the completion marker last
    tmp = mdir / ".final.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    for f in tmp.iterdir():
        os.replace(f, mdir / f.name)
    tmp.rmdir()
    import pandas as pd

    vals = pd.read_csv(val_path)
    summary = {"key": key, "variant": v.name, "seed": seed, "complete": True, "steps": cfg.steps,
               "final_train_loss": last, "final_val_loss": float(vals.val_loss.iloc[-1]),
               "initial_val_loss": float(vals.val_loss.iloc[0]), "train_seconds": total_s,
               "tokens_per_second": (cfg.steps - start) * tokens_per_step / max(total_s - elapsed, 1e-9),
               "parameters": n_params, "device": str(dev)}
    write_json_atomic(mdir / "complete.json", summary)
    return summary


def warn_if_slow(estimated_seconds: float, budget_seconds: float, what: str) -> None:
    """Warn before starting work whose estimated time exceeds the profile's budget."""
    if estimated_seconds > budget_seconds:
        warnings.warn(f"{what}: estimated {estimated_seconds / 60:.1f} min exceeds the budget of "
                      f"{budget_seconds / 60:.1f} min; reduce seeds, steps or factors", stacklevel=2)
