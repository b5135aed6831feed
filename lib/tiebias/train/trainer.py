"""One model's training in a run folder, as named steps: check the arguments, decide from the model folder (finished,
resume or start over), build, load the resume point, prepare the folder, run the steps (:mod:`.steploop`), finalise.
A resumed run ends with the same weights as an uninterrupted one (bit for bit on CPU)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from tiebias.config.checks import check_int
from tiebias.config.training import SEED_LIMIT, TrainConfig
from tiebias.config.variants import Variant
from tiebias.models.build import build
from tiebias.run.files import (
    OVERWRITE_HINT,
    DamagedFileError,
    diff_config,
    read_json,
    read_log,
    weights_sha256,
    write_json_atomic,
)
from tiebias.run.folder import FINGERPRINTS, WEIGHTS_ID, ForeignModelError, Run, RunLockedError
from tiebias.run.variation import ParameterChangedError
from tiebias.system.parallel import check_should_stop
from tiebias.system.threads import check_num_threads
from tiebias.train.checkpoints import (
    TRAIN_FIELDS,
    VAL_FIELDS,
    clear_after,
    has_trained_checkpoints,
    kept_log,
    load_resume_point,
    prune_states,
    require_initial,
    save_final,
    write_log,
)
from tiebias.train.job import TrainJob
from tiebias.train.memory import check_memory
from tiebias.train.steploop import StepLoop

_SETUP_LOCK = threading.Lock()


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device to train on: the one asked for, else CUDA when available, else CPU.

    Args:
        device: the device asked for (None: choose).

    Returns:
        The ``torch.device``.
    """
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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


def _checked_args(variant: str | Variant, seed: int, config: TrainConfig | None,
                  stop_at: int | None) -> tuple[Variant, TrainConfig]:
    """The variant and the validated config; a bad seed or stop_at stops here, naming the value."""
    v = Variant.parse(variant)
    check_int("seed", seed, minimum=0, maximum=SEED_LIMIT - 1, need=f"an integer 0 <= seed < 2**32 ({SEED_LIMIT})")
    if stop_at is not None:
        check_int("stop_at", stop_at, minimum=0, need="None or an integer >= 0")
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
    vocab = run.config["tokenizer_size"]
    tok = run.tokenizer()
    train_ids = run.tokens("train")
    val_ids = run.tokens("validation")
    check_memory(cfg, len(tok), acc.device, world)
    check_data(cfg, train_ids.numel(), val_ids.numel())
    job = TrainJob(run, v, seed, cfg, acc, precision, tok, train_ids, val_ids, vocab, num_threads, should_stop)
    with _writer_lock(run, acc, f"training {job.key}"):
        return _train_locked(job, resume=resume, overwrite=overwrite, progress=progress, stop_at=stop_at)


def _train_locked(job: TrainJob, *, resume: bool, overwrite: bool, progress: bool, stop_at: int | None) -> dict:
    """The body of :func:`train`, run while holding the writer lock: checks of the folder, then training."""
    fresh, finished = _check_folder(job, resume=resume, overwrite=overwrite)
    if finished is not None:
        return finished
    model, opt = _build(job)
    start, elapsed, train_rows, val_rows, notes = _resume(job, model, opt, fresh)
    _prepare_folder(job, fresh, start, train_rows, val_rows, notes)
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
    fresh = True
    if cfg_file.exists():
        try:
            have = read_json(cfg_file, f"{OVERWRITE_HINT} to retrain {key}, or restore the file")
            run.check_model_origin(job.v, job.seed)
        except (DamagedFileError, ForeignModelError):
            if not overwrite:
                raise
            return True, None
        wanted = job.wanted()
        diff = diff_config(have, wanted, sorted((set(have) | set(wanted)) - set(FINGERPRINTS)))
        if diff and not overwrite:
            raise ParameterChangedError(run.path, diff, f"model {key} was trained with the folder's value",
                                        f"{OVERWRITE_HINT} to retrain {key} here")
        if not diff and resume and run.complete_path(job.v, job.seed).exists():
            try:
                return False, run.summary(job.v, job.seed)
            except DamagedFileError as e:
                warnings.warn(f"{e}: finishing {key} again from its newest checkpoint", stacklevel=4)
        fresh = bool(diff) or not resume
    elif has_trained_checkpoints(job.ckpt_root) and not overwrite:
        raise DamagedFileError(f"{cfg_file}: missing, but {job.ckpt_root} holds checkpoints: what they were "
                               f"trained with is unknown; restore the file, or {OVERWRITE_HINT} to retrain {key} "
                               "from scratch")
    return fresh, None


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
            fresh: bool) -> tuple[int, float, list[str], list[str], list[str]]:
    """Load the resume point (unless ``fresh``): (start, elapsed, kept train rows, kept val rows, notes)."""
    start, elapsed = 0, 0.0
    train_rows: list[str] = []
    val_rows: list[str] = []
    notes: list[str] = []
    if not fresh:
        resumed = load_resume_point(model, opt, job.ckpt_root, job.dev, job.v.tied, job.key)
        if resumed is not None:
            start, elapsed = resumed
        # the step-0 validation row is written after the step-0 checkpoint: a resume at 0 writes it again
        train_rows, n1 = kept_log(job.metrics_path, TRAIN_FIELDS, start, list(range(1, start + 1)), job.key)
        val_rows, n2 = kept_log(job.val_path, VAL_FIELDS, start if start else -1,
                                val_steps(job.cfg, start) if start else [], job.key)
        notes = n1 + n2
    return start, elapsed, train_rows, val_rows, notes


