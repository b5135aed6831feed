"""The study commands run on a run folder (``.tiebias-study.json``): the reproduction report's rerun command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiebias.config.paths import path_text
from tiebias.run.files import DamagedFileError, read_json, write_json_atomic
from tiebias.run.folder import Run
from tiebias.system.atomic import atomic_path


def _arg_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(_arg_text(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)


def _recorded(run: Run) -> list:
    try:
        recorded = read_json(run.study_commands_path, "")
    except (FileNotFoundError, DamagedFileError):
        return []
    return recorded.get("commands", []) if isinstance(recorded, dict) else []


def record_command(run_dir: str | Path, profile: str, overrides: dict[str, Any], only: list[str] | None) -> bytes | None:
    """Add this study's command to the folder's list before any notebook runs; returns the file's content before."""
    run, path = Run(run_dir), Path(profile)
    entry = {"profile": str(path.resolve()) if path.suffix == ".toml" and path.is_file() else profile,
             "only": list(only or []), "set": [f"{k}={_arg_text(v)}" for k, v in overrides.items()]}
    with run.writing("recording the study command"):
        before = run.study_commands_path.read_bytes() if run.study_commands_path.is_file() else None
        write_json_atomic(run.study_commands_path, {"commands": [*(c for c in _recorded(run) if c != entry), entry]})
    return before


def restore_commands(run_dir: str | Path, before: bytes | None) -> None:
    """Put the list back as :func:`record_command` found it (a study that ran nothing is not repeated)."""
    run = Run(run_dir)
    with run.writing("restoring the study commands"):
        if before is None:
            run.study_commands_path.unlink(missing_ok=True)
        else:
            with atomic_path(run.study_commands_path) as tmp:
                tmp.write_bytes(before)


def study_commands(run: Run) -> list[list[str]]:
    """The arguments after ``python -m tiebias`` of each study command run on ``run``, oldest first."""
    return [["study", "--profile", c["profile"], "--run-dir", path_text(run.path, "replace"),
             *(a for name in c.get("only", []) for a in ("--only", str(name))),
             *(a for item in c.get("set", []) for a in ("--set", str(item)))]
            for c in _recorded(run) if isinstance(c, dict) and isinstance(c.get("profile"), str)]
