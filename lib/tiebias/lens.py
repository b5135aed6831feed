"""Tuned lens and logit lens for any decoder-only causal LM (paper claim 3).

The lens itself is the ``tuned_lens`` package's own :class:`~tuned_lens.TunedLens`
(one affine translator per layer, added residually and initialised to the identity),
so a lens saved here loads with the package's ``TunedLens.from_unembed_and_pretrained``
(and with ``TunedLens.from_model_and_pretrained(model, path)`` for the families the
package itself recognises).
What this module adds is a CPU-sized training loop that follows the package's recipe,
an evaluation table (KL to the final distribution in bits and next-token cross-entropy,
per layer, for the tuned and the logit lens), save/load with shape checks, and two
notebook helpers.

Layer indexing (checked for transformers 5 on every family in :data:`VERIFIED_MODEL_TYPES`): with
``output_hidden_states=True`` the model returns L + 1 tensors. ``hidden_states[i]`` for
i < L is the residual stream entering block i (0 = embedding output), pre-norm.
``hidden_states[L]`` is *post* final norm (the model applies the final norm before
recording it), so applying the package's ``Unembed`` (final norm + unembedding) to it
would normalise twice. Row L of the evaluation therefore uses the residual stream
entering the final norm, captured with a forward pre-hook, and both lenses reduce to
the model's own head there (the tuned lens has no translator for the last layer).
Translator i reads ``hidden_states[i]``, as in the package's training loop.

transformers-5 / tuned-lens 0.2.0 incompatibilities handled here (site-packages is
left untouched):

* ``tuned_lens.scripts.train_loop`` cannot be imported: it needs
  ``torchdata.dataloader2``, which torchdata 0.10+ removed. The recipe is re-implemented
  in :func:`train_lens` (same loss, optimiser, clipping and schedule).
* ``TrajectoryStatistic.figure()`` passes ``colorbar.titleside``, which plotly 6+
  rejects; :func:`trajectory_figure` builds the figure with ``colorbar.title.side``.
* ``TunedLens.from_model_and_pretrained`` falls back to downloading from the Hugging
  Face Hub when the local folder lacks a file, and only warns on an unembedding
  mismatch with a coarse hash (corner entries to one decimal); :func:`load_lens`
  checks the files, the shapes and a full SHA-256 of the unembedding first.
* The package finds the final norm and the unembedding by model *class*
  (``tuned_lens.model_surgery`` knows Llama, GPT-NeoX, GPT-2, GPT-Neo, GPT-J, OPT and
  BLOOM) and raises ``NotImplementedError`` for OLMo, OLMo2, Qwen3, Mistral, Gemma, ...
  Here they are found by *layout* (:func:`find_layout`): the head is
  ``get_output_embeddings()`` and the final norm is the first of
  :data:`FINAL_NORM_NAMES` on the decoder or base model. The package's ``Unembed``,
  ``LogitLens`` and ``TunedLens`` objects are then built from those modules without its
  class checks, so the lens files stay in the package's format. Before a model is
  lensed, one short forward pass checks the layout (L + 1 hidden states, one call of the
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
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from tuned_lens import TunedLens
from tuned_lens.nn import Lens, LogitLens, Unembed
from tuned_lens.nn.lenses import TunedLensConfig

if TYPE_CHECKING:  # plotting pulls in plotly; imported where used
    from tuned_lens.plotting import PredictionTrajectory

__all__ = [
    "FINAL_NORM_NAMES",
    "LENS_SUBDIR",
    "LN2",
    "VERIFIED_MODEL_TYPES",
    "Layout",
    "check_model",
    "evaluate",
    "find_layout",
    "kl_bits",
    "lens_path",
    "load_lens",
    "new_logit_lens",
    "new_lens",
    "save_lens",
    "top_tokens_by_layer",
    "train_lens",
    "trajectory",
    "trajectory_figure",
]

LN2 = math.log(2.0)
LENS_SUBDIR = "lens"
"""A model's lens lives in ``<model dir>/lens/`` (package format: config.json + params.pt)."""

VERIFIED_MODEL_TYPES = (
    "llama", "mistral", "olmo", "olmo2", "olmo3", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
    "gpt2", "gpt_neo", "gpt_neox", "opt", "phi", "mpt",
)
"""Families checked by ``tests/test_lens_families.py`` (tiny random models, tied and untied).
Other decoder-only families are accepted when :func:`check_model`'s layout check passes."""

FINAL_NORM_NAMES = (
    "norm",  # llama, mistral, olmo, olmo2/3, qwen2/3, gemma 1-3, ...
    "final_layer_norm",  # gpt_neox
    "ln_f",  # gpt2, gpt_neo, gptj, bloom, falcon
    "final_layernorm",  # phi, jamba
    "norm_f",  # mpt, dbrx
    "final_norm",  # recurrent_gemma, modernbert decoder
    "decoder.final_layer_norm",  # opt
)
"""Attribute paths of the final norm, tried in order on ``model.get_decoder()`` then ``model.base_model``."""

_LOGIT_POSTPROCESSING = {"final_logit_softcapping": None, "logit_scale": 1.0, "logits_scaling": 1.0}
"""Config fields of families that transform the head's output (value that means "off"): the lens's
unembedding (final norm + head) would not reproduce such a model's logits."""

