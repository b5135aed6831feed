"""Headline results, ``summary.json`` and the HTML report of a run.

Each notebook records its claim's headline with :func:`record`: our value, its spread over seeds, the
noise floor where one applies, the paper's value, and a verdict that is *computed* here from the
value and a threshold (``value > threshold``), never typed in; in a run that is not evidence
(:mod:`tiebias.verdicts.evidence`) the status says "not meaningful" whatever the comparison. :func:`write_summary` gathers them into
``<run>/summary.json``; :func:`write_report` converts the executed notebooks to HTML and writes an
index page ``<run>/report.html`` with the summary table and the key figures.
"""

from __future__ import annotations

import html
import math
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

from tiebias.config.checks import is_int
from tiebias.run.files import DamagedFileError, read_json, sanitise_json, write_json_atomic
from tiebias.run.folder import Run

CLAIMS = {
    "claim1_alignment": "The tied matrix is closer to the untied output matrix than to the untied input matrix",
    "claim2_gradient_flow": "The output path carries most of the gradient reaching the tied matrix",
    "claim3_tuned_lens": "Tied models' early layers have higher tuned-lens KL than untied models'",
    "claim3_tuned_lens_reference": "Claim 3's rule with the lenses read as the paper's code reads them (hidden state "
                                   "i through translator i - 1; the paper's Figure 2 numbers use this reading)",
    "claim4_causality": "Scaling the input-path gradient moves the tied matrix towards the input space",
}
NOTEBOOK_OF = {"claim1_alignment": "02_align", "claim2_gradient_flow": "01_train", "claim3_tuned_lens": "03_lens",
               "claim3_tuned_lens_reference": "03_lens", "claim4_causality": "04_ablate"}
LENS_PROTOCOL_NOTE = (
    "Claim 3 is recorded twice, from the same trained lenses with the same rule: claim3_tuned_lens reads each lens "
    "as the tuned-lens package trains it (translator i on hidden state i, the model's own head at the last layer); "
    "claim3_tuned_lens_reference reads it as the paper's public code does (hidden state i through translator i - 1, "
    "the last, already normed, state through the last translator and the final norm again). The paper's numbers "
    "(Figure 2) come from the reference code's reading, with lenses trained for 100 steps.")
NOT_MEANINGFUL = "not meaningful"
"""The status of every claim of a run that is not evidence (the rule: :func:`tiebias.verdicts.evidence.not_meaningful`)."""
KEY_FIGURES = ["01_gradient_flow", "02_table1", "02_cosine_histograms", "03_tuned_lens_kl", "04_dose_response",
               "01_loss_curves"]


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _number(name: str, x: Any) -> float:
    """A finite float, else a ValueError naming the parameter."""
    try:
        if isinstance(x, bool):
            raise TypeError
        f = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {x!r} is not a number") from None
    if not math.isfinite(f):
        raise ValueError(f"{name}: {x!r} is not a finite number")
    return f