def _prepare_folder(job: TrainJob, fresh: bool, start: int, train_rows: list[str], val_rows: list[str],
                    notes: list[str]) -> None:
    """The main process empties (``fresh``) or cuts back the model folder and its logs to ``start``."""
    acc = job.acc
    acc.wait_for_everyone()
    if job.main:
        if job.mdir.exists() and fresh:
            shutil.rmtree(job.mdir)  # retrain from scratch, or a folder that never got its config
            for p in (job.metrics_path, job.val_path):
                p.unlink(missing_ok=True)
        job.ckpt_root.mkdir(parents=True, exist_ok=True)
        job.run.metrics_dir.mkdir(exist_ok=True)
        write_json_atomic(job.cfg_file, job.train_config())
        clear_after(job.ckpt_root, start)
        write_log(job.metrics_path, TRAIN_FIELDS, train_rows)
        write_log(job.val_path, VAL_FIELDS, val_rows)
        if notes:
            warnings.warn(f"model {job.key}: " + "; ".join(notes) + " (recomputed from the checkpoint)",
                          stacklevel=4)
        print(f"{job.key}: {job.dev} ({job.world} process{'es' if job.world > 1 else ''}, {job.precision})"
              + (f", resuming at step {start}" if start else ""), flush=True)
    acc.wait_for_everyone()


def _finalise(job: TrainJob, loop: StepLoop, total_s: float) -> None:
    """Main process: the final model, then (last, atomically) the completion marker with the summary read from the
    logs, ``diverged`` when it did, and the sha256 of the final weights (the identity a claim's record keeps)."""
    cfg, key = job.cfg, job.key
    todo = f"{OVERWRITE_HINT} to retrain {key}"
    logged = read_log(job.metrics_path, TRAIN_FIELDS, todo=todo)
    vals = read_log(job.val_path, VAL_FIELDS, todo=todo)
    summary = {"key": key, "variant": job.v.name, "seed": job.seed, "complete": True, "steps": cfg.steps,
               "final_train_loss": float(logged.loss.iloc[-1]), "train_seconds": total_s,
               "tokens_per_second": int(logged.step.iloc[-1]) * cfg.batch_size * cfg.seq_len / max(total_s, 1e-9),
               "parameters": loop.n_params, "device": str(job.dev), "processes": job.world, "precision": job.precision,
               "final_val_loss": float(vals.val_loss.iloc[-1]), "initial_val_loss": float(vals.val_loss.iloc[0]),
               **({"diverged": loop.diverged} if loop.diverged else {})}
    save_final(loop.core, job.tok, job.mdir)
    summary[WEIGHTS_ID] = weights_sha256(job.mdir, todo)  # the identity a claim's record keeps of this model
    prune_states(job.ckpt_root, keep=1)
    require_initial(job.ckpt_root)  # the folder vanished since the last checkpoint: never marked complete
    reasons = {k: "training diverged (the loss is not a finite number)"
               for k in ("final_train_loss", "final_val_loss", "initial_val_loss")}
    write_json_atomic(job.run.complete_path(job.v, job.seed), summary, reasons)


def make_accelerator(precision: str = "auto", device: str | torch.device | None = None) -> tuple[Accelerator, str]:
    """The accelerate engine for this process (DDP when launched with N processes); ``precision`` ``auto`` is bf16
    autocast on a GPU that supports it, else fp32."""
    dev = pick_device(device)
    cuda = dev.type == "cuda"
    bf16_ok = cuda and torch.cuda.is_bf16_supported()
    if precision == "bf16" and not bf16_ok:
        raise ValueError(f"precision: 'bf16' needs a CUDA GPU with bf16 support; this process runs on {dev}. "
                         "Use 'auto' or 'fp32'")
    mp = "bf16" if precision == "bf16" or (precision == "auto" and bf16_ok) else "no"
    acc = Accelerator(cpu=not cuda, mixed_precision=mp)
    if acc.num_processes > 1:
        _destroy_group_at_exit()
    return acc, "bf16 autocast" if mp == "bf16" else "fp32"


@functools.cache
def _destroy_group_at_exit() -> None:
    """Destroy the process group at exit, while it is still whole (registered once): a gloo group left alive can
    abort in teardown (SIGABRT) after a successful training."""
    atexit.register(_destroy_group)


def _destroy_group() -> None:
    """The exit hook: destroy the default process group if it still exists."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
