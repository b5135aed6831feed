"""Files of a run folder: atomic writes never through a link, strict JSON, logs and tables read as untrusted, models
checked before they load; a damaged file is named with what to do (:class:`DamagedFileError`)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import torch

from tiebias.run.layout import CONFIG_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME
from tiebias.system.atomic import atomic_path, private_folder

OVERWRITE_HINT = "set overwrite=True (notebook parameter / --set overwrite=true)"


class RunFolderError(ValueError):
    """A run folder cannot be used as asked (locked by another writer, or a damaged file)."""


class ParameterChangedError(ValueError):
    """Asked values differ from those a run folder's models or data were made with; says how to try them apart."""

    def __init__(self, folder: str | Path, diff: dict[str, tuple[Any, Any]], what: str, instead: str) -> None:
        name, (_, new) = next(iter(diff.items()))
        tag = re.sub(r"[^A-Za-z0-9._-]+", "_", str(new)).strip("_") or "new"
        fresh = str(Path(folder).with_name(f"{Path(folder).name}-{name}-{tag}"))
        changed = "; ".join(f"{k}: folder has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
        super().__init__(
            f"{changed} ({folder}: {what}). Try a variation in a fresh run folder: run_dir = \"{fresh}\" in the "
            f"parameters cell, --run-dir {fresh} on the command line (make study RUN={fresh}), -p run_dir {fresh} "
            f"with papermill; or {instead}")
        self.diff, self.fresh = diff, fresh

    def _render_traceback_(self) -> list[str]:
        """IPython shows the message alone instead of a traceback (``%tb`` still shows it)."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class DamagedFileError(RunFolderError):
    """A file of the run folder does not load; the message names it and says what to do."""


class UnsafeFileError(DamagedFileError):
    """A torch file that refers to Python objects (which could run code when loaded); it is never loaded."""


def damaged(path: Path, err: BaseException | str, todo: str) -> DamagedFileError:
    why = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    return DamagedFileError(f"{path}: damaged or unreadable ({why}); {todo}")


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def load_torch_file(path: Path, holds: str, todo: str, *, map_location: str | torch.device = "cpu") -> Any:
    """A torch file read with ``weights_only=True``; a Python object in it is refused (:class:`UnsafeFileError`)."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # any loader error: a damaged, foreign or unsafe file
        text = " ".join(str(e).split())
        if found := _GLOBAL.search(text):
            raise UnsafeFileError(f"{path}: refused: it refers to the Python object {found.group(1)}, and a file like "
                                  f"this can run code when it is opened; it should hold only {holds} (tensors and "
                                  f"plain values); {todo}") from None
        first = text.split(". ")[0].rstrip(".")
        why = first if first and "weights_only" not in first else "not a torch file of tensors and plain values"
        raise damaged(path, f"{type(e).__name__}: {why}", f"it should hold {holds}; {todo}") from None


def sanitise_json(data: Any, reasons: dict[str, str] | None = None) -> tuple[Any, dict[str, str]]:
    """Strict-JSON copy of ``data`` and {json path: reason} for each NaN/Infinity made None (``reasons`` by path);
    numpy values, 1-element tensors and paths become plain JSON."""
    found: dict[str, str] = {}

    def walk(x: Any, where: str) -> Any:
        if isinstance(x, dict):
            return {str(k): walk(v, f"{where}.{k}" if where else str(k)) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(x)]
        if isinstance(x, np.ndarray):
            return walk(x.tolist(), where)
        if isinstance(x, np.generic) or (isinstance(x, torch.Tensor) and x.numel() == 1):
            return walk(x.item(), where)
        if isinstance(x, float) and not math.isfinite(x):
            found[where] = (reasons or {}).get(where, f"{x!r} is not a JSON number")
            return None
        if x is None or isinstance(x, (str, int, float)):
            return x
        if isinstance(x, Path):
            return str(x)
        raise TypeError(f"{where or 'value'}: {type(x).__name__} is not JSON serialisable")

    return walk(data, ""), found


def write_json_atomic(path: Path, data: Any, reasons: dict[str, str] | None = None) -> None:
    """Write strict JSON atomically; a dict records why each non-finite number is ``null`` under ``null_reasons``."""
    clean, nulls = sanitise_json(data, reasons)
    if nulls:
        if not isinstance(clean, dict):
            raise ValueError(f"{path.name}: non-finite values at {sorted(nulls)} and no place to say why")
        clean["null_reasons"] = {**clean.get("null_reasons", {}), **nulls}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(clean, indent=2, sort_keys=True, allow_nan=False) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def remove_entry(path: Path) -> None:
    """Remove a file, a folder or a symbolic link (the link itself, never what it points to); nothing if missing."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


@contextmanager
def atomic_folder(path: Path, prefix: str | None = None) -> Iterator[Path]:
    """A name to build a folder at, put in place of ``path`` (or a link there) if the block ends without raising."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with private_folder(path.parent, f".{path.name}." if prefix is None else prefix) as d:
        yield d / path.name
        remove_entry(path)
        os.replace(d / path.name, path)


@contextmanager
def files_into(folder: Path) -> Iterator[Path]:
    """A private folder whose files are renamed into ``folder`` (replacing links) if the block ends without raising."""
    folder.mkdir(parents=True, exist_ok=True)
    with private_folder(folder, ".files.") as d:
        yield d
        for f in sorted(d.iterdir()):
            os.replace(f, folder / f.name)


def open_append(path: Path, encoding: str = "utf-8", newline: str | None = None) -> IO[str]:
    """``path`` opened to append text, created if missing; a symbolic link there is refused (``O_NOFOLLOW``)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError:
        if path.is_symlink():
            raise RunFolderError(f"{path}: is a symbolic link (to {os.readlink(path)}); the kit never writes through "
                                 "a link, which could change a file outside the run folder. Remove the link (rm "
                                 "that path; if it pointed at the real log, copy that file there) and run "
                                 "again.") from None
        raise
    return open(fd, "a", encoding=encoding, newline=newline)


def _read_text(path: Path, todo: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as e:
        raise damaged(path, e, todo) from None


def read_json(path: Path, todo: str) -> Any:
    """A JSON file the kit wrote; a missing file raises FileNotFoundError, a damaged one names it and ``todo``."""
    try:
        return json.loads(_read_text(path, todo))
    except json.JSONDecodeError as e:
        raise damaged(path, e, todo) from None


_NUMERIC = re.compile(r"^\s*$|^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^[-+]?(nan|inf|infinity)$", re.I)


def read_log_lines(path: Path, header: list[str] | None = None, *,
                   todo: str) -> tuple[list[str], list[tuple[int, str]], int]:
    """A metrics CSV checked line by line: (columns, [(step, line)], rows dropped: a last row cut mid-write)."""
    lines = _read_text(path, todo).split("\n")
    dropped = int(lines.pop() != "")  # no final newline: the writer was stopped in the middle of this row
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
    at, rows = cols.index("step"), []
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
    return pd.read_csv(io.StringIO(",".join(cols) + "\n" + "".join(line + "\n" for _, line in rows)))


COSINE = (-1.001, 1.001)  # what a cosine can be, float32 rounding allowed for
COSINE_CHANGE = (-2.002, 2.002)  # a difference of two cosines
SHARE = (0.0, 1.0)  # a share or an overlap
KL_BITS = (-1e-6, 1e6)  # a KL in bits: never negative beyond rounding; no float32 logits give a million bits
FINITE = (-sys.float_info.max, sys.float_info.max)


def read_table(path: Path, todo: str, *, columns: tuple[str, ...] = (),
               bounds: dict[str, tuple[float, float]] | None = None, allow_empty: bool = False) -> pd.DataFrame:
    """A metrics table read as untrusted: it must parse, have rows (unless ``allow_empty``) and ``columns``, and hold
    numbers within ``bounds`` (``name*``: every column it starts); else the file, column and row are named."""
    try:
        table = pd.read_csv(io.StringIO(_read_text(path, todo)))
    except (ValueError, pd.errors.ParserError) as e:  # EmptyDataError is a ValueError
        raise damaged(path, f"not a readable table ({type(e).__name__}: {e})", todo) from None
    if table.empty:
        if allow_empty:
            return table
        raise damaged(path, f"the table has no rows (columns {list(table.columns)})", todo)
    if missing := [c for c in columns if c not in table.columns]:
        raise damaged(path, f"column(s) {', '.join(map(repr, missing))} missing (the file has {list(table.columns)})",
                      todo)
    for name, (lo, hi) in (bounds or {}).items():
        for c in [c for c in table.columns if (c.startswith(name[:-1]) if name.endswith("*") else c == name)]:
            x = pd.to_numeric(table[c], errors="coerce")
            if (bad := x.isna() & table[c].notna()).any():
                i = int(bad.to_numpy().nonzero()[0][0])
                raise damaged(path, f"column {c!r}, row {i + 1}: {table[c].iloc[i]!r} is not a number", todo)
            if (out := ~x.between(lo, hi) & x.notna()).any():
                i = int(out.to_numpy().nonzero()[0][0])
                raise damaged(path, f"column {c!r}, row {i + 1}: {float(x.iloc[i])!r} is impossible there "
                              f"(allowed: {lo:g} to {hi:g})", todo)
            table[c] = x
    return table


def check_model_folder(path: Path, todo: str) -> None:
    """A saved model's config.json must parse and its model.safetensors be whole (or its shards' index exist)."""
    read_json(path / CONFIG_NAME, todo)
    weights = path / WEIGHTS_NAME
    if weights.exists():
        check_safetensors(weights, todo)
    elif not (path / WEIGHTS_INDEX_NAME).exists():
        raise damaged(weights, "missing", todo)


def weights_sha256(path: Path, todo: str) -> str:
    """sha256 of a saved model's weights (``model.safetensors``; sharded: the index, then each shard by name)."""
    index = path / WEIGHTS_INDEX_NAME
    files = [path / WEIGHTS_NAME] if (path / WEIGHTS_NAME).exists() or not index.exists() else \
        [index, *sorted(path.glob("model-*.safetensors"))]
    digest = hashlib.sha256()
    for f in files:
        try:
            with f.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        except OSError as e:
            raise damaged(f, e, todo) from None
    return digest.hexdigest()


