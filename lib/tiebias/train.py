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
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from safetensors.torch import load_file
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from .gradients import GradientProvenance
from .models import build, count_parameters, get_preset
from .runs import (
    OVERWRITE_HINT,
    DamagedFileError,
    Run,
    RunLockedError,
    Variant,
    check_model_folder,
    diff_config,
    model_key,
    read_json,
    read_log,
    read_log_lines,
    write_json_atomic,
)

TRAIN_FIELDS = ["step", "loss", "lr", "grad_norm", "tokens", "elapsed_s", "input_norm", "output_norm",
                "output_share", "cosine", "input_rows", "input_factor", "output_factor"]
VAL_FIELDS = ["step", "val_loss"]


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
    precision: str = "auto"

    def validate(self) -> TrainConfig:
        """Stop at once on a bad value, naming the parameter, the value and what is allowed."""
        get_preset(self.preset)
        if self.family not in ("llama", "neox"):
            raise ValueError(f"family: unknown value {self.family!r}; allowed: 'llama', 'neox'")
        for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_tokens", "checkpoint_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}: {v!r} is not allowed; need an integer > 0")
        if self.seq_len < 2:
            raise ValueError(f"seq_len: {self.seq_len} is not allowed; need an integer >= 2 (each window predicts "
                             "its next tokens, so one token gives nothing to learn or evaluate)")
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
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"precision: unknown value {self.precision!r}; allowed: 'auto', 'fp32', 'bf16'")
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
    """Write ``step-N`` atomically; the two newest checkpoints keep the optimiser state.

    The older of the two is the fallback when the newest turns out damaged; :func:`train` drops it
    once the model is finished.
    """
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
        _prune_states(ckpt_root, keep=2)


def _prune_states(ckpt_root: Path, keep: int) -> None:
    """Delete the optimiser state of all but the ``keep`` newest checkpoints."""
    with_state = sorted((_step_of(d), d) for d in ckpt_root.glob("step-*") if (d / "trainer_state.pt").exists())
    for _, d in with_state[:-keep] if keep else with_state:
        (d / "trainer_state.pt").unlink()


def _step_of(d: Path) -> int:
    m = re.fullmatch(r"step-(\d+)", d.name)
    return int(m.group(1)) if m else -1


def _load_resume_point(model: PreTrainedModel, opt: torch.optim.Optimizer, ckpt_root: Path, dev: torch.device,
                       tied: bool, key: str) -> tuple[int, float] | None:
    """Load the newest checkpoint whose weights and optimiser state both load; (step, elapsed) or None.

    A checkpoint that does not load is skipped for the previous one with a warning naming the file.
    Refuses (ValueError naming the folder) when checkpoints past step 0 exist but none can be resumed:
    restarting from step 0 is never done silently.
    """
    dirs = sorted((d for d in ckpt_root.glob("step-*") if _step_of(d) >= 0), key=_step_of, reverse=True)
    problems = []
    out_w = model.get_output_embeddings().weight
    allowed_missing = {n for n, p in model.named_parameters(remove_duplicate=False) if p is out_w} if tied else set()
    for d in dirs:
        state_file, weights = d / "trainer_state.pt", d / "model.safetensors"
        if not state_file.exists():
            problems.append(f"{d.name}: no optimiser state (trainer_state.pt)")
            continue
        try:
            check_model_folder(d, "")
            state = torch.load(state_file, map_location=dev, weights_only=False)
            if not isinstance(state, dict) or "optimizer" not in state:
                raise ValueError("not a trainer state (no 'optimizer' entry)")
        except DamagedFileError as e:
            problems.append(f"{d.name}: {str(e).split(';')[0]}")
        except Exception as e:  # a truncated or foreign pickle: any loader error
            problems.append(f"{d.name}: {state_file} does not load ({type(e).__name__}: {e})")
        else:
            try:
                sd = load_file(str(weights), device=str(dev))
                missing, unexpected = model.load_state_dict(sd, strict=False)
                if unexpected or set(missing) - allowed_missing:
                    raise ValueError(f"weights do not match the model: missing {missing}, unexpected {unexpected}")
                opt.load_state_dict(state["optimizer"])
            except Exception as e:  # weights or optimiser state of another shape
                problems.append(f"{d.name}: {d} does not match this model ({type(e).__name__}: {e})")
                continue
            if problems:
                warnings.warn(f"model {key}: skipped checkpoint(s) that cannot be resumed ({'; '.join(problems)}); "
                              f"resuming from {d.name} instead (the later steps are recomputed)", stacklevel=3)
            return _step_of(d), float(state.get("elapsed_s", 0.0))
    if any(_step_of(d) > 0 for d in dirs):
        raise ValueError(f"model {key}: no checkpoint in {ckpt_root} can be resumed ({'; '.join(problems)}); "
                         f"training would restart from step 0: {OVERWRITE_HINT} to retrain it from scratch, "
                         "or restore the checkpoint files")
    return None


