"""Which folders the kit writes into: its own run folders, or a new or empty folder, never a user's folder.

A run folder is marked when the kit first creates it (:data:`tiebias.run.layout.MARKERS`: one file for a
run, another for an external pair's folder); a run folder made by an earlier version of the kit is
recognised by its ``config.json`` (the kit's own keys). Any other folder that holds files is refused
before anything is written, and so is a run folder that is, holds or lies inside a local corpus
(the run's files would be read as texts the next time the corpus is loaded).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from tiebias.config.checks import HOW_TO_PASS
from tiebias.config.checks import check_run_dir_text as check_text
from tiebias.config.paths import NOTEBOOKS
from tiebias.run.files import RunFolderError, write_json_atomic
from tiebias.run.layout import LOCK_HOLDER, LOCK_NAME, MARKERS, RunLayout

Kind = Literal["run", "pair"]
KIT_CONFIG_KEYS = ("corpus", "vocab_size")  # every config.json the kit writes has these
KIT_NOTEBOOKS = tuple(f"{name}.ipynb" for name in NOTEBOOKS)
_WHAT = {"run": "a run folder", "pair": "an external pair's folder"}
_FOR = {"run": "", "pair": " (the folder notebooks 02 / 03 write to for tied_source / untied_source)"}


class NotARunFolderError(RunFolderError):
    """A folder the kit must not write into: not its own, the corpus's, or of the other kind."""


def check_run_dir_text(run_dir: Any, param: str = "run_dir") -> None:
    """Refuse an empty or whitespace-only folder name (the config's rule), as :class:`NotARunFolderError`."""
    check_text(run_dir, param, NotARunFolderError)