def check_safetensors(path: Path, todo: str) -> None:
    """Refuse a safetensors file whose header does not parse or fit its bytes (``safe_open``, no tensor read)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt"):
            pass
    except Exception as e:  # SafetensorError, OSError: the loader's words, with the file named
        raise damaged(path, e, todo) from None


@contextmanager
def pickles_refused(folder: str | Path, what: str) -> Iterator[None]:
    """Around a loader of pickled ``*.bin`` weights: one referring to Python objects is refused by name."""
    try:
        yield
    except Exception as e:
        text = " ".join(str(e).split())
        if "weights_only" not in text and "Weights only load failed" not in text:
            raise
        found = _GLOBAL.search(text)
        files = sorted(Path(folder).glob("*.bin")) if Path(folder).is_dir() else []
        named = ", ".join(map(str, files)) or f"the pickled weights of {folder}"
        refers = f"the Python object {found.group(1)}" if found else "Python objects"
        raise UnsafeFileError(f"{what}: {named}: refused: a pickled PyTorch weights file that refers to {refers} "
                              "besides tensors, and a file like this can run code when it is opened; nothing in it "
                              "was run. Convert it to safetensors where you trust its origin (load it there and "
                              "save_pretrained(folder, safe_serialization=True)), or use a copy of the model that "
                              "has model.safetensors") from None


def diff_config(old: dict, new: dict, keys: list[str] | None = None) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ between two configs (floats compared with a relative tolerance)."""
    out = {}
    for k in keys if keys is not None else sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a != b and not (isinstance(a, float) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)):
            out[k] = (a, b)
    return out
