"""Checkpoints and metrics logs of one model's training: writing, pruning, resuming, rewriting.

Every checkpoint is a Hugging Face model folder ``step-<N>`` written to a temporary name and renamed,
so an interruption never leaves a half-written checkpoint; the two newest keep the optimiser state so
that training can resume from the newest one that loads. On resume the metrics logs are cut back to
the resume point, verbatim, and rows that cannot be recomputed stop training with an error.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel

from tiebias.config.variants import STEP_PREFIX, step_dir, step_of
from tiebias.run.files import (
    OVERWRITE_HINT,
    DamagedFileError,
    RunFolderError,
    UnsafeFileError,
    atomic_folder,
    check_model_folder,
    damaged,
    files_into,
    load_torch_file,
    read_log_lines,
    remove_entry,
    write_text_atomic,
)
from tiebias.run.layout import CONFIG_NAME, TRAINER_STATE_NAME, WEIGHTS_NAME

# the columns of metrics/<key>.csv and metrics/<key>_val.csv
TRAIN_FIELDS = ["step", "loss", "lr", "grad_norm", "tokens", "elapsed_s", "input_norm", "output_norm",
                "output_share", "cosine", "input_rows", "input_factor", "output_factor",
                "input_l1", "output_l1", "proxy_input_norm", "proxy_input_l1"]
VAL_FIELDS = ["step", "val_loss"]
_TMP_PREFIX = f".tmp-{STEP_PREFIX}"  # a checkpoint being written: .tmp-step-<N>


def _step_key(d: Path) -> int:
    """The step of a ``step-<N>`` folder, -1 for any other name (sorts before every checkpoint)."""
    step = step_of(d)
    return -1 if step is None else step


def require_initial(ckpt_root: Path) -> Path:
    """The step-0 checkpoint (a model's initial weights) under ``ckpt_root``; RunFolderError naming it if missing.

    Training asks before every later checkpoint and before marking the model complete: a model folder
    deleted or moved mid-training would otherwise be recreated by the next save, without its initial
    weights. Analyses ask before measuring drift from initialisation, instead of taking the earliest
    checkpoint left.
    """
    path = ckpt_root / step_dir(0)
    if not (path / CONFIG_NAME).is_file():
        mdir = ckpt_root.parent
        raise RunFolderError(f"{path}: missing: the step-0 checkpoint holds the initial weights of {mdir.name} "
                             f"(was {mdir} deleted or moved?); {mdir.name} cannot be trained on or compared "
                             f"with its start without it. Delete {mdir} if it is still there and train "
                             f"{mdir.name} again (rerun 01_train, or 04_ablate for its variants): it starts "
                             "from scratch")
    return path


def save_checkpoint(model: PreTrainedModel, ckpt_root: Path, step: int, state: dict | None) -> None:
    """Write ``step-N`` atomically; the two newest checkpoints keep the optimiser state.

    The older of the two is the fallback when the newest turns out damaged; :func:`train` drops it
    once the model is finished (:func:`prune_states` with ``keep=1``). Any step after 0 first checks
    that the step-0 checkpoint is still there (:func:`require_initial`), so a vanished model folder
    stops training instead of being recreated without its initial weights.
    """
    if step > 0:
        require_initial(ckpt_root)
    with atomic_folder(ckpt_root / step_dir(step), f"{_TMP_PREFIX}{step}.") as tmp:
        model.save_pretrained(tmp)
        if state is not None:
            torch.save(state, tmp / TRAINER_STATE_NAME)
    if state is not None:
        prune_states(ckpt_root, keep=2)


def prune_states(ckpt_root: Path, keep: int) -> None:
    """Delete the optimiser state of all but the ``keep`` newest checkpoints."""
    with_state = sorted((_step_key(d), d) for d in ckpt_root.glob(f"{STEP_PREFIX}*")
                        if (d / TRAINER_STATE_NAME).exists())
    for _, d in with_state[:-keep] if keep else with_state:
        (d / TRAINER_STATE_NAME).unlink()


TRAINER_STATE_HOLDS = "a checkpoint's optimiser state, step and elapsed time"


def load_resume_point(model: PreTrainedModel, opt: torch.optim.Optimizer, ckpt_root: Path, dev: torch.device,
                       tied: bool, key: str) -> tuple[int, float] | None:
    """Load the newest checkpoint whose weights and optimiser state both load; (step, elapsed) or None.

    A checkpoint that does not load is skipped for the previous one with a warning naming the file.
    Refuses (ValueError naming the folder) when checkpoints past step 0 exist but none can be resumed:
    restarting from step 0 is never done silently; so does a missing step-0 checkpoint (:func:`require_initial`).
    The optimiser state is read with ``weights_only=True``: one that refers to Python objects (which could
    run code) is refused outright (:class:`tiebias.run.files.UnsafeFileError`), not skipped.
    """
    dirs = sorted((d for d in ckpt_root.glob(f"{STEP_PREFIX}*") if _step_key(d) >= 0), key=_step_key,
                  reverse=True)
    if dirs and _step_key(dirs[0]) > 0:
        require_initial(ckpt_root)  # a trained model without its initial weights is not resumed
    problems = []
    todo = (f"delete it: training then resumes from the previous checkpoint that kept its optimiser state, or "
            f"{OVERWRITE_HINT} to retrain {key} from scratch")
    for d in dirs:
        state_file, weights = d / TRAINER_STATE_NAME, d / WEIGHTS_NAME
        if not state_file.exists():
            problems.append(f"{d.name}: no optimiser state (trainer_state.pt)")
            continue
        try:
            check_model_folder(d, "")
            state = load_torch_file(state_file, TRAINER_STATE_HOLDS, todo, map_location=dev)
            if not isinstance(state, dict) or "optimizer" not in state:
                raise damaged(state_file, "not a trainer state (no 'optimizer' entry)", todo)
        except UnsafeFileError:
            raise
        except DamagedFileError as e:
            problems.append(f"{d.name}: {str(e).split(';')[0]}")
            continue
        try:
            _load_weights(model, load_file(str(weights), device=str(dev)), tied)
            opt.load_state_dict(state["optimizer"])
        except Exception as e:  # weights or optimiser state of another shape
            problems.append(f"{d.name}: {d} does not match this model ({type(e).__name__}: {e})")
            continue
        if problems:
            warnings.warn(f"model {key}: skipped checkpoint(s) that cannot be resumed ({'; '.join(problems)}); "
                          f"resuming from {d.name} instead (the later steps are recomputed)",
                          stacklevel=4)  # train(), through its resume step
        return _step_key(d), float(state.get("elapsed_s", 0.0))
    if any(_step_key(d) > 0 for d in dirs):
        raise ValueError(f"model {key}: no checkpoint in {ckpt_root} can be resumed ({'; '.join(problems)}); "
                         f"training would restart from step 0: {OVERWRITE_HINT} to retrain it from scratch, "
                         "or restore the checkpoint files")
    return None


def _load_weights(model: PreTrainedModel, sd: dict[str, torch.Tensor], tied: bool) -> None:
    """Load a checkpoint's weights into ``model``; ValueError when they are not the model's (other names, or a
    tied model's checkpoint holding an output matrix of its own that differs from the input embedding)."""
    out_w = model.get_output_embeddings().weight
    names = [n for n, p in model.named_parameters(remove_duplicate=False) if p is out_w]
    if tied:
        held = [sd[n] for n in names if n in sd]
        if any(t.shape != held[0].shape or not torch.equal(t, held[0]) for t in held[1:]):
            raise ValueError(f"the model is tied but the checkpoint holds different matrices for {names}")
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or set(missing) - (set(names) if tied else set()):
        raise ValueError(f"weights do not match the model: missing {missing}, unexpected {unexpected}")


def kept_log(path: Path, header: list[str], upto: int, expected: list[int], key: str) -> tuple[list[str], list[str]]:
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
    cols, rows, dropped = read_log_lines(path, todo=todo)
    notes = [f"{path.name}: dropped a last row cut mid-write"] if dropped else []
    if cols != header and header[:len(cols)] == cols:
        # a log written before columns were added at the end: its rows get empty (missing) values for them
        rows = [(step, line + "," * (len(header) - len(cols))) for step, line in rows]
        notes.append(f"{path.name}: written before the columns {', '.join(header[len(cols):])} existed; "
                     "its earlier rows leave them empty")
    elif cols != header:
        read_log_lines(path, header, todo=todo)  # the error naming both headers
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
    """A list of steps for a message, shortened when long."""
    return str(steps) if len(steps) <= 6 else f"[{steps[0]}, {steps[1]}, ..., {steps[-1]}] ({len(steps)} steps)"


def write_log(path: Path, header: list[str], lines: list[str]) -> None:
    """Rewrite a metrics log with the given verbatim rows (through a temporary file and a rename)."""
    write_text_atomic(path, "".join(f"{line}\r\n" for line in [",".join(header), *lines]))


def has_trained_checkpoints(ckpt_root: Path) -> bool:
    """Whether a checkpoints folder holds a checkpoint past the initialisation (step > 0)."""
    return any(_step_key(d) > 0 for d in ckpt_root.glob(f"{STEP_PREFIX}*"))


def clear_after(ckpt_root: Path, start: int) -> None:
    """Delete half-written checkpoints and every checkpoint after ``start`` (they are recomputed)."""
    for p in ckpt_root.glob(f"{_TMP_PREFIX}*"):
        remove_entry(p)
    for p in ckpt_root.glob(f"{STEP_PREFIX}*"):
        if _step_key(p) > start:  # recomputed; a damaged one must not linger as a checkpoint
            shutil.rmtree(p)


def save_final(model: PreTrainedModel, tok: Any, mdir: Path) -> None:
    """The final model and tokenizer: written to a private temporary folder, then moved into ``mdir``
    (:func:`tiebias.run.files.files_into`: a link planted in ``mdir`` is replaced, never written through)."""
    with files_into(mdir) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
