"""Checkpoints (HF model folders ``step-<N>``, written whole or not at all; the two newest keep the optimiser state)
and metrics logs (cut back verbatim to the resume point) of one model's training."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel

from tiebias.config.variants import STEP_PREFIX, step_of
from tiebias.run import files as rf
from tiebias.run.layout import CONFIG_NAME, TRAINER_STATE_NAME, WEIGHTS_NAME

# the columns of metrics/<key>.csv and metrics/<key>_val.csv
TRAIN_FIELDS = ["step", "loss", "lr", "grad_norm", "tokens", "elapsed_s", "input_norm", "output_norm",
                "output_share", "cosine", "input_rows", "input_factor", "output_factor",
                "input_l1", "output_l1", "proxy_input_norm", "proxy_input_l1"]
VAL_FIELDS = ["step", "val_loss"]
_TMP_PREFIX = f".tmp-{STEP_PREFIX}"  # a checkpoint being written: .tmp-step-<N>


def _step_key(d: Path) -> int:
    """The step of a ``step-<N>`` folder, -1 for any other name (sorts before every checkpoint)."""
    return -1 if step_of(d) is None else step_of(d)


def require_initial(ckpt_root: Path) -> Path:
    """The step-0 checkpoint (the initial weights) under ``ckpt_root``; RunFolderError if missing, so a model folder
    moved mid-training is never recreated without it, nor drift measured from a later checkpoint."""
    path = ckpt_root / f"{STEP_PREFIX}0"
    if not (path / CONFIG_NAME).is_file():
        mdir = ckpt_root.parent
        raise rf.RunFolderError(f"{path}: missing: the step-0 checkpoint holds the initial weights of {mdir.name} "
                                f"(was {mdir} deleted or moved?); {mdir.name} cannot be trained on or compared "
                                f"with its start without it. Delete {mdir} if it is still there and train "
                                f"{mdir.name} again (rerun 01_train, or 04_ablate for its variants): it starts "
                                "from scratch")
    return path


def prune_states(ckpt_root: Path, keep: int) -> None:
    """Delete the optimiser state of all but the ``keep`` newest checkpoints."""
    with_state = sorted((_step_key(d), d) for d in ckpt_root.glob(f"{STEP_PREFIX}*")
                        if (d / TRAINER_STATE_NAME).exists())
    for _, d in with_state[:-keep]:
        (d / TRAINER_STATE_NAME).unlink()


def load_resume_point(model: PreTrainedModel, opt: torch.optim.Optimizer, ckpt_root: Path, dev: torch.device,
                      tied: bool, key: str) -> tuple[int, float] | None:
    """Load the newest checkpoint whose weights and optimiser state both load (the others skipped with a warning);
    (step, elapsed) or None. Never restarts from step 0 silently; an unsafe optimiser state is refused, not skipped.
    A tied model's checkpoint must hold one matrix under every name of the shared one."""
    dirs = sorted((d for d in ckpt_root.glob(f"{STEP_PREFIX}*") if _step_key(d) >= 0), key=_step_key, reverse=True)
    if dirs and _step_key(dirs[0]) > 0:
        require_initial(ckpt_root)  # a trained model without its initial weights is not resumed
    problems = []
    todo = (f"delete it: training then resumes from the previous checkpoint that kept its optimiser state, or "
            f"{rf.OVERWRITE_HINT} to retrain {key} from scratch")
    out_w = model.get_output_embeddings().weight
    names = [n for n, p in model.named_parameters(remove_duplicate=False) if p is out_w]
    for d in dirs:
        state_file = d / TRAINER_STATE_NAME
        if not state_file.exists():
            problems.append(f"{d.name}: no optimiser state (trainer_state.pt)")
            continue
        try:
            rf.check_model_folder(d, "")
            state = rf.load_torch_file(state_file, "a checkpoint's optimiser state, step and elapsed time", todo,
                                       map_location=dev)
            if not isinstance(state, dict) or "optimizer" not in state:
                raise rf.damaged(state_file, "not a trainer state (no 'optimizer' entry)", todo)
        except rf.UnsafeFileError:
            raise
        except rf.DamagedFileError as e:
            problems.append(f"{d.name}: {str(e).split(';')[0]}")
            continue
        try:
            sd = load_file(str(d / WEIGHTS_NAME), device=str(dev))
            held = [sd[n] for n in names if n in sd]
            if tied and any(t.shape != held[0].shape or not torch.equal(t, held[0]) for t in held[1:]):
                raise ValueError(f"the model is tied but the checkpoint holds different matrices for {names}")
            missing, unexpected = model.load_state_dict(sd, strict=False)
            if unexpected or set(missing) - (set(names) if tied else set()):
                raise ValueError(f"weights do not match the model: missing {missing}, unexpected {unexpected}")
            opt.load_state_dict(state["optimizer"])
        except Exception as e:  # weights or optimiser state of another shape
            problems.append(f"{d.name}: {d} does not match this model ({type(e).__name__}: {e})")
            continue
        if problems:
            warnings.warn(f"model {key}: skipped checkpoint(s) that cannot be resumed ({'; '.join(problems)}); "
                          f"resuming from {d.name} instead (the later steps are recomputed)",
                          stacklevel=3)  # train(), through its start
        return _step_key(d), float(state.get("elapsed_s", 0.0))
    if any(_step_key(d) > 0 for d in dirs):
        raise ValueError(f"model {key}: no checkpoint in {ckpt_root} can be resumed ({'; '.join(problems)}); "
                         f"training would restart from step 0: {rf.OVERWRITE_HINT} to retrain it from scratch, "
                         "or restore the checkpoint files")
    return None


