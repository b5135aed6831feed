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
        .lock  .lock-holder.json    the writer lock and who holds it (see :meth:`Run.writing`)

One process writes a run folder at a time: training and recording results hold the folder's lock,
and a second writer stops at once with an error naming the holder's PID. Readers never wait.
Every JSON file the kit writes is strict JSON (no NaN/Infinity: ``null`` plus a reason), and every
file a reader finds damaged is named in the error together with what to do about it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
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


OVERWRITE_HINT = "set overwrite=True (notebook parameter / --set overwrite=true)"
LOCK_NAME = ".lock"
LOCK_HOLDER = ".lock-holder.json"
_NULL_REASONS = "null_reasons"


class RunFolderError(ValueError):
    """A run folder cannot be used as asked (locked by another writer, or a damaged file)."""


class RunLockedError(RunFolderError):
    """Another live process holds the run folder's writer lock."""


class DamagedFileError(RunFolderError):
    """A file of the run folder does not load; the message names it and says what to do."""


def damaged(path: Path, err: BaseException | str, todo: str) -> DamagedFileError:
    """The error for a file that does not load: the file, the reason, and what to do."""
    why = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    return DamagedFileError(f"{path}: damaged or unreadable ({why}); {todo}")


def sanitise_json(data: Any, reasons: dict[str, str] | None = None) -> tuple[Any, dict[str, str]]:
    """Strict-JSON copy of ``data``: NaN/Infinity become None; returns it and {json path: reason} for each.

    ``reasons`` gives the reason to record for a path (e.g. ``{"spread": "one seed: no spread"}``);
    other non-finite numbers get a generic reason naming the value. numpy scalars and arrays and
    paths are converted to plain JSON types.
    """
    found: dict[str, str] = {}
    given = reasons or {}

    def walk(x: Any, where: str) -> Any:
        if isinstance(x, dict):
            return {str(k): walk(v, f"{where}.{k}" if where else str(k)) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(x)]
        if isinstance(x, np.ndarray):
            return walk(x.tolist(), where)
        if isinstance(x, (bool, np.bool_)):
            return bool(x)
        if isinstance(x, (np.integer,)):
            return int(x)
        if isinstance(x, (float, np.floating)):
            f = float(x)
            if math.isfinite(f):
                return f
            found[where] = given.get(where, f"{f!r} is not a JSON number")
            return None
        if isinstance(x, Path):
            return str(x)
        if x is None or isinstance(x, (str, int)):
            return x
        if isinstance(x, torch.Tensor) and x.numel() == 1:
            return walk(x.item(), where)
        raise TypeError(f"{where or 'value'}: {type(x).__name__} is not JSON serialisable")

    return walk(data, ""), found


