"""One model's training in a run folder, as named steps: check the arguments, decide from the model folder (finished,
resume or start over), build, load the resume point, prepare the folder, run the optimiser steps (:class:`StepLoop`:
learning-rate schedule, batches drawn from a generator seeded by ``(seed, step)``, validation loss), finalise.
A resumed run ends with the same weights as an uninterrupted one (bit for bit on CPU)."""

from __future__ import annotations

import atexit
import contextlib
import csv
import math
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from tiebias.config.checks import check_int
from tiebias.config.params import TrainConfig, recorded_recipe
from tiebias.config.presets import get_preset
from tiebias.config.training import SEED_LIMIT, checkpoint_steps
from tiebias.config.variants import Variant, model_key
from tiebias.models.build import build, count_parameters
from tiebias.run import files as rf
from tiebias.run.files import ParameterChangedError
from tiebias.run.folder import FINGERPRINTS, WEIGHTS_ID, ForeignModelError, Run, RunLockedError
from tiebias.system.memory import free_memory
from tiebias.system.parallel import check_should_stop
from tiebias.system.threads import check_num_threads, loop_threads
from tiebias.train import checkpoints as ck
from tiebias.train import divergence
from tiebias.train.gradients import GradientProvenance

_SETUP_LOCK = threading.Lock()


