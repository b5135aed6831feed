"""The ``tuned_lens`` package's TunedLens / LogitLens for any decoder (final norm and head from the model's layout),
saved and loaded with checks of files, shapes and the unembedding's hash; the token sequences lenses read."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel
from tuned_lens import TunedLens
from tuned_lens.nn import LogitLens, Unembed
from tuned_lens.nn.lenses import TunedLensConfig

from tiebias.config.checks import is_int
from tiebias.models.anatomy import check_model, checked_layout
from tiebias.run.files import damaged, files_into, load_torch_file, read_json
from tiebias.run.layout import CONFIG_NAME, LENS_PARAMS_NAME, LENS_SIDECAR_NAME
from tiebias.system.parallel import CONSTRUCTION

__all__ = ["LN2", "load_lens", "new_lens", "new_logit_lens", "save_lens", "sequences", "unembed_sha256"]

LN2 = math.log(2.0)


def sequences(tokens: Any, seq_len: int, vocab_size: int, max_tokens: int | None = None,
              batch_size: int | None = None) -> Tensor:
    """A checked 1-D token stream cut into (n, seq_len) sequences, the tail shorter than seq_len dropped; a reading
    keeps the stream's first ``max_tokens`` tokens and has its ``batch_size`` checked."""
    if not is_int(seq_len) or seq_len < 2:
        raise ValueError(f"seq_len: must be an int >= 2, got {seq_len!r}")
    if not isinstance(tokens, Tensor) or tokens.dim() != 1 or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"tokens: expected a 1-D torch.LongTensor token stream, got {shape}")
    if tokens.numel() < seq_len:
        raise ValueError(f"tokens: the text has {tokens.numel()} tokens, fewer than one sequence of seq_len={seq_len}; "
                         f"pass at least {seq_len} tokens or lower seq_len")
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"tokens: token ids must lie in [0, {vocab_size - 1}] (vocab_size), got range [{lo}, {hi}]")
    if max_tokens is not None and (not is_int(max_tokens) or max_tokens < seq_len):
        raise ValueError(f"max_tokens: must be an int >= seq_len={seq_len}, got {max_tokens!r}")
    if batch_size is not None and (not is_int(batch_size) or batch_size <= 0):
        raise ValueError(f"batch_size: must be a positive int, got {batch_size!r}")
    n = tokens.numel() // seq_len
    seqs = tokens.long()[: n * seq_len].view(n, seq_len)
    return seqs if max_tokens is None else seqs[: max_tokens // seq_len]


def _check_lens(model: PreTrainedModel, lens: Any) -> None:
    """Raise ValueError if ``lens`` was not built for ``model`` (shape or unembedding differ)."""
    if not isinstance(lens, TunedLens):
        raise ValueError(f"lens: expected a tuned_lens TunedLens or None, got {type(lens).__name__}")
    n, d = len(lens.layer_translators), int(lens.config.d_model)
    want = (model.config.num_hidden_layers, model.config.hidden_size)
    if (n, d) != want:
        raise ValueError(
            f"lens: shape mismatch: lens has {n} translators of width {d}, model "
            f"({model.config.model_type}) has num_hidden_layers={want[0]}, hidden_size={want[1]}; "
            f"train or load a lens for this model"
        )
    head = checked_layout(model).head.weight
    mine = lens.unembed.unembedding.weight
    if mine.shape != head.shape or not torch.equal(mine.detach().cpu(), head.detach().cpu()):
        raise ValueError(
            f"lens: its unembedding {tuple(mine.shape)} differs from the model's {tuple(head.shape)} "
            f"(built for another model or an earlier checkpoint); allowed: a lens made from this model"
        )


def unembed_sha256(model_or_weight: PreTrainedModel | Tensor) -> str:
    """Full SHA-256 of an unembedding (a model's head) as float32: the package's own hash is too coarse."""
    w = model_or_weight if isinstance(model_or_weight, Tensor) else checked_layout(model_or_weight).head.weight
    return hashlib.sha256(w.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()).hexdigest()


def _unembed(model: PreTrainedModel) -> Unembed:
    """The package's Unembed (final norm + head) from the layout, not the class; the head's weight is shared."""
    layout = checked_layout(model)
    unembed = Unembed.__new__(Unembed)  # Unembed.__init__ would ask model_surgery, which knows classes only
    torch.nn.Module.__init__(unembed)
    norm = copy.deepcopy(layout.final_norm)
    if layout.project_out is not None:
        norm = torch.nn.Sequential(norm, copy.deepcopy(layout.project_out))
    head = layout.head
    with torch.device("meta"):
        linear = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
    linear.weight = torch.nn.Parameter(head.weight.detach(), requires_grad=False)
    if head.bias is not None:
        linear.bias = torch.nn.Parameter(head.bias.detach(), requires_grad=False)
    unembed.final_norm = norm.requires_grad_(False)
    unembed.unembedding = linear
    return unembed


def new_logit_lens(model: PreTrainedModel) -> LogitLens:
    """The package's LogitLens for ``model`` (any family :func:`check_model` accepts), on the model's device."""
    return LogitLens(_unembed(model)).to(model.device)


def new_lens(model: PreTrainedModel) -> TunedLens:
    """An untrained (identity) package TunedLens for ``model``, on the model's device."""
    config = TunedLensConfig(
        base_model_name_or_path=str(getattr(model.config, "name_or_path", "") or ""),
        d_model=int(model.config.hidden_size),
        num_hidden_layers=int(model.config.num_hidden_layers),
        bias=True,
    )
    with CONSTRUCTION:  # not while another thread loads a model (see tiebias.system.parallel.CONSTRUCTION)
        return TunedLens(_unembed(model), config).to(model.device)


def save_lens(lens: TunedLens, path: str | os.PathLike[str], *, logits_precision: str | None = None) -> Path:
    """Save in the package's format plus a sidecar with the full unembedding hash and ``logits_precision``."""
    if not isinstance(lens, TunedLens):
        raise ValueError(f"lens: expected a tuned_lens TunedLens, got {type(lens).__name__}")
    path = Path(path)
    w = lens.unembed.unembedding.weight
    meta = {
        "unembed_sha256": unembed_sha256(w),
        "num_hidden_layers": len(lens.layer_translators),
        "d_model": int(lens.config.d_model),
        "vocab_size": int(w.shape[0]),
    }
    if logits_precision is not None:
        meta["logits_precision"] = logits_precision
    with files_into(path) as tmp:  # written beside, then renamed in: a link planted in the folder is replaced
        lens.save(tmp)
        (tmp / LENS_SIDECAR_NAME).write_text(json.dumps(meta, indent=2))
    return path


def load_lens(model: PreTrainedModel, path: str | os.PathLike[str], *, strict: bool = True) -> TunedLens:
    """Load a lens saved by :func:`save_lens` (or the package) for ``model``, checking files, shapes and (``strict``) hash."""
    model_type = check_model(model)
    path = Path(path)
    missing = [f for f in (CONFIG_NAME, LENS_PARAMS_NAME) if not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"path: {path} is not a lens folder (missing {', '.join(missing)})")
    todo = f"delete {path} and run 03_lens again: the lens is trained again"
    cfg = read_json(path / CONFIG_NAME, todo)
    bad = [k for k in ("num_hidden_layers", "d_model") if isinstance(cfg, dict) and k in cfg and not is_int(cfg[k])]
    if not isinstance(cfg, dict) or bad:
        why = f"a JSON {type(cfg).__name__}, not an object" if not isinstance(cfg, dict) else \
            f"{', '.join(f'{k}={cfg[k]!r}' for k in bad)}: not a whole number"
        raise damaged(path / CONFIG_NAME, why, f"it should hold the lens's settings (the package's config.json); {todo}")
    state = load_torch_file(path / LENS_PARAMS_NAME, "a tuned lens's translators (one weight and bias tensor per layer)",
                            todo)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise damaged(path / LENS_PARAMS_NAME, f"a {type(state).__name__}, not a dict of tensors", todo)
    n_layers = len({k.split(".")[0] for k in state})
    widths = {tuple(v.shape) for k, v in state.items() if k.endswith("weight")}
    lens_shape = (int(cfg.get("num_hidden_layers", n_layers)), int(cfg.get("d_model", -1)))
    want = (int(model.config.num_hidden_layers), int(model.config.hidden_size))
    if lens_shape != want or n_layers != want[0] or widths != {(want[1], want[1])}:
        raise ValueError(
            f"path: lens at {path} has {n_layers} translators of shape {sorted(widths)} "
            f"(num_hidden_layers={lens_shape[0]}, d_model={lens_shape[1]}) but the model "
            f"({model_type}) needs num_hidden_layers={want[0]}, hidden_size={want[1]}, i.e. "
            f"{want[0]} translators of shape {(want[1], want[1])}"
        )
    sidecar = path / LENS_SIDECAR_NAME
    if strict and sidecar.is_file():
        meta = read_json(sidecar, todo)
        if not isinstance(meta, dict):
            raise damaged(sidecar, f"a JSON {type(meta).__name__}, not an object", todo)
        saved, mine = meta.get("unembed_sha256"), unembed_sha256(model)
        if saved and saved != mine:
            raise ValueError(
                f"path: lens at {path} was trained on a model with a different unembedding "
                f"(sha256 {saved[:12]}... vs this model's {mine[:12]}...); "
                f"load the lens saved next to this model, or pass strict=False"
            )
    with CONSTRUCTION:
        lens = TunedLens.from_unembed_and_pretrained(_unembed(model), str(path), map_location="cpu",
                                                     weights_only=True)
    return lens.to(model.device)

