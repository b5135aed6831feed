"""The walkthrough: a run's executed notebooks as Markdown with static figures, readable in a repository browser
(which runs no plotly and no widgets); a hidden marker before each cell holds its id and a digest of its source."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from tiebias.config.paths import NOTEBOOKS, PROFILE_DIR, notebooks_dir, repo_root
from tiebias.config.profiles import available
from tiebias.output.markup import md_code, md_fence, md_text, safe_html
from tiebias.output.notebook import PLOTLY_MIME
from tiebias.output.plotting.export import figures_to_png
from tiebias.output.static_pages import expand_widgets
from tiebias.run.layout import RunLayout

MARKER = "<!-- cell {id} {digest} -->"
MARKER_RE = re.compile(r"^<!-- cell (\S+) ([0-9a-f]{12}) -->$", re.M)
INJECTED = "injected-parameters"  # papermill's cell holding the values a run was executed with
REGENERATE = "make walkthrough RUN={run}"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LINK = re.compile(r"(\]\(|src=\")(?!https?:|#|/|\.\./|mailto:)([^)\"\s]+)")


def digest(source: str) -> str:
    """A short digest of a cell's source (12 hex digits of its SHA-256)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _injected(cell: dict) -> bool:
    return INJECTED in cell.get("metadata", {}).get("tags", [])


def source_cells(nb: dict) -> list[tuple[str, str]]:
    """(id, source digest) of every cell of a notebook, papermill's injected-parameters cell left out."""
    return [(str(c.get("id")), digest(_source(c))) for c in nb["cells"] if not _injected(c)]


def relink(markdown: str) -> str:
    """Relative links and images of a notebook's Markdown, pointed from ``walkthrough/`` to ``notebooks/``."""
    return _LINK.sub(lambda m: f"{m.group(1)}../notebooks/{m.group(2)}", markdown)


def check_executed(executed: dict, source: dict, name: str) -> None:
    """Stop when an executed notebook's cells are not those of the notebook source (it is from an older version)."""
    have, want = source_cells(executed), source_cells(source)
    if have != want:
        i = next((i for i, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), min(len(have), len(want)))
        raise ValueError(f"{name}: the run's executed notebook has other cells than notebooks/{name}.ipynb (first "
                         f"difference at cell {i}: {len(have)} cells executed, {len(want)} in the source); execute "
                         f"the current notebooks on that run folder first (python -m tiebias study --profile "
                         "PROFILE --run-dir RUN), then regenerate the walkthrough")


class _Page:
    """One notebook being rendered: its Markdown blocks and the images (bytes) and figures (plotly JSON) they show."""

    def __init__(self, name: str) -> None:
        self.name, self.blocks, self.images, self.figures = name, [], {}, {}

    def image(self, cell: int, ext: str) -> str:
        n = sum(p.startswith(f"images/{self.name}/cell{cell:02d}-") for p in (*self.images, *self.figures)) + 1
        return f"images/{self.name}/cell{cell:02d}-{n}.{ext}"

    def output(self, cell: int, out: dict) -> str | None:
        """One output as Markdown (an image is recorded and linked), None for nothing to show."""
        kind = out.get("output_type")
        if kind == "stream":  # as a terminal shows it: colours dropped, a carriage return overwriting its line
            lines = _ANSI.sub("", _source({"source": out.get("text", "")})).split("\n")
            return md_fence("\n".join(line.rsplit("\r", 1)[-1] for line in lines), "text")
        if kind == "error":
            return md_fence(f"{out.get('ename')}: {out.get('evalue')}", "text")
        data = out.get("data", {})
        if PLOTLY_MIME in data:
            path = self.image(cell, "png")
            self.figures[path] = data[PLOTLY_MIME]
            return f"![figure {len(self.figures)} of {self.name}]({path})"
        for mime, ext in (("image/png", "png"), ("image/jpeg", "jpg")):
            if mime in data:
                path = self.image(cell, ext)
                self.images[path] = base64.b64decode(_source({"source": data[mime]}))
                return f"![image]({path})"
        if "text/html" in data:  # harmless tags only, in one <div> without blank lines (one raw HTML block)
            html = f"<div>{safe_html(_source({'source': data['text/html']}))}</div>"
            return "\n".join(line for line in html.splitlines() if line.strip())
        if "text/markdown" in data:  # not the notebook's own text: shown as its source, not rendered
            return md_fence(_source({"source": data["text/markdown"]}), "markdown")
        if "text/plain" in data:
            return md_fence(_source({"source": data["text/plain"]}), "text")
        return None


