"""scripts/compare_claims.py: the bit-for-bit comparison used for refactors on one machine."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_claims.py"


def _load(name: str = "compare_claims"):
    spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_identical_passes_and_a_last_bit_difference_fails(tmp_path: Path, capsys) -> None:
    cc = _load()
    ref = json.loads(cc.REFERENCE.read_text())
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"claims": {k: v for k, v in ref.items() if not k.startswith("_")}}))
    assert cc.main([str(summary)]) == 0
    moved = json.loads(summary.read_text())
    v = moved["claims"]["claim1_alignment"]["value"]
    moved["claims"]["claim1_alignment"]["value"] = v + abs(v) * 1e-15 + 1e-17
    summary.write_text(json.dumps(moved))
    assert cc.main([str(summary)]) == 1
    assert "claim1_alignment.value" in capsys.readouterr().out


def test_a_verdict_or_comparison_that_differs_fails(tmp_path: Path, capsys) -> None:
    """The verdict (null when the status is neither holds nor does not hold) and the bare comparison both count."""
    cc = _load()
    ref = {k: v for k, v in json.loads(cc.REFERENCE.read_text()).items() if not k.startswith("_")}
    assert ref["claim1_alignment"]["verdict"] is None and ref["claim1_alignment"]["above_threshold"] is True
    summary = tmp_path / "summary.json"
    for key, other in (("verdict", True), ("above_threshold", False)):
        changed = json.loads(json.dumps(ref))
        changed["claim1_alignment"][key] = other
        summary.write_text(json.dumps({"claims": changed}))
        assert cc.main([str(summary)]) == 1
        assert f"claim1_alignment.{key}: {other!r} vs" in capsys.readouterr().out


def test_pin_keeps_the_about_line(tmp_path: Path) -> None:
    cc = _load()
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps({"_about": "why", "claim2_gradient_flow": {"value": 0.1}}))
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"claims": {"claim2_gradient_flow": {"value": 0.2, "verdict": False}}}))
    assert cc.main([str(summary), str(ref), "--pin"]) == 0
    pinned = json.loads(ref.read_text())
    assert pinned["_about"] == "why" and pinned["claim2_gradient_flow"]["value"] == 0.2
    assert cc.main([str(summary), str(ref)]) == 0


def test_claim3_numbers_prints_the_readmes_figures_from_a_run(smoke_study, capsys) -> None:
    """scripts/claim3_numbers.py on the shared smoke study: every figure the README's claim-3 text quotes, from the run."""
    mod = _load("claim3_numbers")
    mod.main([str(smoke_study.path)])
    out = capsys.readouterr().out
    claims = json.loads((smoke_study.path / "summary.json").read_text())["claims"]
    for key in ("claim3_tuned_lens", "claim3_tuned_lens_reference"):
        assert f"{key}: gap {claims[key]['value']:+.3f} bits" in out
    assert out.count("| (") == 4 and "layer-0 tuned-lens KL" in out and "final validation loss: tied" in out


@pytest.mark.parametrize("script, first_missing, todo", [
    ("claim3_numbers", "results/claim3_tuned_lens.json", "run 03_lens on it first"),
    ("claims24_numbers", "metrics/claim2_windows.csv", "run 01_train on it first"),
    ("reproduction_numbers", "reproduction.json", "run python -m tiebias reproduction")])
def test_numbers_scripts_name_what_a_run_lacks(tmp_path: Path, script: str, first_missing: str, todo: str) -> None:
    mod = _load(script)
    try:
        mod.main([str(tmp_path)])
    except SystemExit as e:
        msg = str(e)
    else:
        raise AssertionError("a folder without the notebook's outputs was read")
    assert msg.startswith(f"run: {tmp_path} has no {first_missing}") and todo in msg
    assert not list(tmp_path.iterdir())  # nothing written


def test_claims24_numbers_prints_the_readmes_figures_from_a_run(smoke_study, capsys) -> None:
    """scripts/claims24_numbers.py on the shared smoke study: claim 2's windows, claim 4's ingredients, the scale axis."""
    import pandas as pd

    mod = _load("claims24_numbers")
    mod.main([str(smoke_study.path), "--scale", str(smoke_study.path)])
    out = capsys.readouterr().out
    w = pd.read_csv(smoke_study.path / "metrics" / "claim2_windows.csv")
    after = w[(w.window == "after warmup") & (w.metric == "proxy l2")].iloc[0]
    assert f"after warmup {after['mean']:.1%} vs {after.paper:.1%}" in out
    assert "| kit (another seed's untied model) | 5 |" in out and "At k = 5, the paper's shift is +0.006" in out
    assert "| 1024 | 64 |" in out and "with width (16 to 64" in out


def test_reproduction_numbers_prints_the_readmes_figures_from_a_run(smoke_study, capsys) -> None:
    """scripts/reproduction_numbers.py on the shared smoke study: per-claim lines, cause counts, the row-1 mechanism."""
    mod = _load("reproduction_numbers")
    mod.main([str(smoke_study.path)])
    out = capsys.readouterr().out
    data = json.loads((smoke_study.path / "reproduction.json").read_text())
    assert out.count("| not meaningful | not meaningful |") == len(data["claims"]) == 4
    numbers = [r for r in data["rows"] if not r["setting"]]
    groups = {r.get("group") or r["key"] for r in numbers}  # one number of ours beside several of the paper's: once
    assert f"{len(groups)} comparisons ({len(numbers)} numbers of the paper): " in out
    assert len(groups) < len(numbers)  # Table 1's and 5's rows repeat our numbers against several model pairs
    assert "| penalty: update part |" in out and "The paper's reading costs the tied model" in out
    assert "k = 1: " in out and "k = 5: " in out
