"""Files of a run folder that are not about the Run itself: atomic writes, strict JSON, metrics logs, saved models.

A file a reader must never see half-written (JSON, tables, metrics logs, token splits, report pages) is written
through a temporary file and a rename (:func:`tiebias.system.atomic.atomic_path`, the one place that does it), never through a symbolic
link (:func:`tiebias.system.atomic.private_folder`; logs appended a row at a time: :func:`open_append`); every JSON file is strict
JSON (no NaN/Infinity: ``null`` plus a reason); every file a reader finds damaged is named in the error together
with what to do about it (:class:`DamagedFileError`).
"""

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
_NULL_REASONS = "null_reasons"


class RunFolderError(ValueError):
    """A run folder cannot be used as asked (locked by another writer, or a damaged file)."""


class DamagedFileError(RunFolderError):
    """A file of the run folder does not load; the message names it and says what to do."""


class UnsafeFileError(DamagedFileError):
    """A torch file that refers to Python objects (which could run code when loaded), where only tensors and plain
    values belong; it is never loaded."""


def damaged(path: Path, err: BaseException | str, todo: str) -> DamagedFileError:
    """The error for a file that does not load: the file, the reason, and what to do."""
    why = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    return DamagedFileError(f"{path}: damaged or unreadable ({why}); {todo}")


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def load_torch_file(path: Path, holds: str, todo: str, *, map_location: str | torch.device = "cpu") -> Any:
    """A torch file read with ``weights_only=True``: tensors and plain values only, so no code of the file runs.

    A file that refers to any other Python object raises :class:`UnsafeFileError`, one that does not load
    :class:`DamagedFileError`; both name the file, what it should hold (``holds``) and ``todo``. Torch's own
    message is cut to its first sentence and dropped when it gives advice about ``weights_only``.
    """
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # any loader error: a damaged, foreign or unsafe file
        text = " ".join(str(e).split())
        found = _GLOBAL.search(text)
        if found:
            raise UnsafeFileError(f"{path}: refused: it refers to the Python object {found.group(1)}, and a file like "
                                  f"this can run code when it is opened; it should hold only {holds} (tensors and "
                                  f"plain values); {todo}") from None
        first = text.split(". ")[0].rstrip(".")
        why = f"{type(e).__name__}: {first}" if first and "weights_only" not in first else \
            f"{type(e).__name__}: not a torch file of tensors and plain values"
        raise damaged(path, why, f"it should hold {holds}; {todo}") from None


def sanitise_json(data: Any, reasons: dict[str, str] | None = None) -> tuple[Any, dict[str, str]]:
    """Strict-JSON copy of ``data``: NaN/Infinity become None; returns it and {json path: reason} for each.

    ``reasons`` gives the reason to record for a path (e.g. ``{"spread": "one seed: no spread"}``);
    other non-finite numbers get a generic reason naming the value. numpy scalars and arrays and
    paths are converted to plain JSON types.
    """
    found: dict[str, str] = {}
    given = reasons or {}

    def walk(x: Any, where: str) -> Any:
        """The strict-JSON copy of ``x`` found at json path ``where``."""
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
    write_text_atomic(path, text)


def remove_entry(path: Path) -> None:
    """Remove a file, a folder or a symbolic link (the link itself, never what it points to); nothing if missing."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


@contextmanager
def atomic_folder(path: Path, prefix: str | None = None) -> Iterator[Path]:
    """A folder name to build a folder at (not yet created), put in place of ``path`` (replacing it, or a link
    there) when the block ends; if the block raises, it is removed and ``path`` is left as it was.

    The name lies in a :func:`private_folder` (named ``<prefix>...``, default ``.<name>.``) next to ``path``, so
    nothing planted in the folder is written through. The folder above ``path`` is made if missing.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with private_folder(path.parent, f".{path.name}." if prefix is None else prefix) as d:
        tmp = d / path.name
        yield tmp
        remove_entry(path)
        os.replace(tmp, path)


@contextmanager
def files_into(folder: Path) -> Iterator[Path]:
    """A :func:`private_folder` inside ``folder`` (made if missing) to write files into; each is renamed into
    ``folder`` when the block ends, replacing a file or a link of its name (never writing where a link points).

    For writers that write several files into a folder they are given (``save_pretrained``, a lens's ``save``)
    among files the folder keeps; if the block raises, nothing is moved.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with private_folder(folder, ".files.") as d:
        yield d
        for f in sorted(d.iterdir()):
            os.replace(f, folder / f.name)


def open_append(path: Path, encoding: str = "utf-8", newline: str | None = None) -> IO[str]:
    """``path`` opened to append text, created if missing; a symbolic link there is refused, never written through.

    For logs written a row at a time (metrics), which a rename per row cannot serve: ``O_NOFOLLOW`` makes the open
    fail on a link, and the error names the file and what to do.
    """
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


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


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


COSINE = (-1.001, 1.001)
"""What a cosine can be; float32 rounding moves one by far less than the 0.001 beyond 1 allowed."""
COSINE_CHANGE = (-2.002, 2.002)
"""What a difference of two cosines can be."""
SHARE = (0.0, 1.0)
"""What a share or an overlap can be."""
KL_BITS = (-1e-6, 1e6)
"""What a KL in bits read from a table can be: never negative beyond rounding, and 1e6 bits would need
log-probabilities a million bits apart, which no model's float32 logits give; a larger value is a damaged file."""
FINITE = (-sys.float_info.max, sys.float_info.max)
"""Any finite number."""


