"""The optimiser steps of one model: learning-rate schedule, batches (step ``s`` drawn from a generator seeded by
``(seed, s)``, so a resumed run sees the same batches), validation loss and the step loop."""

from __future__ import annotations

import contextlib
import csv
import math
import time
from dataclasses import dataclass
from typing import TextIO

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from tiebias.config.training import TrainConfig, checkpoint_steps
from tiebias.models.build import count_parameters
from tiebias.run.files import open_append
from tiebias.system.threads import FixedThreads, ThreadTuner, loop_threads
from tiebias.train import divergence
from tiebias.train.checkpoints import TRAIN_FIELDS, save_checkpoint
from tiebias.train.gradients import GradientProvenance
from tiebias.train.job import TrainJob


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate for optimiser step ``step`` (0-based): linear warmup, then cosine to min_lr."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_for_step(ids: torch.Tensor, step: int, seed: int, batch_size: int, seq_len: int) -> torch.Tensor:
    """The training batch of a step: random windows drawn from a generator seeded by (seed, step).

    Args:
        ids: the training token stream.
        step: the optimiser step (0-based).
        seed: the model's seed.
        batch_size: windows in the batch.
        seq_len: tokens per window.

    Returns:
        A ``[batch_size, seq_len]`` tensor of token ids.
    """
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


@dataclass
class Logs:
    """The open metrics logs of the main process (None elsewhere)."""

    mf: TextIO | None
    vf: TextIO | None

    def __post_init__(self) -> None:
        self.mw = csv.DictWriter(self.mf, fieldnames=TRAIN_FIELDS) if self.mf else None
        self.vw = csv.writer(self.vf) if self.vf else None

    def close(self) -> None:
        """Close both files."""
        for f in (self.mf, self.vf):
            if f is not None:
                f.close()


class StepLoop:
    """The optimiser steps of one model, with their logs, validation losses and checkpoints."""

    def __init__(self, job: TrainJob, model: PreTrainedModel, opt: torch.optim.Optimizer, elapsed: float) -> None:
        self.job, self.core, self.opt = job, model, opt
        self.schedule = set(checkpoint_steps(job.cfg.steps, job.cfg.checkpoint_every))
        self.n_params = count_parameters(model)
        # accelerate's autocast costs ~10% per step on CPU even when disabled: enter it only for bf16
        self.autocast = job.acc.autocast if job.precision != "fp32" else contextlib.nullcontext
        # DDP only when there is more than one process: a single process trains the bare model
        self.ddp = job.acc.prepare_model(model) if job.world > 1 else model
        self.rows = job.cfg.batch_size // job.world
        self.lo = job.acc.process_index * self.rows
        self.t0 = time.perf_counter() - elapsed
        self.diverged: dict | None = None  # divergence.at_step of the step that ended training early

    def val_loss(self) -> float:
        """Validation loss of the model as it is now."""
        cfg = self.job.cfg
        with self.autocast():
            return evaluate_loss(self.core, self.job.val_ids, seq_len=cfg.seq_len, max_tokens=cfg.eval_tokens,
                                 batch_size=cfg.batch_size, device=self.job.dev)

    def checkpoint(self, step: int) -> None:
        """Save the checkpoint of ``step`` (main process, with the optimiser state); every process waits."""
        if self.job.main:
            save_checkpoint(self.core, self.job.ckpt_root, step, {
                "optimizer": self.opt.state_dict(), "step": step, "elapsed_s": time.perf_counter() - self.t0})
        self.job.acc.wait_for_everyone()

    def run(self, start: int, *, progress: bool, stop_at: int | None) -> dict | None:
        """Steps ``start`` to the end; returns the stop record when ``stop_at`` or ``should_stop`` ends it early."""
        job, cfg = self.job, self.job.cfg
        logs = Logs(open_append(job.metrics_path, newline="") if job.main else None,
                     open_append(job.val_path, newline="") if job.main else None)
        if start == 0:
            self.checkpoint(0)
            if job.main:
                logs.vw.writerow([0, self.val_loss()])
                logs.vf.flush()
        # a plain run (nothing to record, nothing to scale) does not patch the model at all
        plain = not cfg.record_provenance and job.v.input_factor == 1.0 and job.v.output_factor == 1.0
        prov = None if plain else GradientProvenance(self.core, input_factor=job.v.input_factor,
                                                     output_factor=job.v.output_factor, record=cfg.record_provenance)
        bar = tqdm(total=cfg.steps, initial=start, desc=job.key, disable=not progress or not job.main,
                   dynamic_ncols=True)
        # one CPU process: the thread count follows the load (results do not depend on it, only speed);
        # several processes keep theirs (their step times are synchronised, so probing one would mislead)
        threads = loop_threads(job.num_threads if job.world == 1 else None, job.dev.type)
        try:
            with prov if prov is not None else contextlib.nullcontext(), threads as tuner:
                self.ddp.train()
                for step in range(start, cfg.steps):
                    if (stop_at is not None and step >= stop_at) or (job.should_stop and job.should_stop()):
                        return {"key": job.key, "complete": False, "step": step}
                    last = self._step(step, prov, logs, tuner)
                    bar.update(1)
                    bar.set_postfix(loss=f"{last:.3f}")
                    if self.diverged is not None:
                        self._stop_diverged(logs)
                        break
        finally:
            bar.close()
            logs.close()
        return None

    def _step(self, step: int, prov: GradientProvenance | None, logs: Logs, tuner: ThreadTuner | FixedThreads,
              ) -> float:
        """One optimiser step, its log row, validation loss and checkpoint when due; returns the loss."""
        job, cfg, opt = self.job, self.job.cfg, self.opt
        lr = lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch_for_step(job.train_ids, step, job.seed, cfg.batch_size, cfg.seq_len)[
            self.lo:self.lo + self.rows].to(job.dev)
        with tuner.step():
            with self.autocast():
                loss = self.ddp(input_ids=x, labels=x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            stats = prov.pop() if prov is not None else None
            gnorm = torch.nn.utils.clip_grad_norm_(self.core.parameters(), cfg.grad_clip)
            opt.step()
        done = step + 1
        if job.world > 1:
            loss = job.acc.reduce(loss.detach(), reduction="mean")
        last, grad_norm = loss.item(), gnorm.item()  # the same on every process (reduced loss, averaged gradient)
        self.diverged = divergence.at_step(done, last, grad_norm)
        if job.main:
            row = {"step": done, "loss": last, "lr": lr, "grad_norm": grad_norm,
                   "tokens": done * cfg.batch_size * cfg.seq_len, "elapsed_s": time.perf_counter() - self.t0}
            if stats is not None:
                row.update(stats.as_dict())
            logs.mw.writerow(row)
            if done % cfg.eval_every == 0 or done == cfg.steps:
                logs.vw.writerow([done, self.val_loss()])
                logs.vf.flush()
        if done in self.schedule:
            if job.main:
                logs.mf.flush()
            self.checkpoint(done)
        return last

    def _stop_diverged(self, logs: Logs) -> None:
        """End training at the diverged step: its validation row (so the record's last loss is this step's), a note."""
        job, d = self.job, self.diverged
        assert d is not None
        if job.main:
            if not (d["step"] % job.cfg.eval_every == 0 or d["step"] == job.cfg.steps):
                logs.vw.writerow([d["step"], self.val_loss()])
            logs.mf.flush()
            logs.vf.flush()
            print(f"{job.key}: training diverged at step {d['step']} (loss {d['loss']}, gradient norm "
                  f"{d['grad_norm']}); stopped there, nothing after it could learn: {divergence.ADVICE}", flush=True)