def _kept_log(path: Path, header: list[str], upto: int, expected: list[int], key: str) -> tuple[list[str], list[str]]:
    """Rows of a metrics log to keep when resuming at ``upto`` (verbatim lines), plus notes on what was dropped.

    Rows after ``upto`` are recomputed, so they (and a row cut mid-write) are dropped; repeated steps
    keep their first row. Rows missing before ``upto`` cannot be recomputed: that stops with an error.
    """
    todo = (f"remove the bad lines (rows after step {upto} are recomputed), or {OVERWRITE_HINT} to retrain {key} "
            "from scratch")
    if not path.exists():
        if not expected:
            return [], []
        raise DamagedFileError(f"{path}: missing, but the checkpoint at step {upto} needs its rows for steps "
                               f"{_span(expected)}; restore it, or {OVERWRITE_HINT} to retrain {key} from scratch")
    _, rows, dropped = read_log_lines(path, header, todo=todo)
    notes = [f"{path.name}: dropped a last row cut mid-write"] if dropped else []
    kept, seen = [], set()
    for step, line in rows:
        if step > upto:
            continue
        if step in seen:
            notes.append(f"{path.name}: dropped a repeated row for step {step}")
            continue
        seen.add(step)
        kept.append(line)
    missing = sorted(set(expected) - seen)
    extra = sorted(seen - set(expected))
    if missing or extra:
        detail = (f"lacks the rows of steps {_span(missing)}" if missing else "") + \
                 (" and " if missing and extra else "") + (f"has unexpected steps {_span(extra)}" if extra else "")
        raise DamagedFileError(f"{path}: {detail} up to the checkpoint at step {upto}; they cannot be recomputed "
                               f"without retraining: restore the file, or {OVERWRITE_HINT} to retrain {key} from "
                               "scratch")
    return kept, notes


def _span(steps: list[int]) -> str:
    return str(steps) if len(steps) <= 6 else f"[{steps[0]}, {steps[1]}, ..., {steps[-1]}] ({len(steps)} steps)"


def _write_log(path: Path, header: list[str], lines: list[str]) -> None:
    """Rewrite a metrics log with the given verbatim rows (through a temporary file and a rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(f"{line}\r\n" for line in [",".join(header), *lines]))
    os.replace(tmp, path)


def val_steps(cfg: TrainConfig, upto: int) -> list[int]:
    """Steps with a validation row, up to ``upto``: 0, every ``eval_every``, and the last step."""
    return [s for s in range(upto + 1) if s == 0 or s % cfg.eval_every == 0 or s == cfg.steps]


def check_data(cfg: TrainConfig, n_train: int, n_val: int) -> None:
    """Refuse a sequence length the run's token splits (or ``eval_tokens``) cannot serve, before anything is written."""
    if cfg.eval_tokens < cfg.seq_len:
        raise ValueError(f"eval_tokens: {cfg.eval_tokens} is shorter than seq_len={cfg.seq_len}; need "
                         "eval_tokens >= seq_len (validation is measured on whole windows)")
    if n_train <= cfg.seq_len:
        raise ValueError(f"seq_len: {cfg.seq_len} is not shorter than the training split ({n_train} tokens); "
                         "use a shorter seq_len or a larger corpus")
    if min(n_val, cfg.eval_tokens) < cfg.seq_len:
        raise ValueError(f"seq_len: {cfg.seq_len} is longer than the validation tokens available "
                         f"(split {n_val}, eval_tokens={cfg.eval_tokens}); use a shorter seq_len, a larger "
                         "eval_tokens or a corpus with a larger validation split")


