"""Tuned lens and logit lens for any decoder-only causal LM (paper claim 3): model layout, lens building and I/O.

The lens itself is the ``tuned_lens`` package's own :class:`~tuned_lens.TunedLens`
(one affine translator per layer, added residually and initialised to the identity),
so a lens saved here loads with the package's ``TunedLens.from_unembed_and_pretrained``
(and with ``TunedLens.from_model_and_pretrained(model, path)`` for the families the
package itself recognises). Training is in :mod:`tiebias.lens.fit`, the evaluation table
and notebook helpers in :mod:`tiebias.lens.evaluate`, the trajectory figure in
:mod:`tiebias.output.plotting.lens`; this module holds what they share.

Layer indexing (verified with the locked transformers, ``constraints.txt``, on every family in
:data:`VERIFIED_MODEL_TYPES`): with ``output_hidden_states=True`` the model returns L + 1 tensors.
``hidden_states[i]`` for i < L is the residual stream entering block i (0 = embedding output), pre-norm.
``hidden_states[L]`` is *post* final norm (the model applies the final norm before
recording it), so applying the package's ``Unembed`` (final norm + unembedding) to it
would normalise twice. Row L of the evaluation therefore uses the residual stream
entering the final norm, captured with a forward pre-hook, and both lenses reduce to
the model's own head there (the tuned lens has no translator for the last layer).
Translator i reads ``hidden_states[i]``, as in the package's training loop.

transformers-5 / tuned-lens 0.2.0 incompatibilities handled here (site-packages is
left untouched; the training loop and plotly ones are described in their modules):

* ``TunedLens.from_model_and_pretrained`` falls back to downloading from the Hugging
  Face Hub when the local folder lacks a file, and only warns on an unembedding
  mismatch with a coarse hash (corner entries to one decimal); :func:`load_lens`
  checks the files, the shapes and a full SHA-256 of the unembedding first.
* The package finds the final norm and the unembedding by model *class*
  (``tuned_lens.model_surgery`` knows Llama, GPT-NeoX, GPT-2, GPT-Neo, GPT-J, OPT and
  BLOOM) and raises ``NotImplementedError`` for OLMo, OLMo2, Qwen3, Mistral, Gemma, ...
  Here they are found by *layout* (:func:`tiebias.models.anatomy.find_layout`, re-exported here): the head is
  ``get_output_embeddings()`` and the final norm is the first of
  :data:`FINAL_NORM_NAMES` on the decoder or base model. The package's ``Unembed``,
  ``LogitLens`` and ``TunedLens`` objects are then built from those modules without its
  class checks, so the lens files stay in the package's format. Before a model is
  lensed, one short forward pass checks the layout (:func:`check_model`: L + 1 hidden states, one call of the
  final norm, and final norm + head on its input reproducing the model's logits);
  anything else (logit soft-capping, logit scaling, a missing norm or head) is refused
  with a ``ValueError`` naming the ``model_type`` and what is missing.
"""

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
from tiebias.models.anatomy import FINAL_NORM_NAMES, Layout, check_model, checked_layout, find_layout
from tiebias.run.files import damaged, files_into, load_torch_file, read_json
from tiebias.run.layout import CONFIG_NAME, LENS_PARAMS_NAME, LENS_SIDECAR_NAME
from tiebias.system.parallel import CONSTRUCTION

__all__ = [
    "FINAL_NORM_NAMES",
    "LN2",
    "VERIFIED_MODEL_TYPES",
    "Layout",
    "check_model",
    "find_layout",
    "load_lens",
    "new_logit_lens",
    "new_lens",
    "save_lens",
]

LN2 = math.log(2.0)
LENS_PARAMS_HOLDS = "a tuned lens's translators (one weight and bias tensor per layer)"
"""A model's lens lives in ``<model dir>/lens/`` (package format: config.json + params.pt)."""

