"""Input and output embedding matrices of a model, and matching two vocabularies by token string.

``extract`` pulls the two matrices and their token strings out of a saved model folder, a hub id or a
loaded model (reading only the embedding tensors from safetensors when it can, so a large model's other
weights never load); ``checkpoint_matrices`` does it for every checkpoint of a run; ``match_vocab``
lines up the rows of two models that name the same token.  The metrics live in ``tiebias.align.maps``,
``tiebias.align.neighbours`` and ``tiebias.align.token_stats``.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from tiebias.config.variants import step_of
from tiebias.run.layout import CHECKPOINTS_SUBDIR

log = logging.getLogger(__name__)

WHICH: tuple[str, ...] = ("input", "output")
Which = Literal["input", "output"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_MISSING_TOKEN = "\x00missing-id:"  # placeholder for ids the tokenizer cannot name; never matched
_ANCESTOR_LEVELS = 4


def check_which(which: str, name: str) -> None:
    """Refuse a matrix name other than ``'input'`` or ``'output'``; the error names the argument."""
    if which not in WHICH:
        raise ValueError(f"{name} must be one of {WHICH}, got {which!r}")


@dataclass(eq=False, repr=False)
class Embeddings:
    """Input and output embedding matrices of one model, rows indexed by token id.

    ``tied`` means one shared matrix: ``input`` and ``output`` are then the same tensor.
    """

    input: Tensor
    output: Tensor
    tied: bool
    tokens: list[str]
    source: str

    @property
    def vocab_size(self) -> int:
        """Number of rows (tokens) kept."""
        return int(self.input.shape[0])

    @property
    def width(self) -> int:
        """Embedding width d."""
        return int(self.input.shape[1])

    def matrix(self, which: Which) -> Tensor:
        """The ``'input'`` or ``'output'`` matrix."""
        check_which(which, "which")
        return self.input if which == "input" else self.output

    def __repr__(self) -> str:
        return (f"Embeddings(source={self.source!r}, vocab={self.vocab_size}, width={self.width}, "
                f"tied={self.tied}, dtype={self.input.dtype})")


def extract(source: Any, tokenizer: Any = None, *, revision: str | None = None,
            dtype: torch.dtype = torch.float32) -> Embeddings:
    """Input/output embedding matrices and token strings of a model.

    ``source`` is a local model folder (only the two embedding tensors are read from its safetensors
    files when possible), a hub id, or a loaded ``PreTrainedModel`` (its weights are copied).  Token
    strings come from ``tokenizer`` (object or folder), else from the model folder, else from the nearest
    ancestor folder (up to 4 levels) holding a ``tokenizer/`` subfolder or tokenizer files, so a
    ``checkpoints/step-N`` folder of a run works.  Rows beyond ``len(tokenizer)`` (padding) are dropped.
    """
    from transformers import PreTrainedModel

    local: Path | None = None
    hub_id: str | None = None
    if isinstance(source, PreTrainedModel):
        name = str(getattr(source, "name_or_path", "") or "")
        label = name or type(source).__name__
        if name and Path(name).is_dir():
            local = Path(name)
        elif name:
            hub_id = name
    elif isinstance(source, (str, Path)):
        label = str(source)
        path = Path(source).expanduser()
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise ValueError(f"source: {label!r} is not a model folder (no config.json)")
            local = path
        elif isinstance(source, Path) or _looks_like_path(str(source)):
            raise ValueError(f"source: model folder {str(source)!r} does not exist")
        else:
            hub_id = str(source)
    else:
        raise ValueError("source must be a model folder, a hub id or a loaded PreTrainedModel, "
                         f"got {type(source).__name__}")

    tok = _resolve_tokenizer(tokenizer, local, hub_id, revision, label)  # before any weights: fail fast
    if isinstance(source, PreTrainedModel):
        inp, out, tied = _weights_from_model(source, dtype, label)
    elif local is not None:
        inp, out, tied = _weights_from_folder(local, dtype, label)
    else:
        assert hub_id is not None
        inp, out, tied = _weights_from_hub(hub_id, revision, dtype)
    n_tok = len(tok)
    n_rows = int(inp.shape[0])
    if n_rows > n_tok:
        log.info("%s: dropping %d padding rows beyond len(tokenizer)=%d", label, n_rows - n_tok, n_tok)
        inp = inp[:n_tok]
        out = inp if tied else out[:n_tok]
    elif n_rows < n_tok:
        warnings.warn(f"{label}: tokenizer has {n_tok} tokens but the embedding only {n_rows} rows; "
                      "token strings beyond the matrix are ignored", stacklevel=2)
        n_tok = n_rows
    return Embeddings(input=inp, output=out, tied=tied, tokens=_token_strings(tok, n_tok), source=label)


def require_untied(emb: Embeddings, role: str = "this comparison") -> Embeddings:
    """Return ``emb`` unchanged, or raise ValueError if it is a tied model (naming its source)."""
    if emb.tied:
        raise ValueError(f"{role} needs an untied model, but {emb.source!r} is tied "
                         "(its input and output embeddings are one matrix)")
    return emb


def checkpoint_matrices(model_dir: str | Path, which: Which = "input", *,
                        dtype: torch.dtype = torch.float32) -> list[tuple[int, Tensor]]:
    """``(step, matrix)`` for every ``checkpoints/step-<N>/`` of a model folder, sorted by step.

    Feeds ``evolution``; ``model_dir`` may also be the ``checkpoints`` folder itself.
    """
    check_which(which, "which")
    root = Path(model_dir)
    ck = root / CHECKPOINTS_SUBDIR if (root / CHECKPOINTS_SUBDIR).is_dir() else root
    found = [(step_of(p), p) for p in (ck.iterdir() if ck.is_dir() else []) if p.is_dir() and step_of(p) is not None]
    if not found:
        raise ValueError(f"model_dir: no checkpoints/step-<N> folders under {str(root)!r}")
    out: list[tuple[int, Tensor]] = []
    for step, p in sorted(found):
        emb = extract(p, dtype=dtype)
        out.append((step, emb.matrix(which)))
    return out


def _looks_like_path(s: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else (or ``dir/x`` under an existing dir) is a path."""
    if s.startswith((".", "/", "~")) or s.count("/") > 1 or "\\" in s:
        return True
    return "/" in s and Path(s).parent.is_dir()


