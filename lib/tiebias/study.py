"""Run the notebooks in order with papermill on one run folder and one profile."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import papermill as pm

from . import profiles

NOTEBOOKS = ("01_train", "02_align", "03_lens", "04_ablate")


def notebooks_dir() -> Path:
    return profiles.repo_root() / "notebooks"


def parse_set(items: list[str] | None) -> dict[str, Any]:
    """Turn ``["steps=100", "seeds=0,1"]`` into papermill parameters (numbers parsed, lists kept as text)."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set: {item!r} is not NAME=VALUE (e.g. steps=100)")
        k, v = item.split("=", 1)
        k = k.strip().lower()
        for cast in (int, float):
            try:
                out[k] = cast(v)
                break
            except ValueError:
                continue
        else:
            out[k] = {"true": True, "false": False}.get(v.lower(), v)
    return out


def run_study(profile: str | None = None, run_dir: str | Path | None = None, overrides: dict[str, Any] | None = None,
              only: list[str] | None = None, progress: bool = True) -> dict[str, float]:
    """Execute the notebooks in order into ``<run>/notebooks/``, then write summary.json and report.html."""
    params = profiles.resolve(profile, run_dir)  # validates the profile name, fixes the run folder
    overrides = dict(overrides or {})
    profile_keys = set(params)
    unknown = set(overrides) - profile_keys
    if unknown:
        raise ValueError(f"parameters {sorted(unknown)} are not known; known: {', '.join(sorted(profile_keys))}")
    out_dir = Path(params["run_dir"]) / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(NOTEBOOKS) if not only else only
    times: dict[str, float] = {}
    for name in names:
        src = notebooks_dir() / f"{name}.ipynb"
        if not src.exists():
            if only:
                raise ValueError(f"notebook: {name!r} not found; available: {', '.join(NOTEBOOKS)}")
            continue
        declared = set(pm.inspect_notebook(str(src)))
        p = {"profile": params["profile"], "run_dir": params["run_dir"]}
        p.update({k: v for k, v in overrides.items() if k in declared})
        t0 = time.perf_counter()
        pm.execute_notebook(str(src), str(out_dir / f"{name}.ipynb"), parameters=p, cwd=str(src.parent),
                            progress_bar=progress, kernel_name="python3")
        times[name] = time.perf_counter() - t0
        print(f"{name}: {times[name]:.0f} s -> {out_dir / (name + '.ipynb')}")
    from .report import write_report, write_summary
    from .runs import Run

    run = Run(params["run_dir"])
    if run.config_path.exists():
        print(f"summary: {write_summary(run, times)}")
        print(f"report:  {write_report(run)}")
    return times
