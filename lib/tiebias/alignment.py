"""Embedding matrices and the paper's comparison metrics.

Everything the alignment notebooks need in one place: pulling input/output embedding matrices out of a
saved model (``extract``), matching two vocabularies by token string (``match_vocab``), the Table-1
alignment score under an identity, orthogonal or linear map (``align``/``align_all``/``compare``), the
Table-5 neighbourhood overlap (``knn_overlap``), the Figure-3 drift of a matrix over checkpoints
(``evolution``), the Figure-5 norm-against-frequency view (``norm_frequency``) and frequency-stratified
summaries (``by_frequency``, ``summarise``).

Numerics: the statistics a map is fitted from (column means, Gram and cross-covariance matrices) are
accumulated in float64 over row chunks, so a 50k x 2048 float32 pair never needs a full float64 copy;
the fitted map is applied at the precision of the inputs (float32 inputs: float32 products).
"""

from __future__ import annotations

import json
import logging
import math
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import pandas as pd
import torch
from torch import Tensor

log = logging.getLogger(__name__)

METHODS: tuple[str, ...] = ("identity", "orthogonal", "linear")
WHICH: tuple[str, ...] = ("input", "output")
Which = Literal["input", "output"]
Matrix = Tensor | np.ndarray

_F64 = torch.float64
_EPS64 = torch.finfo(torch.float64).eps
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_MISSING_TOKEN = "\x00missing-id:"  # placeholder for ids the tokenizer cannot name; never matched
_ANCESTOR_LEVELS = 4
_CHUNK_BYTES = 1 << 25  # 32 MiB of float64 per streamed row chunk
_PIVOT_TOL = 1e-10  # Cholesky pivots below this (relative) fall back to a pseudo-inverse
_POLAR_COND = 1e-12  # smallest eigenvalue ratio of C^T C for the eigh route to the polar factor


# --------------------------------------------------------------------------------------------------
# Embeddings and extraction
# --------------------------------------------------------------------------------------------------


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
        _check_which(which, "which")
        return self.input if which == "input" else self.output

    def __repr__(self) -> str:
        return (f"Embeddings(source={self.source!r}, vocab={self.vocab_size}, width={self.width}, "
                f"tied={self.tied}, dtype={self.input.dtype})")