@dataclass
class TrainJob:
    """One model's training: what is trained, with what, on which data, and where its files go."""

    run: Run
    v: Variant
    seed: int
    cfg: TrainConfig
    acc: Accelerator
    precision: str
    tok: Any
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    vocab: int
    num_threads: int | str | None = "auto"
    should_stop: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        run, v, seed = self.run, self.v, self.seed
        self.key, self.mdir, self.ckpt_root = model_key(v, seed), run.model_dir(v, seed), run.checkpoints_dir(v, seed)
        self.cfg_file = run.train_config_path(v, seed)
        self.metrics_path, self.val_path = run.metrics_path(v, seed, "train"), run.metrics_path(v, seed, "val")
        self.world, self.main, self.dev = self.acc.num_processes, self.acc.is_main_process, self.acc.device

    def wanted(self) -> dict[str, Any]:
        """What the model is trained with: variant, seed, vocabulary and the TrainConfig (a change is a new model)."""
        return {"variant": self.v.name, "seed": self.seed, "vocab_size": self.vocab, **recorded_recipe(self.cfg)}


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
        k = x.shape[0] * (seq_len - 1)
        total += model(input_ids=x, labels=x).loss.item() * k
        count += k
    model.train(was_training)
    return total / count


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

    def val_loss(self, step: int) -> None:
        """Log the validation loss of the model as it is now (main process) as ``step``'s row."""
        cfg = self.job.cfg
        with self.autocast():
            loss = evaluate_loss(self.core, self.job.val_ids, seq_len=cfg.seq_len, max_tokens=cfg.eval_tokens,
                                 batch_size=cfg.batch_size, device=self.job.dev)
        self.vw.writerow([step, loss])
        self.vf.flush()

    def checkpoint(self, step: int) -> None:
        """Save the checkpoint of ``step`` (main process, with the optimiser state); every process waits."""
        if self.job.main:
            ck.save_checkpoint(self.core, self.job.ckpt_root, step, {
                "optimizer": self.opt.state_dict(), "step": step, "elapsed_s": time.perf_counter() - self.t0})
        self.job.acc.wait_for_everyone()

    def run(self, start: int, *, progress: bool, stop_at: int | None) -> dict | None:
        """Steps ``start`` to the end; returns the stop record when ``stop_at`` or ``should_stop`` ends it early."""
        job, cfg = self.job, self.job.cfg
        self.mf, self.vf = [rf.open_append(p, newline="") if job.main else None for p in (job.metrics_path, job.val_path)]
        self.mw = csv.DictWriter(self.mf, fieldnames=ck.TRAIN_FIELDS) if job.main else None
        self.vw = csv.writer(self.vf) if job.main else None
        if start == 0:
            self.checkpoint(0)
            if job.main:
                self.val_loss(0)
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
                    last = self._step(step, prov, tuner)
                    bar.update(1)
                    bar.set_postfix(loss=f"{last:.3f}")
                    if self.diverged is not None:
                        break
                d = self.diverged
                if d is not None and job.main:  # its validation row, so the record's last loss is this step's
                    if not (d["step"] % cfg.eval_every == 0 or d["step"] == cfg.steps):
                        self.val_loss(d["step"])
                    print(f"{job.key}: training diverged at step {d['step']} (loss {d['loss']}, gradient norm "
                          f"{d['grad_norm']}); stopped there, nothing after it could learn: {divergence.ADVICE}",
                          flush=True)
        finally:
            bar.close()
            for f in (self.mf, self.vf):
                if f is not None:
                    f.close()
        return None

    def _step(self, step: int, prov: GradientProvenance | None, tuner: Any) -> float:
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
            self.mw.writerow({**row, **(stats._asdict() if stats is not None else {})})
            if done % cfg.eval_every == 0 or done == cfg.steps:
                self.val_loss(done)
        if done in self.schedule:
            if job.main:
                self.mf.flush()
            self.checkpoint(done)
        return last


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device to train on: the one asked for, else CUDA when available, else CPU.

    Args:
        device: the device asked for (None: choose).

    Returns:
        The ``torch.device``.
    """
    return torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")


def estimate_memory(cfg: Any, vocab_size: int, processes: int = 1) -> int:
    """Rough peak bytes of one training process (``cfg``: a TrainConfig): weights, grads, AdamW state, activations,
    logits."""
    p = get_preset(cfg.preset)
    d, L = p.hidden, p.layers
    ffn = p.intermediate(cfg.family)
    params = 2 * vocab_size * d + L * (4 * d * d + 3 * d * ffn)
    rows = max(cfg.batch_size // processes, 1)
    tokens = rows * cfg.seq_len
    activations = tokens * L * (16 * d + 3 * ffn) * 4 + rows * p.heads * cfg.seq_len**2 * 4 * L
    return int(16 * params + activations + tokens * vocab_size * 4 * 3)


def check_memory(cfg: Any, vocab_size: int, device: torch.device, processes: int = 1) -> None:
    """Refuse, before allocating, a preset/batch that cannot fit in the device's free memory."""
    need, free = estimate_memory(cfg, vocab_size, processes), free_memory(device)
    if device.type != "cuda":
        free //= max(processes, 1)  # the processes share the machine's memory
    if need > 0.9 * free:
        raise ValueError(f"preset: {cfg.preset!r} with batch_size={cfg.batch_size}, seq_len={cfg.seq_len} needs "
                         f"about {need / 2**30:.1f} GiB per process but {device} has {free / 2**30:.1f} GiB free; "
                         "choose a smaller preset, batch or sequence length")


def _checked_args(variant: str | Variant, seed: int, config: TrainConfig | None,
                  stop_at: int | None) -> tuple[Variant, TrainConfig]:
    """The variant and the validated config; a bad seed or stop_at stops here, naming the value."""
    v = Variant.parse(variant)
    check_int("seed", seed, f"an integer 0 <= seed < 2**32 ({SEED_LIMIT})", maximum=SEED_LIMIT - 1)
    if stop_at is not None:
        check_int("stop_at", stop_at, "None or an integer >= 0")
    return v, (config or TrainConfig()).validate()


