"""Measure the numbers the what-if exercises' answers quote, from a class run and each exercise's own run, and render
the exercises into the notebooks' last cells and the lesson plan into TEACHING.md.

Usage: python scripts/exercise_answers.py [--base runs/class] [--runs runs] [--base-only | --render | --check]
  Each exercise's run is <runs>/ex-<id> (what `make exercise ID=<id>` writes). A run whose profile or changed
  parameter is not the exercise's is refused, so an answer never quotes a run of something else.
  --base-only measures the class run again and keeps each exercise's stored numbers (after a new class run, e.g. one
  measured by scripts/time_class.py). --render measures nothing: it renders the notebooks and TEACHING.md from
  notebooks/exercise_numbers.json (after editing notebooks/exercises.toml or lib/tiebias/teach/lesson.md); --check
  exits 1, writing nothing, if they are out of date.
An answer in exercises.toml is a template: {base.NAME} a number of the class run, {ex.NAME} of the exercise's run,
{word.NAME} "higher" or "lower" (ex against base; {size.NAME} "larger" or "smaller"), {ratio.NAME} base over ex; the
names are those of quantities() below. The coding exercises are written in the notebooks and kept as they are.
"""

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from tiebias.config.paths import NOTEBOOKS, notebooks_dir, repo_root, runs_dir  # noqa: E402
from tiebias.data.tokens import unigram_loss  # noqa: E402
from tiebias.lens import tables  # noqa: E402
from tiebias.output.markup import md_fence  # noqa: E402
from tiebias.run.files import read_json, write_text_atomic  # noqa: E402
from tiebias.run.folder import Run  # noqa: E402
from tiebias.study import parse_set  # noqa: E402
from tiebias.teach import exercises, schedule  # noqa: E402
from tiebias.verdicts import claims  # noqa: E402

NUMBERS = notebooks_dir() / "exercise_numbers.json"
"""The measured numbers: ``base`` (the class run) and, per exercise id, ``ex`` (its own run)."""
LESSON = repo_root() / "lib" / "tiebias" / "teach" / "lesson.md"
"""The lesson plan's template, written filled to TEACHING.md."""
CELL_PREFIX = "exercise-"
"""Ids of the notebooks' exercise cells (``exercise-01_train`` is the heading; ``exercise-01-code-*`` the coding
exercise, written in the notebook)."""


def _key(k: float) -> str:
    """A factor as a name part: 1.0 -> "1", 0.2 -> "0p2" (format fields need identifiers)."""
    return f"{k:g}".replace(".", "p")


def _mean_val(run: Run, variant: str) -> float:
    """Mean over complete seeds of a variant's final validation loss (nats)."""
    m = run.models()
    rows = m[m.complete & (m.variant == variant)]
    return float(sum(run.summary(variant, s)["final_val_loss"] for s in rows.seed) / max(len(rows), 1))


def _training(run: Run, summary: dict[str, Any]) -> dict[str, float]:
    """Claim 2's shares, the input rows a step reaches, and the losses against the unigram baseline."""
    out: dict[str, float] = {}
    c2 = summary["claims"].get("claim2_gradient_flow")
    if c2:
        w = c2["details"]["windows"]["exact l2"]
        out.update(share=c2["value"], share_after_warmup=w["after warmup"], share_warmup=w["warmup"],
                   share_ratio=c2["value"] / (1 - c2["value"]))
        logs = {s: pd.read_csv(run.metrics_dir / f"tied-s{s}.csv") for s in run.models().query("variant == 'tied'").seed}
        flow = pd.concat(list(logs.values()))
        half = flow.step.max() // 2  # the numbers 01 prints
        first, second = (float(flow[(flow.step > half) == h].output_share.mean()) for h in (False, True))
        out.update(input_rows=float(flow.input_rows.mean()), input_rows_frac=float(flow.input_rows.mean()) / run.config[
            "vocab_size"], share_first_half=first, share_second_half=second)
    m = run.models()
    if {"tied", "untied"} <= set(m[m.complete].variant):
        uni = unigram_loss(run.frequencies(), run.tokens("validation"))
        out.update(unigram=uni, loss_tied=_mean_val(run, "tied"), loss_untied=_mean_val(run, "untied"))
        out.update(below_tied=uni - out["loss_tied"], below_untied=uni - out["loss_untied"])
    return out