EmbeddingPair = Embeddings


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
    _check_which(which, "which")
    root = Path(model_dir)
    ck = root / "checkpoints" if (root / "checkpoints").is_dir() else root
    found: list[tuple[int, Path]] = []
    for p in ck.iterdir() if ck.is_dir() else []:
        m = re.fullmatch(r"step-(\d+)", p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    if not found:
        raise ValueError(f"model_dir: no checkpoints/step-<N> folders under {str(root)!r}")
    out: list[tuple[int, Tensor]] = []
    for step, p in sorted(found):
        emb = extract(p, dtype=dtype)
        out.append((step, emb.matrix(which)))
    return out


def _check_which(which: str, name: str) -> None:
    if which not in WHICH:
        raise ValueError(f"{name} must be one of {WHICH}, got {which!r}")


def _looks_like_path(s: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else (or ``dir/x`` under an existing dir) is a path."""
    if s.startswith((".", "/", "~")) or s.count("/") > 1 or "\\" in s:
        return True
    return "/" in s and Path(s).parent.is_dir()


def _weights_from_model(model: Any, dtype: torch.dtype, label: str) -> tuple[Tensor, Tensor, bool]:
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
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return bool(getattr(text, "tie_word_embeddings", False))


def _check_shapes(inp: Tensor, out: Tensor, label: str) -> None:
    if inp.ndim != 2 or out.ndim != 2 or inp.shape != out.shape:
        raise ValueError(f"{label}: input embedding {tuple(inp.shape)} and output embedding "
                         f"{tuple(out.shape)} do not have the same [vocab, width] shape")


def _weights_from_folder(path: Path, dtype: torch.dtype, label: str) -> tuple[Tensor, Tensor, bool]:
    """Read only the embedding tensors when the folder has safetensors; else load the model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from .files import check_safetensors, read_json

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
    raw = tok.convert_ids_to_tokens(list(range(n)))
    return [t if isinstance(t, str) else f"{_MISSING_TOKEN}{i}" for i, t in enumerate(raw)]


# --------------------------------------------------------------------------------------------------
# Vocabulary matching
# --------------------------------------------------------------------------------------------------


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
    pos_b: dict[str, int] = {}
    for i, t in enumerate(b.tokens):
        if not t.startswith(_MISSING_TOKEN):
            pos_b.setdefault(t, i)
    seen: set[str] = set()
    ia: list[int] = []
    ib: list[int] = []
    for i, t in enumerate(a.tokens):
        j = pos_b.get(t)
        if j is not None and t not in seen:
            seen.add(t)
            ia.append(i)
            ib.append(j)
    if not ia:
        raise ValueError(f"no shared tokens between {a.source!r} and {b.source!r}")
    log.info("match_vocab: kept %d shared tokens (%s: %d, %s: %d)", len(ia), a.source, len(a.tokens),
             b.source, len(b.tokens))
    return VocabMatch(torch.tensor(ia), torch.tensor(ib), [a.tokens[i] for i in ia])


# --------------------------------------------------------------------------------------------------
# Alignment (Table 1, Figure 1)
# --------------------------------------------------------------------------------------------------


@dataclass(repr=False)
class AlignResult:
    """Mean and per-token cosine after mapping source onto target (``heldout``: out-of-fold scores)."""

    method: str
    mean: float
    per_token: Tensor
    n_tokens: int
    heldout: bool
    folds: int = 0

    def __repr__(self) -> str:
        how = f"{self.folds}-fold held-out" if self.heldout else "in-sample"
        return f"AlignResult({self.method}: mean={self.mean:.4f}, n={self.n_tokens}, {how})"


def align(source: Matrix, target: Matrix, method: str, *, heldout_folds: int = 0,
          seed: int = 0) -> AlignResult:
    """Mean cosine between the mapped source rows and the target rows (the paper's alignment score).

    Both matrices are centred (column means removed), the source is mapped onto the target with
    ``identity`` (no map; equal widths only), ``orthogonal`` (Procrustes: semi-orthogonal W = U V^T from
    the SVD U S V^T of S_c^T T_c, so S_c W ~ T_c; the paper writes the transposed SVD of T_c^T S_c,
    which is the same map) or ``linear`` (least squares S_c M ~ T_c), and each token's mapped row is
    compared with its target row by cosine.  ``heldout_folds=k >= 2`` fits the map and the centring on
    k-1 folds of tokens (seeded shuffle) and scores the remaining fold, for every fold.
    """
    _check_method(method)
    return align_all(source, target, (method,), heldout_folds=heldout_folds, seed=seed)[method]


def align_all(source: Matrix, target: Matrix, methods: Sequence[str] = METHODS, *, heldout_folds: int = 0,
              seed: int = 0) -> dict[str, AlignResult]:
    """``align`` for several methods at once, sharing the passes over the data (same results)."""
    methods = tuple(dict.fromkeys(methods))
    if not methods:
        raise ValueError(f"methods must name at least one of {METHODS}")
    for m in methods:
        _check_method(m)
    S = _as_matrix(source, "source")
    T = _as_matrix(target, "target")
    n = S.shape[0]
    if T.shape[0] != n:
        raise ValueError(f"source and target must have the same number of rows (tokens): "
                         f"{n} vs {T.shape[0]}; match the vocabularies first (match_vocab)")
    if n < 2:
        raise ValueError(f"source: need at least 2 tokens to centre and align, got {n}")
    if "identity" in methods and S.shape[1] != T.shape[1]:
        raise ValueError(f"method 'identity' needs equal widths, got source width {S.shape[1]} and target "
                         f"width {T.shape[1]}; use 'orthogonal' or 'linear'")
    k = _check_folds(heldout_folds, n)
    cdt = _F64 if _F64 in (S.dtype, T.dtype) else torch.float32
    chunk = max(256, _CHUNK_BYTES // (8 * max(S.shape[1], T.shape[1])))
    need_cross = "orthogonal" in methods or "linear" in methods
    need_gram = "linear" in methods
    ref_s, ref_t = _column_mean(S, chunk), _column_mean(T, chunk)
    scores = {m: torch.full((n,), math.nan, dtype=_F64) for m in methods}

    if k == 0:
        if need_cross:
            st = _accumulate(S, T, None, ref_s, ref_t, need_gram, need_cross, chunk)
        else:  # identity in-sample: the centring is the column mean itself
            st = _Stats(n, torch.zeros_like(ref_s), torch.zeros_like(ref_t), None, None)
        mean_s, mean_t, maps = _fit(st, methods, ref_s, ref_t)
        _score(S, T, None, mean_s, mean_t, maps, cdt, chunk, scores)
    else:
        gen = torch.Generator().manual_seed(int(seed))
        perm = torch.randperm(n, generator=gen)
        folds = [perm[f::k].sort().values for f in range(k)]
        stats = [_accumulate(S, T, rows, ref_s, ref_t, need_gram, need_cross, chunk) for rows in folds]
        for f, rows in enumerate(folds):
            st = _combine([s for g, s in enumerate(stats) if g != f])
            mean_s, mean_t, maps = _fit(st, methods, ref_s, ref_t)
            _score(S, T, rows, mean_s, mean_t, maps, cdt, chunk, scores)
    return {m: AlignResult(method=m, mean=float(scores[m].mean()), per_token=scores[m], n_tokens=n,
                           heldout=k > 0, folds=k) for m in methods}


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _check_folds(k: int, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"heldout_folds must be an int (0 = in-sample, >= 2 = k-fold), got {k!r}")
    k = int(k)
    if k == 0:
        return 0
    if k < 2:
        raise ValueError(f"heldout_folds must be 0 (in-sample) or >= 2, got {k}")
    if k > n:
        raise ValueError(f"heldout_folds={k} exceeds the number of tokens ({n})")
    if n - math.ceil(n / k) < 2:
        raise ValueError(f"heldout_folds={k} leaves fewer than 2 fitting tokens out of {n}")
    return k


def _as_matrix(x: Any, name: str) -> Tensor:
    """A 2-D, non-empty, finite floating tensor (numpy arrays are wrapped without a copy)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [tokens, width] matrix, got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)})")
    x = x.detach()
    if not x.is_floating_point() or x.dtype in (torch.float16, torch.bfloat16):
        x = x.to(torch.float32 if x.is_floating_point() else _F64)
    step = max(1, _CHUNK_BYTES // (8 * x.shape[1]))  # isfinite on the whole matrix allocates ~1.7x it
    for blk in _blocks(x, None, step):
        # a NaN/inf entry makes the block sum non-finite; only then (or on overflow) check entrywise
        if not math.isfinite(float(blk.sum())) and not bool(torch.isfinite(blk).all()):
            raise ValueError(f"{name} contains NaN or infinite values")
    return x


def _blocks(x: Tensor, rows: Tensor | None, chunk: int) -> Iterator[Tensor]:
    """Row blocks of ``x`` (all rows, or the given row indices) in its own dtype; may be views."""
    if rows is None:
        for i in range(0, x.shape[0], chunk):
            yield x[i:i + chunk]
    else:
        for i in range(0, rows.numel(), chunk):
            yield x[rows[i:i + chunk]]


def _rows(x: Tensor, rows: Tensor | None, chunk: int) -> Iterator[Tensor]:
    """Row blocks as fresh float64 tensors (safe to modify in place)."""
    for blk in _blocks(x, rows, chunk):
        yield blk.to(_F64, copy=True)


def _column_mean(x: Tensor, chunk: int) -> Tensor:
    total = torch.zeros(x.shape[1], dtype=_F64, device=x.device)
    for blk in _blocks(x, None, chunk):
        total += blk.sum(0).to(_F64)  # native-dtype reduction: a float64 upcast first is 4x slower
    return total / x.shape[0]


@dataclass
class _Stats:
    """Sums about a fixed reference point: n, sum(s-r), sum(t-r), sum(s-r)(s-r)^T, sum(s-r)(t-r)^T."""

    n: int
    sum_s: Tensor
    sum_t: Tensor
    gram: Tensor | None
    cross: Tensor | None


def _accumulate(S: Tensor, T: Tensor, rows: Tensor | None, ref_s: Tensor, ref_t: Tensor, need_gram: bool,
                need_cross: bool, chunk: int) -> _Stats:
    ds, dt = S.shape[1], T.shape[1]
    dev = S.device
    sum_s = torch.zeros(ds, dtype=_F64, device=dev)
    sum_t = torch.zeros(dt, dtype=_F64, device=dev)
    gram = torch.zeros(ds, ds, dtype=_F64, device=dev) if need_gram else None
    cross = torch.zeros(ds, dt, dtype=_F64, device=dev) if need_cross else None
    for xs, xt in zip(_rows(S, rows, chunk), _rows(T, rows, chunk), strict=True):
        xs -= ref_s
        xt -= ref_t
        sum_s += xs.sum(0)
        sum_t += xt.sum(0)
        if gram is not None:
            gram.addmm_(xs.T, xs)
        if cross is not None:
            cross.addmm_(xs.T, xt)
    n = S.shape[0] if rows is None else int(rows.numel())
    return _Stats(n, sum_s, sum_t, gram, cross)


def _combine(parts: list[_Stats]) -> _Stats:
    def total(xs: list[Tensor | None]) -> Tensor | None:
        return None if xs[0] is None else torch.stack(xs).sum(0)  # type: ignore[arg-type]

    return _Stats(sum(p.n for p in parts), torch.stack([p.sum_s for p in parts]).sum(0),
                  torch.stack([p.sum_t for p in parts]).sum(0), total([p.gram for p in parts]),
                  total([p.cross for p in parts]))


def _fit(st: _Stats, methods: Sequence[str], ref_s: Tensor,
         ref_t: Tensor) -> tuple[Tensor, Tensor, dict[str, Tensor | None]]:
    """Column means and the requested maps, from the sums of the fitting rows."""
    m_s, m_t = st.sum_s / st.n, st.sum_t / st.n
    maps: dict[str, Tensor | None] = {}
    cross = None if st.cross is None else st.cross - st.n * torch.outer(m_s, m_t)
    for m in methods:
        if m == "identity":
            maps[m] = None
        elif m == "orthogonal":
            assert cross is not None
            maps[m] = _procrustes(cross)
        else:
            assert st.gram is not None and cross is not None
            gram = st.gram - st.n * torch.outer(m_s, m_s)
            maps[m] = _least_squares(gram, cross, st.n)
    return ref_s + m_s, ref_t + m_t, maps


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run small dense decompositions single-threaded.

    Threaded LAPACK eigh/svd on a d x d matrix is latency-bound; on a 2-core machine with other work
    running it measured 10-20x slower than one thread (27 s vs 1.4 s for d=2048).  torch's thread count
    is process-wide, so it is restored right after.
    """
    old = torch.get_num_threads()
    if old == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _procrustes(C: Tensor) -> Tensor:
    """Semi-orthogonal W maximising trace(W^T C): the polar factor U V^T of C = U S V^T.

    Computed as C (C^T C)^(-1/2) by an eigendecomposition of the smaller Gram matrix (several times
    faster than an SVD on CPU); falls back to the SVD when C is (nearly) rank-deficient.
    """
    ds, dt = C.shape
    if ds < dt:
        return _procrustes(C.T).T
    with _one_thread():
        lam, V = torch.linalg.eigh(C.T @ C)
    if lam[-1] > 0 and lam[0] > _POLAR_COND * lam[-1]:
        W = ((C @ V) / lam.sqrt()) @ V.T
        eye = torch.eye(dt, dtype=C.dtype, device=C.device)
        if float((W.T @ W - eye).abs().max()) < 1e-9:
            return W
    with _one_thread():
        U, _, Vh = torch.linalg.svd(C, full_matrices=False)
    return U @ Vh


def _least_squares(G: Tensor, C: Tensor, n: int) -> Tensor:
    """Minimum-norm M solving G M = C (normal equations of S_c M ~ T_c).

    Cholesky when G is comfortably positive definite; otherwise an eigendecomposition pseudo-inverse
    that drops directions with eigenvalue below max(n, d) * eps * 16 of the largest (numerically zero
    in a float64 Gram matrix), which reproduces ``numpy.linalg.lstsq`` on rank-deficient data.
    """
    d = G.shape[0]
    scale = float(G.diagonal().max())
    if scale <= 0:
        return torch.zeros_like(C)
    with _one_thread():
        L, info = torch.linalg.cholesky_ex(G)
        if int(info) == 0 and float(L.diagonal().square().min()) > _PIVOT_TOL * scale:
            return torch.cholesky_solve(C, L)
        lam, Q = torch.linalg.eigh(G)
    keep = lam > lam[-1] * max(n, d) * _EPS64 * 16
    Qk = Q[:, keep]
    return Qk @ ((Qk.T @ C) / lam[keep].unsqueeze(1))


def _score(S: Tensor, T: Tensor, rows: Tensor | None, mean_s: Tensor, mean_t: Tensor,
           maps: dict[str, Tensor | None], cdt: torch.dtype, chunk: int, out: dict[str, Tensor]) -> None:
    """Per-token cosine of mapped source and target rows, written into ``out[method][rows]``.

    Works at the compute precision ``cdt`` (float32 unless an input is float64): centring and mapping a
    float32 row in float32 loses nothing the row itself had.
    """
    maps_c = {m: (None if w is None else w.to(cdt)) for m, w in maps.items()}
    ms, mt = mean_s.to(cdt), mean_t.to(cdt)
    start = 0
    for xs, xt in zip(_blocks(S, rows, chunk), _blocks(T, rows, chunk), strict=True):
        xs = xs.to(cdt) - ms
        xt = xt.to(cdt) - mt
        stop = start + xs.shape[0]
        where = slice(start, stop) if rows is None else rows[start:stop]
        for m, w in maps_c.items():
            mapped = xs if w is None else xs @ w
            out[m][where] = _cosine_rows(mapped, xt).cpu()
        start = stop


def _cosine_rows(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise cosine (sums in the inputs' dtype, returned as float64); a zero row scores 0."""
    dot = (a * b).sum(1).to(_F64)
    den = torch.linalg.vector_norm(a, dim=1).to(_F64) * torch.linalg.vector_norm(b, dim=1).to(_F64)
    return torch.where(den > 0, dot / den.clamp_min(torch.finfo(_F64).tiny), torch.zeros_like(dot))


# --------------------------------------------------------------------------------------------------
# Neighbourhoods (Table 5)
# --------------------------------------------------------------------------------------------------


def knn_overlap(a: Matrix, b: Matrix, k: int = 10, *, chunk: int = 4096) -> tuple[float, Tensor]:
    """Mean and per-token overlap |N_k^A(i) & N_k^B(i)| / k of cosine nearest neighbours (self excluded).

    Rows of ``a`` and ``b`` must be the same tokens; widths may differ.  When one matrix takes part in
    several comparisons (Table 5), compute its ``neighbours`` once and use ``neighbour_overlap``.
    """
    A = _as_matrix(a, "a")
    B = _as_matrix(b, "b")
    if B.shape[0] != A.shape[0]:
        raise ValueError(f"a and b must have the same number of rows (tokens): {A.shape[0]} vs {B.shape[0]}")
    return neighbour_overlap(neighbours(A, k, chunk=chunk), neighbours(B, k, chunk=chunk))


def neighbours(m: Matrix, k: int = 10, *, chunk: int = 4096) -> Tensor:
    """Ids of each row's k most cosine-similar other rows, [V, k] (order within a row not meaningful).

    Similarities are computed in ``chunk x chunk`` blocks of the upper triangle, each block serving its
    rows and its columns: half the work of the full V x V product, memory O(V k + chunk^2) beyond the
    input (rows are normalised block by block, not copied whole).
    """
    x = _as_matrix(m, "m")
    n = x.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n - 1:
        raise ValueError(f"k must be an int between 1 and n_tokens-1={n - 1}, got {k!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    k, chunk = int(k), int(chunk)
    if not x.is_floating_point() or x.dtype not in (torch.float32, _F64):
        x = x.to(torch.float32)
    norms = torch.linalg.vector_norm(x, dim=1)
    inv = torch.where(norms > 0, 1 / norms.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(norms))
    vals = torch.full((n, k), -math.inf, dtype=x.dtype, device=x.device)
    idx = torch.full((n, k), -1, dtype=torch.long, device=x.device)

    def merge(r0: int, sims: Tensor, c0: int) -> None:
        """Fold ``sims[r, c] = cos(r0 + r, c0 + c)`` into the running top-k of rows r0.."""
        bv, bi = sims.topk(min(k, sims.shape[1]), dim=1)
        r1 = r0 + sims.shape[0]
        top, pos = torch.cat([vals[r0:r1], bv], 1).topk(k, dim=1)
        idx[r0:r1] = torch.cat([idx[r0:r1], bi + c0], 1).gather(1, pos)
        vals[r0:r1] = top

    for i0 in range(0, n, chunk):
        xi = x[i0:i0 + chunk] * inv[i0:i0 + chunk, None]
        for j0 in range(i0, n, chunk):
            xj = xi if j0 == i0 else x[j0:j0 + chunk] * inv[j0:j0 + chunk, None]
            sims = xi @ xj.T
            if j0 == i0:
                sims.fill_diagonal_(-math.inf)
            merge(i0, sims, j0)
            if j0 != i0:
                merge(j0, sims.T.contiguous(), i0)  # topk along contiguous rows is ~2x faster
    return idx


def neighbour_overlap(idx_a: Tensor, idx_b: Tensor) -> tuple[float, Tensor]:
    """Mean and per-token fraction of shared ids between two [V, k] neighbour lists."""
    if idx_a.ndim != 2 or idx_a.shape != idx_b.shape:
        raise ValueError(f"idx_a and idx_b must be [tokens, k] of one shape, got {tuple(idx_a.shape)} and "
                         f"{tuple(idx_b.shape)}")
    n, k = idx_a.shape
    if n == 0 or k == 0:
        raise ValueError("idx_a is empty")
    per = torch.empty(n, dtype=_F64)
    step = max(1, (1 << 24) // (k * k))
    for i in range(0, n, step):
        x, y = idx_a[i:i + step], idx_b[i:i + step]
        per[i:i + step] = (x.unsqueeze(2) == y.unsqueeze(1)).any(2).sum(1).to(_F64) / k
    return float(per.mean()), per


# --------------------------------------------------------------------------------------------------
# Norms, frequency, evolution (Figures 3 and 5)
# --------------------------------------------------------------------------------------------------


def row_norms(m: Matrix) -> Tensor:
    """L2 norm of every row, in float64."""
    x = _as_matrix(m, "m")
    chunk = max(256, _CHUNK_BYTES // (8 * x.shape[1]))
    return torch.cat([torch.linalg.vector_norm(blk, dim=1) for blk in _rows(x, None, chunk)]).cpu()


def load_counts(counts: Any, vocab_size: int) -> np.ndarray:
    """Token counts as an int64 array of length ``vocab_size`` indexed by token id.

    Accepts an array-like of that length, a DataFrame with ``id`` and ``count`` columns, or the path of
    a run's ``token_frequencies.csv``; ids missing from a table count 0.
    """
    if isinstance(counts, (str, Path)):
        p = Path(counts)
        if not p.is_file():
            raise ValueError(f"counts: no such file {str(p)!r}")
        counts = pd.read_csv(p)
    if isinstance(counts, pd.DataFrame):
        if not {"id", "count"} <= set(counts.columns):
            raise ValueError(f"counts table needs 'id' and 'count' columns, has {list(counts.columns)}")
        ids = counts["id"].to_numpy(dtype=np.int64)
        cnt = counts["count"].to_numpy(dtype=np.float64)
        if (ids < 0).any() or len(np.unique(ids)) != len(ids):
            raise ValueError("counts table: ids must be unique and non-negative")
        over = ids >= vocab_size
        if (cnt[over] > 0).any():
            raise ValueError(f"counts table has non-zero counts for ids >= vocab_size={vocab_size}")
        arr = np.zeros(vocab_size, dtype=np.float64)
        arr[ids[~over]] = cnt[~over]
    else:
        arr = counts.detach().cpu().numpy() if isinstance(counts, Tensor) else np.asarray(counts)
        arr = arr.astype(np.float64, copy=False).reshape(-1)
        if arr.shape[0] != vocab_size:
            raise ValueError(f"counts has {arr.shape[0]} entries, expected one per token ({vocab_size})")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError("counts must be finite and non-negative")
    return arr.astype(np.int64)


@dataclass(repr=False)
class NormFrequency:
    """Per-token norm against log10 count (``table``) and their Spearman rank correlation.

    ``spearman`` uses the tokens seen at least once (log10 of 0 is undefined); ``spearman_all`` also
    ranks the unseen tokens (tied, lowest).
    """

    table: pd.DataFrame
    spearman: float
    pvalue: float
    spearman_all: float
    n_seen: int
    n_unseen: int

    def __repr__(self) -> str:
        return (f"NormFrequency(spearman={self.spearman:.4f} over {self.n_seen} seen tokens, "
                f"all={self.spearman_all:.4f}, unseen={self.n_unseen})")


def norm_frequency(emb_matrix: Matrix, counts: Any, *, tokens: Sequence[str] | None = None) -> NormFrequency:
    """Row norm and log10 corpus count of every token (Figure 5), with the rank correlation."""
    from scipy.stats import spearmanr

    norms = row_norms(emb_matrix).numpy()
    c = load_counts(counts, norms.shape[0])
    seen = c > 0
    with np.errstate(divide="ignore"):
        logf = np.where(seen, np.log10(np.maximum(c, 1)), np.nan)
    table = pd.DataFrame({"id": np.arange(norms.shape[0]), "count": c, "log10_freq": logf, "norm": norms,
                          "seen": seen})
    if tokens is not None:
        if len(tokens) != norms.shape[0]:
            raise ValueError(f"tokens has {len(tokens)} entries, expected {norms.shape[0]}")
        table.insert(1, "token", list(tokens))
    rho, p = (spearmanr(logf[seen], norms[seen]) if seen.sum() > 2 else (math.nan, math.nan))
    rho_all = spearmanr(c, norms)[0] if norms.shape[0] > 2 else math.nan
    return NormFrequency(table, float(rho), float(p), float(rho_all), int(seen.sum()), int((~seen).sum()))


def by_frequency(per_token_scores: Any, counts: Any, bins: int = 5) -> pd.DataFrame:
    """Mean/std/count of a per-token score in frequency-quantile bins, rarest first.

    Seen tokens are split into ``bins`` quantile bins of their count (ties stay together, so bins may be
    fewer or uneven); tokens never seen form their own ``unseen`` bin.  NaN scores are ignored.
    """
    s = per_token_scores.detach().cpu().numpy() if isinstance(per_token_scores, Tensor) \
        else np.asarray(per_token_scores)
    s = s.astype(np.float64).reshape(-1)
    if s.size == 0:
        raise ValueError("per_token_scores is empty")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive int, got {bins!r}")
    c = load_counts(counts, s.shape[0])
    seen = c > 0
    labels = np.full(s.shape[0], "unseen", dtype=object)
    if seen.any():
        ranks = pd.Series(c[seen]).rank(method="average")
        codes = pd.qcut(ranks, q=min(bins, int(seen.sum())), labels=False, duplicates="drop").to_numpy()
        labels[seen] = [f"q{int(q) + 1}" for q in codes]
    df = pd.DataFrame({"bin": labels, "count": c, "score": s})
    order = ["unseen"] + sorted({x for x in labels if x != "unseen"}, key=lambda q: int(q[1:]))
    rows = []
    for b in order:
        g = df[df["bin"] == b]
        if g.empty:
            continue
        sc = g["score"].dropna()
        rows.append({"bin": b, "count_min": int(g["count"].min()), "count_max": int(g["count"].max()),
                     "n": int(sc.size), "mean": float(sc.mean()) if sc.size else math.nan,
                     "std": float(sc.std(ddof=1)) if sc.size > 1 else math.nan})
    out = pd.DataFrame(rows)
    out["sem"] = out["std"] / np.sqrt(out["n"].clip(lower=1))
    return out


def evolution(checkpoints: Sequence[tuple[int, Matrix]]) -> pd.DataFrame:
    """Drift of one matrix over training (Figure 3), one row per checkpoint sorted by step.

    ``cos_to_init``: mean per-token cosine to the earliest checkpoint (step 0 when the run saved its
    initialisation); ``cos_to_prev``: to the previous checkpoint; ``norm_change``: relative change of
    the Frobenius norm, ||W_t|| / ||W_0|| - 1; ``dist_to_init``: ||W_t - W_0|| / ||W_0||.
    """
    if len(checkpoints) == 0:
        raise ValueError("checkpoints is empty")
    items = sorted(((int(s), _as_matrix(m, f"checkpoints[step={s}]")) for s, m in checkpoints),
                   key=lambda t: t[0])
    steps = [s for s, _ in items]
    if len(set(steps)) != len(steps):
        raise ValueError(f"checkpoints: duplicate steps in {steps}")
    shape0 = items[0][1].shape
    for s, m in items:
        if m.shape != shape0:
            raise ValueError(f"checkpoints: step {s} has shape {tuple(m.shape)}, step {steps[0]} has "
                             f"{tuple(shape0)}")
    chunk = max(256, _CHUNK_BYTES // (8 * shape0[1]))
    cdt = _F64 if any(m.dtype == _F64 for _, m in items) else torch.float32
    w0 = items[0][1]
    rows = []
    prev: Tensor | None = None
    norm0 = 0.0
    for s, m in items:
        cos0 = cosp = sq = sqd = 0.0
        prev_blocks = _blocks(prev, None, chunk) if prev is not None else None
        for xm, x0 in zip(_blocks(m, None, chunk), _blocks(w0, None, chunk), strict=True):
            # row reductions at the input precision, summed over rows in float64
            xm, x0 = xm.to(cdt), x0.to(cdt)
            cos0 += float(_cosine_rows(xm, x0).sum())
            if prev_blocks is not None:
                cosp += float(_cosine_rows(xm, next(prev_blocks).to(cdt)).sum())
            sq += float(torch.linalg.vector_norm(xm, dim=1).to(_F64).square().sum())
            sqd += float(torch.linalg.vector_norm(xm - x0, dim=1).to(_F64).square().sum())
        if prev is None:
            norm0 = math.sqrt(sq)
        n = m.shape[0]
        rows.append({"step": s, "cos_to_init": cos0 / n,
                     "cos_to_prev": math.nan if prev is None else cosp / n,
                     "norm_change": math.sqrt(sq) / norm0 - 1 if norm0 > 0 else math.nan,
                     "dist_to_init": math.sqrt(sqd) / norm0 if norm0 > 0 else math.nan})
        prev = m
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------------
# Table rows and summaries
# --------------------------------------------------------------------------------------------------


def check_knn_k(knn_k: Any, n_tokens: int | None = None, name: str = "knn_k") -> int | None:
    """Validate a neighbourhood size: None (no KNN column) or an int in 1..n_tokens-1; errors name ``name``."""
    if knn_k is None:
        return None
    top = f"{n_tokens - 1}" if n_tokens is not None else "n_tokens - 1"
    if isinstance(knn_k, bool) or not isinstance(knn_k, (int, np.integer)) or knn_k < 1 or (
            n_tokens is not None and knn_k > n_tokens - 1):
        raise ValueError(f"{name}: {knn_k!r} is not allowed; need None (no KNN overlap) or an integer between 1 "
                         f"and {top} (the shared tokens minus one)")
    return int(knn_k)


def compare(a: Embeddings, b: Embeddings, which_a: Which, which_b: Which, methods: Sequence[str] = METHODS,
            heldout_folds: int = 0, *, seed: int = 0, allow_vocab_mismatch: bool = True,
            knn_k: int | None = None, return_scores: bool = False) -> dict[str, Any]:
    """One Table-1 row: ``a.<which_a>`` mapped onto ``b.<which_b>`` on their shared tokens.

    Method columns hold the mean cosine; ``identity`` is NaN (not an error) when the widths differ, so a
    row for a pair like Qwen3-4B/8B still fills.  ``knn_k`` adds a ``knn@k`` column (Table 5).
    ``return_scores`` adds ``per_token`` ({method: Tensor}) and ``token_ids`` (rows of ``a``) for
    histograms and ``by_frequency(row["per_token"][m], counts[row["token_ids"]])``.
    """
    _check_which(which_a, "which_a")
    _check_which(which_b, "which_b")
    methods = tuple(dict.fromkeys(methods))
    for m in methods:
        _check_method(m)
    check_knn_k(knn_k)
    ia, ib, _ = match_vocab(a, b, allow=allow_vocab_mismatch)
    check_knn_k(knn_k, int(ia.numel()))
    S = a.matrix(which_a)
    T = b.matrix(which_b)
    if ia.numel() != S.shape[0] or not bool((ia == torch.arange(S.shape[0])).all()):
        S = S[ia]
    if ib.numel() != T.shape[0] or not bool((ib == torch.arange(T.shape[0])).all()):
        T = T[ib]
    run = [m for m in methods if not (m == "identity" and S.shape[1] != T.shape[1])]
    res = align_all(S, T, run, heldout_folds=heldout_folds, seed=seed) if run else {}
    row: dict[str, Any] = {"source": a.source, "source_matrix": which_a, "target": b.source,
                           "target_matrix": which_b, "source_tied": a.tied, "target_tied": b.tied,
                           "n_tokens": int(ia.numel()), "vocab_source": a.vocab_size,
                           "vocab_target": b.vocab_size, "heldout_folds": int(heldout_folds)}
    for m in methods:
        row[m] = res[m].mean if m in res else math.nan
    if knn_k is not None:
        row[f"knn@{knn_k}"] = knn_overlap(S, T, knn_k)[0]
    if return_scores:
        row["per_token"] = {m: r.per_token for m, r in res.items()}
        row["token_ids"] = ia
    return row


class Summary(NamedTuple):
    """Mean, sample std, n and a two-sided t confidence interval for the mean."""

    mean: float
    std: float
    n: int
    ci_low: float
    ci_high: float


def summarise(values: Any, *, level: float = 0.95) -> Summary:
    """Mean +- t-interval of repeated measurements (e.g. one score over seeds: the noise floor)."""
    from scipy.stats import t as student_t

    v = values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values, dtype=np.float64)
    v = v.astype(np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("values is empty")
    if not np.isfinite(v).all():
        raise ValueError("values contains NaN or infinite entries")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    mean = float(v.mean())
    if v.size == 1:
        return Summary(mean, math.nan, 1, math.nan, math.nan)
    std = float(v.std(ddof=1))
    half = float(student_t.ppf(0.5 + level / 2, df=v.size - 1)) * std / math.sqrt(v.size)
    return Summary(mean, std, int(v.size), mean - half, mean + half)


class BootstrapCI(NamedTuple):
    """Mean of per-item values with a percentile bootstrap confidence interval (items resampled)."""

    mean: float
    ci_low: float
    ci_high: float
    n: int
    n_boot: int
    level: float


def bootstrap_mean(values: Any, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> BootstrapCI:
    """Percentile bootstrap CI for the mean of per-item values (e.g. per-token score differences of one pair).

    Items are resampled with replacement ``n_boot`` times (deterministic for ``seed``), in chunks of a
    few million draws so 150k tokens x 2000 resamples stays small in memory. With one model pair there
    is no seed spread; this says how much the mean depends on which tokens happen to be scored.
    """
    v = values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values, dtype=np.float64)
    v = v.astype(np.float64).reshape(-1)
    if v.size < 2:
        raise ValueError(f"values: need at least 2 items to bootstrap, got {v.size}")
    if not np.isfinite(v).all():
        raise ValueError("values contains NaN or infinite entries")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 100:
        raise ValueError(f"n_boot: must be an int >= 100, got {n_boot!r}")
    rng = np.random.default_rng(seed)
    per_chunk = max(1, (1 << 22) // v.size)
    means = np.empty(n_boot)
    for start in range(0, n_boot, per_chunk):
        b = min(per_chunk, n_boot - start)
        means[start:start + b] = v[rng.integers(0, v.size, (b, v.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return BootstrapCI(float(v.mean()), float(lo), float(hi), int(v.size), n_boot, float(level))


__all__ = [
    "METHODS", "WHICH", "AlignResult", "BootstrapCI", "bootstrap_mean", "EmbeddingPair", "Embeddings", "NormFrequency", "Summary",
    "VocabMatch", "align", "align_all", "by_frequency", "checkpoint_matrices", "compare", "evolution",
    "extract", "knn_overlap", "load_counts", "match_vocab", "neighbour_overlap", "neighbours",
    "norm_frequency", "require_untied", "row_norms", "summarise",
]
