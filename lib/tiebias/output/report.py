"""A run's ``summary.json`` and ``report.html``: the claims' records, the executed notebooks as pages, key figures."""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from pathlib import Path
from typing import Any

from markupsafe import Markup

from tiebias.config.paths import path_text
from tiebias.lens.tables import not_converged_because
from tiebias.output.markup import render
from tiebias.run.files import DamagedFileError, read_json, write_json_atomic, write_text_atomic
from tiebias.run.folder import Run
from tiebias.run.history import timings as kernel_times_of
from tiebias.verdicts.records import CLAIMS, current_results
from tiebias.verdicts.status import DOES_NOT_HOLD, HOLDS, STALE, status_of

KEY_FIGURES = ["01_gradient_flow", "01_claim2_windows", "02_table1", "02_cosine_histograms", "03_tuned_lens_kl",
               "04_dose_response", "04_ingredients", "04_scale_claim4", "01_loss_curves"]


def _finite(t: Any) -> bool:
    return isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)


def write_summary(run: Run, timings: dict[str, float] | None = None, memory: dict[str, float] | None = None) -> Path:
    """``<run>/summary.json``: the claims' records, the models, each notebook's wall time and peak memory (merged
    over the earlier file's and JupyterLab kernels'); a damaged earlier file is rewritten, with a warning.

    Args: run: the run; timings, memory: notebook -> wall time (s) / peak memory (MiB) to merge in.
    Returns: the path of ``summary.json``."""
    for what, unit, values in (("timings", "seconds", timings), ("memory", "MiB", memory)):
        for k, t in (values or {}).items():
            if not _finite(t) or t < 0:
                raise ValueError(f"{what}: {k!r} has {t!r}; need a finite number of {unit} >= 0")
    claims = current_results(run)
    kernel_times, kernel_memory = kernel_times_of(run)  # notebooks run in JupyterLab
    with run.writing("writing summary.json"):
        prev: dict = {}
        path = run.summary_path
        if path.exists():
            try:
                prev = read_json(path, "")
                prev = prev if isinstance(prev, dict) else {}
            except (DamagedFileError, AttributeError):
                warnings.warn(f"{path}: damaged; rewritten from the run folder (timings of earlier notebooks are "
                              "lost)", stacklevel=2)
        write_json_atomic(path, {
            "run": path_text(run.path, "surrogateescape"), "profile": run.profile, "config": run.config,
            "models": run.models().to_dict(orient="records"), "claims": claims,
            "timings_seconds": {**prev.get("timings_seconds", {}), **kernel_times, **(timings or {})},
            "peak_memory_mib": {**prev.get("peak_memory_mib", {}), **kernel_memory, **(memory or {})}})
    return path


def fmt(x: Any) -> str:
    """A recorded number or mapping as the report's cell shows it (4 significant digits, "–" for none)."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, dict):
        return "; ".join(f"{k}: {fmt(v)}" for k, v in x.items())
    return str(x)


def write_report(run: Run) -> Path:
    """``<run>/report.html``: the claims, the key figures and the executed notebooks as offline pages in ``report/``;
    a notebook that does not convert stops the call, named, before anything is written.

    Args: run: the run.
    Returns: the path of ``report.html``."""
    from tiebias.output.notebook import PLOTLY_JS
    from tiebias.output.static_pages import export_offline_html

    with tempfile.TemporaryDirectory(prefix="tiebias-report-") as tmp:  # the notebooks' HTML, before it is written
        scratch, bodies = Path(tmp), {}
        for nb in sorted(run.notebooks_dir.glob("*.ipynb")):
            try:  # plotly figures drawn from their mimetype; plotly.min.js written once, beside the pages
                bodies[nb.stem] = export_offline_html(nb, scratch / f"{nb.stem}.html").read_text(encoding="utf-8")
            except Exception as e:  # a damaged notebook: named, with what to do
                raise DamagedFileError(f"{nb}: does not convert to HTML ({type(e).__name__}: {e}); delete it and "
                                       f"rerun that notebook (python -m tiebias study --only {nb.stem})") from None
        doc = _page(run, list(bodies))
        with run.writing("writing report.html"):
            run.report_dir.mkdir(exist_ok=True)
            for stem, body in bodies.items():
                write_text_atomic(run.report_dir / f"{stem}.html", body)
            if bodies and (scratch / PLOTLY_JS).exists():
                write_text_atomic(run.report_dir / PLOTLY_JS, (scratch / PLOTLY_JS).read_text(encoding="utf-8"))
            write_text_atomic(run.report_path, doc)
    return run.report_path


def _page(run: Run, converted: list[str]) -> str:
    """report.html's text, every value from the run folder escaped by the template."""
    from plotly.offline import get_plotlyjs

    claims = current_results(run)
    figures = [_figure(run, f) for f in KEY_FIGURES if run.figure_path(f, "json").is_file()]
    study = run.config.get("study", {})
    return render("report.html.j2", name=path_text(run.path.name, "replace"), path=path_text(run.path, "replace"),
                  study={k: str(study.get(k)) for k in ("profile", "preset", "steps", "seeds")},
                  notebooks=_notebooks(run, converted), reproduction=(run.path / "reproduction.html").exists(),
                  not_evidence=list(dict.fromkeys(r["not_meaningful"] for r in claims.values() if r.get("not_meaningful"))),
                  claims=[_claim_row(desc, claims.get(c)) for c, desc in CLAIMS.items()], fmt=fmt,
                  figures=figures, plotly_js=Markup(get_plotlyjs()) if figures else "", **_baselines(run))


