"""Text in, tokens out: corpora (embedded, local files, hub datasets through ``datasets``) and their checks, the
byte-level BPE tokenizer (``tokenizers``, saved as a ``transformers`` fast tokenizer), encoding, frequencies and the
unigram baseline."""

from tiebias.data import checks, corpus, tokens
from tiebias.data.corpus import load_corpus

__all__ = ["checks", "corpus", "load_corpus", "tokens"]
