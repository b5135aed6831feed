"""Run the notebooks in order with papermill on one run folder and one profile."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import papermill as pm

from . import profiles
from .params import NOTEBOOKS, PARAMS, coerce
from .runs import Run

PATH_PARAMETERS = ("corpus", "tied_source", "untied_source")  # local paths or hub names


def notebooks_dir() -> Path:
    """The folder holding the study notebooks (in the checkout)."""
    return profiles.repo_root() / "notebooks"


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """Turn ``["steps=100", "seeds=0,1"]`` into typed parameters, checked against the vocabulary."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set: {item!r} is not NAME=VALUE (e.g. steps=100)")
        k, v = item.split("=", 1)
        k = k.strip().lower()
        if k in ("profile", "run_dir"):
            raise ValueError(f"{k}: give it with --{k.replace('_', '-')}, not --set")
        out[k] = coerce(k, v)
    for k in PATH_PARAMETERS:  # notebooks run in notebooks/: a path relative to here must not change meaning
        if isinstance(out.get(k), str) and Path(out[k]).expanduser().exists():
            out[k] = str(Path(out[k]).expanduser().resolve())
    return out


def declared_parameters(name: str) -> set[str]:
    """The names a notebook's papermill parameters cell declares."""
    return set(pm.inspect_notebook(str(notebooks_dir() / f"{name}.ipynb")))


def check_study(profile: str | Path | None = None, run_dir: str | Path | None = None,
                overrides: dict[str, Any] | None = None, only: list[str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Check everything a study would run with, writing nothing: the resolved parameters and the notebooks.

    Every override must be a parameter of at least one notebook that will run; otherwise it would be
    accepted and then silently dropped.
    """
    overrides = dict(overrides or {})
    for k in ("profile", "run_dir"):
        if k in overrides:
            raise ValueError(f"{k}: give it as the {k} argument (--{k.replace('_', '-')}), not as an override")
    names = list(only) if only else list(NOTEBOOKS)
    for name in names:
        if name not in NOTEBOOKS or not (notebooks_dir() / f"{name}.ipynb").exists():
            raise ValueError(f"notebook: {name!r} not found; available: {', '.join(NOTEBOOKS)}")
    params = profiles.resolve(profile, run_dir, notebooks=names, **overrides)
    declared = {name: declared_parameters(name) for name in names}
    for k in overrides:
        if not any(k in d for d in declared.values()):
            users = ", ".join(PARAMS[k].notebooks)
            raise ValueError(f"{k}: not a parameter of the notebooks run ({', '.join(names)}); used by {users}")
    return params, names


def run_study(profile: str | Path | None = None, run_dir: str | Path | None = None,
              overrides: dict[str, Any] | None = None, only: list[str] | None = None,
              progress: bool = True) -> dict[str, float]:
    """Execute the notebooks in order into ``<run>/notebooks/``, then write summary.json and report.html.

    All parameters are checked before anything is written; each override reaches every notebook that
    declares it, as the checked (typed) value.
    """
    overrides = dict(overrides or {})
    params, names = check_study(profile, run_dir, overrides, only)
    out_dir = Run(params["run_dir"]).notebooks_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    for name in names:
        src = notebooks_dir() / f"{name}.ipynb"
        declared = declared_parameters(name)
        p = {"profile": params["profile"], "run_dir": params["run_dir"]}
        p.update({k: params[k] for k in overrides if k in declared})
        t0 = time.perf_counter()
        pm.execute_notebook(str(src), str(out_dir / f"{name}.ipynb"), parameters=p, cwd=str(src.parent),
                            progress_bar=progress, kernel_name="python3")
        times[name] = time.perf_counter() - t0
        print(f"{name}: {times[name]:.0f} s -> {out_dir / (name + '.ipynb')}")
    from .report import write_report, write_summary

    run = Run(params["run_dir"])
    if run.config_path.exists():
        print(f"summary: {write_summary(run, times)}")
        print(f"report:  {write_report(run)}")
    return times
