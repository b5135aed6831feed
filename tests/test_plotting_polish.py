"""Figures read on their own: log axes ticked at 1, 2, 5, 10, 20, every axis titled, the claim-2 threshold line
labelled from where the claims define it, error bars that say what they are, and PNGs without toolbar or margin.

Every figure the plotting modules build is built here from small synthetic frames.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from tiebias.output import notebook
from tiebias.output.plotting import ablation, alignment, export, lens, style, training
from tiebias.verdicts import claims

KS = [1.0, 2.0, 5.0, 10.0, 20.0]
rng = np.random.default_rng(0)


def _train_log(n: int = 300) -> pd.DataFrame:
    step = np.arange(1, n + 1)
    out = 1.5 * np.exp(-step / 80) + 0.2 + rng.uniform(0, 0.02, n)
    inp = 0.02 + 0.5 * np.exp(-step / 10)
    return pd.DataFrame({"step": step, "loss": 8 - np.log(step), "input_norm": inp, "output_norm": out,
                         "output_share": out / (inp + out)})


def _ablation() -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = [{"k": k, "seed": s, "step": st, "method": m, "vs_untied_input": 0.3 + 0.01 * math.log(k) + 0.01 * s,
             "vs_untied_output": 0.5 - 0.02 * math.log(k) + 0.01 * s}
            for k in KS for s in (0, 1) for st in (100, 200) for m in ("orthogonal", "linear")]
    shares = pd.DataFrame([{"k": k, "seed": s, "output_share": 0.8 / k ** 0.3 + 0.01 * s} for k in KS for s in (0, 1)])
    return pd.DataFrame(rows), shares


def _gaps(layers: int = 4) -> pd.DataFrame:
    g = rng.normal(0.1, 0.05, layers)
    return pd.DataFrame({"layer": range(layers), "gap": g, "ci_low": g - 0.05, "ci_high": g + 0.05,
                         "significant": g > 0.05})


def _per_layer() -> pd.DataFrame:
    return pd.DataFrame([{"variant": v, "seed": s, "layer": i, "recipe": r, "budget": b, "lens_steps": 250 * b,
                          "kl_tuned_bits": 1 / (i + 1) + 0.1 * b + 0.01 * s, "kl_logit_bits": 5 / (i + 1)}
                         for v in ("tied", "untied") for s in (0, 1) for i in range(4) for r in ("cpu", "package")
                         for b in (1, 2, 4)])


def all_figures() -> dict[str, go.Figure]:
    """Every figure of the plotting modules (the trajectory heatmap is checked in test_explorers)."""
    logs = {f"tied-s{s}": _train_log() for s in (0, 1)}
    table, shares = _ablation()
    ev = pd.DataFrame([{"matrix": m, "seed": s, "step": st, "cos_to_init": 1 - st / 2000, "cos_to_prev": 0.99}
                       for m in alignment.MATRIX_COLORS for s in (0, 1) for st in (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)])
    kl = _per_layer()
    ladder_gaps = pd.DataFrame({"recipe": "cpu", "budget": [1, 2, 4], "gap": [0.3, 0.2, 0.2], "ci_low": [0.1] * 3,
                                "ci_high": [0.5] * 3})
    scale = pd.DataFrame({"step": [4, 8], "val_loss": [6.0, 5.5], "gap": [0.0, 0.3], "ci_low": [-0.1, 0.1],
                          "ci_high": [0.1, 0.5]})
    readings = pd.DataFrame({"reading": list("abcd"), "protocol": ["package", "reference"] * 2, "lens_steps": 250,
                             "gap": 0.2, "ci_low": 0.1, "ci_high": 0.3})
    reading_layers = pd.DataFrame([{"reading": r, "layer": i, "tied": 1.0 / (i + 1), "untied": 0.8 / (i + 1)}
                                   for r in "abcd" for i in range(3)])
    return {
        "loss_curves": training.loss_curves(logs, {}, unigram=6.5),
        "gradient_flow": training.gradient_flow(logs),
        "dose_response": ablation.dose_response(table, shares),
        "evolution": alignment.evolution(ev),
        "by_frequency": alignment.by_frequency({"a": _freq_table()}),
        "per_layer": lens.per_layer(kl, {"kl_tuned_bits": "tuned", "kl_logit_bits": "logit"}, "t", "KL (bits)"),
        "gap_by_depth": lens.gap_by_depth({"a": _gaps(), "b": _gaps(8)}),
        "ladder": lens.ladder(kl[kl.layer < 4]),
        "ladder_gap": lens.ladder_gap(ladder_gaps),
        "gap_vs_loss": lens.gap_vs_loss(scale),
        "readings": lens.readings(reading_layers, readings),
    }


def _freq_table() -> pd.DataFrame:
    return pd.DataFrame({"bin": ["q1", "q2", "q3"], "mean": [0.8, 0.5, -0.9], "std": [0.4, 0.1, 0.3], "n": [10, 20, 30]})


def _axes(fig: go.Figure) -> dict[str, go.layout.XAxis]:
    """Every x / y axis of a figure (subplots included) by layout name."""
    keys = {"xaxis", "yaxis"} | {k for k in fig.layout.to_plotly_json() if k.startswith(("xaxis", "yaxis"))}
    return {k: fig.layout[k] for k in sorted(keys)}


@pytest.fixture(scope="module")
def figures() -> dict[str, go.Figure]:
    return all_figures()


def test_every_axis_with_tick_labels_has_a_title(figures) -> None:
    missing = [f"{name}.{key}" for name, fig in figures.items() for key, ax in _axes(fig).items()
               if ax.showticklabels is not False and not (ax.title.text or "").strip()]
    assert not missing, f"axes without a title: {missing}"


def test_log_axes_tick_at_1_2_5_or_at_the_data(figures) -> None:
    logs = {(name, key): ax for name, fig in figures.items() for key, ax in _axes(fig).items() if ax.type == "log"}
    assert {n for n, _ in logs} == {"gradient_flow", "dose_response", "evolution", "ladder", "ladder_gap"}
    for (name, key), ax in logs.items():
        assert ax.tickmode == "array" and ax.tickvals, f"{name}.{key}: plotly's own log ticks ('9 1 2 3 ...')"
        for v, text in zip(ax.tickvals, ax.ticktext, strict=True):
            assert float(text) == pytest.approx(v), (name, key, text, v)
    for key in ("xaxis", "xaxis2", "xaxis3"):
        ax = figures["dose_response"].layout[key]
        assert list(ax.tickvals) == KS and list(ax.ticktext) == ["1", "2", "5", "10", "20"]
    flow = figures["gradient_flow"].layout.yaxis
    mantissas = {round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6) for v in flow.tickvals}
    assert mantissas <= {1.0, 2.0, 5.0} and len(flow.tickvals) >= 5
    assert list(figures["ladder_gap"].layout.xaxis.tickvals) == [1, 2, 4]  # budgets: the rungs themselves


@pytest.mark.parametrize(("values", "want"), [
    ([1, 2, 5, 10, 20], [1, 2, 5, 10, 20]),
    (np.linspace(0.012, 1.9, 50), [0.02, 0.05, 0.1, 0.2, 0.5, 1]),
    ([0.5, *range(1, 300)], [0.5, 1, 2, 5, 10, 20, 50, 100, 200]),
    ([0, -1, np.nan], []),
])
def test_log_ticks(values, want) -> None:
    assert style.log_ticks(values) == pytest.approx(want)


def test_log_ticks_thin_to_powers_of_ten_over_many_decades() -> None:
    assert style.log_ticks(np.geomspace(1e-3, 1e5, 40)) == pytest.approx([10.0 ** e for e in range(-3, 6)])
    assert [style.tick_text(t) for t in (0.05, 1.0, 20.0, 2000.0, 1e5)] == ["0.05", "1", "20", "2000", "1e5"]


def test_claim2_threshold_line_comes_from_the_claims_and_is_labelled(monkeypatch) -> None:
    monkeypatch.setattr(claims, "CLAIM2_SHARE", 0.6)
    table, shares = _ablation()
    for fig in (ablation.dose_response(table, shares), training.gradient_flow({"tied-s0": _train_log()})):
        lines = [s for s in fig.layout.shapes if s.y0 == s.y1 == 0.6]
        assert len(lines) == 1 and lines[0].line.dash == "dash"
        assert any("60%" in a.text and "claim 2" in a.text for a in fig.layout.annotations)
        assert not [s for s in fig.layout.shapes if s.y0 == s.y1 == 0.5]  # no hard-coded 0.5 left


def test_frequency_error_bars_stay_on_the_cosine_scale_and_say_what_they_are(figures) -> None:
    bar = figures["by_frequency"].data[0]
    mean, sd = np.array([0.8, 0.5, -0.9]), np.array([0.4, 0.1, 0.3])
    np.testing.assert_allclose(bar.error_y.array, [0.2, 0.1, 0.3])  # 0.8 + 0.4 would pass 1
    np.testing.assert_allclose(bar.error_y.arrayminus, [0.4, 0.1, 0.1])  # -0.9 - 0.3 would pass -1
    assert (mean + bar.error_y.array <= 1 + 1e-12).all() and (mean - bar.error_y.arrayminus >= -1 - 1e-12).all()
    np.testing.assert_allclose(bar.customdata[:, 0], sd)
    assert "per-token sd" in bar.hovertemplate and "per-token sd" in figures["by_frequency"].layout.title.text


def test_subplot_titles_clear_the_plot_area(figures) -> None:
    fig = figures["dose_response"]
    assert fig.layout.margin.t >= 100  # room for the figure title above the panel titles
    assert all(len(a.text) <= 40 for a in fig.layout.annotations if a.yref == "paper")


def test_notebook_tables_print_a_rounded_tiny_negative_as_zero() -> None:
    df = pd.DataFrame({"gap": [-0.000169, 0.0012], "ci_low": [-0.003, 0.25]}).round(3)
    assert str(df.iloc[0, 0]) == "-0.0"  # what pandas would print
    assert [notebook.table_number(x) for x in df.gap] == ["0", "0.001"]
    assert notebook.table_number(1414275.0) == "1414275" and notebook.table_number(6.18849) == "6.18849"


def test_png_figures_get_their_own_size_or_the_default() -> None:
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4])).update_layout(width=640, height=300)
    assert (export.sized(fig)["layout"]["width"], export.sized(fig)["layout"]["height"]) == (640, 300)
    plain = export.sized(go.Figure())["layout"]
    assert (plain["width"], plain["height"]) == (export.DEFAULT_WIDTH, export.DEFAULT_HEIGHT)


def _has_chromium() -> bool:
    try:
        return bool(export.chromium())
    except RuntimeError:
        return False


@pytest.mark.skipif(not _has_chromium(), reason="needs chromium (apt-get install -y chromium)")
def test_png_is_exactly_the_figure(tmp_path) -> None:
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4])).update_layout(width=640, height=300)
    out, = export.write_pngs([fig], [tmp_path / "f.png"])
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (640, 300)


@pytest.mark.skipif(not _has_chromium(), reason="needs chromium (apt-get install -y chromium)")
def test_readme_pngs_are_refreshed_from_a_runs_saved_figures(tmp_path, capsys) -> None:
    (tmp_path / "run" / "figures").mkdir(parents=True)
    go.Figure(go.Bar(x=[1], y=[2])).update_layout(height=240).write_json(tmp_path / "run" / "figures" / "a.json")
    out = tmp_path / "figures"
    out.mkdir()
    for name in ("a", "b"):  # the README's images: b has no figure in this run
        (out / f"{name}.png").write_bytes(b"old")
    export.main([str(tmp_path / "run"), str(out)])
    assert struct.unpack(">II", (out / "a.png").read_bytes()[16:24]) == (export.DEFAULT_WIDTH, 240)
    assert (out / "b.png").read_bytes() == b"old" and "skipped b" in capsys.readouterr().out
    with pytest.raises(ValueError, match="run_dir: .* has no figures/ folder"):
        export.from_run(tmp_path / "run" / "figures", out)


def test_every_series_is_drawn_however_many() -> None:
    assert style.palette(2, ["#a", "#b", "#c"]) == ["#a", "#b"]
    assert len(set(style.palette(6, ["#a", "#b"]))) == 6
    fig = lens.gap_by_depth({f"depth {i}": _gaps(3 + i) for i in range(5)})
    assert len(fig.data) == 5 and len({t.line.color for t in fig.data}) == 5


def test_every_saved_figure_titles_its_axes(smoke_study) -> None:
    """Every figure a smoke study saves, the library's and those the notebooks draw themselves."""
    import plotly.io as pio

    saved = {f.stem: pio.read_json(f) for f in sorted((smoke_study.path / "figures").glob("*.json"))}
    assert {"01_claim2_windows", "02_levels_at_checkpoints", "03_row1_parts", "04_ingredients", "02_table1"} <= set(saved)
    missing = [f"{name}.{key}" for name, fig in saved.items() for key, ax in _axes(fig).items()
               if ax.showticklabels is not False and not (ax.title.text or "").strip()]
    assert not missing, f"axes without a title: {missing}"
