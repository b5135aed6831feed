"""Claim 3's mechanism: the exact split of the paper's reading's row-1 error, its penalties, the tied - untied
comparison and the trend against k; the tables in the shared smoke study."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from tiebias.config.lens import LensSettings
from tiebias.config.variants import Variant
from tiebias.lens import evaluate as lens_eval
from tiebias.lens import mechanism as M
from tiebias.lens.lenses import new_lens
from tiebias.models.build import build


def _hand_made_lens(model):
    """A lens whose translators 0 and 1 are random affine maps (an untrained lens is the identity: no error)."""
    lens = new_lens(model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in lens.layer_translators:
            t.weight.copy_(0.3 * torch.randn(t.weight.shape, generator=g))
            t.bias.copy_(0.1 * torch.randn(t.bias.shape, generator=g))
    return lens


def test_the_two_parts_add_up_to_the_papers_reading_exactly() -> None:
    torch.manual_seed(0)
    model = build("tiny", vocab_size=64, seed=0).eval()
    lens = _hand_made_lens(model)
    ids = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        parts = M.split_error(lens, hs[0], hs[1])
        reference = lens(hs[1], 0)  # the paper's code: hidden state 1 through translator 0
        package = lens(hs[1], 1)
        both = lens.unembed(parts[M.PARTS[3]])
    scale = reference.abs().max()
    assert torch.allclose(both, reference, atol=1e-5 * float(scale))
    assert torch.allclose(lens.unembed(parts[M.PARTS[0]]), package, atol=1e-5 * float(scale))
    embed = parts[M.PARTS[1]] - parts[M.PARTS[0]]
    update = parts[M.PARTS[2]] - parts[M.PARTS[0]]
    d_w = lens.layer_translators[0].weight - lens.layer_translators[1].weight
    d_b = lens.layer_translators[0].bias - lens.layer_translators[1].bias
    assert torch.allclose(embed, hs[0] @ d_w.T + d_b, atol=1e-6)
    assert torch.allclose(update, (hs[1] - hs[0]) @ d_w.T, atol=1e-6)


def test_row1_parts_scores_both_readings_as_evaluate_does() -> None:
    torch.manual_seed(0)
    model = build("tiny", vocab_size=64, seed=0)
    lens = _hand_made_lens(model)
    tokens = torch.randint(0, 64, (1024,))
    t = M.row1_parts(model, lens, tokens, seq_len=32, max_tokens=512).set_index("measure").value
    ref = lens_eval.evaluate(model, tokens, lens, seq_len=32, max_tokens=512, protocol="reference", logit_lens=False)
    pkg = lens_eval.evaluate(model, tokens, lens, seq_len=32, max_tokens=512, protocol="package", logit_lens=False)
    tol = 1e-4 * max(1.0, float(ref.kl_tuned_bits[1]))  # float32 sums in another order: far below any real change
    assert t[M.PARTS[3]] == pytest.approx(float(ref.kl_tuned_bits[1]), abs=tol)
    assert t[M.PARTS[0]] == pytest.approx(float(pkg.kl_tuned_bits[1]), abs=tol)
    assert (t.drop(list(M.PARTS)) >= -1).all()  # geometry: norms ratios and a cosine
    with pytest.raises(ValueError, match="max_tokens"):
        M.row1_parts(model, lens, tokens, seq_len=32, max_tokens=8)


def _parts(values: dict[tuple[str, int], tuple[float, float, float, float]]) -> pd.DataFrame:
    rows = []
    for (v, s), kls in values.items():
        rows += [{"variant": v, "seed": s, "measure": m, "value": x, "kind": "kl"} for m, x in zip(M.PARTS, kls, strict=True)]
        rows.append({"variant": v, "seed": s, "measure": "update / embedding norm", "value": 10.0 + s, "kind": "geometry"})
    return pd.DataFrame(rows)


def test_comparison_names_the_part_that_carries_the_difference() -> None:
    vals = {("tied", s): (0.3, 0.3 + 0.01 * s, 5.0 + 0.1 * s, 5.1 + 0.1 * s) for s in range(3)}
    vals |= {("untied", s): (0.3, 0.31 - 0.01 * s, 2.0 + 0.05 * s, 2.0 + 0.05 * s) for s in range(3)}
    parts = _parts(vals)
    pen = M.penalties(parts).set_index(["variant", "seed"])
    assert pen.loc[("tied", 0), "update part"] == pytest.approx(4.7)
    assert pen.loc[("tied", 0), "interaction"] == pytest.approx(5.1 - 0.3 - 0.0 - 4.7)
    table = M.compare(parts)
    both = table.set_index("measure").loc["penalty: both"]
    assert both.difference == pytest.approx(np.mean([4.8 + 0.1 * s - 1.7 - 0.05 * s for s in range(3)]))
    low = table.set_index("measure").ci_low  # 03 names the parts whose difference's interval lies above 0
    assert low["penalty: update part"] > 0 and not low["penalty: embedding part"] > 0
    flat = _parts({(v, s): (0.3, 0.3, 2.0 + 0.1 * s, 2.0 + 0.1 * s) for v in ("tied", "untied") for s in range(3)})
    flat_low = M.compare(flat).set_index("measure").ci_low
    assert not any(flat_low[f"penalty: {p}"] > 0 for p in ("embedding part", "update part", "interaction"))


def test_k_trend_falls_rises_or_shows_none() -> None:
    k = np.repeat([1.0, 2.0, 5.0, 10.0], 3)
    noise = np.tile([-0.05, 0.0, 0.05], 4)
    falling = pd.DataFrame({"k": k, "penalty": 5.0 - 0.5 * np.log2(k) + noise})
    assert M.k_trend(falling)["word"] == "falls"
    assert M.k_trend(falling.assign(penalty=5.0 + 0.5 * np.log2(k) + noise))["word"] == "rises"
    assert M.k_trend(falling.assign(penalty=5.0 + np.tile([-1.0, 0.0, 1.0], 4)))["word"] == "no trend"
    assert M.k_trend(falling.head(2))["word"] == "too few points"


def test_penalty_by_k_needs_two_factors(fresh_run) -> None:
    with pytest.raises(ValueError, match="variants: .* fewer than two tied models"):
        M.penalty_by_k(fresh_run, [Variant.parse("tied"), Variant.parse("untied")], [0],
                       LensSettings(steps=1, tokens_per_step=64, seq_len=32, budgets=(1,), recipes=("cpu",),
                                    eval_tokens=64))


def test_the_smoke_study_writes_the_mechanism_tables_finite(smoke_study) -> None:
    m = smoke_study.path / "metrics"
    parts = pd.read_csv(m / "lens_row1_parts.csv")
    assert set(parts.variant) == {"tied", "untied"} and set(M.PARTS) <= set(parts.measure)
    assert np.isfinite(parts.value).all()
    mech = pd.read_csv(m / "lens_row1_mechanism.csv")
    assert {"penalty: both", "penalty: update part", "penalty: embedding part"} <= set(mech.measure)
    pen = pd.read_csv(m / "lens_row1_penalty_k.csv")
    assert pen.k.nunique() >= 2 and np.isfinite(pen.penalty).all()
    for name in ("03_row1_parts", "04_row1_penalty_k"):
        assert (smoke_study.path / "figures" / f"{name}.html").exists()
    executed = json.loads((smoke_study.path / "notebooks" / "03_lens.ipynb").read_text())
    assert any("The paper's reading costs the tied model" in "".join(o.get("text", ""))
               for c in executed["cells"] for o in c.get("outputs", []))
