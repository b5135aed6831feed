"""``reproduction.md``, ``reproduction.json`` and ``reproduction.html`` of a run: the paper's numbers beside ours.

The content is :func:`tiebias.verdicts.reproduction.build`'s; this module adds what a reproduction report also
states (ReScience C, the ML Reproducibility Challenge): the compute, the environment, the seeds and the command that
reproduces the run, and writes it as Markdown (escaped), JSON and an offline HTML page linked from ``report.html``.
"""

from __future__ import annotations

import hashlib
import html
import math
import os
import platform
import re
import shlex
from importlib import metadata
from pathlib import Path
from typing import Any

from tiebias.config.paths import path_text, repo_root
from tiebias.output.markup import md_code, md_text
from tiebias.run.commands import study_commands
from tiebias.run.files import DamagedFileError, read_json, write_json_atomic, write_text_atomic
from tiebias.run.folder import Run
from tiebias.verdicts.reproduction import CAUSES, EXPLAINED, RULES, Reproduction, Row, build

PACKAGES = ("torch", "transformers", "tuned-lens", "datasets", "tokenizers", "papermill")
LOCK_FILE = "constraints.txt"
COLUMNS = ("source", "quantity", "paper", "ours, the kit's protocol", "ours, the paper's protocol", "cause", "why")
HOW_TO_READ = RULES
"""The report's header: the judge's rule set (:data:`tiebias.verdicts.reproduction.RULES`)."""


