"""A model's input and output embedding matrices with their token strings, from a folder (only the two tensors read
from safetensors when possible), a hub id or a loaded model, tying checked on the weights; rows matched by token."""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tiebias.align.tokenizers import resolve_tokenizer, token_strings
from tiebias.config.variants import Variant, step_of
from tiebias.models.anatomy import TyingError, check_loaded_tying, is_tied, same_matrix, tying_conflict
from tiebias.run.folder import Run
from tiebias.run.layout import CHECKPOINTS_SUBDIR, CONFIG_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

log = logging.getLogger(__name__)


@dataclass(eq=False, repr=False)
class Embeddings:
    """Input and output embedding matrices of one model, rows indexed by token id (one tensor when ``tied``)."""

    input: Tensor
    output: Tensor
    tied: bool
    tokens: list[str]
    source: str

    @property
    def vocab_size(self) -> int:
        """Number of rows (tokens) kept."""
        return int(self.input.shape[0])

    def matrix(self, which: str) -> Tensor:
        """The ``'input'`` or ``'output'`` matrix."""
        if which not in ("input", "output"):
            raise ValueError(f"which must be 'input' or 'output', got {which!r}")
        return self.input if which == "input" else self.output

    def __repr__(self) -> str:
        return (f"Embeddings(source={self.source!r}, vocab={self.vocab_size}, width={self.input.shape[1]}, "
                f"tied={self.tied}, dtype={self.input.dtype})")


def extract(source: Any, tokenizer: Any = None, *, revision: str | None = None,
            dtype: torch.dtype = torch.float32) -> Embeddings:
    """Input/output embedding matrices and token strings of a model folder, hub id or loaded model. The tokenizer is
    ``tokenizer``, else the folder's or its nearest ancestor's (so a run's checkpoint works); padding rows are dropped."""
    from transformers import PreTrainedModel

    if isinstance(source, PreTrainedModel):
        name = str(getattr(source, "name_or_path", "") or "")
        label = name or type(source).__name__
    elif isinstance(source, (str, Path)):
        name = label = str(source)
        path = Path(source).expanduser()
        if path.is_dir() and not (path / CONFIG_NAME).is_file():
            raise ValueError(f"source: {label!r} is not a model folder (no config.json)")
        # a hub id is ``name`` or ``org/name``; anything else (or ``dir/x`` under an existing dir) is a path
        if not path.is_dir() and (isinstance(source, Path) or name.startswith((".", "/", "~")) or "\\" in name
                                  or name.count("/") > 1 or ("/" in name and Path(name).parent.is_dir())):
            raise ValueError(f"source: model folder {name!r} does not exist")
    else:
        raise ValueError("source must be a model folder, a hub id or a loaded PreTrainedModel, "
                         f"got {type(source).__name__}")
    local = Path(name).expanduser() if name and Path(name).expanduser().is_dir() else None
    hub_id = name if name and local is None else None
    tok = resolve_tokenizer(tokenizer, local, hub_id, revision, label)  # before any weights: fail fast
    if isinstance(source, PreTrainedModel):
        inp, out, tied = _weights_from_model(source, dtype, label)
    elif local is not None:
        inp, out, tied = _weights_from_folder(local, dtype, label)
    else:
        inp, out, tied = _load_whole(name, dtype, label, revision)
    if inp.ndim != 2 or inp.shape != out.shape:
        raise ValueError(f"{label}: input embedding {tuple(inp.shape)} and output embedding "
                         f"{tuple(out.shape)} do not have the same [vocab, width] shape")
    n_tok, n_rows = len(tok), int(inp.shape[0])
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
    """A run's model's embeddings (final, or checkpoint ``step``), refused unless tied as the run's variant says."""
    v = Variant.parse(variant)
    try:
        emb = extract(run.model_path(v, seed, step), run.tokenizer_dir)
    except TyingError as exc:
        raise run.not_its_model(v, seed, step, exc.conflict) from None
    if emb.tied != v.tied:
        raise run.not_its_model(v, seed, step, f"the model in this folder is {'untied' if v.tied else 'tied'} (its "
                                f"config.json says tie_word_embeddings={emb.tied}, and its weights agree)")
    return emb


def checkpoint_matrices(model_dir: str | Path, which: str = "input", *,
                        dtype: torch.dtype = torch.float32) -> list[tuple[int, Tensor]]:
    """``(step, matrix)`` for every ``checkpoints/step-<N>/`` of a model folder (or of the checkpoints folder)."""
    root = Path(model_dir)
    ck = root / CHECKPOINTS_SUBDIR if (root / CHECKPOINTS_SUBDIR).is_dir() else root
    found = [(step_of(p), p) for p in (ck.iterdir() if ck.is_dir() else []) if p.is_dir() and step_of(p) is not None]
    if not found:
        raise ValueError(f"model_dir: no checkpoints/step-<N> folders under {str(root)!r}")
    return [(step, extract(p, dtype=dtype).matrix(which)) for step, p in sorted(found)]


