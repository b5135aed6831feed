"""External models by hub id or local folder, checked from ``config.json`` on a meta-device skeleton before any weights
load, then on the loaded weights' tying; errors name the notebook parameter ``<label>_source``."""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections import namedtuple
from pathlib import Path
from typing import Any

import torch

from tiebias.config.paths import RUNS
from tiebias.models import anatomy
from tiebias.run.files import check_safetensors, pickles_refused
from tiebias.run.folder import Run
from tiebias.run.guard import check_folder, mark
from tiebias.run.layout import CONFIG_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from tiebias.system.alloc import free_memory

SourceInfo = namedtuple("SourceInfo", "label param source model_type tied tie_word_embeddings num_hidden_layers "
                                      "hidden_size vocab_size n_params local_safetensors")
"""What a model's config says, read without loading weights (``param``: the notebook parameter that named it)."""


def inspect(source: Any, label: str, *, lens: bool = False) -> SourceInfo:
    """Read one source's config (no weights) and check it on a meta-device skeleton: a causal-LM head, and with
    ``lens`` a layout the lens can follow; errors name ``<label>_source``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    param = f"{label}_source"
    if source is None or not isinstance(source, (str, os.PathLike)):
        raise ValueError(f"{param}: " + ("missing; give a model folder or a hub id" if source is None else
                                         f"expected a model folder or a hub id, got {type(source).__name__}"))
    path = Path(str(source)).expanduser()
    if path.is_dir() and not (path / CONFIG_NAME).is_file():
        raise ValueError(f"{param}: {str(source)!r} is a folder without config.json, not a model folder")
    src = str(path) if path.is_dir() else str(source)
    try:
        config = AutoConfig.from_pretrained(src)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{param}: cannot read a model config from {src!r} ({exc})") from exc
    model_type = getattr(config, "model_type", "?")
    try:
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
    except ValueError as exc:
        raise ValueError(
            f"{param}: {src!r} is a {model_type!r} model ({type(config).__name__}) with no causal-LM head in "
            f"transformers (AutoModelForCausalLM does not support it); allowed: decoder-only causal LMs") from exc
    if skeleton.get_output_embeddings() is None or skeleton.get_input_embeddings() is None:
        raise ValueError(f"{param}: {src!r} ({model_type!r}, {type(skeleton).__name__}) has no "
                         f"{'output' if skeleton.get_output_embeddings() is None else 'input'} embedding")
    if lens:
        try:
            anatomy.find_layout(skeleton)
        except ValueError as exc:
            raise ValueError(f"{param}: {src!r}: {str(exc).removeprefix('model: ')}") from None
    text = anatomy.text_config(config)
    return SourceInfo(label, param, src, str(model_type), anatomy.is_tied(skeleton),
                      getattr(text, "tie_word_embeddings", None), int(getattr(text, "num_hidden_layers", 0) or 0),
                      int(getattr(text, "hidden_size", 0) or 0), int(skeleton.get_output_embeddings().weight.shape[0]),
                      sum(p.numel() for p in skeleton.parameters()),
                      path.is_dir() and ((path / WEIGHTS_NAME).is_file() or (path / WEIGHTS_INDEX_NAME).is_file()))


def _check_role(info: SourceInfo) -> None:
    """Refuse a ``tied`` source that is untied and an ``untied`` source that is tied."""
    want = {"tied": True, "untied": False}.get(info.label)
    if want is None or info.tied == want:
        return
    why = ("the tied side needs one matrix shared by the input and output embeddings" if want else
           "the untied side needs separate input and output embedding matrices")
    raise ValueError(f"{info.param}: {info.source!r} is {'untied' if want else 'tied'} (its config has "
                     f"tie_word_embeddings={info.tie_word_embeddings!r}, {info.model_type}); {why}. Were "
                     "tied_source and untied_source swapped?")


def estimate_bytes(info: SourceInfo, dtype: torch.dtype = torch.float32, *, need: str = "model",
                   lens: bool = False) -> int:
    """Bytes to load a source's weights (``need="model"``) or only its embeddings (``"embeddings"``, local safetensors);
    ``lens`` adds a float32 width x (width + 1) translator per layer with Adam state (four copies)."""
    size = torch.empty((), dtype=dtype).element_size()
    if need == "embeddings" and info.local_safetensors:
        total = info.vocab_size * info.hidden_size * (1 if info.tied else 2) * size
    else:
        total = info.n_params * size
    if lens:
        total += 4 * info.num_hidden_layers * info.hidden_size * (info.hidden_size + 1) * 4
    return int(total)


def check_sources(sources: dict[str, Any], *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                  need: str = "model", lens: bool = False) -> dict[str, SourceInfo]:
    """Check every source from its config before any weights load (role, head, lens layout, free memory on
    ``device`` for all together); with ``lens``, warns when the depths differ. Errors name ``<label>_source``."""
    if not isinstance(sources, dict) or not sources:
        raise ValueError(f"sources: expected a non-empty dict label -> model folder or hub id, got {sources!r}")
    infos = {label: inspect(src, label, lens=lens) for label, src in sources.items()}
    for info in infos.values():
        _check_role(info)
    need_bytes = {label: estimate_bytes(i, dtype, need=need, lens=lens) for label, i in infos.items()}
    total, free = sum(need_bytes.values()), free_memory(device)
    gib = lambda n: f"{n / 2**30:.2f} GiB"  # noqa: E731
    if total > free:
        parts = ", ".join(f"{infos[k].param} {infos[k].source!r} {gib(v)} ({infos[k].n_params / 1e9:.2f} B params)"
                          for k, v in need_bytes.items())
        raise ValueError(f"{', '.join(i.param for i in infos.values())}: loading needs about {gib(total)} "
                         f"({parts}; {str(dtype).removeprefix('torch.')}{' weights' if need == 'model' else ''}) but "
                         f"only {gib(free)} is free on {torch.device(device)}; use a machine with more memory or a "
                         "16-bit dtype")
    if lens and len({i.num_hidden_layers for i in infos.values()}) > 1:
        desc = " and ".join(f"{i.param} {i.source!r} has {i.num_hidden_layers} layers" for i in infos.values())
        warnings.warn(f"{desc}: layers are compared on relative depth (layer / number of layers)", UserWarning,
                      stacklevel=2)
    return infos


def load_models(sources: dict[str, Any], *, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32) -> dict[str, tuple[Any, Any]]:
    """Load causal LMs with their tokenizers for lensing, in eval mode; every refusal (configs, tokenizers larger than
    the head, damaged safetensors) comes before the first weight is read, then the weights' tying is checked.

    Args:
        sources: role label -> model folder or hub id.
        device: where the models go.
        dtype: the weights' dtype.

    Returns:
        Label -> ``(model, tokenizer)``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    infos = check_sources(sources, dtype=dtype, device=device, need="model", lens=True)
    tokenizers = {}
    for label, info in infos.items():
        try:
            tok = AutoTokenizer.from_pretrained(info.source)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{info.param}: no tokenizer loads from {info.source!r} ({exc}); save one in the "
                             f"model folder") from exc
        if len(tok) > info.vocab_size:
            raise ValueError(f"{info.param}: the tokenizer of {info.source!r} has {len(tok)} tokens but the model's "
                             f"vocabulary only {info.vocab_size}; allowed: a tokenizer no larger than the model's head")
        tokenizers[label] = tok
    for info in infos.values():  # every local weights file checked before the first loads
        for weights in sorted(Path(info.source).glob("*.safetensors")) if Path(info.source).is_dir() else []:
            check_safetensors(weights, f"download or copy it again, or give another {info.param}")
    out = {}
    for label, info in infos.items():
        with pickles_refused(info.source, info.param):
            model, loading = AutoModelForCausalLM.from_pretrained(info.source, dtype=dtype, output_loading_info=True)
        try:  # the config was checked before loading; the loaded weights decide
            tied = anatomy.check_loaded_tying(model, f"{info.param}: {info.source!r}", loading.get("missing_keys", ()))
        except anatomy.TyingError as exc:
            raise not_as_configured(exc) from None
        _check_role(info._replace(tied=tied))
        model = model.to(device).eval()
        anatomy.check_model(model)
        out[label] = (model, tokenizers[label])
    return out