def _kit_config(path: Path) -> tuple[bool, str]:
    """Whether ``config.json`` is one the kit wrote (its keys), and if not, why."""
    try:
        cfg = json.loads(RunLayout(path).config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return False, f"its config.json does not load as JSON, {type(e).__name__}"
    if isinstance(cfg, dict) and all(k in cfg for k in KIT_CONFIG_KEYS):
        return True, ""
    return False, f"its config.json is not one this kit writes, with no {' / '.join(KIT_CONFIG_KEYS)} keys"


def folder_kind(path: str | Path) -> Kind | None:
    """``"run"`` or ``"pair"`` for a folder of the kit (marked, or an earlier version's run), else None."""
    layout = RunLayout(path)
    for kind in MARKERS:
        if layout.marker_path(kind).is_file():
            return kind  # type: ignore[return-value]
    return "run" if layout.config_path.is_file() and _kit_config(layout.path)[0] else None


def _leftovers(path: Path) -> list[str]:
    """The entries of a folder that make it non-empty: all but a writer lock and the kit's executed notebooks."""
    out = []
    for p in sorted(path.iterdir()):
        if p.name in (LOCK_NAME, LOCK_HOLDER):
            continue
        if p.name == "notebooks" and p.is_dir() and all(q.name in KIT_NOTEBOOKS for q in p.iterdir()):
            continue  # left by an earlier version's study, which made notebooks/ before the run
        out.append(p.name + ("/" if p.is_dir() else ""))
    return out


def _inside(a: Path, b: Path) -> bool:
    """Whether ``a`` is ``b`` or lies inside it."""
    return a == b or b in a.parents


def check_corpus(path: Path, corpus: Any, param: str = "run_dir") -> None:
    """Refuse a run folder that is, holds or lies inside the local corpus (a file or a folder of texts)."""
    if not isinstance(corpus, (str, Path)) or not str(corpus).strip():
        return
    c = Path(corpus).expanduser()
    if not c.exists():
        return  # the embedded corpus or a hub dataset: nothing on disk to protect
    c = c.resolve()
    if _inside(path, c):
        where = "is the corpus folder" if path == c else "lies inside the corpus folder"
    elif _inside(c, path):
        where = "holds the corpus"
    else:
        return
    raise NotARunFolderError(
        f"{param}, corpus: {param} {str(path)!r} {where} {str(c)!r}; the run's files would be written among "
        f"the texts and read as texts the next time the corpus is loaded. Choose a {param} outside the corpus "
        f"({HOW_TO_PASS}), or move the corpus out of the run folder. Nothing was written.")


FOLDER_NAMES = frozenset({"report", "results", "metrics", "figures", "models", "notebooks", "tokenizer", "tokens",
                          "depth", "lens", "checkpoints"})
"""Names of folders the kit makes in a run folder (at some depth): a dangling link under one of them is refused too."""


def linked_folders(path: Path, limit: int = 6) -> list[tuple[Path, str]]:
    """Up to ``limit`` symbolic links inside a folder (at any depth, none followed) that point to a folder, or point
    nowhere under the name of a folder the kit makes, with their targets: the kit would write where they point."""
    found: list[tuple[Path, str]] = []
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            p = Path(root) / name
            if p.is_symlink() and (p.is_dir() or (name in FOLDER_NAMES and not p.exists())):
                found.append((p, os.readlink(p)))
                if len(found) >= limit:
                    return found
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
    return found


def check_links(path: str | Path, param: str = "run_dir") -> None:
    """Refuse a run folder holding a symbolic link to a folder (``report/``, ``results/``, ``models/``, ...) or a
    dangling one, as :class:`NotARunFolderError`: the kit writes only inside the run folder, never through a link.

    The run folder itself may be a link (a run kept on another disk).
    """
    p = Path(path)
    if not p.is_dir():
        return
    found = linked_folders(p)
    if not found:
        return
    shown = "; ".join(f"{q.relative_to(p)} -> {target}" for q, target in found)
    raise NotARunFolderError(
        f"{param}: run folder {str(p)!r} holds symbolic links to folders ({shown}); the kit writes only inside the "
        "run folder, never through a link, which would put its files (reports, results, models) where the link "
        "points. Replace each link by a real folder (rm the link; copy in what you need from where it points), or, "
        f"to keep a run on another disk, move the whole run folder there and give that path as {param} (the run "
        "folder itself may be a link). Nothing was written.")


def check_folder(path: str | Path, kind: Kind = "run", *, corpus: Any = None, param: str = "run_dir",
                 kit_made: bool = False) -> Path:
    """The resolved folder if the kit may write there as ``kind``; else :class:`NotARunFolderError`, nothing written.

    Allowed: a new or empty folder, or a folder of the kit of the same kind. ``kit_made`` accepts a
    folder without a marker at a place only the kit names (an earlier version's external pair folder).
    """
    check_run_dir_text(path, param)
    p = Path(path).expanduser().resolve()
    check_corpus(p, corpus, param)
    if p.exists() and not p.is_dir():
        raise NotARunFolderError(f"{param}: {str(p)!r} is a file, not a folder; choose another {param} "
                                 f"({HOW_TO_PASS}). Nothing was written.")
    have = folder_kind(p) if p.exists() else None
    if have == kind or not p.exists() or (have is None and kit_made):
        check_links(p, param)
        return p
    if have is not None:
        fix = (f"give a new or empty folder, or leave {param} None for runs/external/<pair>" if kind == "pair"
               else f"choose another {param} ({HOW_TO_PASS})")
        held = "holds a run or a model (config.json or models/)" if have == "run" else f"is {_WHAT[have]}"
        raise NotARunFolderError(f"{param}: {str(p)!r} {held}, not {_WHAT[kind]}{_FOR[kind]}: {fix}. "
                                 "Nothing was written.")
    left = _leftovers(p)
    if not left:
        return p
    why = f"no {MARKERS[kind]} file" + ("" if kind == "pair" else ", no config.json")
    if kind == "run" and RunLayout(p).config_path.exists():
        why = _kit_config(p)[1]
    shown = ", ".join(left[:6]) + (", ..." if len(left) > 6 else "")
    raise NotARunFolderError(
        f"{param}: {str(p)!r} is not {_WHAT[kind]} of this kit{_FOR[kind]}: {why}, and it is not empty (it "
        f"holds {shown}). The kit writes only into its own folders or into a new or empty one, so that nothing "
        f"of yours is replaced. Choose another {param} ({HOW_TO_PASS}). Nothing was written.")


def check_run(path: str | Path, param: str = "run") -> Path:
    """The resolved folder if it is an existing run folder of the kit (marked, or an earlier version's run: the rule
    of :func:`check_folder`), holding no linked folder; else :class:`NotARunFolderError`, nothing written.

    For commands that write into a run folder they are given and never create one (``reproduction``).
    """
    check_run_dir_text(path, param)
    p = Path(path).expanduser().resolve()
    have = folder_kind(p) if p.is_dir() else None
    if have != "run":
        why = ("it does not exist" if not p.exists() else "it is a file" if not p.is_dir() else
               f"it is {_WHAT[have]}" if have is not None else
               _kit_config(p)[1] if RunLayout(p).config_path.exists() else f"no {MARKERS['run']} file, no config.json")
        raise NotARunFolderError(f"{param}: {str(p)!r} is not a run folder of this kit ({why}); give the folder of an "
                                 "executed study, e.g. runs/default. Nothing was written.")
    check_links(p, param)
    return p


def mark(path: str | Path, kind: Kind = "run") -> None:
    """Write the marker that makes ``path`` a folder of the kit (the folder is created if missing)."""
    marker = RunLayout(path).marker_path(kind)
    if not marker.is_file():
        write_json_atomic(marker, {"kind": kind, "note": f"{_WHAT[kind]} of the tiebias kit; the kit writes "
                                   "only into folders marked so, or into new or empty ones"})


def empty_folder(path: Path) -> None:
    """Delete everything in a run folder except its writer lock (held by the caller): ``overwrite=True``."""
    import shutil

    for p in path.iterdir():
        if p.name in (LOCK_NAME, LOCK_HOLDER):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