def _span(steps: list[int]) -> str:
    """A list of steps for a message, shortened when long."""
    return str(steps) if len(steps) <= 6 else f"[{steps[0]}, {steps[1]}, ..., {steps[-1]}] ({len(steps)} steps)"


def kept_log(path: Path, header: list[str], upto: int, expected: list[int], key: str) -> tuple[list[str], list[str]]:
    """Rows of a metrics log to keep when resuming at ``upto`` (verbatim), plus notes on what was dropped: later rows,
    a row cut mid-write and repeats go; a missing row before ``upto`` cannot be recomputed and stops with an error."""
    again = f"{rf.OVERWRITE_HINT} to retrain {key} from scratch"
    if not path.exists():
        if not expected:
            return [], []
        raise rf.DamagedFileError(f"{path}: missing, but the checkpoint at step {upto} needs its rows for steps "
                                  f"{_span(expected)}; restore it, or {again}")
    todo = f"remove the bad lines (rows after step {upto} are recomputed), or {again}"
    cols, rows, dropped = rf.read_log_lines(path, todo=todo)
    notes = [f"{path.name}: dropped a last row cut mid-write"] if dropped else []
    if cols != header and header[:len(cols)] == cols:
        # a log written before columns were added at the end: its rows get empty (missing) values for them
        rows = [(step, line + "," * (len(header) - len(cols))) for step, line in rows]
        notes.append(f"{path.name}: written before the columns {', '.join(header[len(cols):])} existed; "
                     "its earlier rows leave them empty")
    elif cols != header:
        rf.read_log_lines(path, header, todo=todo)  # the error naming both headers
    kept, seen = [], set()
    for step, line in rows:
        if step <= upto and step in seen:
            notes.append(f"{path.name}: dropped a repeated row for step {step}")
        elif step <= upto:
            seen.add(step)
            kept.append(line)
    missing, extra = sorted(set(expected) - seen), sorted(seen - set(expected))
    if missing or extra:
        detail = " and ".join(([f"lacks the rows of steps {_span(missing)}"] if missing else [])
                              + ([f"has unexpected steps {_span(extra)}"] if extra else []))
        raise rf.DamagedFileError(f"{path}: {detail} up to the checkpoint at step {upto}; they cannot be recomputed "
                                  f"without retraining: restore the file, or {again}")
    return kept, notes


def write_log(path: Path, header: list[str], lines: list[str]) -> None:
    """Rewrite a metrics log with the given verbatim rows (through a temporary file and a rename)."""
    rf.write_text_atomic(path, "".join(f"{line}\r\n" for line in [",".join(header), *lines]))
