"""Shared helpers of the embedding-metric tests: random related matrices, tiny tokenizers and Llama models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CORPUS_A = ["the cat sat on the mat", "a dog ran far away from the cat", "embeddings tie input and output"]
CORPUS_B = ["weights are shared between the layers", "the dog and the cat", "output space bias"]


# ----------------------------------------------------------------------------------------- helpers


def centre(x: np.ndarray) -> np.ndarray:
    return x - x.mean(0)


def cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def related(n: int, ds: int, dt: int, seed: int = 0, noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Source and a noisy linear image of it with an offset (so centring matters)."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((n, ds)) + rng.standard_normal(ds)
    t = s @ rng.standard_normal((ds, dt)) * 0.4 + noise * rng.standard_normal((n, dt)) + 3.0
    return s, t


def make_tokenizer(texts: list[str], path: Path | None = None) -> PreTrainedTokenizerFast:
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts * 20, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>")
    if path is not None:
        tok.save_pretrained(path)
    return tok


def llama(vocab: int, tied: bool, hidden: int = 32, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, tie_word_embeddings=tied)
    return LlamaForCausalLM(cfg).eval()