VERIFIED_MODEL_TYPES = (
    "llama", "mistral", "olmo", "olmo2", "olmo3", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
    "gpt2", "gpt_neo", "gpt_neox", "opt", "phi", "mpt",
)
"""Families checked by ``tests/test_lens_families.py`` (tiny random models, tied and untied) with the transformers
version of ``constraints.txt``; another version may lack or change some (the tests skip one it lacks, naming it).
Other decoder-only families are accepted when :func:`check_model`'s layout check passes."""

# --------------------------------------------------------------------------- checks


_layout = checked_layout  # the name this unit's modules use


def _lens_shape(lens: TunedLens) -> tuple[int, int]:
    """(number of translators, width) of a tuned lens."""
    return len(lens.layer_translators), int(lens.config.d_model)


def _check_lens(model: PreTrainedModel, lens: Any) -> None:
    """Raise ValueError if ``lens`` was not built for ``model`` (shape or unembedding differ)."""
    if not isinstance(lens, TunedLens):
        raise ValueError(f"lens: expected a tuned_lens TunedLens or None, got {type(lens).__name__}")
    n, d = _lens_shape(lens)
    want = (model.config.num_hidden_layers, model.config.hidden_size)
    if (n, d) != want:
        raise ValueError(
            f"lens: shape mismatch: lens has {n} translators of width {d}, model "
            f"({model.config.model_type}) has num_hidden_layers={want[0]}, hidden_size={want[1]}; "
            f"train or load a lens for this model"
        )
    head = _layout(model).head.weight
    mine = lens.unembed.unembedding.weight
    if mine.shape != head.shape or not torch.equal(mine.detach().cpu(), head.detach().cpu()):
        raise ValueError(
            f"lens: its unembedding {tuple(mine.shape)} differs from the model's {tuple(head.shape)} "
            f"(built for another model or an earlier checkpoint); allowed: a lens made from this model"
        )


def _weight_sha256(weight: Tensor) -> str:
    """Full SHA-256 of an unembedding as float32 (the package's own hash is too coarse to tell models apart)."""
    w = weight.detach().to("cpu", torch.float32).contiguous()
    return hashlib.sha256(w.numpy().tobytes()).hexdigest()


def _unembed_sha256(model: PreTrainedModel) -> str:
    """Full SHA-256 of the model's unembedding weights, as stored in a lens's sidecar."""
    return _weight_sha256(_layout(model).head.weight)


# --------------------------------------------------------------------------- lens construction / io


def _unembed(model: PreTrainedModel) -> Unembed:
    """The package's Unembed (final norm + head) for ``model``, built from its layout, not its class.

    The final norm is copied (as the package does); the head's weight is shared, frozen: no vocab x width copy."""
    layout = _layout(model)
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
    """Save in the package's format (config.json + params.pt) plus a small sidecar with a full unembedding hash.

    ``logits_precision`` ("bf16" / "fp32": what computed the lens logits in training) goes into the sidecar."""
    if not isinstance(lens, TunedLens):
        raise ValueError(f"lens: expected a tuned_lens TunedLens, got {type(lens).__name__}")
    path = Path(path)
    w = lens.unembed.unembedding.weight
    meta = {
        "unembed_sha256": _weight_sha256(w),
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
    """Load a lens saved by :func:`save_lens` (or the package) for ``model``, checking files, shapes and (``strict``) hash.

    Checked first because the package would try the Hub for missing files and fail on shapes with a bare error."""
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
    state = load_torch_file(path / LENS_PARAMS_NAME, LENS_PARAMS_HOLDS, todo)
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
        saved = meta.get("unembed_sha256")
        if saved and saved != _unembed_sha256(model):
            raise ValueError(
                f"path: lens at {path} was trained on a model with a different unembedding "
                f"(sha256 {saved[:12]}... vs this model's {_unembed_sha256(model)[:12]}...); "
                f"load the lens saved next to this model, or pass strict=False"
            )
    with CONSTRUCTION:
        lens = TunedLens.from_unembed_and_pretrained(_unembed(model), str(path), map_location="cpu",
                                                     weights_only=True)
    return lens.to(model.device)