def record(run: Run, claim: str, *, value: float, threshold: float, statement: str, unit: str = "",
           spread: float | None = None, noise_floor: float | None = None, paper: Any = None,
           n_seeds: int | None = None, details: dict | None = None, status: str | None = None,
           not_meaningful: str | None = None) -> dict:
    """Store one claim's headline; the verdict is ``value > threshold`` (both stored, so anyone can check).

    ``status`` is the verdict in words; by default "holds" / "does not hold" from the comparison, or a
    rule's own outcome when the comparison is not enough (e.g. claim 3's "not converged"). A value that
    cannot exist (NaN, e.g. claim 4 with one seed) is accepted only with a ``status`` saying why; it is
    stored as ``null`` with that reason, and the verdict is false. ``not_meaningful`` (a reason: the run is not
    evidence) makes the status ``NOT_MEANINGFUL`` whatever the comparison, the reason stored beside it.

    Everything is checked before the file is written (under the run's writer lock); a spread or
    noise floor that is not a number is stored as ``null`` with its reason under ``null_reasons``.
    """
    if claim not in CLAIMS:
        raise ValueError(f"claim: unknown value {claim!r}; allowed: {', '.join(CLAIMS)}")
    undetermined = isinstance(value, float) and math.isnan(value) and bool(status)
    value = math.nan if undetermined else _number("value", value)
    threshold = _number("threshold", threshold)
    if n_seeds is not None and (not is_int(n_seeds) or n_seeds < 1):
        raise ValueError(f"n_seeds: {n_seeds!r} is not allowed; need None or an integer >= 1")
    if status is not None and (not isinstance(status, str) or not status.strip()):
        raise ValueError(f"status: {status!r} is not allowed; need None or a non-empty string")
    if not_meaningful is not None and (not isinstance(not_meaningful, str) or not not_meaningful.strip()):
        raise ValueError(f"not_meaningful: {not_meaningful!r} is not allowed; need None or a non-empty reason")
    if details is not None and not isinstance(details, dict):
        raise ValueError(f"details: {type(details).__name__} is not a dict")
    value_null = str(status)  # why a NaN value is stored as null: the rule's own reason, not the run's
    if not_meaningful:
        status = NOT_MEANINGFUL
    entry = {"claim": claim, "description": CLAIMS[claim], "value": value, "threshold": threshold,
             "verdict": bool(value > threshold),
             "status": status or ("holds" if value > threshold else "does not hold"), "statement": str(statement), "unit": unit,
             "spread": spread, "noise_floor": noise_floor, "paper": paper, "n_seeds": n_seeds,
             "details": details or {}, **({"not_meaningful": not_meaningful} if not_meaningful else {})}
    one = "one seed: a spread needs two or more" if n_seeds == 1 else "not a number (fewer than two values?)"
    reasons = {"spread": one, "noise_floor": "not a number (the noise floor needs two or more seeds)",
               "value": value_null}
    sanitise_json(entry)  # not serialisable: stop before the file is touched
    with run.writing(f"recording {claim}"):
        write_json_atomic(run.result_path(claim), entry, reasons)
    return {**entry, "value": _finite(value), "spread": _finite(spread), "noise_floor": _finite(noise_floor)}


def results(run: Run) -> dict[str, dict]:
    """The claims recorded so far in a run (a damaged file is named with the notebook that rewrites it)."""
    out = {}
    for p in sorted(run.results_dir.glob("*.json")):
        nb = NOTEBOOK_OF.get(p.stem)
        out[p.stem] = read_json(p, f"delete it and rerun {'notebook ' + nb if nb else 'the notebook that wrote it'}")
    return out


def write_summary(run: Run, timings: dict[str, float] | None = None) -> Path:
    """``<run>/summary.json``: every headline number, its spread, noise floor, paper value and verdict."""
    cfg = run.config
    for k, t in (timings or {}).items():
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"timings: {k!r} has {t!r}; need a finite number of seconds >= 0")
    claims = results(run)
    with run.writing("writing summary.json"):
        prev = {}
        path = run.summary_path
        if path.exists():
            try:
                prev = read_json(path, "").get("timings_seconds", {})
            except (DamagedFileError, AttributeError):
                warnings.warn(f"{path}: damaged; rewritten from the run folder (timings of earlier notebooks are "
                              "lost)", stacklevel=2)
        data = {"run": str(run.path), "profile": cfg.get("study", {}).get("profile"), "config": cfg,
                "models": run.models().to_dict(orient="records"), "claims": claims,
                "timings_seconds": {**prev, **(timings or {})}}
        write_json_atomic(path, data)
    return path


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
    import tempfile

    from tiebias.output.notebook import PLOTLY_JS
    from tiebias.output.static_pages import (
        export_offline_html as export_html,  # no CDN scripts: the pages work offline
    )

    claims = results(run)
    cfg = run.config.get("study", {})
    bodies = {}
    scratch = Path(tempfile.mkdtemp(prefix="tiebias-report-"))
    for nb in sorted(run.notebooks_dir.glob("*.ipynb")):
        try:  # plotly figures are drawn from their mimetype; plotly.min.js is written once, beside the pages
            bodies[nb.stem] = export_html(nb, scratch / f"{nb.stem}.html").read_text(encoding="utf-8")
        except Exception as e:  # a damaged notebook: named, with what to do
            raise DamagedFileError(f"{nb}: does not convert to HTML ({type(e).__name__}: {e}); delete it and "
                                   f"rerun that notebook (python -m tiebias study --only {nb.stem})") from None
    rows = []
    for c, desc in CLAIMS.items():
        r = claims.get(c)
        if r is None:
            rows.append(f"<tr><td>{html.escape(desc)}</td><td colspan=6>not run</td></tr>")
            continue
        rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in (
            html.escape(desc), f"{_fmt(r['value'])} {html.escape(r['unit'])}", _fmt(r["spread"]), _fmt(r["noise_floor"]),
            _fmt(r["paper"]), _verdict_cell(r), html.escape(r["statement"]))) + "</tr>")
    figs = [f for f in KEY_FIGURES if run.figure_path(f).exists()]
    fig_html = "\n".join(f'<h3>{html.escape(f)}</h3><iframe src="figures/{f}.html" loading="lazy"></iframe>' for f in figs)
    links = " · ".join(f'<a href="report/{p}.html">{html.escape(p)}</a>' for p in bodies)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>tiebias report: {html.escape(run.path.name)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:6px;vertical-align:top;font-size:14px}}