def _figure(run: Run, name: str) -> dict:
    """A key figure's plotly JSON, every ``<`` escaped so that it cannot end its script element."""
    try:
        fig = read_json(run.figure_path(name, "json"), "")
        data = json.dumps({"data": fig.get("data", []), "layout": fig.get("layout", {})}, allow_nan=False)
    except (DamagedFileError, AttributeError, OSError, ValueError) as e:
        return {"name": name, "json": None, "error": str(e)}
    return {"name": name, "json": Markup(data.replace("<", "\\u003c"))}


def _notebooks(run: Run, converted: list[str]) -> list[dict]:
    """The notebooks run, with their times, linked to their pages (else "run in JupyterLab" if they were)."""
    try:
        times = read_json(run.summary_path, "").get("timings_seconds") or {}
    except (FileNotFoundError, DamagedFileError, AttributeError):
        times = {}
    lab = set(kernel_times_of(run)[0])
    out = []
    for name in sorted(set(converted) | {str(k) for k in times}):
        when = [f"{times[name]:.0f} s"] if _finite(times.get(name)) else []
        if name not in converted and name in lab:
            when.append("run in JupyterLab")
        out.append({"name": name, "page": name in converted, "when": ", ".join(when)})
    return out


def _claim_row(desc: str, r: dict | None) -> dict:
    """A claim's row: its record, status and what follows it (the rule, what did not converge, why stale)."""
    if r is None:
        return {"desc": desc, "record": None}
    verdict = r.get("verdict")  # true / false only for "holds" / "does not hold"; null for any other status
    status = r.get("status") or (status_of(verdict) if isinstance(verdict, bool) else "no status recorded")
    detail = ""
    conv = (r.get("details") or {}).get("convergence")
    if status == STALE:
        detail = str(r.get("stale", {}).get("reason"))
    elif status in (HOLDS, DOES_NOT_HOLD):
        detail = f" (the rule: value > {fmt(r['threshold'])})"
    elif status == "not converged" and isinstance(conv, dict):
        try:
            detail = f": {not_converged_because(conv)}"
        except (KeyError, TypeError, ValueError):  # an older record's layout: the status alone
            pass
    return {"desc": desc, "record": r, "status": status, "detail": detail}


def _baselines(run: Run) -> dict:
    """Each finished model's validation loss beside the run's unigram and bigram baselines."""
    from tiebias.data.tokens import unigram_loss
    from tiebias.verdicts.evidence import validation_bigram

    m = run.models() if run.config_path.exists() else None
    if m is None or not m.complete.any():
        return {"losses": None}
    losses = {r.key: run.summary(r.variant, r.seed).get("final_val_loss") for r in m[m.complete].itertuples()}
    return {"losses": ", ".join(f"{k} {fmt(v) if isinstance(v, (int, float)) else 'missing'}" for k, v in losses.items()),
            "unigram": unigram_loss(run.frequencies(), run.tokens("validation")), "bigram": validation_bigram(run)}