_SIDECAR = "tiebias_lens.json"
_CONFIG = "config.json"
_PARAMS = "params.pt"


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True, eq=False)
class Layout:
    """Where a causal LM keeps what the lens needs: its final norm and its head (modules of the model itself).

    ``final_norm`` is the module applied to the residual stream after the last block (its input is
    what the lens reads at layer L); ``project_out`` is an optional projection after it (OPT-350m
    style), applied before ``head``.
    """

    model_type: str
    norm_path: str
    final_norm: torch.nn.Module
    head: torch.nn.Linear
    project_out: torch.nn.Module | None = None


_VERIFIED: weakref.WeakKeyDictionary[torch.nn.Module, Layout] = weakref.WeakKeyDictionary()


def _describe(model: Any) -> str:
    """``model_type='...' (ClassName)`` for error messages."""
    return f"model_type={getattr(model.config, 'model_type', '?')!r} ({type(model).__name__})"


def _text_config(config: Any) -> Any:
    """The text part of a (possibly multimodal) config."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _attr_path(root: Any, path: str) -> tuple[bool, Any]:
    """(found, value) of a dotted attribute path; found is False when any step is missing."""
    obj = root
    for key in path.split("."):
        if not hasattr(obj, key):
            return False, None
        obj = getattr(obj, key)
    return True, obj


def find_layout(model: Any) -> Layout:
    """Find the final norm and the head by layout (no forward pass; works on a meta-device skeleton).

    Raises ValueError naming the ``model_type`` and the class when the model has no linear head,
    no recognisable final norm, or transforms the head's logits (soft-capping, logit scaling).
    """
    if not isinstance(model, PreTrainedModel):
        raise ValueError(
            f"model: expected a transformers PreTrainedModel (e.g. LlamaForCausalLM, "
            f"OlmoForCausalLM), got {type(model).__name__}"
        )
    what = _describe(model)
    model_type = str(getattr(model.config, "model_type", "?"))
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(
            f"model: {what} has no causal-LM head (get_output_embeddings() is None); "
            f"load it with AutoModelForCausalLM"
        )
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(
            f"model: {what} has a {type(head).__name__} head; the lens needs a linear unembedding (nn.Linear)"
        )
    text = _text_config(model.config)
    for key, off in _LOGIT_POSTPROCESSING.items():
        value = getattr(text, key, off)
        if value is not None and value != off:
            raise ValueError(
                f"model: {what} transforms its logits after the head ({key}={value!r}), so final norm + "
                f"head would not reproduce its output distribution; allowed: {key}={off!r}"
            )
    roots: list[tuple[str, Any]] = []
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    for label, root in (("decoder", decoder), ("base_model", getattr(model, "base_model", None))):
        if root is not None and all(root is not r for _, r in roots):
            roots.append((label, root))
    for label, root in roots:
        for name in FINAL_NORM_NAMES:
            found, norm = _attr_path(root, name)
            if not found:
                continue
            path = f"{label}.{name}"
            if norm is None:
                raise ValueError(
                    f"model: {what} has no final norm ({path} is None, e.g. a post-norm model such as "
                    f"OPT-350m); the lens needs a final norm before the head"
                )
            if not isinstance(norm, torch.nn.Module):
                continue
            owner = _attr_path(root, name.rsplit(".", 1)[0])[1] if "." in name else root
            project_out = getattr(owner, "project_out", None)  # OPT with word_embed_proj_dim != hidden_size
            if not isinstance(project_out, torch.nn.Module):
                project_out = None
            return Layout(model_type, path, norm, head, project_out)
    raise ValueError(
        f"model: {what} has no recognisable final norm: none of {', '.join(FINAL_NORM_NAMES)} on "
        f"{' or '.join(label for label, _ in roots) or 'the model (no base_model)'}"
    )


def _apply_head(layout: Layout, h: Tensor) -> Tensor:
    """The model's own head on the residual stream entering the final norm."""
    n = layout.final_norm(h)
    if layout.project_out is not None:
        n = layout.project_out(n)
    return layout.head(n)


def _layout(model: Any) -> Layout:
    """The model's layout, checked once with a short forward pass (cached per model object)."""
    cached = _VERIFIED.get(model) if isinstance(model, torch.nn.Module) else None
    if cached is not None:
        return cached
    layout = find_layout(model)
    what = _describe(model)
    n_layers = int(model.config.num_hidden_layers)
    ids = torch.arange(min(4, int(model.config.vocab_size)), device=model.device).unsqueeze(0)
    store: list[Tensor] = []
    handle = layout.final_norm.register_forward_pre_hook(lambda _m, args: store.append(args[0]))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True)
            n_states = len(out.hidden_states) if out.hidden_states is not None else 0
            if n_states != n_layers + 1:
                raise ValueError(
                    f"model: {what} returns {n_states} hidden states for num_hidden_layers={n_layers}; "
                    f"the lens needs L + 1 (embedding output, then one per block)"
                )
            if len(store) != 1:
                raise ValueError(
                    f"model: {what}: its final norm {layout.norm_path} ran {len(store)} times in one forward "
                    f"pass; the lens needs it to run once, after the last block"
                )
            mine = _apply_head(layout, store[0]).float()
            theirs = out.logits.float()
    finally:
        handle.remove()
        model.train(was_training)
    # Same modules on the same input: equal up to kernel differences (float32) or rounding (16-bit).
    exact = layout.head.weight.dtype in (torch.float32, torch.float64)
    tol = (1e-4 if exact else 1e-2) * max(1.0, float(theirs.abs().max()))
    diff = float((mine - theirs).abs().max()) if mine.shape == theirs.shape else math.inf
    if not diff <= tol:
        raise ValueError(
            f"model: {what}: final norm ({layout.norm_path}) + head does not reproduce the model's logits "
            f"(max difference {diff:.3g}, shapes {tuple(mine.shape)} vs {tuple(theirs.shape)}); the family "
            f"transforms its logits or hidden states in a way the lens cannot follow"
        )
    _VERIFIED[model] = layout
    return layout