def _table_error(path: Path, why: str, todo: str) -> DamagedFileError:
    return DamagedFileError(f"{path}: {why}; {todo}")


def read_table(path: Path, todo: str, *, columns: tuple[str, ...] = (),
               bounds: dict[str, tuple[float, float]] | None = None,
               allow_empty: bool = False) -> pd.DataFrame:
    """A metrics table (``metrics/<name>.csv``) read as untrusted, every refusal naming the file and ``todo``.

    Args:
        path: the CSV file (a missing one raises FileNotFoundError).
        todo: what to do about a damaged file (e.g. rerun the notebook that writes it).
        columns: the columns the reader needs; a missing one is named.
        bounds: column -> (low, high): the column's values must be numbers (empty or NaN: missing) within the
            bounds (:data:`COSINE`, :data:`SHARE`, :data:`KL_BITS`, ...); a name ending in ``*`` covers every column
            it starts.
        allow_empty: a table the kit writes with its header only when there is nothing to measure (04's
            ingredients with one seed, say): returned empty, its columns not checked.

    Returns:
        The table, with at least one row unless ``allow_empty``.

    Refused (:class:`DamagedFileError`): text that does not decode or parse, no header, no rows, a missing column, a
    value that is not a number, or one outside its column's bounds (an impossible cosine, share or KL), each named
    with its column and row.
    """
    try:
        table = pd.read_csv(io.StringIO(_read_text(path, todo)))
    except (ValueError, pd.errors.ParserError) as e:  # EmptyDataError is a ValueError
        raise _table_error(path, f"not a readable table ({type(e).__name__}: {e})", todo) from None
    if table.empty and allow_empty:
        return table
    if table.empty:
        raise _table_error(path, f"the table has no rows (columns {list(table.columns)})", todo)
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise _table_error(path, f"column(s) {', '.join(map(repr, missing))} missing (the file has {list(table.columns)})",
                      todo)
    for name, (lo, hi) in (bounds or {}).items():
        cols = [c for c in table.columns if c.startswith(name[:-1])] if name.endswith("*") else \
            [name] if name in table.columns else []
        for c in cols:
            x = pd.to_numeric(table[c], errors="coerce")
            bad = x.isna() & table[c].notna()
            if bad.any():
                i = int(bad.to_numpy().nonzero()[0][0])
                raise _table_error(path, f"column {c!r}, row {i + 1}: {table[c].iloc[i]!r} is not a number", todo)
            out = ~x.between(lo, hi) & x.notna()
            if out.any():
                i = int(out.to_numpy().nonzero()[0][0])
                raise _table_error(path, f"column {c!r}, row {i + 1}: {float(x.iloc[i])!r} is impossible there (allowed: "
                              f"{lo:g} to {hi:g})", todo)
            table[c] = x
    return table


def check_model_folder(path: Path, todo: str) -> None:
    """Check that a saved model's config.json parses and its model.safetensors header and size are whole."""
    read_json(path / CONFIG_NAME, todo)
    weights = path / WEIGHTS_NAME
    if not weights.exists():
        if (path / WEIGHTS_INDEX_NAME).exists():
            return
        raise damaged(weights, "missing", todo)
    check_safetensors(weights, todo)


def weights_sha256(path: Path, todo: str) -> str:
    """sha256 of a saved model's weights (of ``model.safetensors``; a sharded model's: of its index, then each shard
    by name): the identity of exactly these weights, which a claim's record keeps to notice a model retrained since."""
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


_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
"""Bytes per element of the safetensors dtypes (others are left to the loader)."""


def check_safetensors(path: Path, todo: str) -> None:
    """Raise :class:`DamagedFileError` naming ``path`` when its header does not parse, the file is cut short, or a
    tensor's shape and dtype do not fit the bytes its offsets give (a shape such as [1e9, 1e9] over a few bytes,
    which the loader reports without naming the file)."""
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
        tensors = {k: t for k, t in header.items() if k != "__metadata__"}
        for name, t in tensors.items():
            shape, (begin, end), width = t["shape"], t["data_offsets"], _DTYPE_BYTES.get(t["dtype"])
            if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
                raise ValueError(f"tensor {name!r} has shape {shape!r}, not a list of sizes")
            if width is not None and math.prod(shape) * width != int(end) - int(begin):
                raise ValueError(f"tensor {name!r} of shape {shape} and dtype {t['dtype']} needs "
                                 f"{math.prod(shape) * width} bytes, its data_offsets give {int(end) - int(begin)}")
        end = max((int(t["data_offsets"][1]) for t in tensors.values()), default=0)
        if 8 + n + end != size:
            raise ValueError(f"file has {size} bytes, its header describes {8 + n + end}")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise damaged(path, e, todo) from None


@contextmanager
def pickles_refused(folder: str | Path, what: str) -> Iterator[None]:
    """Around a loader that may read a model's pickled ``*.bin`` weights (transformers does, with ``weights_only``):
    a file that refers to Python objects raises :class:`UnsafeFileError` naming it and saying to convert it to
    safetensors, instead of torch's advice to load it with ``weights_only`` off (which would run its code)."""
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
        if isinstance(a, float) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9):
            continue
        if a != b:
            out[k] = (a, b)
    return out