def _weights_from_model(model: Any, dtype: torch.dtype, label: str,
                        missing_keys: Any = ()) -> tuple[Tensor, Tensor, bool]:
    """Copies of a loaded model's embedding weights on the CPU in ``dtype`` (one when tied, as the weights say)."""
    inp_mod, out_mod = model.get_input_embeddings(), model.get_output_embeddings()
    if inp_mod is None or out_mod is None:
        raise ValueError(f"{label}: model has no {'input' if inp_mod is None else 'output'} embedding")
    tied = check_loaded_tying(model, label, missing_keys)
    inp = inp_mod.weight.detach().to(device="cpu", dtype=dtype, copy=True)
    out = inp if tied else out_mod.weight.detach().to(device="cpu", dtype=dtype, copy=True)
    return inp, out, tied


def _weights_from_folder(path: Path, dtype: torch.dtype, label: str) -> tuple[Tensor, Tensor, bool]:
    """Only the embedding tensors, read from the folder's safetensors under the names of a meta-device skeleton (tying
    checked on them: :class:`TyingError`); the whole model when they are not found this way."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    from tiebias.run.files import check_safetensors, read_json

    todo = ("an external model: download or copy it again; a checkpoint of a run: use another step or retrain the "
            "model; a final model: delete its complete.json and train it again (it resumes from its newest good "
            "checkpoint)")
    read_json(path / CONFIG_NAME, todo)  # a damaged file is named, not reported by the loader
    for weights in sorted(path.glob("*.safetensors")):
        check_safetensors(weights, todo)
    config = AutoConfig.from_pretrained(path)
    index, single = path / WEIGHTS_INDEX_NAME, path / WEIGHTS_NAME
    held, tied = [], False
    try:
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
        inp_mod, out_mod = skeleton.get_input_embeddings(), skeleton.get_output_embeddings()
        if inp_mod is not None and out_mod is not None and (single.is_file() or index.is_file()):
            tied = is_tied(skeleton) or is_tied(config)
            params = list(skeleton.named_parameters(remove_duplicate=False))
            in_names = [n for n, p in params if p is inp_mod.weight]
            out_names = [n for n, p in params if p is out_mod.weight]
            if single.is_file():
                with safe_open(str(single), "pt") as f:
                    weight_map = {k: single for k in f.keys()}
            else:
                weight_map = {k: path / v for k, v in json.loads(index.read_text())["weight_map"].items()}
            keys = _checkpoint_keys(skeleton, list(weight_map))

            def read(names: list[str]) -> list[Tensor]:
                """Every distinct checkpoint tensor named by ``names``, read from its file."""
                out = []
                for k in sorted({keys[n] for n in names if n in keys}):
                    with safe_open(str(weight_map[k]), "pt") as f:
                        out.append(f.get_tensor(k))
                return out

            held = read(in_names + out_names) if tied else read(in_names)[:1] + read(out_names)[:1]
    except (ValueError, KeyError, OSError, RuntimeError, TypeError) as exc:
        log.info("%s: reading embeddings directly failed (%s); loading the whole model", label, exc)
        held = []
    if len(held) < (1 if tied else 2):
        return _load_whole(str(path), dtype, label)
    conflict = tying_conflict(tied, all(same_matrix(t, held[0]) for t in held[1:]))
    if conflict:
        raise TyingError(str(path), conflict)
    inp = held[0].to(dtype)
    return inp, inp if tied else held[1].to(dtype), tied


def _load_whole(src: str, dtype: torch.dtype, label: str, revision: str | None = None) -> tuple[Tensor, Tensor, bool]:
    """Embedding weights of the whole model loaded from a folder or hub id (pickled weights refused)."""
    from transformers import AutoModelForCausalLM

    from tiebias.run.files import pickles_refused

    try:
        with pickles_refused(src, label):
            model, loading = AutoModelForCausalLM.from_pretrained(src, revision=revision, dtype=dtype,
                                                                  low_cpu_mem_usage=True, output_loading_info=True)
    except OSError as exc:
        if Path(src).is_dir():
            raise
        raise ValueError(f"source: {src!r} is neither a local model folder nor a loadable hub id ({exc})") from exc
    return _weights_from_model(model, dtype, label, loading.get("missing_keys", ()))


def _checkpoint_keys(skeleton: Any, keys: list[str]) -> dict[str, str]:
    """Model parameter name -> checkpoint key under transformers' load-time renames (GPT-NeoX's ``embed_out``); best
    effort, as the helpers are internal: without them only exact names match and the whole model is loaded."""
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