def _weights_from_model(model: Any, dtype: torch.dtype, label: str) -> tuple[Tensor, Tensor, bool]:
    """Copies of a loaded model's embedding weights (one tensor when tied), on the CPU in ``dtype``."""
    inp_mod = model.get_input_embeddings()
    out_mod = model.get_output_embeddings()
    if inp_mod is None or out_mod is None:
        raise ValueError(f"{label}: model has no {'input' if inp_mod is None else 'output'} embedding")
    w_in, w_out = inp_mod.weight, out_mod.weight
    tied = (w_in.data_ptr() == w_out.data_ptr()) or _config_tied(model.config)
    inp = w_in.detach().to(device="cpu", dtype=dtype, copy=True)
    out = inp if tied else w_out.detach().to(device="cpu", dtype=dtype, copy=True)
    _check_shapes(inp, out, label)
    return inp, out, tied


def _config_tied(config: Any) -> bool:
    """Whether the (text) config asks for tied word embeddings."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return bool(getattr(text, "tie_word_embeddings", False))


def _check_shapes(inp: Tensor, out: Tensor, label: str) -> None:
    """Refuse input and output embeddings that are not both [vocab, width] of one shape."""
    if inp.ndim != 2 or out.ndim != 2 or inp.shape != out.shape:
        raise ValueError(f"{label}: input embedding {tuple(inp.shape)} and output embedding "
                         f"{tuple(out.shape)} do not have the same [vocab, width] shape")


def _weights_from_folder(path: Path, dtype: torch.dtype, label: str) -> tuple[Tensor, Tensor, bool]:
    """Read only the embedding tensors when the folder has safetensors; else load the model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tiebias.run.files import check_safetensors, read_json

    todo = ("a checkpoint of a run: use another step or retrain the model; a final model: delete its complete.json "
            "and train it again (it resumes from its newest good checkpoint)")
    read_json(path / "config.json", todo)  # a damaged file is named, not reported by the loader
    if (path / "model.safetensors").is_file():
        check_safetensors(path / "model.safetensors", todo)
    config = AutoConfig.from_pretrained(path)
    try:
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
        got = _read_embeddings(path, skeleton, config)
    except (ValueError, KeyError, OSError, RuntimeError, TypeError) as exc:
        log.info("%s: reading embeddings directly failed (%s); loading the whole model", label, exc)
        got = None
    if got is not None:
        inp, out, tied = got
        inp = inp.to(dtype)
        out = inp if tied else out.to(dtype)
        _check_shapes(inp, out, label)
        return inp, out, tied
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, low_cpu_mem_usage=True)
    try:
        return _weights_from_model(model, dtype, label)
    finally:
        del model


