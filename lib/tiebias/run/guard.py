"""Which folders the kit writes into: its own (marked, :data:`tiebias.run.layout.MARKERS`) or a new or empty one;
never a user's folder, the corpus's, or through a link."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from tiebias.config.checks import HOW_TO_PASS, check_run_dir_text
from tiebias.run.files import RunFolderError, write_json_atomic
from tiebias.run.layout import LOCK_HOLDER, LOCK_NAME, MARKERS, RunLayout

Kind = Literal["run", "pair"]
_WHAT = {"run": "a run folder", "pair": "an external pair's folder"}
_FOR = {"run": "", "pair": " (the folder notebooks 02 / 03 write to for tied_source / untied_source)"}
FOLDER_NAMES = frozenset({"report", "results", "metrics", "figures", "models", "notebooks", "tokenizer", "tokens",
                          "depth", "lens", "checkpoints"})  # a dangling link of one of these names is refused too


class NotARunFolderError(RunFolderError):
    """A folder the kit must not write into: not its own, the corpus's, or of the other kind."""


def _not_ours(p: Path, kind: Kind) -> str:
    """Why a folder without ``kind``'s marker is not the kit's."""
    if (p / "config.json").exists():
        return "its config.json is not one this kit writes (or one of an earlier version, before folders were marked)"
    return f"no {MARKERS[kind]} file" + ("" if kind == "pair" else ", no config.json")


def check_links(path: str | Path, param: str = "run_dir", limit: int = 6) -> None:
    """Refuse a run folder holding, at any depth, a link to a folder, or a dangling one named as a folder the kit
    makes. The run folder itself may be a link."""
    p, found = Path(path), []
    for root, dirs, files in os.walk(p) if p.is_dir() else ():
        for name in [*dirs, *files]:
            q = Path(root) / name
            if q.is_symlink() and (q.is_dir() or (name in FOLDER_NAMES and not q.exists())) and len(found) < limit:
                found.append(f"{q.relative_to(p)} -> {os.readlink(q)}")
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
    if found:
        raise NotARunFolderError(
            f"{param}: run folder {str(p)!r} holds symbolic links to folders ({'; '.join(found)}); the kit writes "
            "only inside the run folder, never through a link, which would put its files (reports, results, models) "
            "where the link points. Replace each link by a real folder (rm the link; copy in what you need from where "
            f"it points), or, to keep a run on another disk, move the whole run folder there and give that path as "
            f"{param} (the run folder itself may be a link). Nothing was written.")


def check_folder(path: str | Path, kind: Kind = "run", *, corpus: Any = None, param: str = "run_dir",
                 existing: bool = False) -> Path:
    """The resolved folder if the kit may write there as ``kind``: the kit's of that kind, or (unless ``existing``)
    new or empty; else :class:`NotARunFolderError`."""
    check_run_dir_text(path, param, NotARunFolderError)
    p = Path(path).expanduser().resolve()
    c = Path(corpus).expanduser() if isinstance(corpus, (str, Path)) and str(corpus).strip() else None
    c = c.resolve() if c is not None and c.exists() else None  # None: the embedded corpus or a hub dataset
    where = ("" if c is None else "is the corpus folder" if p == c else "lies inside the corpus folder"
             if c in p.parents else "holds the corpus" if p in c.parents else "")
    if where:  # the run folder must not be, lie inside or hold the local corpus (a file or a folder of texts)
        raise NotARunFolderError(
            f"{param}, corpus: {param} {str(p)!r} {where} {str(c)!r}; the run's files would be written among "
            f"the texts and read as texts the next time the corpus is loaded. Choose a {param} outside the corpus "
            f"({HOW_TO_PASS}), or move the corpus out of the run folder. Nothing was written.")
    have = next((k for k in MARKERS if p.is_dir() and RunLayout(p).marker_path(k).is_file()), None)
    left = [q.name + ("/" if q.is_dir() else "") for q in sorted(p.iterdir() if p.is_dir() else [])
            if q.name not in (LOCK_NAME, LOCK_HOLDER)]
    if have == kind or (not existing and not left and not p.is_file()):
        check_links(p, param)
        return p
    fix = (f"give a new or empty folder, or leave {param} None for runs/external/<pair>" if kind == "pair"
           else f"choose another {param} ({HOW_TO_PASS})")
    if existing:
        why = ("it does not exist" if not p.exists() else "it is a file" if p.is_file() else
               f"it is {_WHAT[have]}" if have else _not_ours(p, kind))
        raise NotARunFolderError(f"{param}: {str(p)!r} is not a run folder of this kit ({why}); give the folder of an "
                                 "executed study, e.g. runs/default. Nothing was written.")
    if p.is_file():
        raise NotARunFolderError(f"{param}: {str(p)!r} is a file, not a folder; {fix}. Nothing was written.")
    if have is not None:
        held = "holds a run or a model (config.json or models/)" if have == "run" else f"is {_WHAT[have]}"
        raise NotARunFolderError(f"{param}: {str(p)!r} {held}, not {_WHAT[kind]}{_FOR[kind]}: {fix}. "
                                 "Nothing was written.")
    shown = ", ".join(left[:6]) + (", ..." if len(left) > 6 else "")
    raise NotARunFolderError(
        f"{param}: {str(p)!r} is not {_WHAT[kind]} of this kit{_FOR[kind]}: {_not_ours(p, kind)}, and it is "
        f"not empty (it holds {shown}). The kit writes only into its own folders or into a new or empty one, so "
        f"that nothing of yours is replaced. Choose another {param} ({HOW_TO_PASS}). Nothing was written.")


def mark(path: str | Path, kind: Kind = "run") -> None:
    marker = RunLayout(path).marker_path(kind)
    if not marker.is_file():
        write_json_atomic(marker, {"kind": kind, "note": f"{_WHAT[kind]} of the tiebias kit; the kit writes "
                                   "only into folders marked so, or into new or empty ones"})