def _alignment(run: Run, summary: dict[str, Any]) -> dict[str, float]:
    """Claim 1's cosines and noise floors, and the cross-seed KNN overlaps with their chance level."""
    c1 = summary["claims"].get("claim1_alignment")
    if not c1:
        return {}
    d = c1["details"]
    floors = d["noise_floor"]
    out = {"c1_out": d["out_to_tied"], "c1_in": d["in_to_tied"], "c1_gap": d["gap"],
           "floor_tied": floors["tied -> tied (noise floor)"],
           "floor_out": floors["untied output -> untied output (noise floor)"],
           "floor_in": floors["untied input -> untied input (noise floor)"]}
    table = pd.read_csv(run.metrics_dir / "alignment_table1.csv")
    knn = [c for c in table.columns if c.startswith("knn@")][0]
    k = int(knn.removeprefix("knn@"))
    cross = table[table.pairing == "cross seed"].groupby("comparison")[knn].mean()
    out.update(knn_k=k, knn_chance=k / run.config["vocab_size"], knn_out=cross["untied output -> tied"],
               knn_in=cross["untied input -> tied"], knn_tied=cross["tied -> tied (noise floor)"])
    out.update(knn_out_x=out["knn_out"] / out["knn_chance"], knn_in_x=out["knn_in"] / out["knn_chance"])
    return out


def _lens(run: Run, summary: dict[str, Any]) -> dict[str, Any]:
    """Claim 3 under both readings, and the lens ladder's convergence recomputed with today's rule."""
    c3 = summary["claims"].get("claim3_tuned_lens")
    if not c3:
        return {}
    out: dict[str, Any] = {"gap": c3["value"], "gap_lo": c3["details"]["ci_low"], "gap_hi": c3["details"]["ci_high"],
                           "budget": c3["details"]["budget"]}
    out["half_width"] = (out["gap_hi"] - out["gap_lo"]) / 2
    ref = summary["claims"].get("claim3_tuned_lens_reference")
    if ref:
        out.update(ref_gap=ref["value"], ref_lo=ref["details"]["ci_low"], ref_hi=ref["details"]["ci_high"])
    kl = pd.read_csv(run.metrics_dir / "lens_per_layer_ladder.csv")
    recipe = str(kl.recipe.iloc[0])
    conv = tables.convergence(tables.ladder_gaps(kl, recipe), kl)
    out.update(lens_budgets=[int(b) for b in conv["budgets"]], budgets=", ".join(f"{b}x" for b in conv["budgets"]),
               rungs=" -> ".join(f"{b}x" for b in conv["budgets"][-2:]),
               converged="converged" if conv["converged"] else "not converged", gap_change=conv["change"])
    out["not_converged_because"] = tables.not_converged_because(conv)  # the clause 03 prints
    if conv["kl"]:
        w = conv["kl"]["worst"]
        out.update(kl_variant=w["variant"], kl_layer=w["layer"], kl_before=w["before"], kl_after=w["after"],
                   kl_fall=(w["before"] - w["after"]) / w["before"] if w["before"] else math.nan)
    return out


