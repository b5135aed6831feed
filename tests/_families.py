"""Tiny random configs of the decoder-only families the kit lenses (hidden 32, 2 layers), for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers as tr

HIDDEN = 32
LAYERS = 2
POSITIONS = 128

# family -> (config class name, keyword arguments besides vocab_size and tie_word_embeddings)
_ATTN = dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=2,
             max_position_embeddings=POSITIONS)
_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", dict(_ATTN, num_key_value_heads=2)),
    "mistral": ("MistralConfig", dict(_ATTN, num_key_value_heads=2)),
    "olmo": ("OlmoConfig", dict(_ATTN, num_key_value_heads=2)),
    "olmo2": ("Olmo2Config", dict(_ATTN, num_key_value_heads=2)),
    "olmo3": ("Olmo3Config", dict(_ATTN, num_key_value_heads=2)),
    "qwen2": ("Qwen2Config", dict(_ATTN, num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", dict(_ATTN, num_key_value_heads=2, head_dim=16)),
    "gemma": ("GemmaConfig", dict(_ATTN, num_key_value_heads=2, head_dim=16)),
    "gemma2": ("Gemma2Config", dict(_ATTN, num_key_value_heads=2, head_dim=16, final_logit_softcapping=None)),
    "gemma3": ("Gemma3TextConfig", dict(_ATTN, num_key_value_heads=2, head_dim=16)),
    "gpt2": ("GPT2Config", dict(n_embd=HIDDEN, n_layer=LAYERS, n_head=2, n_positions=POSITIONS)),
    "gpt_neo": ("GPTNeoConfig", dict(hidden_size=HIDDEN, num_layers=LAYERS, num_heads=2, window_size=16,
                                     attention_types=[[["global", "local"], 1]], max_position_embeddings=POSITIONS)),
    "gpt_neox": ("GPTNeoXConfig", dict(_ATTN)),
    "phi": ("PhiConfig", dict(_ATTN)),  # final_layernorm; its head has a bias
    "mpt": ("MptConfig", dict(d_model=HIDDEN, n_layers=LAYERS, n_heads=2, expansion_ratio=2, max_seq_len=POSITIONS)),
    "opt": ("OPTConfig", dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, ffn_dim=2 * HIDDEN, num_attention_heads=2,
                              word_embed_proj_dim=HIDDEN, max_position_embeddings=POSITIONS)),
}

FAMILIES = list(_SPECS)
"""Every family above, whether or not the installed transformers has it: a test of a family it lacks is skipped,
named (:func:`require`), instead of vanishing from the test list."""

PACKAGE_FAMILIES = {"llama", "gpt2", "gpt_neo", "gpt_neox", "opt"}
"""Families tuned_lens's own model_surgery recognises (by class)."""


def missing(family: str) -> str | None:
    """Why ``family`` cannot be checked with the installed transformers (its config class is absent), else None."""
    cls = _SPECS[family][0]
    if hasattr(tr, cls):
        return None
    major_minor = ".".join(tr.__version__.split(".")[:2])
    return f"transformers {major_minor} has no {cls}: family {family} not checked"


def require(family: str) -> None:
    """Skip the calling test, saying why, when the installed transformers lacks ``family``."""
    reason = missing(family)
    if reason is not None:
        pytest.skip(reason)


def tiny_config(family: str, tied: bool, vocab_size: int = 300, **changes: Any) -> tr.PretrainedConfig:
    """A tiny config of ``family`` with special tokens inside the vocabulary (skips the test if transformers lacks it)."""
    require(family)
    cls, kw = _SPECS[family]
    special = dict(bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return getattr(tr, cls)(vocab_size=vocab_size, tie_word_embeddings=tied, **special, **{**kw, **changes})


def save_tiny(family: str, tied: bool, folder: Path, vocab_size: int = 300, seed: int = 0, tokenizer: Any = None,
              **changes: Any) -> Path:
    """Build a random tiny model of ``family`` and save it (and ``tokenizer``, if given) to ``folder``."""
    torch.manual_seed(seed)
    model = tr.AutoModelForCausalLM.from_config(tiny_config(family, tied, vocab_size, **changes))
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


_TOKENIZER: list[Any] = []


def corpus_tokenizer(vocab_size: int = 320) -> Any:
    """A byte-level BPE tokenizer trained on the embedded corpus's training split (cached per process)."""
    if not _TOKENIZER:
        from tiebias.data import corpus as data
        from tiebias.data import tokens

        texts = data.load_corpus(None)["train"]["text"][:4]  # a few works are plenty for 320 tokens
        _TOKENIZER.append(tokens.train_tokenizer(texts, vocab_size=vocab_size))
    return _TOKENIZER[0]


def char_tokenizer() -> tr.PreTrainedTokenizerFast:
    """Character-level tokenizer whose ids fit the tiny vocabulary."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz .")}
    vocab["<eos>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return tr.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
