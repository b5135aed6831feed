"""The run folder: one place on disk that every notebook reads and writes.

Layout::

    runs/<name>/
        config.json                 corpus, vocabulary size and the study parameters
        tokenizer/                  transformers fast tokenizer (save_pretrained)
        token_frequencies.csv       id, token, count over the training split
        tokens/{train,validation,test}.npy   the encoded splits (token id streams)
        models/<variant>-s<seed>/   final HF model (+ tokenizer files), train_config.json, complete.json
            checkpoints/step-<N>/   HF model at step N (step 0 = initialisation)
            lens/                   tuned lens for this model
        metrics/<variant>-s<seed>.csv       one row per optimiser step
        metrics/<variant>-s<seed>_val.csv   validation loss at evaluation steps
        figures/  notebooks/  summary.json  report.html
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

from .gradients import check_factor

SPLITS = ("train", "validation", "test")
_VARIANT_RE = re.compile(r"^(tied|untied)(?:_in([0-9.eE+-]+))?(?:_out([0-9.eE+-]+))?$")
_KEY_RE = re.compile(r"^(?P<variant>.+)-s(?P<seed>\d+)$")


@dataclass(frozen=True)
class Variant:
    """A training variant: tied or untied, and for tied models the input/output gradient factors."""

    tied: bool
    input_factor: float = 1.0
    output_factor: float = 1.0

    @classmethod
    def parse(cls, name: str | Variant) -> Variant:
        """Parse ``tied``, ``untied``, ``tied_in5``, ``tied_out0.2``, ``tied_in5_out0.2``."""
        if isinstance(name, Variant):
            return name
        m = _VARIANT_RE.match(str(name))
        if not m:
            raise ValueError(
                f"variant: cannot parse {name!r}; allowed: 'tied', 'untied', 'tied_in<k>', 'tied_out<k>', "
                "'tied_in<k>_out<k>' with k a number > 0 (e.g. 'tied_in5', 'tied_in10_out0.1')")
        kind, fin, fout = m.groups()
        try:
            fi = check_factor("variant input factor", float(fin)) if fin is not None else 1.0
            fo = check_factor("variant output factor", float(fout)) if fout is not None else 1.0
        except ValueError as e:
            raise ValueError(f"variant: {name!r} has a bad factor ({e}); factors must be finite numbers > 0") from None
        if kind == "untied" and (fin is not None or fout is not None):
            raise ValueError(f"variant: {name!r} asks for gradient scaling on an untied model; scaling is defined "
                             "for tied models only (use 'tied_in<k>')")
        return cls(kind == "tied", fi, fo)

    @property
    def name(self) -> str:
        """Canonical name, the inverse of :meth:`parse`."""
        s = "tied" if self.tied else "untied"
        if self.input_factor != 1.0:
            s += f"_in{self.input_factor:g}"
        if self.output_factor != 1.0:
            s += f"_out{self.output_factor:g}"
        return s

    def __str__(self) -> str:
        return self.name


def model_key(variant: str | Variant, seed: int) -> str:
    """Folder name of one trained model: ``<variant>-s<seed>``."""
    return f"{Variant.parse(variant).name}-s{int(seed)}"


def parse_key(key: str) -> tuple[Variant, int]:
    """Inverse of :func:`model_key`."""
    m = _KEY_RE.match(key)
    if not m:
        raise ValueError(f"model key: cannot parse {key!r}; expected '<variant>-s<seed>' such as 'tied-s0'")
    return Variant.parse(m["variant"]), int(m["seed"])


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def diff_config(old: dict, new: dict, keys: list[str] | None = None) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ between two configs (floats compared with a relative tolerance)."""
    out = {}
    for k in keys if keys is not None else sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, float) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9):
            continue
        if a != b:
            out[k] = (a, b)
    return out


