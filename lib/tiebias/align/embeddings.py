"""Input and output embedding matrices of a model, and matching two models' rows by token string.

``extract`` pulls the two matrices and their token strings out of a saved model folder, a hub id or a
loaded model (reading only the embedding tensors from safetensors when it can, so a large model's other
weights never load); ``checkpoint_matrices`` does it for every checkpoint of a run; ``match_vocab``
lines up the rows of two models that name the same token (the tokenizer side is
:mod:`tiebias.align.tokenizers`).  The metrics live in ``tiebias.align.maps``,
``tiebias.align.neighbours`` and ``tiebias.align.token_stats``.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from tiebias.align.tokenizers import VocabMatch, match_tokens, resolve_tokenizer, token_strings
from tiebias.config.variants import Variant, step_of
from tiebias.models.anatomy import TyingError, check_loaded_tying, is_tied, same_matrix, tying_conflict
from tiebias.run.folder import Run
from tiebias.run.layout import CHECKPOINTS_SUBDIR, CONFIG_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

log = logging.getLogger(__name__)

WHICH: tuple[str, ...] = ("input", "output")
Which = Literal["input", "output"]

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
            if not (path / CONFIG_NAME).is_file():
                raise ValueError(f"source: {label!r} is not a model folder (no config.json)")
            local = path
        elif isinstance(source, Path) or _looks_like_path(str(source)):
            raise ValueError(f"source: model folder {str(source)!r} does not exist")
        else:
            hub_id = str(source)
    else:
        raise ValueError("source must be a model folder, a hub id or a loaded PreTrainedModel, "
                         f"got {type(source).__name__}")

    tok = resolve_tokenizer(tokenizer, local, hub_id, revision, label)  # before any weights: fail fast
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
    return Embeddings(input=inp, output=out, tied=tied, tokens=token_strings(tok, n_tok), source=label)


def from_run(run: Run, variant: str | Variant, seed: int, step: int | None = None) -> Embeddings:
    """A run's model's embeddings (the final model, or its checkpoint at ``step``), tied as the run's variant says.

    A model folder whose config.json or weights were edited or replaced is refused (RunFolderError naming the
    folder, the variant and what to do), whether its config and weights disagree on tying or agree on the wrong one.
    """
    v = Variant.parse(variant)
    try:
        emb = extract(run.model_path(v, seed, step), run.tokenizer_dir)
    except TyingError as exc:
        raise run.not_its_model(v, seed, step, exc.conflict) from None
    if emb.tied != v.tied:
        raise run.not_its_model(v, seed, step, f"the model in this folder is {'untied' if v.tied else 'tied'} (its "
                                f"config.json says tie_word_embeddings={emb.tied}, and its weights agree)")
    return emb


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


def _weights_from_model(model: Any, dtype: torch.dtype, label: str,
                        missing_keys: Any = ()) -> tuple[Tensor, Tensor, bool]:
    """Copies of a loaded model's embedding weights (one tensor when tied), on the CPU in ``dtype``.

    Tied is what the loaded weights say; :class:`tiebias.models.anatomy.TyingError` when the config disagrees
    (``missing_keys``: what transformers reported missing on load)."""
    inp_mod = model.get_input_embeddings()
    out_mod = model.get_output_embeddings()
    if inp_mod is None or out_mod is None:
        raise ValueError(f"{label}: model has no {'input' if inp_mod is None else 'output'} embedding")
    w_in, w_out = inp_mod.weight, out_mod.weight
    tied = check_loaded_tying(model, label, missing_keys)
    inp = w_in.detach().to(device="cpu", dtype=dtype, copy=True)
    out = inp if tied else w_out.detach().to(device="cpu", dtype=dtype, copy=True)
    _check_shapes(inp, out, label)
    return inp, out, tied


def _check_shapes(inp: Tensor, out: Tensor, label: str) -> None:
    """Refuse input and output embeddings that are not both [vocab, width] of one shape."""
    if inp.ndim != 2 or out.ndim != 2 or inp.shape != out.shape:
        raise ValueError(f"{label}: input embedding {tuple(inp.shape)} and output embedding "
                         f"{tuple(out.shape)} do not have the same [vocab, width] shape")


def _weights_from_folder(path: Path, dtype: torch.dtype, label: str) -> tuple[Tensor, Tensor, bool]:
    """Read only the embedding tensors when the folder has safetensors; else load the model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tiebias.run.files import check_safetensors, pickles_refused, read_json

    todo = ("an external model: download or copy it again; a checkpoint of a run: use another step or retrain the "
            "model; a final model: delete its complete.json and train it again (it resumes from its newest good "
            "checkpoint)")
    read_json(path / CONFIG_NAME, todo)  # a damaged file is named, not reported by the loader
    for weights in sorted(path.glob("*.safetensors")):
        check_safetensors(weights, todo)
    config = AutoConfig.from_pretrained(path)
    try:
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
        got = _read_embeddings(path, skeleton, config)
    except TyingError:
        raise
    except (ValueError, KeyError, OSError, RuntimeError, TypeError) as exc:
        log.info("%s: reading embeddings directly failed (%s); loading the whole model", label, exc)
        got = None
    if got is not None:
        inp, out, tied = got
        inp = inp.to(dtype)
        out = inp if tied else out.to(dtype)
        _check_shapes(inp, out, label)
        return inp, out, tied
    with pickles_refused(path, label):
        model, loading = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, low_cpu_mem_usage=True,
                                                              output_loading_info=True)
    try:
        return _weights_from_model(model, dtype, label, loading.get("missing_keys", ()))
    finally:
        del model