def not_as_configured(exc: anatomy.TyingError, where: str | None = None) -> anatomy.TyingError:
    """The error for an external model whose weights are not tied as its config says, with what to do."""
    return anatomy.TyingError(exc.where if where is None else where, f"{exc.conflict}; the model is not the one its "
                              "config describes: correct tie_word_embeddings in its config.json or restore its "
                              "weights, or use another model")


def external_path(tied_source: Any, untied_source: Any, run_dir: Any = None, *, root: Any = RUNS,
                  corpus: Any = None) -> Path:
    """Where an external pair's outputs go, checked, creating nothing: ``run_dir``, else ``<root>/external/`` and both
    model names with a short hash of the full sources; never a run's, the corpus's or a user's folder.

    Args:
        tied_source, untied_source: the pair, which names the default folder.
        run_dir: the folder to use instead (None: the default).
        root: the runs folder the default lives under.
        corpus: the study's corpus, whose folder is refused.

    Returns:
        The resolved folder.
    """
    if run_dir is not None:
        return check_folder(run_dir, "pair", corpus=corpus)
    srcs = (tied_source, untied_source)
    paths = [Path(str(s)).expanduser() for s in srcs]
    names = [p.name if p.is_dir() else str(s).replace("/", "--") for p, s in zip(paths, srcs, strict=True)]
    full = [str(p.resolve()) if p.is_dir() else str(s) for p, s in zip(paths, srcs, strict=True)]
    digest = hashlib.sha1("\n".join(full).encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{names[0]}__{names[1]}__{digest}")
    path = Path(root).expanduser().resolve() / "external" / slug
    return check_folder(path, "pair", corpus=corpus)


def external_dir(tied_source: Any, untied_source: Any, run_dir: Any = None, *, root: Any = RUNS,
                 corpus: Any = None) -> Run:
    """The external pair's folder (:func:`external_path`), created and marked, with figures/ and metrics/.

    Args:
        tied_source, untied_source, run_dir, root, corpus: as in :func:`external_path`.

    Returns:
        A ``Run`` on the folder.
    """
    path = external_path(tied_source, untied_source, run_dir, root=root, corpus=corpus)
    mark(path, "pair")
    out = Run(path)
    for d in (out.figures_dir, out.metrics_dir):
        d.mkdir(parents=True, exist_ok=True)
    return out