def render_notebook(nb: dict, name: str) -> _Page:
    """An executed notebook (widgets already expanded) as Markdown blocks, one marker before each cell."""
    page = _Page(name)
    for i, cell in enumerate(nb["cells"]):
        src = _source(cell)
        if _injected(cell):
            page.blocks.append("*The parameters this run was executed with (inserted by papermill):*\n\n"
                               + md_fence(src, "python"))
            continue
        page.blocks.append(MARKER.format(id=cell.get("id"), digest=digest(src)))
        if cell["cell_type"] == "markdown":
            page.blocks.append(relink(src))
        elif cell["cell_type"] == "code":
            code = md_fence(src, "python")
            if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):  # folded in JupyterLab: here too
                code = f"<details><summary>Code (folded, as in the notebook)</summary>\n\n{code}\n\n</details>"
            page.blocks.append(code)
            merged: list[dict] = []  # consecutive printed text of one stream as one block, not one per print
            for o in cell.get("outputs", []):
                if merged and o.get("output_type") == "stream" == merged[-1].get("output_type") \
                        and o.get("name") == merged[-1]["name"]:
                    merged[-1] = {**merged[-1], "text": _source({"source": merged[-1]["text"]})
                                  + _source({"source": o["text"]})}
                else:
                    merged.append(o)
            page.blocks.extend(b for b in (page.output(i, o) for o in merged) if b)
        else:
            page.blocks.append(md_fence(src))
    return page


def _profile_note(profile: str) -> str:
    """The comment at the top of a shipped profile's TOML file (what the profile is for), else ''."""
    if profile not in available():  # a name from the run folder: never a path to read
        return ""
    text = (PROFILE_DIR / f"{profile}.toml").read_text(encoding="utf-8")
    lines = itertools.takewhile(lambda line: line.startswith("#"), text.splitlines())
    return " ".join(line.lstrip("# ").strip() for line in lines).removeprefix(f"{profile}:").strip()