@contextlib.contextmanager
def _writer_lock(run: Run, acc: Accelerator, what: str) -> Iterator[None]:
    """The run's writer lock, taken by the main process; every process raises if it is held elsewhere."""
    err = None
    with contextlib.ExitStack() as stack:
        if acc.is_main_process:
            try:
                stack.enter_context(run.writing(what))
            except RunLockedError as e:
                err = str(e)
        if acc.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            err = broadcast_object_list([err])[0]
        if err is not None:
            raise RunLockedError(err)
        yield


def train(run: Run | str | Path, variant: str | Variant, seed: int, config: TrainConfig | None = None, *,
          resume: bool = True, overwrite: bool = False, progress: bool = True, stop_at: int | None = None,
          device: str | torch.device | None = None) -> dict:
    """Train one model (variant, seed) in a run folder and return its summary.

    A finished model with the same config is not trained again. An unfinished one resumes from its
    newest checkpoint that loads (a damaged one is skipped for the previous one, with a warning). A
    model folder made with a different config stops with an error unless ``overwrite=True``.
    ``stop_at`` ends this call after that many optimiser steps (as an interruption would); calling
    again resumes. Everything is validated before the folder is written, and the writing happens
    under the run's writer lock.

    Under ``accelerate launch`` (or torchrun) each process takes an equal slice of the same global
    batch, DDP averages the gradients, provenance is measured on the averaged gradient, and only the
    main process writes.
    """
    run = run if isinstance(run, Run) else Run(run)
    hf_logging.disable_progress_bar()  # one bar per checkpoint write would drown the training bar
    v = Variant.parse(variant)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: {seed!r} is not allowed; need an integer >= 0")
    if stop_at is not None and (isinstance(stop_at, bool) or not isinstance(stop_at, int) or stop_at < 0):
        raise ValueError(f"stop_at: {stop_at!r} is not allowed; need None or an integer >= 0")
    cfg = (config or TrainConfig()).validate()
    acc, precision = make_accelerator(cfg.precision, device)
    world = acc.num_processes
    if cfg.batch_size % world:
        raise ValueError(f"batch_size: {cfg.batch_size} rows cannot be split evenly over {world} processes; "
                         f"use a multiple of {world} (and at least {world} rows)")
    vocab = run.config["tokenizer_size"]
    tok = run.tokenizer()
    train_ids = run.tokens("train")
    val_ids = run.tokens("validation")
    check_memory(cfg, len(tok), acc.device, world)
    check_data(cfg, train_ids.numel(), val_ids.numel())
    with _writer_lock(run, acc, f"training {model_key(v, seed)}"):
        return _train_locked(run, v, seed, cfg, acc, precision, tok, train_ids, val_ids, vocab,
                             resume=resume, overwrite=overwrite, progress=progress, stop_at=stop_at)