def _read_embeddings(path: Path, skeleton: Any, config: Any) -> tuple[Tensor, Tensor, bool] | None:
    """Embedding tensors straight from safetensors, named after the (meta-device) model skeleton.

    None when they cannot be found this way (the caller loads the whole model); :class:`TyingError` when the
    config's tying disagrees with the tensors (a tied config over a checkpoint with an output matrix of its own
    that differs from the input embedding, or an untied one whose two matrices are equal)."""
    from safetensors import safe_open

    inp_mod, out_mod = skeleton.get_input_embeddings(), skeleton.get_output_embeddings()
    if inp_mod is None or out_mod is None:
        return None
    tied = is_tied(skeleton) or is_tied(config)
    params = list(skeleton.named_parameters(remove_duplicate=False))
    in_names = [n for n, p in params if p is inp_mod.weight]
    out_names = [n for n, p in params if p is out_mod.weight]
    index = path / WEIGHTS_INDEX_NAME
    single = path / WEIGHTS_NAME
    if single.is_file():
        with safe_open(str(single), "pt") as f:
            weight_map = {k: single for k in f.keys()}
    elif index.is_file():
        weight_map = {k: path / v for k, v in json.loads(index.read_text())["weight_map"].items()}
    else:
        return None

    keys = _checkpoint_keys(skeleton, list(weight_map))

    def read(names: list[str]) -> list[Tensor]:
        """Every distinct checkpoint tensor named by ``names``, read from its file."""
        found = sorted({keys[n] for n in names if n in keys})
        out = []
        for k in found:
            with safe_open(str(weight_map[k]), "pt") as f:
                out.append(f.get_tensor(k))
        return out

    held = read(in_names + out_names) if tied else read(in_names)[:1] + read(out_names)[:1]
    if len(held) < (1 if tied else 2):
        return None
    conflict = tying_conflict(tied, all(same_matrix(t, held[0]) for t in held[1:]))
    if conflict:
        raise TyingError(str(path), conflict)
    return (held[0], held[0], True) if tied else (held[0], held[1], False)


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
        model, loading = AutoModelForCausalLM.from_pretrained(hub_id, revision=revision, dtype=dtype,
                                                              low_cpu_mem_usage=True, output_loading_info=True)
    except OSError as exc:
        raise ValueError(f"source: {hub_id!r} is neither a local model folder nor a loadable hub id "
                         f"({exc})") from exc
    try:
        return _weights_from_model(model, dtype, hub_id, loading.get("missing_keys", ()))
    finally:
        del model


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


__all__ = ["WHICH", "Embeddings", "VocabMatch", "Which", "check_which", "checkpoint_matrices", "extract", "from_run",
           "match_tokens", "match_vocab", "require_untied", "token_strings"]