def check_model(model: Any) -> str:
    """Return ``model_type`` if the model can be lensed (layout found and checked), else raise ValueError."""
    return _layout(model).model_type


def _check_tokens(tokens: Any, seq_len: int, vocab_size: int, name: str = "tokens") -> Tensor:
    """Validate a 1-D integer token stream holding at least one sequence."""
    if not isinstance(seq_len, int) or seq_len < 2:
        raise ValueError(f"seq_len: must be an int >= 2, got {seq_len!r}")
    if (
        not isinstance(tokens, Tensor)
        or tokens.dim() != 1
        or tokens.dtype.is_floating_point
        or tokens.dtype == torch.bool
    ):
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise ValueError(f"{name}: expected a 1-D torch.LongTensor token stream, got {shape}")
    if tokens.numel() < seq_len:
        raise ValueError(
            f"{name}: the text has {tokens.numel()} tokens, fewer than one sequence of "
            f"seq_len={seq_len}; pass at least {seq_len} tokens or lower seq_len"
        )
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= vocab_size:
        raise ValueError(
            f"{name}: token ids must lie in [0, {vocab_size - 1}] (vocab_size), got range [{lo}, {hi}]"
        )
    return tokens.long()


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


def _unembed_sha256(model: PreTrainedModel) -> str:
    """Full SHA-256 of the unembedding weights (the package's own hash is too coarse to tell models apart)."""
    w = _layout(model).head.weight.detach().to("cpu", torch.float32).contiguous()
    return hashlib.sha256(w.numpy().tobytes()).hexdigest()


# --------------------------------------------------------------------------- lens construction / io


def lens_path(model_dir: str | os.PathLike[str]) -> Path:
    """Where the lens of a saved model lives: ``<model_dir>/lens``."""
    return Path(model_dir) / LENS_SUBDIR


def _unembed(model: PreTrainedModel) -> Unembed:
    """The package's Unembed (final norm + head) for ``model``, built from its layout, not its class.

    Like the package, the final norm is copied; the head's weight is shared (detached, frozen)
    rather than copied, which spares a vocabulary x width copy per lens on large models.
    """
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
    return TunedLens(_unembed(model), config).to(model.device)


def save_lens(lens: TunedLens, path: str | os.PathLike[str]) -> Path:
    """Save in the package's format (config.json + params.pt) plus a small sidecar with a full unembedding hash."""
    if not isinstance(lens, TunedLens):
        raise ValueError(f"lens: expected a tuned_lens TunedLens, got {type(lens).__name__}")
    path = Path(path)
    lens.save(path)
    w = lens.unembed.unembedding.weight.detach().to("cpu", torch.float32).contiguous()
    meta = {
        "unembed_sha256": hashlib.sha256(w.numpy().tobytes()).hexdigest(),
        "num_hidden_layers": len(lens.layer_translators),
        "d_model": int(lens.config.d_model),
        "vocab_size": int(w.shape[0]),
    }
    (path / _SIDECAR).write_text(json.dumps(meta, indent=2))
    return path


def load_lens(model: PreTrainedModel, path: str | os.PathLike[str], *, strict: bool = True) -> TunedLens:
    """Load a lens saved by :func:`save_lens` (or the package) for ``model``.

    Checks files and shapes before handing over to the package's
    ``TunedLens.from_unembed_and_pretrained`` (which would otherwise try the Hub for missing
    files and fail on shapes with a bare size-mismatch error). ``strict`` also requires the sidecar hash to match the model's
    unembedding, i.e. the lens was trained on this very model.
    """
    model_type = check_model(model)
    path = Path(path)
    missing = [f for f in (_CONFIG, _PARAMS) if not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"path: {path} is not a lens folder (missing {', '.join(missing)})")
    cfg = json.loads((path / _CONFIG).read_text())
    state = torch.load(path / _PARAMS, map_location="cpu", weights_only=True)
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
    sidecar = path / _SIDECAR
    if strict and sidecar.is_file():
        saved = json.loads(sidecar.read_text()).get("unembed_sha256")
        if saved and saved != _unembed_sha256(model):
            raise ValueError(
                f"path: lens at {path} was trained on a model with a different unembedding "
                f"(sha256 {saved[:12]}... vs this model's {_unembed_sha256(model)[:12]}...); "
                f"load the lens saved next to this model, or pass strict=False"
            )
    lens = TunedLens.from_unembed_and_pretrained(_unembed(model), str(path), map_location="cpu", weights_only=True)
    return lens.to(model.device)