def _train_locked(run: Run, v: Variant, seed: int, cfg: TrainConfig, acc: Accelerator, precision: str,
                  tok: Any, train_ids: torch.Tensor, val_ids: torch.Tensor, vocab: int, *, resume: bool,
                  overwrite: bool, progress: bool, stop_at: int | None) -> dict:
    """The body of :func:`train`, run while holding the writer lock: checks of the folder, then training."""
    world, main = acc.num_processes, acc.is_main_process
    key = model_key(v, seed)
    mdir = run.model_dir(v, seed)
    ckpt_root = mdir / "checkpoints"
    metrics_path = run.metrics_dir / f"{key}.csv"
    val_path = run.metrics_dir / f"{key}_val.csv"
    wanted = {"variant": v.name, "seed": seed, "vocab_size": vocab, **asdict(cfg)}

    # -- checks of what the folder holds: nothing is written until they pass ------------------------
    cfg_file = mdir / "train_config.json"
    fresh = True
    if cfg_file.exists():
        try:
            have = read_json(cfg_file, f"{OVERWRITE_HINT} to retrain {key}, or restore the file")
        except DamagedFileError:
            if not overwrite:
                raise
            have = {}
        diff = diff_config(have, wanted)
        if diff and not overwrite:
            detail = "; ".join(f"{k}: folder has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
            raise ValueError(f"model {key} in {run.path} was trained with a different config ({detail}); "
                             f"{OVERWRITE_HINT} to retrain it, or use another run folder")
        if not diff and resume and (mdir / "complete.json").exists():
            try:
                return run.summary(v, seed)
            except DamagedFileError as e:
                warnings.warn(f"{e}: finishing {key} again from its newest checkpoint", stacklevel=3)
        fresh = bool(diff) or not resume
    elif any(_step_of(d) > 0 for d in ckpt_root.glob("step-*")) and not overwrite:
        raise DamagedFileError(f"{cfg_file}: missing, but {ckpt_root} holds checkpoints: what they were trained "
                               f"with is unknown; restore the file, or {OVERWRITE_HINT} to retrain {key} from scratch")

    dev = acc.device
    model = build(cfg.preset, family=cfg.family, tied=v.tied, vocab_size=len(tok), seed=seed,
                  eos_token_id=tok.eos_token_id).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=True)
    start, elapsed = 0, 0.0
    train_rows: list[str] = []
    val_rows: list[str] = []
    notes: list[str] = []
    if not fresh:
        resumed = _load_resume_point(model, opt, ckpt_root, dev, v.tied, key)
        if resumed is not None:
            start, elapsed = resumed
        # the step-0 validation row is written after the step-0 checkpoint: a resume at 0 writes it again
        train_rows, n1 = _kept_log(metrics_path, TRAIN_FIELDS, start, list(range(1, start + 1)), key)
        val_rows, n2 = _kept_log(val_path, VAL_FIELDS, start if start else -1,
                                 val_steps(cfg, start) if start else [], key)
        notes = n1 + n2

    # -- writing ------------------------------------------------------------------------------------
    acc.wait_for_everyone()
    if main:
        if mdir.exists() and fresh:
            shutil.rmtree(mdir)  # retrain from scratch, or a folder that never got its config
            for p in (metrics_path, val_path):
                p.unlink(missing_ok=True)
        ckpt_root.mkdir(parents=True, exist_ok=True)
        run.metrics_dir.mkdir(exist_ok=True)
        write_json_atomic(cfg_file, wanted)
        for p in ckpt_root.glob(".tmp-step-*"):
            shutil.rmtree(p)
        for p in ckpt_root.glob("step-*"):
            if _step_of(p) > start:  # recomputed below; a damaged one must not linger as a checkpoint
                shutil.rmtree(p)
        _write_log(metrics_path, TRAIN_FIELDS, train_rows)
        _write_log(val_path, VAL_FIELDS, val_rows)
        if notes:
            warnings.warn(f"model {key}: " + "; ".join(notes) + " (recomputed from the checkpoint)", stacklevel=3)
        print(f"{key}: {dev} ({world} process{'es' if world > 1 else ''}, {precision})"
              + (f", resuming at step {start}" if start else ""), flush=True)
    acc.wait_for_everyone()
    schedule = set(checkpoint_steps(cfg.steps, cfg.checkpoint_every))
    n_params = count_parameters(model)
    core = model
    # accelerate's autocast costs ~10% per step on CPU even when disabled: enter it only for bf16
    autocast = acc.autocast if precision != "fp32" else contextlib.nullcontext
    # DDP only when there is more than one process: a single process trains the bare model
    ddp = acc.prepare_model(model) if world > 1 else model

    def val_loss() -> float:
        with autocast():
            return evaluate_loss(core, val_ids, seq_len=cfg.seq_len, max_tokens=cfg.eval_tokens,
                                 batch_size=cfg.batch_size, device=dev)

    def checkpoint(step: int) -> None:
        if main:
            _save_checkpoint(core, ckpt_root, step, {"optimizer": opt.state_dict(), "step": step,
                                                     "elapsed_s": time.perf_counter() - t0})
        acc.wait_for_everyone()

    t0 = time.perf_counter() - elapsed
    mf = metrics_path.open("a", newline="") if main else None
    vf = val_path.open("a", newline="") if main else None
    mw = csv.DictWriter(mf, fieldnames=TRAIN_FIELDS) if mf else None
    vw = csv.writer(vf) if vf else None
    if start == 0:
        checkpoint(0)
        if main:
            vw.writerow([0, val_loss()])
            vf.flush()
    # a plain run (nothing to record, nothing to scale) does not patch the model at all
    plain = not cfg.record_provenance and v.input_factor == 1.0 and v.output_factor == 1.0
    prov = None if plain else GradientProvenance(core, input_factor=v.input_factor,
                                                 output_factor=v.output_factor, record=cfg.record_provenance)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    rows = cfg.batch_size // world
    lo = acc.process_index * rows
    bar = tqdm(total=cfg.steps, initial=start, desc=key, disable=not progress or not main, dynamic_ncols=True)
    try:
        with prov if prov is not None else contextlib.nullcontext():
            ddp.train()
            for step in range(start, cfg.steps):
                if stop_at is not None and step >= stop_at:
                    return {"key": key, "complete": False, "step": step}
                lr = lr_at(step, cfg)
                for g in opt.param_groups:
                    g["lr"] = lr
                x = batch_for_step(train_ids, step, seed, cfg.batch_size, cfg.seq_len)[lo:lo + rows].to(dev)
                with autocast():
                    loss = ddp(input_ids=x, labels=x).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                stats = prov.pop() if prov is not None else None
                gnorm = torch.nn.utils.clip_grad_norm_(core.parameters(), cfg.grad_clip)
                opt.step()
                done = step + 1
                if world > 1:
                    loss = acc.reduce(loss.detach(), reduction="mean")
                last = loss.item()
                if main:
                    row = {"step": done, "loss": last, "lr": lr, "grad_norm": gnorm.item(),
                           "tokens": done * tokens_per_step, "elapsed_s": time.perf_counter() - t0}
                    if stats is not None:
                        row.update(stats.as_dict())
                    mw.writerow(row)
                    if done % cfg.eval_every == 0 or done == cfg.steps:
                        vw.writerow([done, val_loss()])
                        vf.flush()
                if done in schedule:
                    if main:
                        mf.flush()
                    checkpoint(done)
                bar.update(1)
                bar.set_postfix(loss=f"{last:.3f}")
    finally:
        bar.close()
        for f in (mf, vf):
            if f is not None:
                f.close()
    total_s = time.perf_counter() - t0
    if main:
        # every number from the logs, so a rerun that finds all steps done (killed just before the
        # completion marker) reports the same losses; throughput over the whole (resumed) training time
        todo = f"{OVERWRITE_HINT} to retrain {key}"
        logged = read_log(metrics_path, TRAIN_FIELDS, todo=todo)
        vals = read_log(val_path, VAL_FIELDS, todo=todo)
        summary = {"key": key, "variant": v.name, "seed": seed, "complete": True, "steps": cfg.steps,
                   "final_train_loss": float(logged.loss.iloc[-1]), "train_seconds": total_s,
                   "tokens_per_second": cfg.steps * tokens_per_step / max(total_s, 1e-9),
                   "parameters": n_params, "device": str(dev), "processes": world, "precision": precision,
                   "final_val_loss": float(vals.val_loss.iloc[-1]), "initial_val_loss": float(vals.val_loss.iloc[0])}
        # final model: files written to a temporary folder, moved in, then the completion marker last
        tmp = mdir / ".final.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        core.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        for f in tmp.iterdir():
            os.replace(f, mdir / f.name)
        tmp.rmdir()
        _prune_states(ckpt_root, keep=1)
        reasons = {k: "training diverged (the loss is not a finite number)"
                   for k in ("final_train_loss", "final_val_loss", "initial_val_loss")}
        write_json_atomic(mdir / "complete.json", summary, reasons)
    acc.wait_for_everyone()
    return run.summary(v, seed)


