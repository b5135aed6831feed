"""``summary.json`` and the HTML report of a run.

Each notebook records its claim's headline with :func:`tiebias.verdicts.records.record`: our value, its spread over seeds, the noise floor, the paper's value and the computed verdict.
:func:`write_summary` gathers the records into ``<run>/summary.json``; :func:`write_report` converts the executed
notebooks to HTML and writes an index page ``<run>/report.html`` with the summary table and the key figures. Both
mark a claim whose models were retrained or deleted since it was recorded as stale
(:func:`tiebias.verdicts.records.current_results`).
"""

from __future__ import annotations

import html
import math
import shutil
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tiebias.config.paths import path_text
from tiebias.lens.tables import not_converged_because
from tiebias.run.files import DamagedFileError, read_json, write_json_atomic, write_text_atomic
from tiebias.run.folder import Run
from tiebias.run.kernel_times import timings as kernel_times_of
from tiebias.verdicts.records import CLAIMS, current_results
from tiebias.verdicts.status import DOES_NOT_HOLD, HOLDS, NOT_MEANINGFUL, STALE, status_of

LENS_PROTOCOL_NOTE = (
    "Claim 3 is recorded twice, from the same trained lenses with the same rule: claim3_tuned_lens reads each lens "
    "as the tuned-lens package trains it (translator i on hidden state i, the model's own head at the last layer); "
    "claim3_tuned_lens_reference is the paper's reading, as its public code reads each lens (hidden state i through translator i - 1, "
    "the last, already normed, state through the last translator and the final norm again). The paper's numbers "
    "(Figure 2) come from the paper's reading, with lenses trained for 100 steps.")
KEY_FIGURES = ["01_gradient_flow", "01_claim2_windows", "02_table1", "02_cosine_histograms", "03_tuned_lens_kl",
               "04_dose_response", "04_ingredients", "04_scale_claim4", "01_loss_curves"]


def write_summary(run: Run, timings: dict[str, float] | None = None, memory: dict[str, float] | None = None) -> Path:
    """``<run>/summary.json``: every headline number, its spread, noise floor, paper value and verdict.

    Args:
        run: the run folder whose claim records are gathered.
        timings: notebook -> wall time in seconds (finite, >= 0), merged over the file's earlier ones and the times
            JupyterLab kernels recorded in the run folder (:mod:`tiebias.run.kernel_times`).
        memory: notebook -> peak memory in MiB (finite, >= 0), merged the same way.

    Returns:
        The path of ``summary.json``.

    A claim whose models were retrained or deleted since it was recorded is marked stale, with the reason and the
    notebook to rerun (:func:`tiebias.verdicts.records.current_results`), never shown with its old verdict. A damaged
    earlier file is rewritten with a warning (its timings are lost).
    """
    cfg = run.config
    for what, unit, values in (("timings", "seconds", timings), ("memory", "MiB", memory)):
        for k, t in (values or {}).items():
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
                raise ValueError(f"{what}: {k!r} has {t!r}; need a finite number of {unit} >= 0")
    claims = current_results(run)
    kernel_times, kernel_memory = kernel_times_of(run)  # notebooks run in JupyterLab; the study's own come as arguments
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
        data = {"run": path_text(run.path, "surrogateescape"), "profile": run.profile, "config": cfg,
                "models": run.models().to_dict(orient="records"), "claims": claims,
                "timings_seconds": {**prev.get("timings_seconds", {}), **kernel_times, **(timings or {})},
                "peak_memory_mib": {**prev.get("peak_memory_mib", {}), **kernel_memory, **(memory or {})}}
        write_json_atomic(path, data)
    return path


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, dict):
        return "; ".join(f"{html.escape(str(k))}: {_fmt(v)}" for k, v in x.items())
    return html.escape(str(x))


