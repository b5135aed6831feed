"""What a causal LM is made of, from its config or modules (a loaded model or a meta-device skeleton): the text
config, whether its embeddings are tied (and whether its loaded weights agree with its config), and its layout."""

from __future__ import annotations

import math
import weakref
from collections import namedtuple
from operator import attrgetter
from typing import Any

import torch
from torch import Tensor
from transformers import PreTrainedModel

FINAL_NORM_NAMES = ("norm", "final_layer_norm", "ln_f", "final_layernorm", "norm_f", "final_norm",
                    "decoder.final_layer_norm")
"""Attribute paths of the final norm, tried in order on ``model.get_decoder()`` then ``model.base_model``: llama,
olmo, qwen, gemma / gpt_neox / gpt2, gpt_neo, bloom, falcon / phi / mpt / recurrent_gemma / opt."""

_LOGIT_POSTPROCESSING = {"final_logit_softcapping": None, "logit_scale": 1.0, "logits_scaling": 1.0}
"""Config fields of families that transform the head's output (value that means "off"): final norm + head would not
reproduce such a model's logits."""


def text_config(config: Any) -> Any:
    """The text part of a (possibly multimodal) config; a text-only config is its own text part."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def same_matrix(a: Tensor, b: Tensor) -> bool:
    """Whether two embedding weights are one matrix: the same tensor or storage, or (real tensors) equal in value."""
    if a is b:
        return True
    if "meta" in (a.device.type, b.device.type):
        return False
    return a.data_ptr() == b.data_ptr() or (a.shape == b.shape and a.device == b.device and torch.equal(a, b))


def is_tied(model_or_config: Any) -> bool:
    """Whether input and output embeddings are one matrix: a model's hold the same tensor (object, or storage of real
    tensors); a config's text part says ``tie_word_embeddings`` (False when absent)."""
    if not isinstance(model_or_config, torch.nn.Module):
        return bool(getattr(text_config(model_or_config), "tie_word_embeddings", False))
    inp, out = model_or_config.get_input_embeddings(), model_or_config.get_output_embeddings()
    if inp is None or out is None:
        return False
    a, b = inp.weight, out.weight
    return a is b or ("meta" not in (a.device.type, b.device.type) and a.data_ptr() == b.data_ptr())


class TyingError(ValueError):
    """A model whose config and weights disagree on tying: ``where`` names the model, ``conflict`` what disagrees."""

    def __init__(self, where: str, conflict: str) -> None:
        super().__init__(f"{where}: {conflict}")
        self.where, self.conflict = where, conflict


def tying_conflict(config_tied: bool, tied: bool, *, output_missing: bool = False) -> str | None:
    """Why a model's config and its weights disagree on tying, for an error message; None when they agree."""
    says = f"its config.json says tie_word_embeddings={config_tied}, but its"
    if config_tied and not tied:
        return (f"{says} weights hold an output matrix of their own that differs from the input embedding "
                "(transformers then loads the two untied)")
    if not config_tied and tied:
        return f"{says} output matrix equals its input embedding (one matrix in fact)"
    if not config_tied and output_missing:
        return f"{says} weights hold no output matrix (transformers would draw one at random)"
    return None


def check_loaded_tying(model: torch.nn.Module, where: str, missing_keys: Any = ()) -> bool:
    """Whether a loaded model's weights are tied in fact (whatever its config says: transformers unties a tied config
    whose checkpoint holds an output matrix of its own); :class:`TyingError` naming ``where`` when its config
    disagrees (``missing_keys``: what transformers reported missing on load)."""
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    tied = inp is not None and out is not None and same_matrix(inp.weight, out.weight)
    out_names = {n for n, p in model.named_parameters(remove_duplicate=False) if out is not None and p is out.weight}
    conflict = tying_conflict(is_tied(model.config), tied, output_missing=bool(out_names & set(missing_keys)))
    if conflict:
        raise TyingError(where, conflict)
    return tied


Layout = namedtuple("Layout", "model_type norm_path final_norm head project_out")
"""Where a causal LM keeps what the lens needs: its final norm (its input is what the lens reads at layer L), its head
and an optional projection between them (OPT-350m style); modules of the model itself."""