th{{background:#f3f3f3}}iframe{{width:100%;height:660px;border:1px solid #ddd}}</style></head><body>
<h1>Weight tying biases token embeddings towards the output space: this run</h1>
<p>Run folder <code>{html.escape(str(run.path))}</code>, profile <b>{html.escape(str(cfg.get('profile')))}</b>,
preset {html.escape(str(cfg.get('preset')))}, {html.escape(str(cfg.get('steps')))} steps, seeds {html.escape(str(cfg.get('seeds')))}.
Notebooks: {links or 'none executed'}</p>
{_caveat(claims)}<h2>Summary of the four claims (claim 3 under two lens readings)</h2>
<table><tr><th>claim</th><th>this run</th><th>spread over seeds</th><th>noise floor</th><th>paper</th><th>verdict</th>
<th>statement</th></tr>{''.join(rows)}</table>
<p>{html.escape(LENS_PROTOCOL_NOTE)}</p>
<h2>Key figures</h2>{fig_html or '<p>No figures yet.</p>'}
</body></html>"""
    with run.writing("writing report.html"):
        out = run.report_dir
        out.mkdir(exist_ok=True)
        for stem, body in bodies.items():
            _write_text_atomic(out / f"{stem}.html", body)
        if bodies and (scratch / PLOTLY_JS).exists():
            _write_text_atomic(out / PLOTLY_JS, (scratch / PLOTLY_JS).read_text(encoding="utf-8"))
        _write_text_atomic(run.report_path, doc)
    shutil.rmtree(scratch, ignore_errors=True)
    return run.report_path


def _verdict_cell(r: dict) -> str:
    """A claim's verdict for the summary table: the status in bold, or "not meaningful" plainly, never a bold word."""
    status = r.get("status") or ("holds" if r["verdict"] else "does not hold")
    if status == NOT_MEANINGFUL:
        return f"<i>{NOT_MEANINGFUL}</i> (see the note above the table)"
    return f"<b>{html.escape(status)}</b> (value &gt; {_fmt(r['threshold'])})"


def _caveat(claims: dict[str, dict]) -> str:
    """The banner above the summary table when the run is not evidence (the reasons its claims recorded)."""
    why = dict.fromkeys(r["not_meaningful"] for r in claims.values() if r.get("not_meaningful"))
    if not why:
        return ""
    return ('<p style="border:2px solid #b00;padding:8px"><b>Not meaningful: these numbers cannot be read as evidence '
            f"for or against the claims</b>, because {html.escape('; '.join(why))}. They show only that the analysis "
            "runs.</p>\n")


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
