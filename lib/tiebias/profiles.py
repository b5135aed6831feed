"""Profiles: small TOML files of study parameters (``smoke``, ``default``, ``gpu``) and their resolution.

Every notebook's papermill parameters default to ``None``, meaning "take it from the profile"; any
value given explicitly (papermill ``-p``, ``make study STEPS=...``) wins. The profile is chosen by the
``profile`` parameter, whose default is the ``TIEBIAS_PROFILE`` environment variable, so a test
harness (nbval) can pick the smoke profile without editing the notebook.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tomllib

from .train import TrainConfig

PROFILE_DIR = Path(__file__).with_name("profiles")
PROFILE_ENV = "TIEBIAS_PROFILE"
RUN_DIR_ENV = "TIEBIAS_RUN_DIR"


def available() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name: str | Path) -> dict[str, Any]:
    """Parameters of a shipped profile (by name) or of any TOML file (by path)."""
    path = Path(name)
    if path.suffix != ".toml":
        path = PROFILE_DIR / f"{name}.toml"
    if not path.exists():
        raise ValueError(f"profile: unknown value {str(name)!r}; allowed: {', '.join(available())} "
                         "or a path to a .toml file")
    with path.open("rb") as f:
        return tomllib.load(f)


def default_profile() -> str:
    return os.environ.get(PROFILE_ENV, "default")


def repo_root() -> Path:
    """The checkout root when installed in editable mode, else the current directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def resolve(profile: str | None = None, run_dir: str | Path | None = None, **overrides: Any) -> dict[str, Any]:
    """Merge a profile with explicit overrides (``None`` means "not given") and fill in the run folder."""
    name = profile or default_profile()
    params = load_profile(name)
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in params:
            raise ValueError(f"{k}: not a parameter of profile {name!r}; known: {', '.join(sorted(params))}")
        params[k] = v
    rd = run_dir or os.environ.get(RUN_DIR_ENV) or repo_root() / "runs" / Path(str(name)).stem
    params["profile"] = str(name)
    params["run_dir"] = str(Path(rd).expanduser().resolve())
    for key in ("seeds", "ablate_seeds"):
        if key in params:
            params[key] = _int_list(key, params[key])
    if "variants" in params and isinstance(params["variants"], str):
        params["variants"] = [v.strip() for v in params["variants"].split(",") if v.strip()]
    return params


def _int_list(name: str, value: Any) -> list[int]:
    """Seeds may arrive as a list, an int, or a string such as "0,1,2" (from the command line)."""
    if isinstance(value, str):
        value = [v for v in value.replace(" ", "").split(",") if v]
    if isinstance(value, int):
        value = [value]
    try:
        out = [int(v) for v in value]
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not a list of integers (e.g. [0, 1, 2] or '0,1,2')") from None
    if not out or any(v < 0 for v in out):
        raise ValueError(f"{name}: {value!r} is not allowed; need one or more integers >= 0")
    return out


def train_config(params: dict[str, Any], **changes: Any) -> TrainConfig:
    """The TrainConfig named by resolved parameters (extra keys are ignored)."""
    keys = TrainConfig.__dataclass_fields__.keys()
    cfg = TrainConfig(**{k: params[k] for k in keys if k in params})
    for k, v in changes.items():
        setattr(cfg, k, v)
    return cfg.validate()
