"""Tied and untied Hugging Face decoders that start from the same values: ``llama`` (the OLMo family's shape) or
``neox`` (Pythia's); the untied output matrix gets its own generator derived from the seed."""

from __future__ import annotations

import torch
from transformers import (
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
)

from tiebias.config.presets import config_sizes
from tiebias.config.training import DEFAULT_PROFILE
from tiebias.models.anatomy import is_tied
from tiebias.system.parallel import CONSTRUCTION


def make_config(preset: str, *, family: str = "llama", vocab_size: int = DEFAULT_PROFILE["vocab_size"], tied: bool = True,
                bos_token_id: int | None = 0, eos_token_id: int | None = 0) -> PretrainedConfig:
    """The transformers config for a preset; no dropout, sdpa attention, init std 0.02."""
    sizes = config_sizes(preset, family, vocab_size)
    sizes.pop("model_type")
    common = dict(**sizes, tie_word_embeddings=tied, initializer_range=0.02, bos_token_id=bos_token_id,
                  eos_token_id=eos_token_id, use_cache=False)
    if family == "llama":
        cfg = LlamaConfig(rms_norm_eps=1e-5, attention_dropout=0.0, **common)
    else:
        cfg = GPTNeoXConfig(hidden_act="gelu", use_parallel_residual=True, attention_dropout=0.0,
                            hidden_dropout=0.0, rotary_pct=0.25, **common)
    cfg._attn_implementation = "sdpa"
    cfg.tiebias = {"preset": preset, "family": family, "tied": tied}
    return cfg


def build(preset: str = "small", *, family: str = "llama", tied: bool = True, vocab_size: int = DEFAULT_PROFILE["vocab_size"],
          seed: int = 0, eos_token_id: int | None = 0) -> PreTrainedModel:
    """A freshly initialised decoder: the untied model of the seed first, which the tied one copies where they overlap
    (under ``CONSTRUCTION``: threads building at once get the same models as one after the other).

    Args:
        preset: the model shape (:mod:`tiebias.config.presets`).
        family: ``llama`` or ``neox``.
        tied: one matrix for the input and output embeddings.
        vocab_size: the vocabulary size.
        seed: the initialisation seed.
        eos_token_id: the bos/eos id in the config.

    Returns:
        The model, in training mode.
    """
    untied_cfg = make_config(preset, family=family, vocab_size=vocab_size, tied=False,
                             bos_token_id=eos_token_id, eos_token_id=eos_token_id)
    cls = LlamaForCausalLM if family == "llama" else GPTNeoXForCausalLM
    with CONSTRUCTION:
        torch.manual_seed(seed)
        base = cls(untied_cfg)
        if not tied:
            gen = torch.Generator().manual_seed(seed + 1_000_003)
            out = base.get_output_embeddings().weight
            with torch.no_grad():
                out.copy_(torch.randn(out.shape, generator=gen) * untied_cfg.initializer_range)
            return base.train()
        model = cls(make_config(preset, family=family, vocab_size=vocab_size, tied=True, bos_token_id=eos_token_id,
                                eos_token_id=eos_token_id))
    out_names = {n for n, p in base.named_parameters() if p is base.get_output_embeddings().weight}
    # the shared matrix is loaded through the input-embedding key; the output key would overwrite it
    missing, unexpected = model.load_state_dict({k: v for k, v in base.state_dict().items() if k not in out_names},
                                                strict=False)
    if unexpected or not is_tied(model):
        raise RuntimeError(f"the tied model does not take the shared initialisation (unexpected keys {unexpected})")
    return model.train()


def count_parameters(model: PreTrainedModel) -> dict[str, int]:
    """Unique parameter counts: total, embedding matrices, and the rest."""
    total = sum(p.numel() for p in model.parameters())  # a shared matrix counted once
    emb = sum(p.numel() for p in {m.weight for m in (model.get_input_embeddings(), model.get_output_embeddings())})
    return {"total": total, "embedding": emb, "non_embedding": total - emb}