def find_layout(model: Any) -> Layout:
    """Find the final norm and the head by layout (no forward pass, so a meta-device skeleton works too); refuse a
    head that is not a linear unembedding or whose output the model transforms."""
    if not isinstance(model, PreTrainedModel):
        raise ValueError(f"model: expected a transformers PreTrainedModel (e.g. LlamaForCausalLM, "
                         f"OlmoForCausalLM), got {type(model).__name__}")
    model_type = str(getattr(model.config, "model_type", "?"))
    what = f"model_type={model_type!r} ({type(model).__name__})"
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"model: {what} has no causal-LM head (get_output_embeddings() is None); "
                         f"load it with AutoModelForCausalLM")
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(
            f"model: {what} has a {type(head).__name__} head; the lens needs a linear unembedding (nn.Linear)")
    for key, off in _LOGIT_POSTPROCESSING.items():
        value = getattr(text_config(model.config), key, off)
        if value is not None and value != off:
            raise ValueError(f"model: {what} transforms its logits after the head ({key}={value!r}), so final norm + "
                             f"head would not reproduce its output distribution; allowed: {key}={off!r}")
    roots: list[tuple[str, Any]] = []
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    for label, root in (("decoder", decoder), ("base_model", getattr(model, "base_model", None))):
        if root is not None and all(root is not r for _, r in roots):
            roots.append((label, root))
    for label, root in roots:
        for name in FINAL_NORM_NAMES:
            try:
                norm = attrgetter(name)(root)
            except AttributeError:
                continue
            if norm is None:
                raise ValueError(f"model: {what} has no final norm ({label}.{name} is None, e.g. a post-norm model "
                                 f"such as OPT-350m); the lens needs a final norm before the head")
            if isinstance(norm, torch.nn.Module):
                owner = attrgetter(name.rsplit(".", 1)[0])(root) if "." in name else root
                project_out = getattr(owner, "project_out", None)  # OPT with word_embed_proj_dim != hidden_size
                return Layout(model_type, f"{label}.{name}", norm, head,
                              project_out if isinstance(project_out, torch.nn.Module) else None)
    raise ValueError(f"model: {what} has no recognisable final norm: none of {', '.join(FINAL_NORM_NAMES)} on "
                     f"{' or '.join(label for label, _ in roots) or 'the model (no base_model)'}")


_VERIFIED: weakref.WeakKeyDictionary[torch.nn.Module, Layout] = weakref.WeakKeyDictionary()


def checked_layout(model: Any) -> Layout:
    """The model's layout (:func:`find_layout`), checked once with a short forward pass (cached per model object):
    L + 1 hidden states, one call of the final norm, and final norm + head on its input reproducing the logits."""
    cached = _VERIFIED.get(model) if isinstance(model, torch.nn.Module) else None
    if cached is not None:
        return cached
    layout = find_layout(model)
    what = f"model_type={layout.model_type!r} ({type(model).__name__})"
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
                raise ValueError(f"model: {what} returns {n_states} hidden states for num_hidden_layers={n_layers}; "
                                 f"the lens needs L + 1 (embedding output, then one per block)")
            if len(store) != 1:
                raise ValueError(f"model: {what}: its final norm {layout.norm_path} ran {len(store)} times in one "
                                 f"forward pass; the lens needs it to run once, after the last block")
            n = layout.final_norm(store[0])
            mine = layout.head(n if layout.project_out is None else layout.project_out(n)).float()
            theirs = out.logits.float()
    finally:
        handle.remove()
        model.train(was_training)
    # Same modules on the same input: equal up to kernel differences (float32) or rounding (16-bit).
    tol = (1e-4 if layout.head.weight.dtype in (torch.float32, torch.float64) else 1e-2) * max(
        1.0, float(theirs.abs().max()))
    diff = float((mine - theirs).abs().max()) if mine.shape == theirs.shape else math.inf
    if not diff <= tol:
        raise ValueError(
            f"model: {what}: final norm ({layout.norm_path}) + head does not reproduce the model's logits "
            f"(max difference {diff:.3g}, shapes {tuple(mine.shape)} vs {tuple(theirs.shape)}); the family "
            f"transforms its logits or hidden states in a way the lens cannot follow")
    _VERIFIED[model] = layout
    return layout


def check_model(model: Any) -> str:
    """Return ``model_type`` if the model can be lensed (layout found and checked), else raise ValueError."""
    return checked_layout(model).model_type