def write_json_atomic(path: Path, data: Any, reasons: dict[str, str] | None = None) -> None:
    """Write strict JSON through a temporary file and a rename, so readers never see half a file.

    Non-finite numbers are written as ``null``; for a dict, a ``null_reasons`` entry maps each such
    field (a dotted path) to why it is null. Serialisation happens before anything touches the disk.
    """
    clean, nulls = sanitise_json(data, reasons)
    if nulls:
        if not isinstance(clean, dict):
            raise ValueError(f"{path.name}: non-finite values at {sorted(nulls)} and no place to say why")
        clean[_NULL_REASONS] = {**clean.get(_NULL_REASONS, {}), **nulls}
    text = json.dumps(clean, indent=2, sort_keys=True, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _read_text(path: Path, todo: str) -> str:
    """A file's text; a missing file raises FileNotFoundError, an unreadable one names it and ``todo``."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise damaged(path, e, todo) from None


def read_json(path: Path, todo: str) -> Any:
    """Load a JSON file the kit wrote; a missing file raises FileNotFoundError, a damaged one names it and ``todo``."""
    text = _read_text(path, todo)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise damaged(path, e, todo) from None


_NUMERIC = re.compile(r"^\s*$|^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^[-+]?(nan|inf|infinity)$", re.I)


def read_log_lines(path: Path, header: list[str] | None = None, *,
                   todo: str) -> tuple[list[str], list[tuple[int, str]], int]:
    """Check a metrics CSV line by line: (columns, [(step, line)], dropped), lines kept verbatim.

    A last row cut mid-write (no line end) is dropped and counted; every other field must be a
    number (empty means missing) with an integer ``step``, else :class:`DamagedFileError` names the
    file, the line and ``todo``. ``header`` (if given) must match the file's.
    """
    text = _read_text(path, todo)
    lines = text.split("\n")
    dropped = 0
    if lines[-1] == "":
        lines.pop()
    else:
        lines.pop()  # no final newline: the writer was stopped in the middle of this row
        dropped = 1
    lines = [line.rstrip("\r") for line in lines]  # the csv module ends rows with \r\n
    if not lines:
        if header is None:
            raise damaged(path, "no header line", todo)
        return list(header), [], dropped
    cols = lines[0].split(",")
    if header is not None and cols != header:
        raise damaged(path, f"header is {cols}, expected {header}", todo)
    if "step" not in cols:
        raise damaged(path, f"no 'step' column in header {cols}", todo)
    at = cols.index("step")
    rows = []
    for i, line in enumerate(lines[1:], start=2):
        fields = line.split(",")
        if len(fields) != len(cols) or not all(_NUMERIC.match(f) for f in fields) \
                or not re.fullmatch(r"\d+", fields[at].strip()):
            raise damaged(path, f"line {i} is not a row of {len(cols)} numbers with an integer step: {line[:80]!r}",
                          todo)
        rows.append((int(fields[at]), line))
    return cols, rows, dropped


def read_log(path: Path, header: list[str] | None = None, *, todo: str) -> pd.DataFrame:
    """A metrics CSV as a DataFrame, checked by :func:`read_log_lines` (a half-written last row left out)."""
    cols, rows, _ = read_log_lines(path, header, todo=todo)
    text = ",".join(cols) + "\n" + "".join(line + "\n" for _, line in rows)
    return pd.read_csv(io.StringIO(text))


# -- the writer lock ----------------------------------------------------------------------------------
@dataclass
class _Held:
    lock: Any
    pid: int
    depth: int


_HELD: dict[str, _Held] = {}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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

    # -- the writer lock ------------------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self, what: str = "writing") -> Iterator[Run]:
        """Hold this folder's writer lock for the block; a second writer gets :class:`RunLockedError` at once.

        Reentrant within one process (a notebook that trains, then records results). The lock is an OS
        lock (``filelock``), released by the OS when its holder dies, so a killed writer never blocks the
        next one; ``.lock-holder.json`` beside it only names the holder (PID, host, start) for the error.
        """
        key = str(self.path.resolve())
        held = _HELD.get(key)
        if held is not None and held.pid == os.getpid():
            held.depth += 1
            try:
                yield self
            finally:
                held.depth -= 1
            return
        from filelock import FileLock, Timeout

        self.path.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path / LOCK_NAME), thread_local=False)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            raise RunLockedError(self._locked_message(what)) from None
        try:
            write_json_atomic(self.path / LOCK_HOLDER, {
                "pid": os.getpid(), "host": socket.gethostname(), "what": what,
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")})
            _HELD[key] = _Held(lock, os.getpid(), 1)
            yield self
        finally:
            _HELD.pop(key, None)
            with contextlib.suppress(FileNotFoundError):
                (self.path / LOCK_HOLDER).unlink()
            lock.release()

    def lock_holder(self) -> dict | None:
        """Who holds the writer lock, as recorded next to it (None if nobody recorded a live holder)."""
        try:
            info = json.loads((self.path / LOCK_HOLDER).read_text())
            pid, host = int(info["pid"]), str(info["host"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if host == socket.gethostname() and not _pid_alive(pid):
            return None  # left behind by a killed writer: the OS has already released its lock
        return info

    def _locked_message(self, what: str) -> str:
        info = None
        for _ in range(20):  # the holder writes its PID just after taking the lock
            info = self.lock_holder()
            if info is not None:
                break
            time.sleep(0.05)
        head = f"run folder {self.path}: cannot start {what}: "
        tail = ("; wait for it to finish, or stop it (a stopped or killed process releases the lock at once), "
                "or use another run folder. Reading the folder is not blocked.")
        if info is None:
            return head + f"another process holds the writer lock {self.path / LOCK_NAME} (its PID is not recorded)" + tail
        return (head + f"it is being written by PID {info['pid']} on {info['host']} since {info.get('started')} "
                f"({info.get('what')})" + tail)

    # -- creation ---------------------------------------------------------------------------------
    @classmethod
    def prepare(cls, path: str | Path, *, corpus: str | Path | None = None, vocab_size: int = 4096,
                overwrite: bool = False, extra: dict | None = None) -> Run:
        """Create a run folder (corpus split, tokenizer, token streams, frequencies) or reopen one.

        Reopening checks that corpus and vocabulary size match what the folder was made with; a
        mismatch stops with an error instead of silently mixing two studies. ``overwrite=True``
        empties the folder first. Everything is validated (and the corpus loaded) before the folder
        is touched, and the writing happens under the folder's writer lock.
        """
        from . import data  # local import: data pulls in `datasets`, slow to import

        run = cls(path)
        corpus_name = "shakespeare" if corpus in (None, "", "shakespeare") else str(corpus)
        minimum = data.BYTE_ALPHABET_SIZE + len(data.SPECIAL_TOKENS)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum:
            raise ValueError(f"vocab_size: {vocab_size!r} is not allowed; give an integer >= {minimum} "
                             "(byte-level BPE: 256 byte tokens + 1 special token), such as 4096")
        if extra is not None:
            sanitise_json(extra)
        wanted = {"corpus": corpus_name, "vocab_size": vocab_size}
        keep: dict = {}
        if run.config_path.exists() and not overwrite:
            have = run.config
            diff = diff_config(have, wanted, list(wanted))
            if diff:
                detail = "; ".join(f"{k}: folder has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
                raise ValueError(f"run folder {run.path} was made with a different config ({detail}); "
                                 f"use another run folder, or {OVERWRITE_HINT} to empty it and start again")
            if run._data_ready():
                return run
            keep = {k: v for k, v in have.items() if k not in _DATA_KEYS}
        ds = data.load_corpus(None if corpus_name == "shakespeare" else corpus)
        with run.writing("preparing the run folder"):
            if overwrite and run.config_path.exists():
                _empty_folder(run.path)
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
            cfg = {**keep, **wanted, "n_documents": {s: len(ds[s]) for s in SPLITS}, "n_tokens": n_tokens,
                   "tokenizer_size": len(tok), **(extra or {})}
            write_json_atomic(run.config_path, cfg)
        return run

    def _data_ready(self) -> bool:
        return (self.tokenizer_dir / "tokenizer.json").exists() and all(
            (self.path / "tokens" / f"{s}.npy").exists() for s in SPLITS) and (
            self.path / "token_frequencies.csv").exists()

    def update_config(self, **values: Any) -> None:
        """Merge values into config.json under the writer lock (the data keys of Run.prepare are refused).

        Call it after the work the values describe has succeeded (see :meth:`record_study`), so the
        file never describes work that was refused or failed.
        """
        bad = sorted(set(values) & set(_DATA_KEYS))
        if bad:
            raise ValueError(f"update_config: {bad} describe the folder's data and are set by Run.prepare only; "
                             "record study parameters under another key (e.g. study=...)")
        sanitise_json(values)  # not serialisable: stop before taking the lock or touching the file
        _ = self.config  # missing or damaged: stop before the lock creates anything
        with self.writing("updating config.json"):
            cfg = self.config
            cfg.update(values)
            write_json_atomic(self.config_path, cfg)

    def record_study(self, values: dict[str, Any], section: str = "study") -> None:
        """Record the parameters of work that has just succeeded under ``config.json[section]``."""
        if not isinstance(section, str) or not section or section in _DATA_KEYS:
            raise ValueError(f"section: {section!r} is not allowed; give a name such as 'study' or 'ablation' "
                             f"(not one of {', '.join(_DATA_KEYS)})")
        if not isinstance(values, dict):
            raise ValueError(f"values: {type(values).__name__} is not a dict of parameters")
        self.update_config(**{section: values})

    # -- reading ----------------------------------------------------------------------------------
    @property
    def config(self) -> dict:
        if not self.config_path.exists():
            raise FileNotFoundError(f"run: {self.path} has no config.json; create it with Run.prepare(...) "
                                    "or run notebooks/01_train.ipynb")
        cfg = read_json(self.config_path, "it records the corpus, vocabulary and token counts of this folder: "
                        f"restore it from a copy, or {OVERWRITE_HINT} (Run.prepare) to empty the folder and rebuild it")
        if not isinstance(cfg, dict):
            raise damaged(self.config_path, "not a JSON object", f"{OVERWRITE_HINT} to rebuild the folder")
        return cfg

    def tokenizer(self) -> PreTrainedTokenizerFast:
        """The run's tokenizer; a missing or damaged ``tokenizer/`` folder is named with how to restore it."""
        d = self.tokenizer_dir
        copies = sorted(p.parent for p in self.path.glob("models/*/tokenizer.json"))
        fix = (f"copy the tokenizer files of {copies[0]} (tokenizer.json, tokenizer_config.json, "
               "special_tokens_map.json) into it, or " if copies else "")
        fix += "rerun Run.prepare (notebook 01_train), which rebuilds it from the corpus (deterministic)"
        if not (d / "tokenizer.json").is_file():
            raise FileNotFoundError(f"tokenizer: {d} is missing or has no tokenizer.json; {fix}")
        try:
            return AutoTokenizer.from_pretrained(d)
        except Exception as e:  # any loader failure: reported with the folder named
            raise damaged(d, e, fix) from None

    def tokens(self, split: str) -> torch.Tensor:
        """The encoded split as a 1-D LongTensor."""
        if split not in SPLITS:
            raise ValueError(f"split: unknown value {split!r}; allowed: {', '.join(SPLITS)}")
        p = self.path / "tokens" / f"{split}.npy"
        if not p.exists():
            raise FileNotFoundError(f"tokens: {p} is missing; rerun Run.prepare (notebook 01_train) to rebuild it")
        try:
            arr = np.load(p)
        except (OSError, ValueError, EOFError) as e:
            raise damaged(p, e, "delete it and rerun Run.prepare (notebook 01_train), which rebuilds it "
                          "deterministically") from None
        return torch.from_numpy(arr.astype(np.int64))

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
        return read_json(p, f"delete it and train {model_key(variant, seed)} again: training resumes from its "
                         "final checkpoint and rewrites this file")

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
        """Load a trained model (or a checkpoint) in eval mode; a damaged file is named with what to do."""
        from transformers import AutoModelForCausalLM

        path = self.model_path(variant, seed, step)
        key = model_key(variant, seed)
        if step is None:
            todo = (f"delete {path / 'complete.json'} and train {key} again: training resumes from the newest "
                    "good checkpoint and rewrites the final model")
        else:
            others = [s for s, _ in self.checkpoints(variant, seed) if s != step]
            todo = f"use another step (available: {others}), or retrain {key} ({OVERWRITE_HINT})"
        check_model_folder(path, todo)
        try:
            m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        except Exception as e:  # any loader failure: reported with the folder named
            raise damaged(path, e, todo) from None
        return m.to(device).eval()

    def metrics(self, variant: str | Variant, seed: int, kind: str = "train") -> pd.DataFrame:
        """Per-step training metrics (``kind='train'``) or validation losses (``kind='val'``).

        A last row still being written (no line end yet) is left out; a garbage row is an error
        naming the file and the line.
        """
        if kind not in ("train", "val"):
            raise ValueError(f"kind: unknown value {kind!r}; allowed: 'train', 'val'")
        suffix = "" if kind == "train" else "_val"
        key = model_key(variant, seed)
        p = self.metrics_dir / f"{key}{suffix}.csv"
        if not p.exists():
            raise FileNotFoundError(f"no {kind} metrics for {key} in {self.path}")
        return read_log(p, todo=f"remove the bad lines, or retrain {key} ({OVERWRITE_HINT})")


_DATA_KEYS = ("corpus", "vocab_size", "n_documents", "n_tokens", "tokenizer_size")


def _empty_folder(path: Path) -> None:
    """Delete everything in a run folder except its writer lock (held by the caller)."""
    for p in path.iterdir():
        if p.name in (LOCK_NAME, LOCK_HOLDER):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def check_model_folder(path: Path, todo: str) -> None:
    """Check that a saved model's config.json parses and its model.safetensors header and size are whole."""
    read_json(path / "config.json", todo)
    weights = path / "model.safetensors"
    if not weights.exists():
        if (path / "model.safetensors.index.json").exists():
            return
        raise damaged(weights, "missing", todo)
    check_safetensors(weights, todo)


def check_safetensors(path: Path, todo: str) -> None:
    """Raise :class:`DamagedFileError` naming ``path`` when its header does not parse or the file is cut short."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ValueError("shorter than its 8-byte header length")
            n = int.from_bytes(head, "little")
            if n > size - 8:
                raise ValueError(f"header of {n} bytes does not fit in {size} bytes")
            header = json.loads(f.read(n))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        if 8 + n + end != size:
            raise ValueError(f"file has {size} bytes, its header describes {8 + n + end}")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise damaged(path, e, todo) from None


def parse_variants(values: Any, name: str = "variants") -> list[Variant]:
    """Validate a list of variant names (or one comma-separated string): non-empty, parseable, no repeats."""
    if isinstance(values, (str, Variant)):
        values = [v.strip() for v in str(values).split(",") if v.strip()] if isinstance(values, str) else [values]
    try:
        items = list(values)
    except TypeError:
        raise ValueError(f"{name}: {values!r} is not a list of variants (e.g. ['tied', 'untied'])") from None
    if not items:
        raise ValueError(f"{name}: empty; give one or more of 'tied', 'untied', 'tied_in<k>', 'tied_out<k>' "
                         "(e.g. ['tied', 'untied'])")
    out = []
    for v in items:
        try:
            out.append(Variant.parse(v))
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    names = [v.name for v in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{name}: {names!r} repeats a variant")
    return out