def write_report(run: Run) -> Path:
    """Convert the executed notebooks to HTML and write the index page ``<run>/report.html``.

    Args:
        run: the run folder; its executed notebooks go to ``report/``, and a notebook that does not convert stops
            the call, named, before anything is written.

    Returns:
        The path of ``report.html`` (the claims table, links to the notebooks' pages and the key figures).
    """
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="tiebias-report-"))  # the notebooks' HTML, before it is written
    try:
        return _write_report(run, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_report(run: Run, scratch: Path) -> Path:
    """The body of :func:`write_report`, converting the notebooks in ``scratch``."""
    from tiebias.output.notebook import PLOTLY_JS
    from tiebias.output.static_pages import (
        export_offline_html as export_html,  # no CDN scripts: the pages work offline
    )

    claims = current_results(run)
    cfg = run.config.get("study", {})
    bodies = {}
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
        statement = html.escape(r["statement"])
        if r.get("status") == STALE:
            statement = f"<i>as recorded from the earlier models:</i> {statement}"
        rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in (
            html.escape(desc), f"{_fmt(r['value'])} {html.escape(r['unit'])}", _fmt(r["spread"]), _fmt(r["noise_floor"]),
            _fmt(r["paper"]), _verdict_cell(r), statement)) + "</tr>")
    figs = [f for f in KEY_FIGURES if run.figure_path(f, "json").is_file()]
    fig_html = "\n".join(_figure(run, f) for f in figs)
    links = _notebooks_line(run, list(bodies))
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>tiebias report: {html.escape(path_text(run.path.name, "replace"))}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:6px;vertical-align:top;font-size:14px}}
th{{background:#f3f3f3}}.tiebias-figure{{width:100%;min-height:200px;border:1px solid #ddd}}
.tiebias-needs-scripts{{border:2px solid #b60;padding:8px}}</style></head><body>
<h1>Weight tying biases token embeddings towards the output space: this run</h1>
<p>Run folder <code>{html.escape(path_text(run.path, "replace"))}</code>, profile <b>{html.escape(str(cfg.get('profile')))}</b>,
preset {html.escape(str(cfg.get('preset')))}, {html.escape(str(cfg.get('steps')))} steps, seeds {html.escape(str(cfg.get('seeds')))}.
Notebooks: {links}</p>
{_reproduction_link(run)}
{_caveat(claims)}{_baselines(run)}<h2>Summary of the four claims (claim 3 under two lens readings)</h2>
<table><tr><th>claim</th><th>this run</th><th>spread over seeds</th><th>noise floor</th><th>paper</th><th>verdict</th>
<th>statement</th></tr>{''.join(rows)}</table>
<p>{html.escape(LENS_PROTOCOL_NOTE)}</p>
<h2>Key figures</h2>{_figures_block(fig_html) if figs else '<p>No figures yet.</p>'}
</body></html>"""
    with run.writing("writing report.html"):
        out = run.report_dir
        out.mkdir(exist_ok=True)
        for stem, body in bodies.items():
            write_text_atomic(out / f"{stem}.html", body)
        if bodies and (scratch / PLOTLY_JS).exists():
            write_text_atomic(out / PLOTLY_JS, (scratch / PLOTLY_JS).read_text(encoding="utf-8"))
        write_text_atomic(run.report_path, doc)
    return run.report_path


FIGURES_SCRIPT = """<script>
document.querySelectorAll("script.tiebias-figure-data").forEach(el => {
  const fig = JSON.parse(el.textContent), div = document.createElement("div");
  div.className = "plotly-graph-div tiebias-figure";
  el.after(div);
  Plotly.newPlot(div, fig.data || [], fig.layout || {}, {responsive: true});
});
document.querySelectorAll(".tiebias-needs-scripts").forEach(el => el.remove());
</script>"""
"""Draws every figure from its JSON with plotly.js (in the page, before it), then removes the note that figures need
scripts. JupyterLab's HTML viewer shows the page from memory with scripts once trusted, and its server refuses what the
page would fetch (a frame, a script beside it: "Blocking request from unknown origin"), so nothing is fetched."""


def _figure(run: Run, name: str) -> str:
    """A key figure as its heading and its plotly JSON, in the page (no frame): drawn by :data:`FIGURES_SCRIPT`.

    The JSON comes from the run folder (untrusted): it is parsed and written back with every ``<`` escaped, so it
    cannot end its script element; a file that does not parse is named in place of the figure.
    """
    import json

    try:
        fig = read_json(run.figure_path(name, "json"), "")
        data = json.dumps({"data": fig.get("data", []), "layout": fig.get("layout", {})},
                          allow_nan=False).replace("<", "\\u003c")
    except (DamagedFileError, AttributeError, OSError, ValueError) as e:
        return f"<h3>{html.escape(name)}</h3><p>figure not shown: {html.escape(str(e))}</p>"
    return (f'<h3>{html.escape(name)}</h3><script type="application/json" class="tiebias-figure-data">{data}</script>'
            f'<p><a href="figures/{html.escape(quote(name))}.html">{html.escape(name)}.html</a> (the figure on a page '
            "of its own)</p>")


def _figures_block(fig_html: str) -> str:
    """The figures with plotly.js (once) and the script that draws them, and a note shown where scripts do not run."""
    from plotly.offline import get_plotlyjs

    return ('<p class="tiebias-needs-scripts">The figures are drawn by a script. In JupyterLab click <b>Trust HTML</b> '
            "at the top of this page; or open report.html in a web browser (in JupyterLab: right-click it, "
            f"<i>Open in New Browser Tab</i>).</p>\n{fig_html}\n<script>{get_plotlyjs()}</script>\n{FIGURES_SCRIPT}")


def _notebooks_line(run: Run, converted: list[str]) -> str:
    """The notebooks run and their times (``summary.json``): each linked to its page when the study executed it into
    the run folder, else said to have run in JupyterLab; ``none executed`` when neither."""
    try:
        times = read_json(run.summary_path, "").get("timings_seconds") or {}
    except (FileNotFoundError, DamagedFileError, AttributeError):
        times = {}
    lab = set(kernel_times_of(run)[0])
    parts = []
    for name in sorted(set(converted) | {str(k) for k in times}):
        t = times.get(name)
        when = f"{t:.0f} s" if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) else ""
        if name in converted:
            text = f'<a href="report/{html.escape(quote(name))}.html">{html.escape(name)}</a>'
        else:
            text = html.escape(name)
            when = ", ".join(w for w in (when, "run in JupyterLab" if name in lab else "") if w)
        parts.append(f"{text} ({when})" if when else text)
    return " · ".join(parts) or "none executed"


def _reproduction_link(run: Run) -> str:
    """A paragraph linking the reproduction report (every paper number beside ours, with its cause), when written."""
    if not (run.path / "reproduction.html").exists():
        return ""
    return ('<p><b>Reproduction report</b>: every number the paper reports beside ours, each difference with its '
            'computed cause, [Re] or [¬Re] per claim: <a href="reproduction.html">reproduction.html</a> '
            '(<a href="reproduction.md">Markdown</a>, <a href="reproduction.json">JSON</a>).</p>')


def _verdict_cell(r: dict) -> str:
    """A claim's verdict for the summary table: the status in bold, or "not meaningful" or "stale" (with why and
    what to rerun) plainly, never a bold word."""
    verdict = r.get("verdict")  # true / false only for "holds" / "does not hold"; null for any other status
    status = r.get("status") or (status_of(verdict) if isinstance(verdict, bool) else "no status recorded")
    if status == NOT_MEANINGFUL:
        return f"<i>{NOT_MEANINGFUL}</i> (see the note above the table)"
    if status == STALE:
        return f"<i>{STALE}</i>: {html.escape(str(r.get('stale', {}).get('reason')))}"
    return f"<b>{html.escape(status)}</b>{html.escape(_verdict_reason(r, status))}"


def _verdict_reason(r: dict, status: str) -> str:
    """After the status: the rule's comparison for "holds" / "does not hold" (value against threshold); for claim 3's
    "not converged", what did not converge (the value, the gap, is not what the convergence rule compares); nothing
    for any other status, whose words say it."""
    if status in (HOLDS, DOES_NOT_HOLD):
        return f" (the rule: value > {_fmt(r['threshold'])})"
    conv = (r.get("details") or {}).get("convergence")
    if status == "not converged" and isinstance(conv, dict):
        try:
            return f": {not_converged_because(conv)}"
        except (KeyError, TypeError, ValueError):  # an older record's layout: the status alone
            return ""
    return ""


def _baselines(run: Run) -> str:
    """A paragraph: each finished model's validation loss beside the unigram and bigram baselines of the run's data,
    and which claims need which (:mod:`tiebias.verdicts.evidence`); empty for a folder without finished models."""
    from tiebias.data.tokens import unigram_loss
    from tiebias.verdicts.evidence import validation_bigram

    m = run.models() if run.config_path.exists() else None
    if m is None or not m.complete.any():
        return ""
    losses = {r.key: run.summary(r.variant, r.seed).get("final_val_loss") for r in m[m.complete].itertuples()}
    uni, bi = unigram_loss(run.frequencies(), run.tokens("validation")), validation_bigram(run)
    listed = ", ".join(f"{k} {_fmt(v) if isinstance(v, (int, float)) else 'missing'}" for k, v in losses.items())
    return (f"<h2>Did the models learn?</h2><p>Validation loss (nats) of each finished model: {html.escape(listed)}; "
            f"unigram baseline (no context) {uni:.3f}, bigram baseline (one token of context, counts of the training "
            f"split) {bi:.3f}. Claims 1, 2 and 4 need every model below the unigram baseline; claim 3, read layer by "
            "layer, below the bigram baseline, since a tuned lens at layer 0 is at best a bigram predictor.</p>\n")


def _caveat(claims: dict[str, dict]) -> str:
    """The banner above the summary table when the run is not evidence (the reasons its claims recorded)."""
    why = dict.fromkeys(r["not_meaningful"] for r in claims.values() if r.get("not_meaningful"))
    if not why:
        return ""
    return ('<p style="border:2px solid #b00;padding:8px"><b>Not meaningful: these numbers cannot be read as evidence '
            f"for or against the claims</b>, because {html.escape('; '.join(why))}. They show only that the analysis "
            "runs.</p>\n")