def train(run: Run | str | Path, variant: str | Variant, seed: int, config: TrainConfig | None = None, *,
          resume: bool = True, overwrite: bool = False, progress: bool = True, stop_at: int | None = None,
          device: str | torch.device | None = None, num_threads: int | str | None = "auto",
          should_stop: Callable[[], bool] | None = None) -> dict:
    """Train one model (variant, seed) in a run folder under its writer lock and return its summary.

    A finished model with the same config is returned as it is; an unfinished one resumes from its newest checkpoint
    that loads; a folder made with another config stops unless ``overwrite``. ``stop_at`` or ``should_stop`` end the
    call early, as an interruption would. Under ``accelerate launch`` each process takes an equal slice of the batch,
    provenance is measured on the averaged gradient, and only the main process writes.

    Why so many parameters: the recipe is one object already (``config``); the others say how this one call runs,
    and each caller (notebook 01, models side by side, ``accelerate launch``) sets a different few of them.
    """
    run = run if isinstance(run, Run) else Run(run)
    hf_logging.disable_progress_bar()  # one bar per checkpoint write would drown the training bar
    v, cfg = _checked_args(variant, seed, config, stop_at)
    check_num_threads(num_threads)
    check_should_stop(should_stop)
    with _SETUP_LOCK:  # accelerate's state is one per process: threads training side by side take turns
        acc, precision = make_accelerator(cfg.precision, device)
    world = acc.num_processes
    if cfg.batch_size % world:
        raise ValueError(f"batch_size: {cfg.batch_size} rows cannot be split evenly over {world} processes; "
                         f"use a multiple of {world} (and at least {world} rows)")
    tok, train_ids, val_ids = run.tokenizer(), run.tokens("train"), run.tokens("validation")
    n_train, n_val = train_ids.numel(), val_ids.numel()
    check_memory(cfg, len(tok), acc.device, world)
    if cfg.eval_tokens < cfg.seq_len:  # the data: refused before anything is written
        raise ValueError(f"eval_tokens: {cfg.eval_tokens} is shorter than seq_len={cfg.seq_len}; need "
                         "eval_tokens >= seq_len (validation is measured on whole windows)")
    if n_train <= cfg.seq_len:
        raise ValueError(f"seq_len: {cfg.seq_len} is not shorter than the training split ({n_train} tokens); "
                         "use a shorter seq_len or a larger corpus")
    if min(n_val, cfg.eval_tokens) < cfg.seq_len:
        raise ValueError(f"seq_len: {cfg.seq_len} is longer than the validation tokens available "
                         f"(split {n_val}, eval_tokens={cfg.eval_tokens}); use a shorter seq_len, a larger "
                         "eval_tokens or a corpus with a larger validation split")
    job = TrainJob(run, v, seed, cfg, acc, precision, tok, train_ids, val_ids, run.config["tokenizer_size"],
                   num_threads, should_stop)
    err = None  # the writer lock, taken by the main process; every process raises if it is held elsewhere
    with contextlib.ExitStack() as stack:
        if acc.is_main_process:
            try:
                stack.enter_context(run.writing(f"training {job.key}"))
            except RunLockedError as e:
                err = str(e)
        if world > 1:
            from accelerate.utils import broadcast_object_list

            err = broadcast_object_list([err])[0]
        if err is not None:
            raise RunLockedError(err)
        return _train_locked(job, resume=resume, overwrite=overwrite, progress=progress, stop_at=stop_at)


def _train_locked(job: TrainJob, *, resume: bool, overwrite: bool, progress: bool, stop_at: int | None) -> dict:
    """The body of :func:`train`, run while holding the writer lock: checks of the folder, then training."""
    fresh, finished = _check_folder(job, resume=resume, overwrite=overwrite)
    if finished is not None:
        return finished
    model, opt = _build(job)
    start, elapsed, rows = _resume(job, model, opt, fresh)
    _prepare_folder(job, fresh, start, *rows)
    loop = StepLoop(job, model, opt, elapsed)
    stopped = loop.run(start, progress=progress, stop_at=stop_at)
    if stopped is not None:
        return stopped
    total_s = time.perf_counter() - loop.t0
    if job.main:
        _finalise(job, loop, total_s)
    job.acc.wait_for_everyone()
    return job.run.summary(job.v, job.seed)