def _read_embeddings(path: Path, skeleton: Any, config: Any) -> tuple[Tensor, Tensor, bool] | None:
    """Embedding tensors straight from safetensors, named after the (meta-device) model skeleton."""
    from safetensors import safe_open

    inp_mod, out_mod = skeleton.get_input_embeddings(), skeleton.get_output_embeddings()
    if inp_mod is None or out_mod is None:
        return None
    tied = out_mod.weight is inp_mod.weight or _config_tied(config)
    params = list(skeleton.named_parameters(remove_duplicate=False))
    in_names = [n for n, p in params if p is inp_mod.weight]
    out_names = [n for n, p in params if p is out_mod.weight]
    index = path / "model.safetensors.index.json"
    single = path / "model.safetensors"
    if single.is_file():
        with safe_open(str(single), "pt") as f:
            weight_map = {k: single for k in f.keys()}
    elif index.is_file():
        weight_map = {k: path / v for k, v in json.loads(index.read_text())["weight_map"].items()}
    else:
        return None

    keys = _checkpoint_keys(skeleton, list(weight_map))

    def read(names: list[str]) -> Tensor | None:
        """The first of ``names`` found in the checkpoint, read from its file (None if none is)."""
        for n in names:
            if n in keys:
                with safe_open(str(weight_map[keys[n]]), "pt") as f:
                    return f.get_tensor(keys[n])
        return None

    inp = read(in_names + (out_names if tied else []))
    if inp is None:
        return None
    if tied:
        return inp, inp, True
    out = read(out_names)
    return None if out is None else (inp, out, False)


def _checkpoint_keys(skeleton: Any, keys: list[str]) -> dict[str, str]:
    """Model parameter name -> checkpoint key, applying the library's load-time key renames.

    Some architectures store weights under legacy names (GPT-NeoX saves ``lm_head`` as ``embed_out``).
    The renaming helpers are internal to transformers, so this is best effort: when they are missing or
    fail, only exact names match and the caller falls back to loading the whole model.
    """
    out = {k: k for k in keys}
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, rename_source_key

        renamings = [r for r in get_model_conversion_mapping(skeleton) if isinstance(r, WeightRenaming)]
        meta = dict(skeleton.state_dict())
        for k in keys:
            new, _ = rename_source_key(k, renamings, [], skeleton.base_model_prefix, meta)
            out.setdefault(new, k)
    except Exception as exc:  # noqa: BLE001 - internal API; exact names still work
        log.debug("checkpoint key renaming unavailable: %s", exc)
    return out


def _weights_from_hub(hub_id: str, revision: str | None, dtype: torch.dtype) -> tuple[Tensor, Tensor, bool]:
    """Embedding weights of a hub model (loads the whole model; a failed load names the id)."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(hub_id, revision=revision, dtype=dtype,
                                                     low_cpu_mem_usage=True)
    except OSError as exc:
        raise ValueError(f"source: {hub_id!r} is neither a local model folder nor a loadable hub id "
                         f"({exc})") from exc
    try:
        return _weights_from_model(model, dtype, hub_id)
    finally:
        del model


def _has_tokenizer(p: Path) -> bool:
    """Whether folder ``p`` holds any tokenizer file."""
    return p.is_dir() and any((p / f).is_file() for f in _TOKENIZER_FILES)


def _find_tokenizer_dir(start: Path) -> Path | None:
    """``start`` or the nearest ancestor (<= 4 up) with tokenizer files or a ``tokenizer/`` subfolder."""
    p = start.resolve()
    for _ in range(_ANCESTOR_LEVELS + 1):
        if _has_tokenizer(p):
            return p
        if _has_tokenizer(p / "tokenizer"):
            return p / "tokenizer"
        if p.parent == p:
            break
        p = p.parent
    return None


def _resolve_tokenizer(tokenizer: Any, local: Path | None, hub_id: str | None, revision: str | None,
                       label: str) -> Any:
    """The tokenizer to name rows with: the one given, else the model folder's (or an ancestor's), else the hub's."""
    from transformers import AutoTokenizer

    if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
        if not (hasattr(tokenizer, "convert_ids_to_tokens") and hasattr(tokenizer, "__len__")):
            raise ValueError(f"tokenizer must be a folder or a transformers tokenizer, "
                             f"got {type(tokenizer).__name__}")
        return tokenizer
    if tokenizer is not None:
        p = Path(tokenizer).expanduser()
        if p.is_dir():
            found = p if _has_tokenizer(p) else (p / "tokenizer" if _has_tokenizer(p / "tokenizer") else None)
            if found is None:
                raise ValueError(f"tokenizer: no tokenizer files in {str(tokenizer)!r}")
            return AutoTokenizer.from_pretrained(found)
        text = str(tokenizer)
        if isinstance(tokenizer, Path) or p.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1:
            raise FileNotFoundError(f"tokenizer: folder {text!r} does not exist; for a run folder, rerun "
                                    "Run.prepare (notebook 01_train) to rebuild its tokenizer/")
        return AutoTokenizer.from_pretrained(text, revision=revision)
    if local is not None:
        found = _find_tokenizer_dir(local)
        if found is not None:
            return AutoTokenizer.from_pretrained(found)
        raise ValueError(f"tokenizer: none found for {label!r} (looked in the folder, in up to "
                         f"{_ANCESTOR_LEVELS} parent folders and their tokenizer/ subfolders); "
                         "pass tokenizer=")
    if hub_id is not None:
        try:
            return AutoTokenizer.from_pretrained(hub_id, revision=revision)
        except OSError as exc:
            raise ValueError(f"tokenizer: could not load one for {hub_id!r}; pass tokenizer= ({exc})") from exc
    raise ValueError(f"tokenizer: none known for {label!r}; pass tokenizer=")


