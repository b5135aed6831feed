"""A run's ``reproduction.md``, ``.json`` and ``.html``: the paper's numbers beside ours
(:func:`tiebias.verdicts.reproduction.build`), the compute, environment, seeds and the command that reruns it."""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import shlex
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from tiebias.config.paths import path_text, repo_root
from tiebias.output.markup import md_text, render
from tiebias.run.files import DamagedFileError, read_json, write_json_atomic, write_text_atomic
from tiebias.run.folder import Run
from tiebias.run.history import study_commands
from tiebias.verdicts.reproduction import CAUSES, EXPLAINED, RULES, Reproduction, build

PACKAGES = ("torch", "transformers", "tuned-lens", "datasets", "tokenizers", "papermill")
LOCK_FILE = "constraints.txt"
COLUMNS = ("source", "quantity", "paper", "ours, the kit's protocol", "ours, the paper's protocol", "cause", "why")
CLAIM_HEAD = ("claim", "the kit's protocol", "the paper's protocol", "ours (the kit's record)", "the paper's protocol is")


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
    """The study commands run on this folder joined by ``&&``, else its profile's, else why not."""
    argvs = study_commands(run)
    if not argvs and run.profile is not None:
        argvs = [["study", "--profile", run.profile, "--run-dir", path_text(run.path, "replace")]]
    if not argvs:
        return ("not recorded: no study command was run on this folder and it records no profile (its notebooks "
                "were run by hand?)")
    return " && ".join(shlex.join(["python", "-m", "tiebias", *argv]) for argv in argvs)


def _num(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


_NUMBER = re.compile(r"^[-–+0-9.e\[\], ]*( \(one seed: no range\))?$|^not available$")
"""A cell the kit formatted from numbers alone: written as is in Markdown (escaping it would only add backslashes)."""


def _md_table(head: tuple[str, ...], rows: list[list[str]]) -> Markup:
    """A GFM table, every cell escaped (pandas' ``to_markdown`` needs ``tabulate``, not installed)."""
    out = ["| " + " | ".join(md_text(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c if _NUMBER.match(c) else md_text(c) for c in map(str, row)) + " |" for row in rows]
    return Markup("\n".join(out))


def _html_table(head: tuple[str, ...], rows: list[list[str]]) -> Markup:
    """An HTML table, every cell escaped by pandas (a line break in a cell shown as a space)."""
    return Markup(pd.DataFrame(rows, columns=list(head)).replace("\n", " ", regex=True).to_html(index=False))


def _tables(rep: Reproduction, comp: dict[str, Any]) -> dict[str, tuple[tuple[str, ...], list[list[str]]]]:
    """The report's four tables: head and rows."""
    claims = [[c["claim"], c["kit"] + (f" ({c['which_part']})" if c.get("which_part") else ""), c["paper_protocol"],
               c["kit_statement"], c["paper_protocol_is"]] for c in rep.claims]
    numbers = [[r.source, r.quantity, _num(r.paper), r.kit.text() if r.kit else "–",
                r.paper_protocol.text() if r.paper_protocol else "–", r.cause, r.why] for r in rep.rows if not r.setting]
    settings = [[r.key, _num(r.paper), _num(r.kit.value if r.kit else None)] for r in rep.rows if r.setting]
    walls = [[k, f"{v:.0f} s", _num(comp["peak_memory_mib"].get(k))] for k, v in comp["wall_seconds"].items()]
    return {"claims": (CLAIM_HEAD, claims), "numbers": (COLUMNS, numbers), "settings": (("setting", "paper", "this run"),
            settings), "compute": (("notebook", "wall time", "peak memory of the largest kernel so far (MiB)"), walls)}


def _page(template: str, run: Run, rep: Reproduction, env: dict[str, Any], comp: dict[str, Any]) -> str:
    """The report as Markdown or HTML, every text from the run folder escaped by the template."""
    md = template.endswith(".md.j2")
    table = _md_table if md else _html_table
    causes = rep.causes
    counts = ", ".join(f"{c} {n}" for c, n in causes.items() if n)
    if md:
        counts += f"; explained by a computed cause: {sum(causes[c] for c in EXPLAINED)}"
    study = run.config.get("study", {})
    return render(template, name=path_text(run.path.name, "replace"), rep=rep, env=env, comp=comp,
                  study={k: study.get(k) for k in ("profile", "preset", "vocab_size", "steps", "seeds")},
                  tables={k: table(*v) for k, v in _tables(rep, comp).items()}, counts=counts,
                  how_to_read=Markup(RULES) if md else RULES, comparisons=rep.comparisons,
                  two_causes=rep.with_two_causes, total=sum(causes.values()),
                  numbers=sum(not r.setting for r in rep.rows), lock_file=LOCK_FILE, command=command(run),
                  packages=", ".join(f"{k} {v}" for k, v in env["packages"].items()))


def write_reproduction(run: Run, scale: Run | None = None) -> Path:
    """Write ``reproduction.md``, ``.json`` and ``.html`` into the run folder.

    Args: run: the run; scale: the run whose scale axis gives the trends (None: ``run``).
    Returns: the path of ``reproduction.md``."""
    rep = build(run, scale)
    env, comp = environment(), compute(run)
    data = {"run": path_text(run.path, "replace"), "causes_vocabulary": list(CAUSES), "causes": rep.causes,
            "comparisons": rep.comparisons, "comparisons_with_two_causes": rep.with_two_causes,
            "not_meaningful": rep.not_meaningful,
            "scale_source": rep.scale_source, "claims": rep.claims, "rows": [asdict(r) for r in rep.rows],
            "environment": env, "compute": comp, "command": command(run)}
    md = run.path / "reproduction.md"
    with run.writing("writing reproduction.md"):
        write_json_atomic(run.path / "reproduction.json", data)
        write_text_atomic(md, _page("reproduction.md.j2", run, rep, env, comp))
        write_text_atomic(run.path / "reproduction.html", _page("reproduction.html.j2", run, rep, env, comp))
    return md
