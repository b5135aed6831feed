"""One model's training in a run folder: decide from the model folder (finished, resume or start over), build, load
the resume point, run the optimiser steps, finalise; a resumed run ends with the same weights as an uninterrupted one
(bit for bit on CPU)."""

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
from tiebias.run.layout import TRAINER_STATE_NAME
from tiebias.system.alloc import free_memory
from tiebias.system.parallel import check_arg
from tiebias.system.threads import loop_threads
from tiebias.train import checkpoints as ck
from tiebias.train import divergence
from tiebias.train.gradients import GradientProvenance

_SETUP_LOCK = threading.Lock()


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


class _Training:
    """One model's training: what is trained, with what, on which data, where its files go, and its optimiser steps."""

    def __init__(self, run: Run, v: Variant, seed: int, cfg: TrainConfig, acc: Accelerator, precision: str,
                 num_threads: int | str | None, should_stop: Callable[[], bool] | None) -> None:
        self.run, self.v, self.seed, self.cfg, self.acc, self.precision = run, v, seed, cfg, acc, precision
        self.num_threads, self.should_stop = num_threads, should_stop
        self.tok, self.train_ids, self.val_ids = run.tokenizer(), run.tokens("train"), run.tokens("validation")
        self.key, self.mdir, self.ckpt_root = model_key(v, seed), run.model_dir(v, seed), run.checkpoints_dir(v, seed)
        self.cfg_file = run.train_config_path(v, seed)
        self.metrics_path, self.val_path = run.metrics_path(v, seed, "train"), run.metrics_path(v, seed, "val")
        self.world, self.main, self.dev = acc.num_processes, acc.is_main_process, acc.device
        self.diverged: dict | None = None  # divergence.at_step of the step that ended training early

    def wanted(self) -> dict[str, Any]:
        """What the model is trained with: variant, seed, vocabulary and the TrainConfig (a change is a new model)."""
        return {"variant": self.v.name, "seed": self.seed, "vocab_size": self.run.config["tokenizer_size"],
                **recorded_recipe(self.cfg)}

    def check_folder(self, *, resume: bool, overwrite: bool) -> tuple[bool, dict | None]:
        """Decide from the model folder, writing nothing: (train from scratch?, summary of a finished model). Another
        config, another run's data or checkpoints without their config stop here unless ``overwrite``."""
        run, key, cfg_file = self.run, self.key, self.cfg_file
        if not cfg_file.exists():
            if any(ck._step_key(d) > 0 for d in self.ckpt_root.glob(f"{ck.STEP_PREFIX}*")) and not overwrite:
                raise rf.DamagedFileError(f"{cfg_file}: missing, but {self.ckpt_root} holds checkpoints: what they "
                                          f"were trained with is unknown; restore the file, or {rf.OVERWRITE_HINT} to "
                                          f"retrain {key} from scratch")
            return True, None
        try:
            have = rf.read_json(cfg_file, f"{rf.OVERWRITE_HINT} to retrain {key}, or restore the file")
            run.check_model_origin(self.v, self.seed)
        except (rf.DamagedFileError, ForeignModelError):
            if not overwrite:
                raise
            return True, None
        wanted = self.wanted()
        diff = rf.diff_config(have, wanted, sorted((set(have) | set(wanted)) - set(FINGERPRINTS)))
        if diff and not overwrite:
            raise ParameterChangedError(run.path, diff, f"model {key} was trained with the folder's value",
                                        f"{rf.OVERWRITE_HINT} to retrain {key} here")
        if not diff and resume and run.complete_path(self.v, self.seed).exists():
            try:
                return False, run.summary(self.v, self.seed)
            except rf.DamagedFileError as e:
                warnings.warn(f"{e}: finishing {key} again from its newest checkpoint", stacklevel=3)
        return bool(diff) or not resume, None

    def start(self, fresh: bool) -> int:
        """Build the model and its optimiser (AdamW, or SGD; no weight decay on vectors, nor on the embedding matrices
        unless ``cfg.decay_embeddings``), load the resume point (unless ``fresh``), empty or cut back the model folder
        and its logs to it (main process); returns the first step."""
        cfg, tok = self.cfg, self.tok
        model = build(cfg.preset, family=cfg.family, tied=self.v.tied, vocab_size=len(tok), seed=self.seed,
                      eos_token_id=tok.eos_token_id).to(self.dev)
        embedding = {id(m.weight) for m in (model.get_input_embeddings(), model.get_output_embeddings())}
        decayed = [p.dim() >= 2 and (cfg.decay_embeddings or id(p) not in embedding) for p in model.parameters()]
        groups = [{"params": [p for p, d in zip(model.parameters(), decayed, strict=True) if d],
                   "weight_decay": cfg.weight_decay},
                  {"params": [p for p, d in zip(model.parameters(), decayed, strict=True) if not d],
                   "weight_decay": 0.0}]
        if cfg.optimizer == "sgd":  # claim 4's contrast: no per-coordinate scaling (L2-coupled decay, momentum beta1)
            self.opt = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.beta1, foreach=True)
        else:
            self.opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), foreach=True)
        start, elapsed, train_rows, val_rows, notes = 0, 0.0, [], [], []
        if not fresh:
            start, elapsed = ck.load_resume_point(model, self.opt, self.ckpt_root, self.dev, self.v.tied,
                                                  self.key) or (0, 0.0)
            val_steps = [s for s in range(start + 1) if s == 0 or s % cfg.eval_every == 0 or s == cfg.steps]
            # the step-0 validation row is written after the step-0 checkpoint: a resume at 0 writes it again
            train_rows, n1 = ck.kept_log(self.metrics_path, ck.TRAIN_FIELDS, start, list(range(1, start + 1)),
                                         self.key)
            val_rows, n2 = ck.kept_log(self.val_path, ck.VAL_FIELDS, start if start else -1,
                                       val_steps if start else [], self.key)
            notes = n1 + n2
        self.acc.wait_for_everyone()
        if self.main:
            if self.mdir.exists() and fresh:
                shutil.rmtree(self.mdir)  # retrain from scratch, or a folder that never got its config
                for p in (self.metrics_path, self.val_path):
                    p.unlink(missing_ok=True)
            self.ckpt_root.mkdir(parents=True, exist_ok=True)
            self.run.metrics_dir.mkdir(exist_ok=True)
            # the run's corpus and tokenizer fingerprints tie the model folder to its data (Run.check_model_origin)
            rf.write_json_atomic(self.cfg_file, {**self.wanted(), **self.run.fingerprints()})
            for p in self.ckpt_root.glob(f"{ck._TMP_PREFIX}*"):  # half-written checkpoints
                rf.remove_entry(p)
            for p in self.ckpt_root.glob(f"{ck.STEP_PREFIX}*"):
                if ck._step_key(p) > start:  # recomputed; a damaged one must not linger as a checkpoint
                    shutil.rmtree(p)
            ck.write_log(self.metrics_path, ck.TRAIN_FIELDS, train_rows)
            ck.write_log(self.val_path, ck.VAL_FIELDS, val_rows)
            if notes:
                warnings.warn(f"model {self.key}: " + "; ".join(notes) + " (recomputed from the checkpoint)",
                              stacklevel=3)
            print(f"{self.key}: {self.dev} ({self.world} process{'es' if self.world > 1 else ''}, {self.precision})"
                  + (f", resuming at step {start}" if start else ""), flush=True)
        self.acc.wait_for_everyone()
        self.core, self.n_params = model, count_parameters(model)
        self.schedule = set(checkpoint_steps(cfg.steps, cfg.checkpoint_every))
        # accelerate's autocast costs ~10% per step on CPU even when disabled: enter it only for bf16
        self.autocast = self.acc.autocast if self.precision != "fp32" else contextlib.nullcontext
        # DDP only when there is more than one process: a single process trains the bare model
        self.ddp = self.acc.prepare_model(model) if self.world > 1 else model
        self.rows = cfg.batch_size // self.world
        self.lo = self.acc.process_index * self.rows
        self.t0 = time.perf_counter() - elapsed
        return start

    def val_loss(self, step: int) -> None:
        """Log the validation loss of the model as it is now (main process) as ``step``'s row."""
        cfg = self.cfg
        with self.autocast():
            loss = evaluate_loss(self.core, self.val_ids, seq_len=cfg.seq_len, max_tokens=cfg.eval_tokens,
                                 batch_size=cfg.batch_size, device=self.dev)
        self.vw.writerow([step, loss])
        self.vf.flush()

    def checkpoint(self, step: int) -> None:
        """Write ``step-N`` atomically (main process; after step 0, only while step 0 is there); the two newest keep
        the optimiser state (the older is the fallback when the newest is damaged). Every process waits."""
        if self.main:
            state = {"optimizer": self.opt.state_dict(), "step": step, "elapsed_s": time.perf_counter() - self.t0}
            if step > 0:
                ck.require_initial(self.ckpt_root)
            with rf.atomic_folder(self.ckpt_root / f"{ck.STEP_PREFIX}{step}", f"{ck._TMP_PREFIX}{step}.") as tmp:
                self.core.save_pretrained(tmp)
                torch.save(state, tmp / TRAINER_STATE_NAME)
            ck.prune_states(self.ckpt_root, keep=2)
        self.acc.wait_for_everyone()

    def loop(self, start: int, *, progress: bool, stop_at: int | None) -> dict | None:
        """Steps ``start`` to the end; returns the stop record when ``stop_at`` or ``should_stop`` ends it early."""
        cfg = self.cfg
        self.mf, self.vf = [rf.open_append(p, newline="") if self.main else None
                            for p in (self.metrics_path, self.val_path)]
        self.mw = csv.DictWriter(self.mf, fieldnames=ck.TRAIN_FIELDS) if self.main else None
        self.vw = csv.writer(self.vf) if self.main else None
        if start == 0:
            self.checkpoint(0)
            if self.main:
                self.val_loss(0)
        # a plain run (nothing to record, nothing to scale) does not patch the model at all
        plain = not cfg.record_provenance and self.v.input_factor == 1.0 and self.v.output_factor == 1.0
        prov = None if plain else GradientProvenance(self.core, input_factor=self.v.input_factor,
                                                     output_factor=self.v.output_factor, record=cfg.record_provenance)
        bar = tqdm(total=cfg.steps, initial=start, desc=self.key, disable=not progress or not self.main,
                   dynamic_ncols=True)
        # one CPU process: the thread count follows the load (results do not depend on it, only speed);
        # several processes keep theirs (their step times are synchronised, so probing one would mislead)
        threads = loop_threads(self.num_threads if self.world == 1 else None, self.dev.type)
        try:
            with prov if prov is not None else contextlib.nullcontext(), threads as tuner:
                self.ddp.train()
                for step in range(start, cfg.steps):
                    if (stop_at is not None and step >= stop_at) or (self.should_stop and self.should_stop()):
                        return {"key": self.key, "complete": False, "step": step}
                    last = self.step(step, prov, tuner)
                    bar.update(1)
                    bar.set_postfix(loss=f"{last:.3f}")
                    if self.diverged is not None:
                        break
                d = self.diverged
                if d is not None and self.main:  # its validation row, so the record's last loss is this step's
                    if not (d["step"] % cfg.eval_every == 0 or d["step"] == cfg.steps):
                        self.val_loss(d["step"])
                    print(f"{self.key}: training diverged at step {d['step']} (loss {d['loss']}, gradient norm "
                          f"{d['grad_norm']}); stopped there, nothing after it could learn: {divergence.ADVICE}",
                          flush=True)
        finally:
            bar.close()
            for f in (self.mf, self.vf):
                if f is not None:
                    f.close()
        return None

    def step(self, step: int, prov: GradientProvenance | None, tuner: Any) -> float:
        """One optimiser step, its log row, validation loss and checkpoint when due; returns the loss."""
        cfg, opt = self.cfg, self.opt
        lr = lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch_for_step(self.train_ids, step, self.seed, cfg.batch_size, cfg.seq_len)[
            self.lo:self.lo + self.rows].to(self.dev)
        with tuner.step():
            with self.autocast():
                loss = self.ddp(input_ids=x, labels=x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            stats = prov.pop() if prov is not None else None
            gnorm = torch.nn.utils.clip_grad_norm_(self.core.parameters(), cfg.grad_clip)
            opt.step()
        done = step + 1
        if self.world > 1:
            loss = self.acc.reduce(loss.detach(), reduction="mean")
        last, grad_norm = loss.item(), gnorm.item()  # the same on every process (reduced loss, averaged gradient)
        self.diverged = divergence.at_step(done, last, grad_norm)
        if self.main:
            row = {"step": done, "loss": last, "lr": lr, "grad_norm": grad_norm,
                   "tokens": done * cfg.batch_size * cfg.seq_len, "elapsed_s": time.perf_counter() - self.t0}
            self.mw.writerow({**row, **(stats._asdict() if stats is not None else {})})
            if done % cfg.eval_every == 0 or done == cfg.steps:
                self.val_loss(done)
        if done in self.schedule:
            if self.main:
                self.mf.flush()
            self.checkpoint(done)
        return last

    def finalise(self, total_s: float) -> None:
        """Main process: the final model, then (last, atomically) the completion marker with the summary read from the
        logs, ``diverged`` when it did, and the sha256 of the final weights (the identity a claim's record keeps)."""
        cfg, key = self.cfg, self.key
        todo = f"{rf.OVERWRITE_HINT} to retrain {key}"
        logged = rf.read_log(self.metrics_path, ck.TRAIN_FIELDS, todo=todo)
        vals = rf.read_log(self.val_path, ck.VAL_FIELDS, todo=todo)
        summary = {"key": key, "variant": self.v.name, "seed": self.seed, "complete": True, "steps": cfg.steps,
                   "final_train_loss": float(logged.loss.iloc[-1]), "train_seconds": total_s,
                   "tokens_per_second": int(logged.step.iloc[-1]) * cfg.batch_size * cfg.seq_len / max(total_s, 1e-9),
                   "parameters": self.n_params, "device": str(self.dev), "processes": self.world,
                   "precision": self.precision, "final_val_loss": float(vals.val_loss.iloc[-1]),
                   "initial_val_loss": float(vals.val_loss.iloc[0]),
                   **({"diverged": self.diverged} if self.diverged else {})}
        with rf.files_into(self.mdir) as tmp:  # moved in from a private folder (a link planted there is replaced)
            self.core.save_pretrained(tmp)
            self.tok.save_pretrained(tmp)
        summary[WEIGHTS_ID] = rf.weights_sha256(self.mdir, todo)
        ck.prune_states(self.ckpt_root, keep=1)
        ck.require_initial(self.ckpt_root)  # the folder vanished since the last checkpoint: never marked complete
        reasons = {k: "training diverged (the loss is not a finite number)"
                   for k in ("final_train_loss", "final_val_loss", "initial_val_loss")}
        rf.write_json_atomic(self.run.complete_path(self.v, self.seed), summary, reasons)


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device to train on: the one asked for, else CUDA when available, else CPU.

    Args:
        device: the device asked for (None: choose).

    Returns:
        The ``torch.device``.
    """
    return torch.device(device if device is not None else "cuda" if torch.cuda.is_available() else "cpu")


def check_memory(cfg: Any, vocab_size: int, device: torch.device, processes: int = 1) -> int:
    """Rough peak bytes of one training process (``cfg``: a TrainConfig): weights, grads, AdamW state, activations,
    logits; refused before allocating when more than 0.9 of the device's free memory (the processes' share on CPU)."""
    p = get_preset(cfg.preset)
    d, L = p.hidden, p.layers
    ffn = p.intermediate(cfg.family)
    params = 2 * vocab_size * d + L * (4 * d * d + 3 * d * ffn)
    rows = max(cfg.batch_size // processes, 1)
    tokens = rows * cfg.seq_len
    activations = tokens * L * (16 * d + 3 * ffn) * 4 + rows * p.heads * cfg.seq_len**2 * 4 * L
    need, free = int(16 * params + activations + tokens * vocab_size * 4 * 3), free_memory(device)
    if device.type != "cuda":
        free //= max(processes, 1)  # the processes share the machine's memory
    if need > 0.9 * free:
        raise ValueError(f"preset: {cfg.preset!r} with batch_size={cfg.batch_size}, seq_len={cfg.seq_len} needs "
                         f"about {need / 2**30:.1f} GiB per process but {device} has {free / 2**30:.1f} GiB free; "
                         "choose a smaller preset, batch or sequence length")
    return need


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
    check_arg("num_threads", num_threads)
    check_arg("should_stop", should_stop)
    with _SETUP_LOCK:  # accelerate's state is one per process: threads training side by side take turns
        acc, precision = make_accelerator(cfg.precision, device)
    world = acc.num_processes
    if cfg.batch_size % world:
        raise ValueError(f"batch_size: {cfg.batch_size} rows cannot be split evenly over {world} processes; "
                         f"use a multiple of {world} (and at least {world} rows)")
    t = _Training(run, v, seed, cfg, acc, precision, num_threads, should_stop)
    n_train, n_val = t.train_ids.numel(), t.val_ids.numel()
    check_memory(cfg, len(t.tok), acc.device, world)
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
    err = None  # the writer lock, taken by the main process; every process raises if it is held elsewhere
    with contextlib.ExitStack() as stack:
        if acc.is_main_process:
            try:
                stack.enter_context(run.writing(f"training {t.key}"))
            except RunLockedError as e:
                err = str(e)
        if world > 1:
            from accelerate.utils import broadcast_object_list

            err = broadcast_object_list([err])[0]
        if err is not None:
            raise RunLockedError(err)
        fresh, finished = t.check_folder(resume=resume, overwrite=overwrite)
        if finished is not None:
            return finished
        stopped = t.loop(t.start(fresh), progress=progress, stop_at=stop_at)
        if stopped is not None:
            return stopped
        total_s = time.perf_counter() - t.t0
        if t.main:
            t.finalise(total_s)
        acc.wait_for_everyone()
        return run.summary(v, seed)


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