def environment() -> dict[str, Any]:
    """Python, the packages that compute the numbers, the lock file's hash, the CPU and its kernel choice."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    lock = repo_root() / LOCK_FILE
    return {"python": platform.python_version(), "packages": versions,
            "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock.exists() else None,
            "platform": platform.platform(), "cpu": cpu_model(), "cpu_cores": os.cpu_count(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY")}


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def compute(run: Run) -> dict[str, Any]:
    """Wall time and peak memory per notebook as the study recorded them in ``summary.json`` (empty when absent)."""
    try:
        s = read_json(run.summary_path, "") if run.summary_path.exists() else {}
    except DamagedFileError:
        s = {}
    times = {k: float(v) for k, v in (s.get("timings_seconds") or {}).items()}
    memory = {k: float(v) for k, v in (s.get("peak_memory_mib") or {}).items()}
    return {"wall_seconds": times, "total_seconds": sum(times.values()), "peak_memory_mib": memory}


def command(run: Run) -> str:
    """The commands that rerun this study into the same folder, each shell-quoted, joined by ``&&``: the study
    commands run on it as recorded (profile, ``--only``, ``--set``: :func:`tiebias.run.commands.study_commands`); without a
    record, the profile the run recorded; without either, a sentence saying so."""
    argvs = study_commands(run)
    if not argvs and run.profile is not None:
        argvs = [["study", "--profile", run.profile, "--run-dir", path_text(run.path, "replace")]]
    if not argvs:
        return ("not recorded: no study command was run on this folder and it records no profile (its notebooks "
                "were run by hand?)")
    return " && ".join(shlex.join(["python", "-m", "tiebias", *argv]) for argv in argvs)


def _num(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


def _cells(r: Row) -> list[str]:
    return [r.source, r.quantity, _num(r.paper), r.kit.text() if r.kit else "–",
            r.paper_protocol.text() if r.paper_protocol else "–", r.cause, r.why]


_NUMBER = re.compile(r"^[-–+0-9.e\[\], ]*( \(one seed: no range\))?$|^not available$")
"""A cell the kit formatted from numbers alone: written as is (escaping it would only add backslashes)."""


def _md_table(head: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    def cell(c: str) -> str:
        return c if _NUMBER.match(c) else md_text(c)

    out = ["| " + " | ".join(md_text(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cell(str(c)) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _claim_rows(rep: Reproduction) -> list[list[str]]:
    return [[c["claim"], c["kit"] + (f" ({c['which_part']})" if c.get("which_part") else ""), c["paper_protocol"],
             c["kit_statement"], c["paper_protocol_is"]] for c in rep.claims]


CLAIM_HEAD = ("claim", "the kit's protocol", "the paper's protocol", "ours (the kit's record)", "the paper's protocol is")


def markdown(run: Run, rep: Reproduction, env: dict[str, Any], comp: dict[str, Any]) -> str:
    """The report as Markdown; every piece of text from the run folder escaped (:mod:`tiebias.output.markup`)."""
    cfg = run.config.get("study", {})
    lines = [f"# Reproduction report: {md_text(path_text(run.path.name, 'replace'))}", ""]
    if rep.not_meaningful:
        lines += [f"**Not meaningful: this run cannot be evidence for or against the paper**, because "
                  f"{md_text(rep.not_meaningful)}. Every row below says so first; they show only that the report "
                  "is computed.", ""]
    lines += ["Lopardo et al. (2026), *Weight Tying Biases Token Embeddings Towards the Output Space*, reproduced at "
              f"small scale: profile {md_code(cfg.get('profile'))}, preset {md_code(cfg.get('preset'))}, vocabulary "
              f"{md_text(cfg.get('vocab_size'))}, {md_text(cfg.get('steps'))} steps, seeds {md_text(cfg.get('seeds'))}.",
              "", "## Per claim", "",
              "[Re]: the claim holds at our scale under that protocol; [¬Re]: it does not.", "",
              _md_table(CLAIM_HEAD, _claim_rows(rep)), "", "## Every number", "", HOW_TO_READ, ""]
    counts = ", ".join(f"{c} {n}" for c, n in rep.causes().items() if n)
    counts += f"; explained by a computed cause: {sum(rep.causes()[c] for c in EXPLAINED)}"
    lines += [f"Causes over {rep.comparisons()} comparisons ({sum(not r.setting for r in rep.rows)} numbers of the "
              f"paper; one number of ours set beside several of the paper's counts once): {md_text(counts)}.", ""]
    if rep.scale_source:
        lines += [f"Scale axis: {md_text(rep.scale_source)}.", ""]
    lines += [_md_table(COLUMNS, [_cells(r) for r in rep.rows if not r.setting]), "", "## Settings beside ours", "",
              _md_table(("setting", "paper", "this run"), [[r.key, _num(r.paper), _num(r.kit.value if r.kit else None)]
                                                          for r in rep.rows if r.setting]), ""]
    lines += _compute_lines(run, env, comp)
    return "\n".join(lines) + "\n"


def _compute_lines(run: Run, env: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    walls = [[k, f"{v:.0f} s", _num(comp["peak_memory_mib"].get(k))] for k, v in comp["wall_seconds"].items()]
    pk = ", ".join(f"{k} {v}" for k, v in env["packages"].items())
    return ["## Compute and environment", "",
            _md_table(("notebook", "wall time", "peak memory of the largest kernel so far (MiB)"), walls) if walls
            else "No timings recorded (the notebooks were not run by the study command).", "",
            f"- total wall time: {comp['total_seconds']:.0f} s on {md_text(env['cpu'])} ({md_text(env['cpu_cores'])} "
            "cores, no GPU)" if comp["wall_seconds"] else f"- CPU: {md_text(env['cpu'])}",
            f"- Python {md_text(env['python'])}; {md_text(pk)}",
            f"- lock file {md_code(LOCK_FILE)} sha256 {md_code(env['lock_sha256'])}",
            f"- ATEN_CPU_CAPABILITY: {md_code(env['ATEN_CPU_CAPABILITY'] or 'not set')}",
            f"- seeds {md_text(run.config.get('study', {}).get('seeds'))}; every parameter in `config.json`",
            f"- rerun: {md_code(command(run))}", ""]


def html_page(run: Run, rep: Reproduction, env: dict[str, Any], comp: dict[str, Any]) -> str:
    """The same report as a self-contained HTML page (no scripts, every text escaped)."""
    def table(head: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><tr>{th}</tr>{trs}</table>"

    banner = (f'<p style="border:2px solid #b00;padding:8px"><b>Not meaningful:</b> {html.escape(rep.not_meaningful)}'
              "</p>" if rep.not_meaningful else "")
    counts = ", ".join(f"{c} {n}" for c, n in rep.causes().items() if n)
    settings = [[r.key, _num(r.paper), _num(r.kit.value if r.kit else None)] for r in rep.rows if r.setting]
    walls = [[k, f"{v:.0f} s", _num(comp["peak_memory_mib"].get(k))] for k, v in comp["wall_seconds"].items()]
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>reproduction report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}}
table{{border-collapse:collapse;width:100%;margin-bottom:1em}}td,th{{border:1px solid #ccc;padding:4px;font-size:13px;
vertical-align:top}}th{{background:#f3f3f3}}</style></head><body>
<h1>Reproduction report: {html.escape(path_text(run.path.name, 'replace'))}</h1>{banner}
{f"<p>Scale axis: {html.escape(rep.scale_source)}.</p>" if rep.scale_source else ""}
<h2>Per claim</h2><p>[Re]: the claim holds at our scale under that protocol; [¬Re]: it does not.</p>
{table(CLAIM_HEAD, _claim_rows(rep))}
<h2>Every number</h2><p>{html.escape(HOW_TO_READ.replace('`', ''))}</p><p>Causes over {rep.comparisons()} comparisons:
{html.escape(counts)}.</p>
{table(COLUMNS, [_cells(r) for r in rep.rows if not r.setting])}
<h2>Settings beside ours</h2>{table(("setting", "paper", "this run"), settings)}
<h2>Compute and environment</h2>{table(("notebook", "wall time", "peak memory of the largest kernel so far (MiB)"), walls)}
<p>{html.escape(f"Python {env['python']}; " + ", ".join(f"{k} {v}" for k, v in env['packages'].items()))}; lock file
sha256 {html.escape(str(env['lock_sha256']))}; CPU {html.escape(env['cpu'])}, {html.escape(str(env['cpu_cores']))} cores;
ATEN_CPU_CAPABILITY {html.escape(str(env['ATEN_CPU_CAPABILITY'] or 'not set'))}.</p>
<p>Rerun: <code>{html.escape(command(run))}</code></p></body></html>"""


def write_reproduction(run: Run, scale: Run | None = None) -> Path:
    """Write ``reproduction.md``, ``.json`` and ``.html`` into the run folder; returns the Markdown's path.

    Args:
        run: the run folder whose numbers are set beside the paper's (:func:`tiebias.verdicts.reproduction.build`).
        scale: a run holding the scale axis's trends table to use instead of ``run``'s (None: ``run``'s own).

    Returns:
        The path of ``reproduction.md``.
    """
    rep = build(run, scale)
    env, comp = environment(), compute(run)
    data = {"run": path_text(run.path, "replace"), "causes_vocabulary": list(CAUSES), "causes": rep.causes(),
            "comparisons": rep.comparisons(), "not_meaningful": rep.not_meaningful,
            "scale_source": rep.scale_source, "claims": rep.claims, "rows": [r.as_dict() for r in rep.rows],
            "environment": env, "compute": comp, "command": command(run)}
    md = run.path / "reproduction.md"
    with run.writing("writing reproduction.md"):
        write_json_atomic(run.path / "reproduction.json", data)
        write_text_atomic(md, markdown(run, rep, env, comp))
        write_text_atomic(run.path / "reproduction.html", html_page(run, rep, env, comp))
    return md


__all__ = ["environment", "compute", "command", "markdown", "html_page", "write_reproduction"]