def _token_strings(tok: Any, n: int) -> list[str]:
    """Token strings of ids 0..n-1; an id the tokenizer cannot name gets a never-matching placeholder."""
    raw = tok.convert_ids_to_tokens(list(range(n)))
    return [t if isinstance(t, str) else f"{_MISSING_TOKEN}{i}" for i, t in enumerate(raw)]


class VocabMatch(NamedTuple):
    """Row indices into two vocabularies that name the same token string, in the first one's id order."""

    idx_a: Tensor
    idx_b: Tensor
    tokens: list[str]


def match_vocab(a: Embeddings, b: Embeddings, *, allow: bool = True) -> VocabMatch:
    """Tokens shared by ``a`` and ``b`` (by string).

    Identical vocabularies give the identity matching.  With ``allow=False`` differing vocabularies are
    an error rather than silently intersected.
    """
    if a.tokens == b.tokens:
        idx = torch.arange(len(a.tokens))
        return VocabMatch(idx, idx.clone(), list(a.tokens))
    if not allow:
        raise ValueError(f"vocabularies differ: {a.source!r} has {len(a.tokens)} tokens, {b.source!r} has "
                         f"{len(b.tokens)}; pass allow=True to compare on the shared tokens")
    return match_tokens(a.tokens, b.tokens, a.source, b.source)


def match_tokens(a: list[str], b: list[str], a_name: str = "a", b_name: str = "b") -> VocabMatch:
    """Ids of the token strings ``a`` and ``b`` share; ValueError naming both when they share none.

    The one check that a pair's vocabularies are comparable: 02 (via :func:`match_vocab`) and 03 (on the
    pair's tokenizers, :func:`tiebias.models.sources.check_tokenizers`) both refuse a pair that shares no token.
    """
    pos_b: dict[str, int] = {}
    for i, t in enumerate(b):
        if not t.startswith(_MISSING_TOKEN):
            pos_b.setdefault(t, i)
    seen: set[str] = set()
    ia: list[int] = []
    ib: list[int] = []
    for i, t in enumerate(a):
        j = pos_b.get(t)
        if j is not None and t not in seen:
            seen.add(t)
            ia.append(i)
            ib.append(j)
    if not ia:
        raise ValueError(f"no shared tokens between {a_name!r} and {b_name!r}")
    log.info("match_vocab: kept %d shared tokens (%s: %d, %s: %d)", len(ia), a_name, len(a), b_name, len(b))
    return VocabMatch(torch.tensor(ia), torch.tensor(ib), [a[i] for i in ia])


def token_strings(tokenizer: Any) -> list[str]:
    """Every token string of a tokenizer, by id (what :func:`match_tokens` compares)."""
    return _token_strings(tokenizer, len(tokenizer))


__all__ = ["WHICH", "Embeddings", "VocabMatch", "Which", "check_which", "checkpoint_matrices", "extract", "match_tokens",
           "match_vocab", "require_untied", "token_strings"]