def _ablation(run: Run, summary: dict[str, Any]) -> dict[str, float]:
    """Claim 4 per factor k: cosines to the untied matrices (orthogonal, cross seed), applied-gradient share, ppl."""
    c4 = summary["claims"].get("claim4_causality")
    if not c4:
        return {}
    v_all = c4["details"]["verdicts"]
    v = v_all["orthogonal"]
    out: dict[str, float] = {}
    for side, name in (("vs_untied_input", "c4_in"), ("vs_untied_output", "c4_out")):
        for k, x in v[side]["means"].items():
            out[f"{name}_k{_key(float(k))}"] = x
        out[f"{name}_sd"] = v[side]["seed_std"]
    ppl = pd.read_csv(run.metrics_dir / "ablation_perplexity.csv")
    for k, g in ppl[ppl.tied].groupby("k"):
        out[f"ppl_k{_key(float(k))}"] = float(g.validation_ppl.mean())
        flows = [pd.read_csv(run.metrics_dir / f"{var}-s{s}.csv") for var, s in zip(g.variant, g.seed, strict=True)]
        out[f"share_k{_key(float(k))}"] = float(pd.concat(flows).output_share.mean())
    out["ppl_untied"] = float(ppl[~ppl.tied].validation_ppl.mean())
    out["ablate_factors"] = sorted(float(k) for k in ppl[ppl.tied].k.unique())
    head = str(c4["statement"]).split(" map (the verdict's)")[0]  # the record's verdicts are stored sorted by map
    out["c4_sentence"] = claims.claim4_sentence(c4["details"]["verdicts"], head if head in v_all else None)
    top = _key(max(out["ablate_factors"]))
    out["c4_shift_in"] = out[f"c4_in_k{top}"] - out["c4_in_k1"]
    out["c4_shift_out"] = out["c4_out_k1"] - out[f"c4_out_k{top}"]
    return out


def quantities(run_dir: str | Path) -> dict[str, Any]:
    """Every named number an answer may quote, from one executed run folder (claims that did not run are absent)."""
    run = Run(run_dir)
    summary = read_json(run.path / "summary.json", "run the study on it again (python -m tiebias study)")
    m = run.models()
    first = m[m.complete].iloc[0]
    out: dict[str, Any] = {"steps": run.summary(first.variant, first.seed)["steps"],
                           "vocab_size": run.config["vocab_size"], "profile": run.profile,
                           "seeds": sorted(int(s) for s in m[m.complete & (m.variant == "tied")].seed)}
    for part in (_training, _alignment, _lens, _ablation):
        out.update(part(run, summary))
    secs = {k: round(v) for k, v in summary.get("timings_seconds", {}).items()}
    out.update({f"time_{k}": v for k, v in secs.items()})
    total = sum(secs.values())
    out["time_total"] = f"{total // 60} min {total % 60} s"
    out.update({f"status_{k.removeprefix('claim').split('_')[0]}": c["status"] for k, c in summary["claims"].items()
                if k != "claim3_tuned_lens_reference"})
    if "claim3_tuned_lens_reference" in summary["claims"]:
        out["status_3ref"] = summary["claims"]["claim3_tuned_lens_reference"]["status"]
    return out


class _Words:
    """``{word.NAME}``: "higher" or "lower" (``{size.NAME}``: "larger" or "smaller"), "the same" when equal."""

    def __init__(self, base: dict[str, Any], ex: dict[str, Any], up: str = "higher", down: str = "lower") -> None:
        self._base, self._ex, self._up, self._down = base, ex, up, down

    def __getattr__(self, name: str) -> str:
        a, b = self._base[name], self._ex[name]
        return "the same" if a == b else (self._up if b > a else self._down)


class _Ratios:
    """``{ratio.NAME}``: the class run's number over the exercise run's."""

    def __init__(self, base: dict[str, Any], ex: dict[str, Any]) -> None:
        self._base, self._ex = base, ex

    def __getattr__(self, name: str) -> float:
        return float(self._base[name]) / float(self._ex[name])


class _Numbers:
    """Attribute access to a dict of numbers, naming the missing one in the error."""

    def __init__(self, values: dict[str, Any], label: str) -> None:
        self._values, self._label = values, label

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"{self._label}.{name}: no such number (have: {', '.join(sorted(self._values))})") from None


