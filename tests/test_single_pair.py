"""Claim 1 with a single tied / untied pair: a token bootstrap instead of a seed spread, and its own output folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tiebias.align import comparisons
from tiebias.align.embeddings import Embeddings
from tiebias.config.environment import cell_timeout
from tiebias.models import sources
from tiebias.verdicts import claims


def _pair(out_noise: float, in_noise: float, n: int = 400, d: int = 16, seed: int = 0) -> dict[int, dict[str, Embeddings]]:
    """One tied matrix and an untied model whose output / input matrices are noisy rotations of it."""
    g = torch.Generator().manual_seed(seed)
    tied = torch.randn(n, d, generator=g)
    rot = torch.linalg.qr(torch.randn(d, d, generator=g))[0]
    out = tied @ rot + out_noise * torch.randn(n, d, generator=g)
    inp = tied @ rot.T + in_noise * torch.randn(n, d, generator=g)
    toks = [f"t{i}" for i in range(n)]
    return {0: {"tied": Embeddings(tied, tied, True, toks, "tied"),
                "untied": Embeddings(inp, out, False, toks, "untied")}}


def test_one_pair_claim_uses_a_token_bootstrap() -> None:
    df = comparisons.table1(_pair(0.3, 3.0), ["orthogonal"], knn_k=None, keep_scores=True)
    c = claims.alignment_gap(df, "orthogonal", n_boot=500)
    assert c["n"] == 1 and c["basis"] == "tokens" and c["note"] == "one pair: no seed noise floor"
    assert c["ci_low"] < c["gap"] < c["ci_high"] and c["ci_low"] > 0 and c["holds"]
    assert c["threshold"] == pytest.approx(c["gap"] - c["ci_low"]) and c["gap"] > c["threshold"]
    assert c["n_tokens"] == 400 and "bootstrap CI over 400 tokens" in c["rule"]
    ci = comparisons.token_gap(df, "orthogonal", n_boot=500)
    assert ci.mean == pytest.approx(c["gap"])
    with pytest.raises(ValueError, match=r"keep_scores=True"):
        claims.alignment_gap(df.drop(columns=["per_token", "token_ids"]), "orthogonal")


def test_small_positive_gap_inside_its_ci_does_not_hold() -> None:
    """A gap just above 0 with a wide token CI is not a verdict of 'holds' (the old threshold was 0)."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 200)
    out = torch.from_numpy(x - x.mean() + 0.01)
    ids = torch.arange(200)
    rows = [{"comparison": c, "pairing": "same seed", "seed_source": 0, "seed_target": 0, "n_tokens": 200,
             "orthogonal": float(v.mean()), "per_token": {"orthogonal": v}, "token_ids": ids}
            for c, v in (("untied output -> tied", out), ("untied input -> tied", torch.zeros(200, dtype=out.dtype)))]
    c = claims.alignment_gap(pd.DataFrame(rows), "orthogonal", n_boot=500)
    assert c["gap"] == pytest.approx(0.01) and c["ci_low"] < 0 < c["ci_high"]
    assert not c["holds"] and c["gap"] < c["threshold"]


def test_several_seeds_keep_the_seed_threshold(two_seed_run) -> None:
    df = comparisons.table1(comparisons.load_models(two_seed_run), ["orthogonal"], knn_k=None, noise_floor=False)
    c = claims.alignment_gap(df)
    assert c["basis"] == "seeds" and c["threshold"] == pytest.approx(2 * c["gap_sd"])
    assert c["holds"] == (c["gap"] > c["threshold"]) and "ci_low" not in c


def test_external_pair_gets_its_own_folder(tmp_path: Path, two_seed_run) -> None:
    t, u = two_seed_run.model_path("tied", 0), two_seed_run.model_path("untied", 0)
    out = sources.external_dir(t, u, root=tmp_path)
    assert out.path.parent == tmp_path / "external" and out.figures_dir.is_dir() and out.metrics_dir.is_dir()
    assert out.path.name.startswith("tied-s0__untied-s0__")
    assert sources.external_dir(t, u, root=tmp_path).path == out.path  # stable
    assert sources.external_dir(u, t, root=tmp_path).path != out.path
    assert sources.external_path("allenai/OLMo-1B-hf", "allenai/OLMo-1B-0724-hf", root=tmp_path).name.startswith(
        "allenai--OLMo-1B-hf__allenai--OLMo-1B-0724-hf__")
    mine = sources.external_dir(t, u, tmp_path / "mine")
    assert mine.path == (tmp_path / "mine").resolve()
    with pytest.raises(ValueError, match=r"run_dir: .* holds a run or a model"):
        sources.external_dir(t, u, two_seed_run.path)


@pytest.mark.slow
def test_notebook_02_on_an_external_pair(tmp_path: Path) -> None:
    """02_align by path on one tiny OLMo pair: a token-bootstrap verdict, saved in the pair's own folder."""
    import json

    import papermill as pm
    from _families import corpus_tokenizer, save_tiny

    nb_dir = Path(__file__).resolve().parents[1] / "notebooks"
    tok = corpus_tokenizer()
    tied = save_tiny("olmo", True, tmp_path / "tied", len(tok), seed=0, tokenizer=tok)
    untied = save_tiny("olmo", False, tmp_path / "untied", len(tok), seed=1, tokenizer=tok)
    out = tmp_path / "pair"
    pm.execute_notebook(str(nb_dir / "02_align.ipynb"), str(tmp_path / "02.ipynb"), cwd=str(nb_dir),
                        kernel_name="python3", execution_timeout=cell_timeout(), progress_bar=False,
                        parameters={"profile": "smoke", "run_dir": str(out), "tied_source": str(tied),
                                    "untied_source": str(untied)})
    assert (out / "figures" / "02_table1.html").is_file() and (out / "figures" / "02_cosine_histograms.html").is_file()
    table = pd.read_csv(out / "metrics" / "alignment_table1.csv")
    assert set(table.pairing) == {"within model", "same seed"}
    rec = json.loads((out / "results" / "claim1_alignment.json").read_text())
    d = rec["details"]
    assert d["basis"] == "tokens" and d["note"] == "one pair: no seed noise floor"
    assert rec["above_threshold"] == (d["ci_low"] > 0) and rec["threshold"] == pytest.approx(d["gap"] - d["ci_low"])
    assert rec["verdict"] == {"holds": True, "does not hold": False}.get(rec["status"])
    assert "one pair: no seed noise floor" in (tmp_path / "02.ipynb").read_text()
    assert not list(tmp_path.glob("tied/figures")) and not list(tmp_path.glob("untied/figures"))
