"""Model presets and builders: tied and untied Hugging Face decoders that start from the same values.

Two families cover the paper's pairs: ``llama`` (RMSNorm, SwiGLU, RoPE: the OLMo family's shape) and
``neox`` (LayerNorm, GELU MLP, parallel residual: the Pythia / GPT-NeoX shape). A tied and an untied
model built with the same preset and seed are identical in every parameter they share; the untied
output matrix gets its own initialisation from a generator derived from the seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import (
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
)

from tiebias.models.anatomy import is_tied
from tiebias.system.parallel import CONSTRUCTION

FAMILIES = ("llama", "neox")


@dataclass(frozen=True)
class Preset:
    """Shape of a decoder: width, depth, heads and MLP width (SwiGLU width for llama, 4d for neox)."""

    hidden: int
    layers: int
    heads: int
    max_positions: int = 1024
    note: str = ""

    def intermediate(self, family: str) -> int:
        """MLP width: 4d for GELU MLPs, about 8d/3 (rounded up to 8) for SwiGLU, same parameter count."""
        if family == "neox":
            return 4 * self.hidden
        return int(8 * ((8 * self.hidden / 3 + 7) // 8))


PRESETS: dict[str, Preset] = {
    "tiny": Preset(32, 2, 2, 256, "unit tests: seconds"),
    "mini": Preset(64, 4, 4, 512, "smoke profile: a minute on a laptop CPU"),
    "small": Preset(128, 6, 4, 1024, "default CPU study: a few minutes per model on 2 cores"),
    "small-deep": Preset(128, 10, 4, 1024, "small's width with 10 layers: the depth comparison of 03_lens"),
    "small-16": Preset(128, 16, 4, 1024, "small's width with 16 layers: the deepest model of the depth profile"),
    "base": Preset(256, 8, 8, 1024, "a larger CPU run: about 4x the cost of small"),
    "gpu-20m": Preset(384, 8, 6, 2048, "single GPU, about 20M parameters with a 50k vocabulary"),
    "gpu-60m": Preset(640, 10, 10, 2048, "single GPU, about 60M parameters with a 50k vocabulary"),
    "gpu-150m": Preset(896, 14, 14, 2048, "single GPU, about 150M parameters with a 50k vocabulary"),
}


def get_preset(name: str) -> Preset:
    """Look a preset up by name, with an error that lists the allowed names."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown value {name!r}; allowed: {', '.join(PRESETS)}")
    return PRESETS[name]


def make_config(preset: str, *, family: str = "llama", vocab_size: int = 4096, tied: bool = True,
                bos_token_id: int | None = 0, eos_token_id: int | None = 0) -> PretrainedConfig:
    """The transformers config for a preset; no dropout, sdpa attention, init std 0.02."""
    p = get_preset(preset)
    if family not in FAMILIES:
        raise ValueError(f"family: unknown value {family!r}; allowed: {', '.join(FAMILIES)}")
    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size: {vocab_size!r} is not a valid vocabulary size; need an int >= 2")
    common = dict(
        vocab_size=vocab_size,
        hidden_size=p.hidden,
        intermediate_size=p.intermediate(family),
        num_hidden_layers=p.layers,
        num_attention_heads=p.heads,
        max_position_embeddings=p.max_positions,
        tie_word_embeddings=tied,
        initializer_range=0.02,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        use_cache=False,
    )
    if family == "llama":
        cfg = LlamaConfig(num_key_value_heads=p.heads, rms_norm_eps=1e-5, attention_dropout=0.0, **common)
    else:
        cfg = GPTNeoXConfig(hidden_act="gelu", use_parallel_residual=True, attention_dropout=0.0,
                            hidden_dropout=0.0, rotary_pct=0.25, **common)
    cfg._attn_implementation = "sdpa"
    cfg.tiebias = {"preset": preset, "family": family, "tied": tied}
    return cfg


def _model_class(family: str) -> type[PreTrainedModel]:
    """The transformers causal-LM class of a family."""
    return LlamaForCausalLM if family == "llama" else GPTNeoXForCausalLM


def build(preset: str = "small", *, family: str = "llama", tied: bool = True, vocab_size: int = 4096,
          seed: int = 0, eos_token_id: int | None = 0) -> PreTrainedModel:
    """Build a freshly initialised decoder.

    The untied model of a seed is initialised first; the tied model copies every parameter it has
    from it, so both start equal where they overlap. The untied output matrix is then re-drawn from
    its own generator, making it independent of the input matrix. Initialisation draws from torch's
    global generator, so builds take :data:`tiebias.system.parallel.CONSTRUCTION`: two threads building at once
    get the same models as one after the other.
    """
    with CONSTRUCTION:
        return _build_unlocked(preset, family, tied, vocab_size, seed, eos_token_id)


def _build_unlocked(preset: str, family: str, tied: bool, vocab_size: int, seed: int,
                    eos_token_id: int | None) -> PreTrainedModel:
    """:func:`build` without the lock."""
    untied_cfg = make_config(preset, family=family, vocab_size=vocab_size, tied=False,
                             bos_token_id=eos_token_id, eos_token_id=eos_token_id)
    cls = _model_class(family)
    torch.manual_seed(seed)
    base = cls(untied_cfg)
    if not tied:
        gen = torch.Generator().manual_seed(seed + 1_000_003)
        out = base.get_output_embeddings().weight
        with torch.no_grad():
            out.copy_(torch.randn(out.shape, generator=gen) * untied_cfg.initializer_range)
        base.train()
        return base
    tied_cfg = make_config(preset, family=family, vocab_size=vocab_size, tied=True,
                           bos_token_id=eos_token_id, eos_token_id=eos_token_id)
    model = cls(tied_cfg)
    out_names = {n for n, p in base.named_parameters() if p is base.get_output_embeddings().weight}
    # the shared matrix is loaded through the input-embedding key; the output key would overwrite it
    state = {k: v for k, v in base.state_dict().items() if k not in out_names}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise RuntimeError(f"unexpected keys copying the shared initialisation: {unexpected}")
    if not is_tied(model):
        raise RuntimeError("tied model does not share its input and output embedding")
    model.train()
    return model


def count_parameters(model: PreTrainedModel) -> dict[str, int]:
    """Unique parameter counts: total, embedding matrices, and the rest."""
    seen: set[int] = set()
    total = emb = 0
    emb_ptrs = {model.get_input_embeddings().weight.data_ptr()}
    if model.get_output_embeddings() is not None:
        emb_ptrs.add(model.get_output_embeddings().weight.data_ptr())
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += p.numel()
        if p.data_ptr() in emb_ptrs:
            emb += p.numel()
    return {"total": total, "embedding": emb, "non_embedding": total - emb}