def fill(template: str, base: dict[str, Any], ex: dict[str, Any], **more: Any) -> str:
    """A template with its ``{base.X}``, ``{ex.X}``, ``{word.X}``, ``{size.X}``, ``{ratio.X}`` (and ``more``) fields
    filled."""
    return template.format(base=_Numbers(base, "base"), ex=_Numbers(ex, "ex"), word=_Words(base, ex),
                           size=_Words(base, ex, "larger", "smaller"), ratio=_Ratios(base, ex), **more)


def lesson(base: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """TEACHING.md: the plan with the class run's numbers (``{base.X}``), the minute marks laid out from its notebook
    times (``{plan.X}``, :func:`tiebias.teach.schedule.layout`) and the machine the times were measured on
    (``{timing.X}``; None: the stored measurement)."""
    seconds = {k.removeprefix("time_"): v for k, v in base.items() if k.startswith("time_") and k != "time_total"}
    fields = schedule.timing_fields(timing if timing is not None else schedule.load_timing())
    return fill(LESSON.read_text(), base, base, plan=_Numbers(schedule.layout(seconds), "plan"),
                timing=_Numbers(fields, "timing"))


def load_numbers(path: Path = NUMBERS) -> dict[str, Any]:
    """The stored numbers; a damaged file is named, with what to do."""
    return read_json(path, "restore it with `git checkout notebooks/exercise_numbers.json`, or measure it again with "
                     "`python scripts/exercise_answers.py`")


def answer(ex: exercises.Exercise, numbers: dict[str, Any]) -> str:
    """The exercise's answer with its numbers filled in from the class run and the exercise's run."""
    if ex.id not in numbers["exercises"]:
        raise ValueError(f"exercise {ex.id}: no measured numbers in {NUMBERS.name}; run "
                         "python scripts/exercise_answers.py")
    return fill(ex.answer.strip(), numbers["base"], numbers["exercises"][ex.id]["ex"])


def markdown(ex: exercises.Exercise, profile: str, numbers: dict[str, Any]) -> str:
    """One exercise's cell: predict, the command, what to look at, the folded answer."""
    make = f"make exercise ID={ex.id}"
    return (f"### Exercise {ex.id} · {ex.title}\n\n**Predict first.** {ex.predict.strip()}\n\n"
            f"**Change one thing.** In JupyterLab's terminal (File > New > Terminal; it opens at the repository "
            f"root) type\n\n{md_fence(make, 'bash')}\n\nor, in a notebook cell, `!make -C .. exercise ID={ex.id}`. "
            f"It trains into a fresh run folder, `runs/ex-{ex.id}/`, so your run stays as it is, and prints the "
            f"command it runs: `{ex.command(profile)}`.\n\n**Look at** {ex.look.strip()}\n\n"
            f"<details><summary>Answer</summary>\n\n{answer(ex, numbers)}\n\n</details>")


def rendered(nb: dict[str, Any], name: str, numbers: dict[str, Any]) -> list[dict[str, Any]]:
    """The notebook's cells with its exercises (its last cells) rendered anew: a heading, the coding exercise's cells
    as the notebook holds them, then one cell per what-if exercise."""
    header, known = exercises.load()
    mine = [e for e in known if e.notebook == name]
    if not 2 <= len(mine) <= 3:
        raise ValueError(f"notebook {name}: {len(mine)} exercises in the file; each notebook has 2 or 3")
    texts = [(f"{CELL_PREFIX}{name}", f"## Exercises\n\n{header['intro'].strip()}")]
    texts += [(f"{CELL_PREFIX}{e.id}", markdown(e, header["profile"], numbers)) for e in mine]
    md = [{"cell_type": "markdown", "id": cid, "metadata": {}, "source": text.splitlines(keepends=True)}
          for cid, text in texts]
    own = [c for c in nb["cells"] if not c["id"].startswith(CELL_PREFIX)]
    coding = [c for c in nb["cells"] if c["id"].startswith(f"{CELL_PREFIX}{name[:2]}-code-")]
    return own + md[:1] + coding + md[1:]


def render(numbers: dict[str, Any], write: bool = True) -> list[Path]:
    """The notebooks and TEACHING.md rendered from the numbers: the files that change (written when ``write``)."""
    changed = []
    for name in NOTEBOOKS:
        path = notebooks_dir() / f"{name}.ipynb"
        nb = json.loads(path.read_text())
        new = rendered(nb, name, numbers)
        if new != nb["cells"]:
            changed.append(path)
            if write:
                write_text_atomic(path, json.dumps({**nb, "cells": new}, indent=1, ensure_ascii=False) + "\n")
    teaching, text = repo_root() / "TEACHING.md", lesson(numbers["base"])
    if teaching.read_text() != text:
        changed.append(teaching)
        if write:
            write_text_atomic(teaching, text)
    return changed


def provenance(run_dir: Path) -> dict:
    """Which run the numbers come from: its folder, profile and summary.json's digest."""
    run = Run(run_dir)
    summary = (run.path / "summary.json").read_bytes()
    where = run_dir.resolve()
    shown = where.relative_to(repo_root()) if where.is_relative_to(repo_root()) else where  # as in the walkthrough
    return {"run": shown.as_posix(), "profile": run.profile, "summary_sha256": hashlib.sha256(summary).hexdigest()}


def check_belongs(ex: exercises.Exercise, run_dir: Path, profile: str) -> dict:
    """The run's numbers, refusing a folder that is not this exercise's: another profile, or a changed parameter whose
    value the run's own outputs (models, tables) do not show."""
    if not (run_dir / "summary.json").exists():
        raise SystemExit(f"{run_dir}: no summary.json; run `make exercise ID={ex.id}` first")
    run = Run(run_dir)
    if run.profile != profile:
        raise SystemExit(f"{run_dir}: profile {run.profile!r}, the exercises use {profile!r}")
    measured = quantities(run_dir)
    for name, value in parse_set(list(ex.set)).items():
        if name not in measured:
            raise SystemExit(f"{run_dir}: cannot tell {name} from the run's outputs; add it to quantities()")
        if measured[name] != value:
            raise SystemExit(f"{run_dir}: {name} = {measured[name]!r} in its outputs, exercise {ex.id} sets {value!r}")
    return measured


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="runs/class")
    ap.add_argument("--runs", default=str(runs_dir()))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--base-only", action="store_true", help="keep the exercises' stored numbers")
    mode.add_argument("--render", action="store_true", help="measure nothing: render from the stored numbers")
    mode.add_argument("--check", action="store_true", help="exit 1 if a notebook or TEACHING.md is out of date")
    args = ap.parse_args(argv)
    if args.render or args.check:
        changed = render(load_numbers(), write=args.render)
        for path in changed:
            print(f"{'updated' if args.render else 'out of date'}: {path.name}")
        return 1 if args.check and changed else 0
    header, known = exercises.load()
    base = Path(args.base)
    if Run(base).profile != header["profile"]:
        raise SystemExit(f"{base}: not a {header['profile']!r} run")
    out = {"profile": header["profile"], "base_run": provenance(base), "base": quantities(base), "exercises": {}}
    stored = load_numbers()["exercises"] if args.base_only else {}
    for ex in known:
        run_dir = Path(args.runs) / f"ex-{ex.id}"
        out["exercises"][ex.id] = stored.get(ex.id) or {**provenance(run_dir),
                                                        "ex": check_belongs(ex, run_dir, header["profile"])}
        answer(ex, out)  # every field of the template is there
    write_text_atomic(NUMBERS, json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {NUMBERS}")
    for path in render(out):
        print(f"updated {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