def make_accelerator(precision: str = "auto", device: str | torch.device | None = None) -> tuple[Accelerator, str]:
    """The accelerate engine for this process (DDP over torch.distributed when launched with N processes).

    ``precision`` is ``auto`` (bf16 autocast on a GPU that supports it, else fp32), ``fp32`` or ``bf16``.
    """
    dev = pick_device(device)
    cuda = dev.type == "cuda"
    bf16_ok = cuda and torch.cuda.is_bf16_supported()
    if precision == "bf16" and not bf16_ok:
        raise ValueError(f"precision: 'bf16' needs a CUDA GPU with bf16 support; this process runs on {dev}. "
                         "Use 'auto' or 'fp32'")
    mp = "bf16" if precision == "bf16" or (precision == "auto" and bf16_ok) else "no"
    acc = Accelerator(cpu=not cuda, mixed_precision=mp)
    return acc, "bf16 autocast" if mp == "bf16" else "fp32"


def estimate_memory(cfg: TrainConfig, vocab_size: int, processes: int = 1) -> int:
    """Rough peak bytes of one training process: weights, grads, AdamW state, activations, logits."""
    p = get_preset(cfg.preset)
    d, L = p.hidden, p.layers
    ffn = p.intermediate(cfg.family)
    params = 2 * vocab_size * d + L * (4 * d * d + 3 * d * ffn)
    rows = max(cfg.batch_size // processes, 1)
    tokens = rows * cfg.seq_len
    activations = tokens * L * (16 * d + 3 * ffn) * 4 + rows * p.heads * cfg.seq_len**2 * 4 * L
    logits = tokens * vocab_size * 4 * 3
    return int(16 * params + activations + logits)


def check_memory(cfg: TrainConfig, vocab_size: int, device: torch.device, processes: int = 1) -> None:
    """Refuse, before allocating, a preset/batch that cannot fit in the device's free memory."""
    need = estimate_memory(cfg, vocab_size, processes)
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        import psutil

        free = psutil.virtual_memory().available // max(processes, 1)
    if need > 0.9 * free:
        raise ValueError(f"preset: {cfg.preset!r} with batch_size={cfg.batch_size}, seq_len={cfg.seq_len} needs "
                         f"about {need / 2**30:.1f} GiB per process but {device} has {free / 2**30:.1f} GiB free; "
                         "choose a smaller preset, batch or sequence length")


def warn_if_slow(estimated_seconds: float, budget_seconds: float, what: str) -> None:
    """Warn before starting work whose estimated time exceeds the profile's budget."""
    if estimated_seconds > budget_seconds:
        warnings.warn(f"{what}: estimated {estimated_seconds / 60:.1f} min exceeds the budget of "
                      f"{budget_seconds / 60:.1f} min; reduce seeds, steps or factors", stacklevel=2)
