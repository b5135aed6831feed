"""Headline results, ``summary.json`` and the HTML report of a run.

Each notebook records its claim's headline with :func:`record`: our value, its spread over seeds, the
noise floor where one applies, the paper's value, and a verdict that is *computed* here from the
value and a threshold (``value > threshold``), never typed in. :func:`write_summary` gathers them into
``<run>/summary.json``; :func:`write_report` converts the executed notebooks to HTML and writes an
index page ``<run>/report.html`` with the summary table and the key figures.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from .runs import Run, write_json_atomic

CLAIMS = {
    "claim1_alignment": "The tied matrix is closer to the untied output matrix than to the untied input matrix",
    "claim2_gradient_flow": "The output path carries most of the gradient reaching the tied matrix",
    "claim3_tuned_lens": "Tied models' early layers have higher tuned-lens KL than untied models'",
    "claim4_causality": "Scaling the input-path gradient moves the tied matrix towards the input space",
}
KEY_FIGURES = ["01_gradient_flow", "02_table1", "02_cosine_histograms", "03_tuned_lens_kl", "04_dose_response",
               "01_loss_curves"]


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def record(run: Run, claim: str, *, value: float, threshold: float, statement: str, unit: str = "",
           spread: float | None = None, noise_floor: float | None = None, paper: Any = None,
           n_seeds: int | None = None, details: dict | None = None) -> dict:
    """Store one claim's headline; the verdict is ``value > threshold`` (both stored, so anyone can check)."""
    if claim not in CLAIMS:
        raise ValueError(f"claim: unknown value {claim!r}; allowed: {', '.join(CLAIMS)}")
    if value is None or not math.isfinite(float(value)):
        raise ValueError(f"value: {value!r} is not a finite number")
    entry = {"claim": claim, "description": CLAIMS[claim], "value": float(value), "threshold": float(threshold),
             "verdict": bool(float(value) > float(threshold)), "statement": statement, "unit": unit,
             "spread": _finite(spread), "noise_floor": _finite(noise_floor), "paper": paper, "n_seeds": n_seeds,
             "details": details or {}}
    write_json_atomic(run.path / "results" / f"{claim}.json", entry)
    return entry


def results(run: Run) -> dict[str, dict]:
    """The claims recorded so far in a run."""
    out = {}
    for p in sorted((run.path / "results").glob("*.json")):
        out[p.stem] = json.loads(p.read_text())
    return out


def write_summary(run: Run, timings: dict[str, float] | None = None) -> Path:
    """``<run>/summary.json``: every headline number, its spread, noise floor, paper value and verdict."""
    cfg = run.config
    prev = {}
    if (run.path / "summary.json").exists():
        prev = json.loads((run.path / "summary.json").read_text()).get("timings_seconds", {})
    data = {"run": str(run.path), "profile": cfg.get("study", {}).get("profile"), "config": cfg,
            "models": run.models().to_dict(orient="records"), "claims": results(run),
            "timings_seconds": {**prev, **(timings or {})}}
    write_json_atomic(run.path / "summary.json", data)
    return run.path / "summary.json"


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, dict):
        return "; ".join(f"{k}: {_fmt(v)}" for k, v in x.items())
    return html.escape(str(x))


def write_report(run: Run) -> Path:
    """Convert the executed notebooks to HTML and write the index page ``<run>/report.html``."""
    from nbconvert import HTMLExporter

    out = run.path / "report"
    out.mkdir(exist_ok=True)
    exporter = HTMLExporter()
    pages = []
    for nb in sorted((run.path / "notebooks").glob("*.ipynb")):
        body, _ = exporter.from_filename(str(nb))
        (out / f"{nb.stem}.html").write_text(body)
        pages.append(nb.stem)
    claims = results(run)
    rows = []
    for c, desc in CLAIMS.items():
        r = claims.get(c)
        if r is None:
            rows.append(f"<tr><td>{html.escape(desc)}</td><td colspan=6>not run</td></tr>")
            continue
        verdict = "holds" if r["verdict"] else "does not hold"
        rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in (
            html.escape(desc), f"{_fmt(r['value'])} {html.escape(r['unit'])}", _fmt(r["spread"]), _fmt(r["noise_floor"]),
            _fmt(r["paper"]), f"<b>{verdict}</b> (value &gt; {_fmt(r['threshold'])})", html.escape(r["statement"]))) + "</tr>")
    figs = [f for f in KEY_FIGURES if (run.path / "figures" / f"{f}.html").exists()]
    fig_html = "\n".join(f'<h3>{html.escape(f)}</h3><iframe src="figures/{f}.html" loading="lazy"></iframe>' for f in figs)
    links = " · ".join(f'<a href="report/{p}.html">{html.escape(p)}</a>' for p in pages)
    cfg = run.config.get("study", {})
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>tiebias report: {html.escape(run.path.name)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:6px;vertical-align:top;font-size:14px}}
th{{background:#f3f3f3}}iframe{{width:100%;height:660px;border:1px solid #ddd}}</style></head><body>
<h1>Weight tying biases token embeddings towards the output space: this run</h1>
<p>Run folder <code>{html.escape(str(run.path))}</code>, profile <b>{html.escape(str(cfg.get('profile')))}</b>,
preset {html.escape(str(cfg.get('preset')))}, {html.escape(str(cfg.get('steps')))} steps, seeds {html.escape(str(cfg.get('seeds')))}.
Notebooks: {links or 'none executed'}</p>
<h2>Summary of the four claims</h2>
<table><tr><th>claim</th><th>this run</th><th>spread over seeds</th><th>noise floor</th><th>paper</th><th>verdict</th>
<th>statement</th></tr>{''.join(rows)}</table>
<h2>Key figures</h2>{fig_html or '<p>No figures yet.</p>'}
</body></html>"""
    (run.path / "report.html").write_text(doc)
    return run.path / "report.html"