def _fmt(x: Any) -> str:
    """A number of a summary for a page (anything else from the run folder as escaped text)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "–" if x is None else md_text(x)
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def index_page(run_label: str, summary: dict, titles: dict[str, str], reproduction: bool = False) -> str:
    """``walkthrough/README.md``: which profile and run, the claims' verdicts, and how to regenerate it."""
    study = summary.get("config", {}).get("study", {})
    profile = str(summary.get("profile") or study.get("profile"))
    timings = summary.get("timings_seconds", {})
    secs = {n: round(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and t == t and abs(t) != math.inf else None
            for n, t in ((n, timings.get(n)) for n in titles)}
    rows = [f"| [{n}]({n}.md) | {md_text(titles[n])} | {_fmt(secs[n])} s |" for n in titles]
    claims = [f"| {md_text(c.get('description', k))} | {_fmt(c.get('value'))} {md_text(c.get('unit') or '')} | "
              f"**{md_text(c.get('status'))}** |" for k, c in summary.get("claims", {}).items()]
    note = _profile_note(profile)
    return "\n".join([
        "# Walkthrough: the four notebooks as executed", "",
        "The study's notebooks with everything they printed and drew, to read before (or instead of) running "
        "them. The notebooks in `notebooks/` are kept without outputs; these pages show one executed run.", "",
        f"**Profile: {md_code(profile)}**" + (f": {note}" if note else ".")
        + f" Preset {md_code(study.get('preset'))}, {md_text(study.get('steps'))} steps, seeds "
        f"{md_text(study.get('seeds'))}, corpus {md_code(study.get('corpus'))}; run folder {md_code(run_label)}.", "",
        "| notebook | what it shows | run time |", "| --- | --- | --- |", *rows, "",
        *(["| claim | this run | verdict |", "| --- | --- | --- |", *claims, ""] if claims else []),
        *(["The run's [reproduction report](reproduction.md): every number the paper reports beside this run's, each "
           "difference with its computed cause, and [Re] or [¬Re] per claim.", ""] if reproduction else []),
        "Figures are PNG pictures of the interactive figures (drawn by plotly.js in headless Chromium); the "
        "explorers show the state they were saved in.", "",
        "Regenerate after changing a notebook (needs Chromium):", "",
        md_fence(f"python -m tiebias study --profile {shlex.quote(profile)} --run-dir {shlex.quote(run_label)}\n"
                 + REGENERATE.format(run=shlex.quote(run_label)), "sh"), "",
        "`tests/test_walkthrough.py` checks that these pages hold the cells of `notebooks/*.ipynb` in order.", ""])


def write_walkthrough(run_dir: str | Path, out: str | Path | None = None, scale: float = 1.5) -> list[Path]:
    """Render the executed notebooks of ``run_dir`` into ``out`` (default ``walkthrough/``); the files written."""
    run_dir, out = Path(run_dir), Path(out) if out is not None else repo_root() / "walkthrough"
    layout = RunLayout(run_dir)
    executed = {n: layout.notebooks_dir / f"{n}.ipynb" for n in NOTEBOOKS}
    executed = {n: p for n, p in executed.items() if p.is_file()}
    summary_path = layout.summary_path
    if not executed or not summary_path.is_file():
        raise ValueError(f"run_dir: {str(run_dir)!r} holds no executed study (notebooks/*.ipynb and summary.json); "
                         "run one first: python -m tiebias study --profile class --run-dir runs/class")
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    pages, titles = {}, {}
    for name, path in executed.items():
        nb = json.loads(path.read_text(encoding="utf-8"))
        check_executed(nb, json.loads((notebooks_dir() / f"{name}.ipynb").read_text(encoding="utf-8")), name)
        titles[name] = next((line.lstrip("# ").strip() for cell in nb["cells"] if cell["cell_type"] == "markdown"
                             for line in _source(cell).splitlines() if line.startswith("#")), "")
        pages[name] = render_notebook(expand_widgets(nb), name)
    pngs = {name: figures_to_png(list(p.figures.values()), scale) for name, p in pages.items()}
    prefix = str(repo_root().resolve()) + "/"  # paths are shown relative to the checkout, wherever it was rendered
    inside = run_dir.resolve().is_relative_to(repo_root().resolve())
    label = str(run_dir.resolve().relative_to(repo_root().resolve())) if inside else str(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "images", ignore_errors=True)
    for old in out.glob("*.md"):
        old.unlink()
    written = []
    profile = md_text(summary.get("profile"))
    for name, page in pages.items():
        for rel, data in [*page.images.items(), *zip(page.figures, pngs[name], strict=True)]:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
            written.append(out / rel)
        header = (f"<!-- generated by `python -m tiebias walkthrough` from an executed run: edit notebooks/{name}.ipynb,"
                  f" not this file -->\n> **Walkthrough** of [`notebooks/{name}.ipynb`](../notebooks/{name}.ipynb) as "
                  f"executed on a run of the **{profile}** profile ([index and how to regenerate](README.md)). The "
                  "figures are static pictures of the notebook's interactive plotly figures; the explorers show the "
                  "state they were saved in. Run the notebook to hover, zoom and type into them.")
        (out / f"{name}.md").write_text("\n\n".join([header, *page.blocks]).replace(prefix, "") + "\n", encoding="utf-8")
        written.append(out / f"{name}.md")
    report = run_dir / "reproduction.md"
    if report.is_file():  # the run's own report (its text escaped when it was written)
        (out / "reproduction.md").write_text(report.read_text(encoding="utf-8").replace(prefix, ""), encoding="utf-8")
        written.append(out / "reproduction.md")
    index = index_page(label, summary, titles, report.is_file())
    (out / "README.md").write_text(index, encoding="utf-8")
    return [*written, out / "README.md"]
