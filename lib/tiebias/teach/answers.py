"""The numbers behind the exercises' answers, read from run folders, so that no answer holds a typed-in number.

``quantities`` reads one executed run (``summary.json`` and ``metrics/``) into flat, named numbers; an answer in
``notebooks/exercises.toml`` is a template that names them (``{base.share:.1%}`` for the class run,
``{ex.share:.1%}`` for the exercise's own run, ``{word.share}`` for "higher" or "lower", ``{ratio.half_width}`` for the
class run's number over the exercise's). ``scripts/exercise_answers.py``
measures both runs of every exercise and stores the numbers in ``notebooks/exercise_numbers.json``; the notebooks show
the templates filled with those numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from tiebias.data.tokens import unigram_loss
from tiebias.lens import tables
from tiebias.run.files import read_json
from tiebias.run.folder import Run
from tiebias.teach import schedule
from tiebias.train import windows
from tiebias.verdicts import claims

NUMBERS_FILE = "exercise_numbers.json"
"""The measured numbers of every exercise, next to ``exercises.toml``."""


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
        first, second = windows.halves(logs)  # the numbers 01 prints
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
    """``{word.NAME}``: "higher" or "lower" (the exercise's run against the class run; ``{size.NAME}``: "larger" or
    "smaller"), "the same" when equal."""

    def __init__(self, base: dict[str, Any], ex: dict[str, Any], up: str = "higher", down: str = "lower") -> None:
        self._base, self._ex, self._up, self._down = base, ex, up, down

    def __getattr__(self, name: str) -> str:
        a, b = self._base[name], self._ex[name]
        return "the same" if a == b else (self._up if b > a else self._down)


class _Ratios:
    """``{ratio.NAME}``: the class run's number over the exercise run's (how many times smaller the exercise's is)."""

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


LESSON_TEMPLATE = Path(__file__).with_name("lesson.md")
"""The lesson plan's template; ``scripts/exercise_answers.py`` writes it, filled from the class run, to TEACHING.md."""


def lesson(base: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """TEACHING.md: the lesson plan with the class run's numbers (``{base.NAME}``), the minute marks laid out from its
    notebook times (``{plan.NAME}``, :func:`tiebias.teach.schedule.layout`) and the stored measurement of the machine
    and the environment (``{timing.NAME}``; None: :data:`tiebias.teach.schedule.TIMING_FILE`) filled in."""
    seconds = {k.removeprefix("time_"): v for k, v in base.items() if k.startswith("time_") and k != "time_total"}
    fields = schedule.timing_fields(timing if timing is not None else schedule.load_timing())
    return fill(LESSON_TEMPLATE.read_text(), base, base, plan=_Numbers(schedule.layout(seconds), "plan"),
                timing=_Numbers(fields, "timing"))


def fill(template: str, base: dict[str, Any], ex: dict[str, Any], **more: Any) -> str:
    """An answer template with its ``{base.X}``, ``{ex.X}``, ``{word.X}``, ``{size.X}`` and ``{ratio.X}`` fields
    filled (and any ``more`` named fields)."""
    return template.format(base=_Numbers(base, "base"), ex=_Numbers(ex, "ex"), word=_Words(base, ex),
                           size=_Words(base, ex, "larger", "smaller"), ratio=_Ratios(base, ex), **more)