def _check_folder(job: TrainJob, *, resume: bool, overwrite: bool) -> tuple[bool, dict | None]:
    """Decide from the model folder, writing nothing: (train from scratch?, summary of a finished model). Another
    config, another run's data or checkpoints without their config stop here unless ``overwrite``."""
    run, key, cfg_file = job.run, job.key, job.cfg_file
    if not cfg_file.exists():
        if any(ck._step_key(d) > 0 for d in job.ckpt_root.glob(f"{ck.STEP_PREFIX}*")) and not overwrite:
            raise rf.DamagedFileError(f"{cfg_file}: missing, but {job.ckpt_root} holds checkpoints: what they were "
                                   f"trained with is unknown; restore the file, or {rf.OVERWRITE_HINT} to retrain "
                                   f"{key} from scratch")
        return True, None
    try:
        have = rf.read_json(cfg_file, f"{rf.OVERWRITE_HINT} to retrain {key}, or restore the file")
        run.check_model_origin(job.v, job.seed)
    except (rf.DamagedFileError, ForeignModelError):
        if not overwrite:
            raise
        return True, None
    wanted = job.wanted()
    diff = rf.diff_config(have, wanted, sorted((set(have) | set(wanted)) - set(FINGERPRINTS)))
    if diff and not overwrite:
        raise ParameterChangedError(run.path, diff, f"model {key} was trained with the folder's value",
                                    f"{rf.OVERWRITE_HINT} to retrain {key} here")
    if not diff and resume and run.complete_path(job.v, job.seed).exists():
        try:
            return False, run.summary(job.v, job.seed)
        except rf.DamagedFileError as e:
            warnings.warn(f"{e}: finishing {key} again from its newest checkpoint", stacklevel=4)
    return bool(diff) or not resume, None


def _build(job: TrainJob) -> tuple[PreTrainedModel, torch.optim.Optimizer]:
    """The freshly initialised model on the device, and its optimiser: AdamW (or SGD, ``cfg.optimizer``), no weight
    decay on vectors, nor on the embedding matrices when ``cfg.decay_embeddings`` is off."""
    cfg, tok = job.cfg, job.tok
    model = build(cfg.preset, family=cfg.family, tied=job.v.tied, vocab_size=len(tok), seed=job.seed,
                  eos_token_id=tok.eos_token_id).to(job.dev)
    embedding = {id(m.weight) for m in (model.get_input_embeddings(), model.get_output_embeddings())}
    decayed = [p.dim() >= 2 and (cfg.decay_embeddings or id(p) not in embedding) for p in model.parameters()]
    groups = [{"params": [p for p, d in zip(model.parameters(), decayed, strict=True) if d],
               "weight_decay": cfg.weight_decay},
              {"params": [p for p, d in zip(model.parameters(), decayed, strict=True) if not d], "weight_decay": 0.0}]
    if cfg.optimizer == "sgd":  # claim 4's contrast: no per-coordinate scaling (L2-coupled decay, momentum beta1)
        return model, torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.beta1, foreach=True)
    return model, torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=True)


def _resume(job: TrainJob, model: PreTrainedModel, opt: torch.optim.Optimizer,
            fresh: bool) -> tuple[int, float, tuple[list[str], list[str], list[str]]]:
    """Load the resume point (unless ``fresh``): (start, elapsed, (kept train rows, kept val rows, notes))."""
    if fresh:
        return 0, 0.0, ([], [], [])
    start, elapsed = ck.load_resume_point(model, opt, job.ckpt_root, job.dev, job.v.tied, job.key) or (0, 0.0)
    cfg = job.cfg
    val_steps = [s for s in range(start + 1) if s == 0 or s % cfg.eval_every == 0 or s == cfg.steps]
    # the step-0 validation row is written after the step-0 checkpoint: a resume at 0 writes it again
    train_rows, n1 = ck.kept_log(job.metrics_path, ck.TRAIN_FIELDS, start, list(range(1, start + 1)), job.key)
    val_rows, n2 = ck.kept_log(job.val_path, ck.VAL_FIELDS, start if start else -1, val_steps if start else [],
                               job.key)
    return start, elapsed, (train_rows, val_rows, n1 + n2)


