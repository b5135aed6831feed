"""The whole study in the smoke profile, end to end, twice: summary.json complete, verdicts consistent,
and the second run trains nothing new."""

import json
from pathlib import Path

import pytest

from tiebias.report import CLAIMS
from tiebias.study import NOTEBOOKS, run_study


@pytest.mark.slow
def test_smoke_study_end_to_end_and_rerun_is_cheap(tmp_path: Path) -> None:
    run_dir = tmp_path / "study"
    times = run_study("smoke", run_dir, progress=False)
    assert list(times) == list(NOTEBOOKS)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["claims"]) == set(CLAIMS)
    for name, c in summary["claims"].items():
        for key in ("value", "threshold", "verdict", "statement", "paper", "spread", "noise_floor", "n_seeds"):
            assert key in c, (name, key)
        assert c["verdict"] == (c["value"] > c["threshold"]), name
    assert (run_dir / "report.html").exists()
    _same_claims_as_reference(summary["claims"])
    html = (run_dir / "report.html").read_text()
    assert all(f"report/{nb}.html" in html for nb in NOTEBOOKS)
    for nb in NOTEBOOKS:
        assert (run_dir / "notebooks" / f"{nb}.ipynb").exists()

    weights = sorted((run_dir / "models").glob("*/model.safetensors"))
    lenses = sorted((run_dir / "models").glob("*/lens/params.pt"))
    stamps = {p: p.stat().st_mtime_ns for p in weights + lenses}
    n_ckpt = len(list((run_dir / "models").glob("*/checkpoints/step-*")))
    run_study("smoke", run_dir, progress=False)
    assert sorted((run_dir / "models").glob("*/model.safetensors")) == weights
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items()), "a second study retrained something"
    assert len(list((run_dir / "models").glob("*/checkpoints/step-*"))) == n_ckpt


REFERENCE = Path(__file__).with_name("data") / "smoke_claims.json"


def _same_claims_as_reference(claims: dict) -> None:
    """Structure-only changes must not move a claim: values as recorded before the architecture pass.

    Same seeds, same code path, same torch: the numbers are bit-identical on one machine; the tolerance
    only absorbs last-bit differences between CPUs (a real change moves them by far more).
    """
    ref = {k: v for k, v in json.loads(REFERENCE.read_text()).items() if not k.startswith("_")}
    assert set(claims) == set(ref)
    for name, want in ref.items():
        got = claims[name]
        for key, w in want.items():
            if isinstance(w, float):
                assert got[key] == pytest.approx(w, rel=1e-6, abs=1e-9), (name, key)
            else:
                assert got[key] == w, (name, key)