# --------------------------------------------------------------------------- maths


def kl_bits(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """KL(p || q) in bits over the last axis, from logits or log-probabilities of p and q."""
    log_p = p_logits.float().log_softmax(-1)
    log_q = q_logits.float().log_softmax(-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1) / LN2


class _LensKL(torch.autograd.Function):
    """Per-position KL(p || softmax(W n + b)) in nats with a hand-written backward.

    KL = sum_v p log p + logsumexp(z) - sum_v p z_v, and sum_v p z_v = (p W) . n + p . b, so
    with ``target_mean = p W``, ``target_bias = p . b`` and ``neg_entropy = sum p log p``
    fixed per position, only ``logsumexp(z)`` needs the vocabulary. Its gradient in n is
    ``softmax(z) W - p W``: one matmul, no vocabulary-sized gradient tensor. Same value and
    gradient as the package's ``sum(p * (log p - log_softmax(z)))`` at a fraction of the
    memory traffic, which is what lets CPU training fit in a minute. The logits, the
    softmax and both matmuls run in ``weight.dtype`` (bf16 for the package's autocast
    precision); sums and the returned KL are float32.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        n: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        target_mean: Tensor,
        target_bias: Tensor,
        neg_entropy: Tensor,
    ) -> Tensor:
        z = n.to(weight.dtype) @ weight.T
        if bias is not None:
            z += bias.to(z.dtype)
        top = z.amax(-1, keepdim=True)
        e = z.sub_(top).exp_()  # in place: z is not needed again
        total = e.sum(-1, keepdim=True, dtype=torch.float32)
        lse = (top.float() + total.log()).squeeze(-1)
        ctx.save_for_backward(e, total, weight, target_mean)
        ctx.n_dtype = n.dtype
        return neg_entropy + lse - (n.float() * target_mean).sum(-1) - target_bias

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        e, total, weight, target_mean = ctx.saved_tensors
        expected = (e @ weight).float() / total  # softmax(z) W
        grad_n = grad.unsqueeze(-1) * (expected - target_mean)
        return grad_n.to(ctx.n_dtype), None, None, None, None, None


_kl_nats_fused = _LensKL.apply
"""Per-position KL(p || softmax(W n + b)) in nats; see :class:`_LensKL`."""


def _target_stats(logits: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(p W, p . b, sum p log p) of the final distribution p = softmax(logits), in float32.

    Few passes over the vocabulary: shift by the max, exponentiate once, and get the
    entropy term from sum e (z - max) / sum e - log sum e.
    """
    z = logits.float()
    z = z - z.amax(-1, keepdim=True)
    e = z.exp()
    total = e.sum(-1, keepdim=True)
    neg_entropy = torch.linalg.vecdot(e, z) / total.squeeze(-1) - total.squeeze(-1).log()
    target_mean = (e @ weight.float()) / total
    target_bias = (
        (e @ bias.float()) / total.squeeze(-1) if bias is not None else torch.zeros_like(neg_entropy)
    )
    return target_mean, target_bias, neg_entropy


@contextmanager
def _capture_final_norm_input(model: PreTrainedModel) -> Iterator[list[Tensor]]:
    """Collect the residual stream entering the final norm (hidden_states[-1] is already normed)."""
    store: list[Tensor] = []
    norm = _layout(model).final_norm

    def hook(_module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        store.append(args[0])

    handle = norm.register_forward_pre_hook(hook)
    try:
        yield store
    finally:
        handle.remove()


@contextmanager
def _intra_op_threads(num_threads: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op CPU threads (None: leave as is); restored on exit."""
    if num_threads is None:
        yield
        return
    if not isinstance(num_threads, int) or num_threads <= 0:
        raise ValueError(f"num_threads: must be a positive int or None, got {num_threads!r}")
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _sequences(tokens: Tensor, seq_len: int) -> Tensor:
    """Non-overlapping (n, seq_len) chunks of the stream; the tail shorter than seq_len is dropped."""
    n = tokens.numel() // seq_len
    return tokens[: n * seq_len].view(n, seq_len)


# --------------------------------------------------------------------------- training


def train_lens(
    model: PreTrainedModel,
    tokens: Tensor,
    *,
    steps: int = 250,
    seq_len: int = 128,
    tokens_per_step: int = 512,
    lr: float = 1e-2,
    warmup_steps: int = 25,
    weight_decay: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
    optimizer: Literal["adam", "sgd"] = "adam",
    momentum: float = 0.9,
    max_grad_norm: float = 1.0,
    batch_size: int = 8,
    low_precision: bool | None = None,
    num_threads: int | None = 1,
    log: list[dict[str, float]] | None = None,
    lens: TunedLens | None = None,
    state: dict[str, Any] | None = None,
) -> TunedLens:
    """Train the package's TunedLens on ``model`` (frozen) to minimise sum over layers of KL(final || lens).

    Follows ``tuned_lens.scripts.train_loop``: KL loss against the model's final
    distribution at the same position, translator i fed ``hidden_states[i]``, one
    backward per layer (the loss is the sum over layers), gradient clipping at
    ``max_grad_norm``, weight decay, linear warmup then linear decay to zero.

    Defaults differ from the package's where its values do not suit a small model on
    a CPU. The package trains 250 steps of 2**18 tokens with SGD + Nesterov momentum
    0.9 at lr 1.0 (its ``lr_scale``, applied as ``lr * (1 - momentum)``) and no warmup.
    At 2**13 tokens per step one run takes 5-20 minutes here (2 cores) for a hidden-128,
    6-layer, 4096-vocab model, so the default is 250 steps of 512 tokens (each
    translator has only 128 x 129 parameters). With that little data the package's SGD
    recipe (``optimizer="sgd", lr=1.0, warmup_steps=0``) and Adam at 1e-3 stop short of
    convergence at layer 0, where a tied model's translator has to move furthest from
    the identity. Layer-0 KL in bits (identity lens / SGD recipe / Adam 1e-3 /
    Adam 1e-2 default / reference of 600 steps x 1024 tokens at Adam 1e-2): trained tied
    Llama 18.7 / 1.47 / 3.46 / 1.16 / 1.07 (SGD and Adam 1e-3 at 1024 tokens per step);
    trained untied GPT-NeoX 5.35 / 0.14 / 0.22 / 0.066 / 0.057. Layers 1-5 land within
    a few percent of the reference. An under-trained lens inflates early-layer KL, the
    quantity claim 3 compares, hence Adam at 1e-2 with 25 warmup steps. Adam follows
    the package's Adam branch (amsgrad, beta1 = ``momentum``).

    ``tokens`` is chunked into non-overlapping ``seq_len`` sequences, shuffled with
    ``seed`` and cycled; ``batch_size`` sequences go through the model at a time.
    ``low_precision`` (default: on when the CPU/GPU supports bf16 matmuls) computes the
    lens logits in bf16 like the package's autocast. ``log``, if given, receives one dict
    per step with the mean KL per layer in bits (keys ``kl_bits_<i>``) and ``lr``.

    ``num_threads`` sets torch's intra-op CPU threads for the call (restored after; None
    keeps the current setting). The default is 1: on the kit's 2-core machine, with
    other processes running, two threads took 190-260 s for the default run against
    29 s for one thread, and were at best about 1.3x faster when the machine was quiet.

    Continuing (the lens-budget ladder of :mod:`tiebias.lens_study`): ``lens`` trains that
    lens in place instead of a new identity lens, and ``state`` is an in/out dict. An
    empty dict is filled, on return, with what a later call needs to continue exactly
    where this one stopped (optimiser moments, the data generator, the shuffled order and
    its cursor, ``steps_done``); a filled one is resumed from. Each call runs its own
    schedule (warmup, then linear decay to 0 over its ``steps``), so every call ends with
    an annealed lens. Two chained calls give bit for bit the same lens whether or not the
    lens and state went through disk in between (``torch.save`` of ``state``).
    """
    model_type = check_model(model)
    if not isinstance(steps, int) or steps <= 0:
        raise ValueError(f"steps: must be a positive int, got {steps!r}")
    if num_threads is not None and (not isinstance(num_threads, int) or num_threads <= 0):
        raise ValueError(f"num_threads: must be a positive int or None, got {num_threads!r}")
    tokens = _check_tokens(tokens, seq_len, model.config.vocab_size)
    if not isinstance(tokens_per_step, int) or tokens_per_step < seq_len or tokens_per_step % seq_len:
        raise ValueError(
            f"tokens_per_step: must be a positive multiple of seq_len={seq_len}, got {tokens_per_step!r}"
        )
    if not isinstance(warmup_steps, int) or not 0 <= warmup_steps < steps:
        raise ValueError(f"warmup_steps: must be an int in [0, steps={steps}), got {warmup_steps!r}")
    if lr <= 0:
        raise ValueError(f"lr: must be > 0, got {lr!r}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer: must be 'adam' or 'sgd', got {optimizer!r}")
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size: must be a positive int, got {batch_size!r}")

    device = model.device
    if low_precision is None:
        low_precision = _bf16_matmul_supported(device)
    if lens is None:
        lens = new_lens(model)
    else:
        _check_lens(model, lens)
    if state is not None and not isinstance(state, dict):
        raise ValueError(f"state: expected a dict (empty to start) or None, got {type(state).__name__}")
    resume = dict(state) if state else None
    if resume is not None and resume.get("optimizer_name") != optimizer:
        raise ValueError(
            f"optimizer: {optimizer!r} cannot continue a lens trained with "
            f"{resume.get('optimizer_name')!r}; continue with the same optimizer or start a new lens"
        )
    if resume is not None and resume.get("seq_len") != seq_len:
        raise ValueError(f"seq_len: {seq_len} differs from the {resume.get('seq_len')} the lens was trained with")
    was_training = model.training
    model.eval()
    params = [p for p in lens.parameters() if p.requires_grad]
    if optimizer == "sgd":
        # Package convention: PyTorch's momentum scales the step by 1 / (1 - beta), undone here.
        opt: torch.optim.Optimizer = torch.optim.SGD(
            params, lr=lr * (1 - momentum), momentum=momentum, nesterov=True, weight_decay=weight_decay
        )
    else:
        # Package's Adam branch: amsgrad, beta1 = momentum.
        opt = torch.optim.Adam(
            params, lr=lr, betas=(momentum, 0.999), amsgrad=True, weight_decay=weight_decay
        )

    base_lr = [g["lr"] for g in opt.param_groups]
    seqs = _sequences(tokens, seq_len)
    per_step = tokens_per_step // seq_len
    gen = torch.Generator().manual_seed(seed)
    if resume is None:
        order = torch.randperm(len(seqs), generator=gen)
        cursor, steps_done = 0, 0
    else:
        opt.load_state_dict(resume["optimizer"])
        gen.set_state(resume["generator"])
        order, cursor, steps_done = resume["order"], int(resume["cursor"]), int(resume["steps_done"])
        if len(order) != len(seqs):
            raise ValueError(
                f"tokens: {len(seqs)} sequences, but the lens was trained on {len(order)}; "
                f"continue on the same token stream"
            )

    def schedule(step: int) -> float:
        # Linear warmup to 1, then linear decay to 0 at `steps`. (The package passes
        # steps - warmup as the decay horizon, leaving the last `warmup` steps at lr 0.)
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (steps - step) / max(1, steps - warmup_steps))
    unembed = lens.unembed
    weight = unembed.unembedding.weight.detach()
    bias = unembed.unembedding.bias
    lens_weight = weight.to(torch.bfloat16 if low_precision else torch.float32).contiguous()
    n_layers = len(lens.layer_translators)

    with _intra_op_threads(num_threads):
        bar = tqdm(range(steps), desc=f"tuned lens ({model_type})", disable=not progress)
        try:
            for step in bar:
                for g, base in zip(opt.param_groups, base_lr, strict=True):
                    g["lr"] = base * schedule(step)
                idx = []
                while len(idx) < per_step:
                    if cursor == len(order):
                        order, cursor = torch.randperm(len(seqs), generator=gen), 0
                    take = min(per_step - len(idx), len(order) - cursor)
                    idx.extend(order[cursor : cursor + take].tolist())
                    cursor += take
                batch = seqs[torch.tensor(idx)].to(device)
                layer_loss = [0.0] * n_layers
                for start in range(0, per_step, batch_size):
                    x = batch[start : start + batch_size]
                    frac = x.shape[0] / per_step
                    with torch.no_grad():
                        out = model(input_ids=x, output_hidden_states=True)
                        target_mean, target_bias, neg_entropy = _target_stats(out.logits, weight, bias)
                    for i, h in enumerate(out.hidden_states[:-1]):
                        n = unembed.final_norm(lens.transform_hidden(h, i))
                        kl = _kl_nats_fused(n, lens_weight, bias, target_mean, target_bias, neg_entropy)
                        loss = kl.mean()
                        (loss * frac).backward()
                        layer_loss[i] += float(loss.detach()) * frac
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                opt.step()
                opt.zero_grad(set_to_none=False)
                current_lr = opt.param_groups[0]["lr"]
                mean_bits = sum(layer_loss) / n_layers / LN2
                bar.set_postfix(kl_bits=f"{mean_bits:.3f}")
                if log is not None:
                    entry = {f"kl_bits_{i}": v / LN2 for i, v in enumerate(layer_loss)}
                    entry["lr"] = current_lr
                    log.append(entry)
        finally:
            bar.close()
            model.train(was_training)
    lens.zero_grad(set_to_none=True)
    if state is not None:
        state.clear()
        state.update(optimizer=opt.state_dict(), optimizer_name=optimizer, generator=gen.get_state(),
                     order=order, cursor=cursor, steps_done=steps_done + steps, seq_len=seq_len)
    return lens


def _bf16_matmul_supported(device: torch.device) -> bool:
    """Whether bf16 matmuls are fast here (CUDA with bf16, or a CPU with oneDNN bf16 support)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    return False


# --------------------------------------------------------------------------- evaluation


def evaluate(
    model: PreTrainedModel,
    tokens: Tensor,
    lens: TunedLens | None = None,
    *,
    seq_len: int = 128,
    max_tokens: int = 32768,
    batch_size: int = 8,
    num_threads: int | None = 1,
    per_sequence: bool = False,
    logit_lens: bool = True,
) -> pd.DataFrame:
    """Per-layer KL to the final distribution (bits) and next-token CE (nats) for the tuned and logit lens.

    One row per layer index 0..L (0 = embedding output, L = model output). Columns:
    ``layer``, ``kl_tuned_bits``, ``kl_logit_bits`` (mean over all positions of
    KL(final || lens)), ``ce_tuned_nats``, ``ce_logit_nats`` (against the next token, over
    positions 0..seq_len-2 of each sequence), ``ce_model_nats`` (the model's own, equal in
    every row) and ``n_tokens`` (positions scored for KL). Tuned columns are NaN when
    ``lens`` is None, logit columns when ``logit_lens`` is False (it does not depend on the
    tuned lens, so a budget ladder computes it once). Uses the first ``max_tokens`` tokens
    in non-overlapping sequences; deterministic and gradient-free. ``num_threads`` as in
    :func:`train_lens`.

    ``per_sequence=True`` returns the same columns for every evaluation sequence (a
    leading ``sequence`` column, ``n_tokens`` = seq_len), the input of a bootstrap over
    sequences; the mean over sequences of each column is the per-layer table.
    """
    check_model(model)
    tokens = _check_tokens(tokens, seq_len, model.config.vocab_size)
    if lens is not None:
        _check_lens(model, lens)
    if not isinstance(max_tokens, int) or max_tokens < seq_len:
        raise ValueError(f"max_tokens: must be an int >= seq_len={seq_len}, got {max_tokens!r}")
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size: must be a positive int, got {batch_size!r}")
    if num_threads is not None and (not isinstance(num_threads, int) or num_threads <= 0):
        raise ValueError(f"num_threads: must be a positive int or None, got {num_threads!r}")

    device = model.device
    seqs = _sequences(tokens, seq_len)[: max_tokens // seq_len]
    logit = new_logit_lens(model) if logit_lens else None
    n_layers = model.config.num_hidden_layers
    n_seq = len(seqs)
    # Per-sequence sums (KL in bits over seq_len positions, CE in nats over seq_len - 1), float64.
    sums = {k: torch.zeros(n_layers + 1, n_seq, dtype=torch.float64) for k in ("kl_t", "kl_l", "ce_t", "ce_l")}
    ce_model = torch.zeros(n_seq, dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _intra_op_threads(num_threads), _capture_final_norm_input(model) as pre_norm:
            for start in range(0, n_seq, batch_size):
                x = seqs[start : start + batch_size].to(device)
                rows = slice(start, start + x.shape[0])
                pre_norm.clear()
                out = model(input_ids=x, output_hidden_states=True)
                if len(out.hidden_states) != n_layers + 1 or len(pre_norm) != 1:
                    raise RuntimeError(
                        f"unexpected hidden-state layout: {len(out.hidden_states)} hidden states, "
                        f"{len(pre_norm)} final-norm calls for {n_layers} layers"
                    )
                log_p = out.logits.float().log_softmax(-1)
                p = log_p.exp()
                neg_entropy = torch.linalg.vecdot(p, log_p)
                targets = x[:, 1:]
                ce_model[rows] = _ce_per_seq(log_p, targets)
                stream = [*out.hidden_states[:-1], pre_norm[0]]
                for i, h in enumerate(stream):
                    per_lens = [("l", logit(h, i))] if logit is not None else []
                    if lens is not None:
                        # The last layer has no translator: the tuned lens is the model's head there.
                        per_lens.append(("t", lens(h, i) if i < n_layers else lens.unembed(h)))
                    for tag, logits in per_lens:
                        log_q = logits.float().log_softmax(-1)
                        kl_nats = neg_entropy - torch.linalg.vecdot(p, log_q)
                        sums[f"kl_{tag}"][i, rows] = kl_nats.sum(-1, dtype=torch.float64).cpu() / LN2
                        sums[f"ce_{tag}"][i, rows] = _ce_per_seq(log_q, targets)
    finally:
        model.train(was_training)

    n_ce = seq_len - 1
    cols = {
        "kl_tuned_bits": (sums["kl_t"] / seq_len, lens is not None),
        "kl_logit_bits": (sums["kl_l"] / seq_len, logit_lens),
        "ce_tuned_nats": (sums["ce_t"] / n_ce, lens is not None),
        "ce_logit_nats": (sums["ce_l"] / n_ce, logit_lens),
    }
    nan = float("nan")
    if per_sequence:
        layer = torch.arange(n_layers + 1).repeat_interleave(n_seq)
        frame: dict[str, Any] = {"sequence": torch.arange(n_seq).repeat(n_layers + 1).numpy(),
                                 "layer": layer.numpy()}
        for name, (values, present) in cols.items():
            frame[name] = values.reshape(-1).numpy() if present else nan
        frame["ce_model_nats"] = (ce_model / n_ce).repeat(n_layers + 1).numpy()
        frame["n_tokens"] = seq_len
        return pd.DataFrame(frame)
    rows_out = []
    for i in range(n_layers + 1):
        row: dict[str, Any] = {"layer": i}
        for name, (values, present) in cols.items():
            row[name] = float(values[i].mean()) if present else nan
        row["ce_model_nats"] = float(ce_model.sum() / (n_ce * n_seq))
        row["n_tokens"] = n_seq * seq_len
        rows_out.append(row)
    return pd.DataFrame(rows_out)


def _ce_per_seq(log_q: Tensor, targets: Tensor) -> Tensor:
    """Summed next-token cross-entropy (nats) per sequence of log-probabilities log_q[:, :-1] against targets."""
    picked = log_q[:, :-1].gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return -picked.sum(-1, dtype=torch.float64).cpu()


# --------------------------------------------------------------------------- notebook helpers


def _encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids for ``text`` without special tokens, from a transformers or tokenizers tokenizer."""
    if hasattr(tokenizer, "encode"):
        try:
            enc = tokenizer.encode(text, add_special_tokens=False)
        except TypeError:
            enc = tokenizer.encode(text)
        return list(getattr(enc, "ids", enc))
    raise ValueError(f"tokenizer: expected an object with .encode(), got {type(tokenizer).__name__}")


def trajectory(model: PreTrainedModel, lens: Lens, tokenizer: Any, text: str) -> PredictionTrajectory:
    """The package's PredictionTrajectory of ``text`` (targets = the next token; the last is eos or itself).

    ``PredictionTrajectory.from_lens_and_model`` indexes correctly (lens i on
    hidden_states[i], model logits for the last row). Plot with :func:`trajectory_figure`.
    The package converts logits to numpy, which has no bfloat16: logits of 16-bit models
    (bf16 on a GPU) are handed over in float32.
    """
    from tuned_lens.plotting import PredictionTrajectory

    check_model(model)
    if isinstance(lens, TunedLens):
        _check_lens(model, lens)
    ids = _encode(tokenizer, text)
    if len(ids) < 2:
        raise ValueError(f"text: needs at least 2 tokens, got {len(ids)} from {text!r}")
    eos = getattr(tokenizer, "eos_token_id", None)
    targets = ids[1:] + [eos if eos is not None else ids[-1]]
    if next(model.parameters()).dtype in (torch.float32, torch.float64):
        return PredictionTrajectory.from_lens_and_model(lens, model, ids, tokenizer=tokenizer, targets=targets)
    return PredictionTrajectory.from_lens_and_model(
        _Float32Logits(lens), _Float32Logits(model), ids, tokenizer=tokenizer, targets=targets  # type: ignore[arg-type]
    )


class _Float32Logits:
    """Calls a model or lens and returns its logits in float32 (numpy, used by the package, has no bfloat16)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.device = getattr(inner, "device", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        if isinstance(out, Tensor):
            return out.float()
        out.logits = out.logits.float()
        return out

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self(*args, **kwargs)


def trajectory_figure(
    traj: PredictionTrajectory,
    statistic: Literal["cross_entropy", "entropy", "forward_kl", "rank", "max_probability"] = "cross_entropy",
    title: str = "",
    token_width: int = 80,
    max_width: int = 900,
) -> Any:
    """Plotly heatmap of one trajectory statistic (layers x tokens).

    ``token_width`` pixels per token plus 200, capped at ``max_width`` so the figure fits a notebook
    (about 950 px wide). Re-implements ``TrajectoryStatistic.figure`` because the package sets
    ``colorbar.titleside``, which plotly >= 6 rejects; the colorbar title is passed
    in the current ``colorbar.title.side`` form instead.
    """
    import plotly.graph_objects as go

    if statistic not in ("cross_entropy", "entropy", "forward_kl", "rank", "max_probability"):
        raise ValueError(
            f"statistic: must be one of cross_entropy, entropy, forward_kl, rank, max_probability; got {statistic!r}"
        )
    if isinstance(max_width, bool) or not isinstance(max_width, int) or max_width < 300:
        raise ValueError(f"max_width: must be an int >= 300 (pixels), got {max_width!r}")
    stat = getattr(traj, statistic)()
    heat = stat.heatmap(colorbar={"title": {"text": f"{stat.name} ({stat.units})", "side": "right"}})
    return go.Figure(heat).update_layout(
        title_text=title,
        title_x=0.5,
        width=min(max_width, 200 + token_width * stat.stats.shape[1]),
        xaxis_title="Input",
        yaxis_title="Layer",
    )


def top_tokens_by_layer(
    model: PreTrainedModel, lens: TunedLens | None, tokenizer: Any, prompt: str, k: int = 5
) -> pd.DataFrame:
    """Top-k next-token predictions after ``prompt`` at every layer, for the tuned and logit lens.

    Long format: columns ``layer`` (0..L), ``lens`` ("tuned" or "logit"), ``rank`` (1..k),
    ``token_id``, ``token`` (decoded) and ``prob``. The tuned rows are omitted when
    ``lens`` is None.
    """
    check_model(model)
    if lens is not None:
        _check_lens(model, lens)
    if not isinstance(k, int) or not 1 <= k <= model.config.vocab_size:
        raise ValueError(f"k: must be an int in [1, {model.config.vocab_size}] (vocab_size), got {k!r}")
    ids = _encode(tokenizer, prompt)
    if not ids:
        raise ValueError(f"prompt: must encode to at least 1 token, got {prompt!r}")
    device = model.device
    logit_lens = new_logit_lens(model)
    n_layers = model.config.num_hidden_layers
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _capture_final_norm_input(model) as pre_norm:
            out = model(input_ids=torch.tensor([ids], device=device), output_hidden_states=True)
            stream = [*out.hidden_states[:-1], pre_norm[0]]
            rows = []
            for i, h in enumerate(stream):
                last = h[:, -1]
                lenses: list[tuple[str, Tensor]] = [("logit", logit_lens(last, i))]
                if lens is not None:
                    lenses.insert(0, ("tuned", lens(last, i) if i < n_layers else lens.unembed(last)))
                for name, logits in lenses:
                    probs = logits.float().softmax(-1)[0]
                    top = probs.topk(k)
                    for r, (pr, tid) in enumerate(
                        zip(top.values.tolist(), top.indices.tolist(), strict=True)
                    ):
                        rows.append(
                            {
                                "layer": i,
                                "lens": name,
                                "rank": r + 1,
                                "token_id": tid,
                                "token": _decode(tokenizer, tid),
                                "prob": pr,
                            }
                        )
    finally:
        model.train(was_training)
    return pd.DataFrame(rows)


def _decode(tokenizer: Any, token_id: int) -> str:
    """Readable text of one token id."""
    try:
        return str(tokenizer.decode([token_id]))
    except Exception:  # any tokenizer quirk falls back to the raw id
        return str(token_id)