def _prepare_folder(job: TrainJob, fresh: bool, start: int, train_rows: list[str], val_rows: list[str],
                    notes: list[str]) -> None:
    """The main process empties (``fresh``) or cuts back the model folder and its logs to ``start``."""
    job.acc.wait_for_everyone()
    if job.main:
        if job.mdir.exists() and fresh:
            shutil.rmtree(job.mdir)  # retrain from scratch, or a folder that never got its config
            for p in (job.metrics_path, job.val_path):
                p.unlink(missing_ok=True)
        job.ckpt_root.mkdir(parents=True, exist_ok=True)
        job.run.metrics_dir.mkdir(exist_ok=True)
        # the run's corpus and tokenizer fingerprints tie the model folder to its data (Run.check_model_origin)
        rf.write_json_atomic(job.cfg_file, {**job.wanted(), **job.run.fingerprints()})
        ck.clear_after(job.ckpt_root, start)
        ck.write_log(job.metrics_path, ck.TRAIN_FIELDS, train_rows)
        ck.write_log(job.val_path, ck.VAL_FIELDS, val_rows)
        if notes:
            warnings.warn(f"model {job.key}: " + "; ".join(notes) + " (recomputed from the checkpoint)",
                          stacklevel=4)
        print(f"{job.key}: {job.dev} ({job.world} process{'es' if job.world > 1 else ''}, {job.precision})"
              + (f", resuming at step {start}" if start else ""), flush=True)
    job.acc.wait_for_everyone()


def _finalise(job: TrainJob, loop: StepLoop, total_s: float) -> None:
    """Main process: the final model, then (last, atomically) the completion marker with the summary read from the
    logs, ``diverged`` when it did, and the sha256 of the final weights (the identity a claim's record keeps)."""
    cfg, key = job.cfg, job.key
    todo = f"{rf.OVERWRITE_HINT} to retrain {key}"
    logged = rf.read_log(job.metrics_path, ck.TRAIN_FIELDS, todo=todo)
    vals = rf.read_log(job.val_path, ck.VAL_FIELDS, todo=todo)
    summary = {"key": key, "variant": job.v.name, "seed": job.seed, "complete": True, "steps": cfg.steps,
               "final_train_loss": float(logged.loss.iloc[-1]), "train_seconds": total_s,
               "tokens_per_second": int(logged.step.iloc[-1]) * cfg.batch_size * cfg.seq_len / max(total_s, 1e-9),
               "parameters": loop.n_params, "device": str(job.dev), "processes": job.world, "precision": job.precision,
               "final_val_loss": float(vals.val_loss.iloc[-1]), "initial_val_loss": float(vals.val_loss.iloc[0]),
               **({"diverged": loop.diverged} if loop.diverged else {})}
    ck.save_final(loop.core, job.tok, job.mdir)
    summary[WEIGHTS_ID] = rf.weights_sha256(job.mdir, todo)
    ck.prune_states(job.ckpt_root, keep=1)
    ck.require_initial(job.ckpt_root)  # the folder vanished since the last checkpoint: never marked complete
    reasons = {k: "training diverged (the loss is not a finite number)"
               for k in ("final_train_loss", "final_val_loss", "initial_val_loss")}
    rf.write_json_atomic(job.run.complete_path(job.v, job.seed), summary, reasons)


def make_accelerator(precision: str = "auto", device: str | torch.device | None = None) -> tuple[Accelerator, str]:
    """The accelerate engine for this process (DDP when launched with N processes); ``precision`` ``auto`` is bf16
    autocast on a GPU that supports it, else fp32."""
    dev = pick_device(device)
    bf16_ok = dev.type == "cuda" and torch.cuda.is_bf16_supported()
    if precision == "bf16" and not bf16_ok:
        raise ValueError(f"precision: 'bf16' needs a CUDA GPU with bf16 support; this process runs on {dev}. "
                         "Use 'auto' or 'fp32'")
    mp = "bf16" if precision == "bf16" or (precision == "auto" and bf16_ok) else "no"
    acc = Accelerator(cpu=dev.type != "cuda", mixed_precision=mp)
    if acc.num_processes > 1:  # destroyed at exit while still whole (registered once): gloo can abort in teardown
        atexit.unregister(_destroy_group)
        atexit.register(_destroy_group)
    return acc, "bf16 autocast" if mp == "bf16" else "fp32"


def _destroy_group() -> None:
    """The exit hook: destroy the default process group if it still exists."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
