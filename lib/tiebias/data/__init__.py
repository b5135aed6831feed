"""Text in, tokens out: corpora (embedded, local files, hub datasets through ``datasets``) and their checks, the
byte-level BPE tokenizer (``tokenizers``, saved as a ``transformers`` fast tokenizer), encoding, frequencies and the
unigram and bigram baselines (``bigram``)."""

from tiebias.data import bigram, checks, corpus, tokens
from tiebias.data.corpus import load_corpus

__all__ = ["bigram", "checks", "corpus", "load_corpus", "tokens"]