class Run:
    """A run folder; see the module docstring for its layout."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    # -- paths ------------------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / "tokenizer"

    @property
    def metrics_dir(self) -> Path:
        return self.path / "metrics"

    @property
    def figures_dir(self) -> Path:
        d = self.path / "figures"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def model_dir(self, variant: str | Variant, seed: int) -> Path:
        return self.path / "models" / model_key(variant, seed)

    # -- creation ---------------------------------------------------------------------------------
    @classmethod
    def prepare(cls, path: str | Path, *, corpus: str | Path | None = None, vocab_size: int = 4096,
                overwrite: bool = False, extra: dict | None = None) -> Run:
        """Create a run folder (corpus split, tokenizer, token streams, frequencies) or reopen one.

        Reopening checks that corpus and vocabulary size match what the folder was made with; a
        mismatch stops with an error instead of silently mixing two studies. ``overwrite=True``
        deletes the folder first.
        """
        from . import data  # local import: data pulls in `datasets`, slow to import

        run = cls(path)
        corpus_name = "shakespeare" if corpus in (None, "", "shakespeare") else str(corpus)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise ValueError(f"vocab_size: {vocab_size!r} is not an int; give a vocabulary size such as 4096")
        wanted = {"corpus": corpus_name, "vocab_size": vocab_size}
        if run.config_path.exists():
            if overwrite:
                shutil.rmtree(run.path)
            else:
                have = run.config
                diff = diff_config(have, wanted, list(wanted))
                if diff:
                    detail = "; ".join(f"{k}: folder has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
                    raise ValueError(f"run folder {run.path} was made with a different config ({detail}); "
                                     "use another run folder, or overwrite=True to delete it")
                if run._data_ready():
                    return run
        run.path.mkdir(parents=True, exist_ok=True)
        ds = data.load_corpus(None if corpus_name == "shakespeare" else corpus)
        tok = data.train_tokenizer(ds["train"]["text"], vocab_size=vocab_size)
        tmp_tok = run.path / ".tokenizer.tmp"
        if tmp_tok.exists():
            shutil.rmtree(tmp_tok)
        tok.save_pretrained(tmp_tok)
        if run.tokenizer_dir.exists():
            shutil.rmtree(run.tokenizer_dir)
        os.replace(tmp_tok, run.tokenizer_dir)
        (run.path / "tokens").mkdir(exist_ok=True)
        n_tokens = {}
        for split in SPLITS:
            ids = data.encode(tok, ds[split]["text"])
            dtype = np.uint16 if len(tok) <= 65535 else np.int32
            tmp = run.path / "tokens" / f".{split}.tmp.npy"
            np.save(tmp, ids.numpy().astype(dtype))
            os.replace(tmp, run.path / "tokens" / f"{split}.npy")
            n_tokens[split] = int(ids.numel())
        counts = data.token_frequencies(tok, ds["train"]["text"])
        data.save_frequencies(run.path / "token_frequencies.csv", tok, counts)
        cfg = {**wanted, "n_documents": {s: len(ds[s]) for s in SPLITS}, "n_tokens": n_tokens,
               "tokenizer_size": len(tok), **(extra or {})}
        write_json_atomic(run.config_path, cfg)
        return run

    def _data_ready(self) -> bool:
        return (self.tokenizer_dir / "tokenizer.json").exists() and all(
            (self.path / "tokens" / f"{s}.npy").exists() for s in SPLITS) and (
            self.path / "token_frequencies.csv").exists()

    def update_config(self, **values: Any) -> None:
        """Merge values into config.json (e.g. the study parameters a notebook ran with)."""
        cfg = self.config
        cfg.update(values)
        write_json_atomic(self.config_path, cfg)

    # -- reading ----------------------------------------------------------------------------------
    @property
    def config(self) -> dict:
        if not self.config_path.exists():
            raise FileNotFoundError(f"run: {self.path} has no config.json; create it with Run.prepare(...) "
                                    "or run notebooks/01_train.ipynb")
        return json.loads(self.config_path.read_text())

    def tokenizer(self) -> PreTrainedTokenizerFast:
        return AutoTokenizer.from_pretrained(self.tokenizer_dir)

    def tokens(self, split: str) -> torch.Tensor:
        """The encoded split as a 1-D LongTensor."""
        if split not in SPLITS:
            raise ValueError(f"split: unknown value {split!r}; allowed: {', '.join(SPLITS)}")
        return torch.from_numpy(np.load(self.path / "tokens" / f"{split}.npy").astype(np.int64))

    def frequencies(self) -> np.ndarray:
        """Token counts over the training split, indexed by token id."""
        from .data import load_frequencies

        return load_frequencies(self.path / "token_frequencies.csv")

    def models(self) -> pd.DataFrame:
        """One row per model folder: key, variant, tied, factors, seed, complete, final step."""
        rows = []
        root = self.path / "models"
        for d in sorted(root.iterdir()) if root.exists() else []:
            try:
                v, seed = parse_key(d.name)
            except ValueError:
                continue
            done = (d / "complete.json").exists()
            rows.append({"key": d.name, "variant": v.name, "tied": v.tied, "input_factor": v.input_factor,
                         "output_factor": v.output_factor, "seed": seed, "complete": done,
                         "checkpoints": len(self.checkpoints(v, seed))})
        return pd.DataFrame(rows, columns=["key", "variant", "tied", "input_factor", "output_factor", "seed",
                                           "complete", "checkpoints"])

    def seeds(self, variant: str | Variant) -> list[int]:
        """Seeds for which a complete model of this variant exists."""
        df = self.models()
        v = Variant.parse(variant).name
        return sorted(df[(df.variant == v) & df.complete].seed.tolist())

    def is_complete(self, variant: str | Variant, seed: int) -> bool:
        return (self.model_dir(variant, seed) / "complete.json").exists()

    def summary(self, variant: str | Variant, seed: int) -> dict:
        """What training wrote when it finished this model (losses, time, throughput)."""
        p = self.model_dir(variant, seed) / "complete.json"
        if not p.exists():
            raise FileNotFoundError(f"model {model_key(variant, seed)} in {self.path} has not finished training")
        return json.loads(p.read_text())

    def checkpoints(self, variant: str | Variant, seed: int) -> list[tuple[int, Path]]:
        """(step, folder) of every complete checkpoint, sorted by step."""
        root = self.model_dir(variant, seed) / "checkpoints"
        out = []
        for d in root.iterdir() if root.exists() else []:
            m = re.fullmatch(r"step-(\d+)", d.name)
            if m and (d / "config.json").exists():
                out.append((int(m.group(1)), d))
        return sorted(out)

    def model_path(self, variant: str | Variant, seed: int, step: int | None = None) -> Path:
        """Folder of the final model (step None) or of the checkpoint at ``step``."""
        if step is None:
            if not self.is_complete(variant, seed):
                raise FileNotFoundError(
                    f"model {model_key(variant, seed)} in {self.path} is missing or unfinished; "
                    f"complete models: {', '.join(self.models().query('complete').key) or 'none'}")
            return self.model_dir(variant, seed)
        for s, d in self.checkpoints(variant, seed):
            if s == step:
                return d
        have = [s for s, _ in self.checkpoints(variant, seed)]
        raise ValueError(f"step: no checkpoint {step} for {model_key(variant, seed)}; available: {have}")

    def load_model(self, variant: str | Variant, seed: int, step: int | None = None,
                   device: str | torch.device = "cpu") -> PreTrainedModel:
        """Load a trained model (or a checkpoint) in eval mode."""
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(self.model_path(variant, seed, step), dtype=torch.float32)
        return m.to(device).eval()

    def metrics(self, variant: str | Variant, seed: int, kind: str = "train") -> pd.DataFrame:
        """Per-step training metrics (``kind='train'``) or validation losses (``kind='val'``)."""
        if kind not in ("train", "val"):
            raise ValueError(f"kind: unknown value {kind!r}; allowed: 'train', 'val'")
        suffix = "" if kind == "train" else "_val"
        p = self.metrics_dir / f"{model_key(variant, seed)}{suffix}.csv"
        if not p.exists():
            raise FileNotFoundError(f"no {kind} metrics for {model_key(variant, seed)} in {self.path}")
        return pd.read_csv(p)
