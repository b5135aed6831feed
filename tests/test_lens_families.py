"""Every decoder-only family of tests/_families.py, lensed by layout: tiny random models saved and loaded by path.

Per family, tied and untied: L + 1 hidden states, the last one after the final norm, last-layer KL 0 for the
logit lens and an identity tuned lens, a briefly trained lens that saves, loads and scores the same, and the
package's trajectory helper. Plus the refusals: logit soft-capping, a model whose logits the head does not
reproduce, and a model with no head. A family the installed transformers lacks is skipped, its reason naming the
transformers version and the missing class; with the locked transformers (constraints.txt) none is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from _families import FAMILIES, PACKAGE_FAMILIES, char_tokenizer, missing, save_tiny, tiny_config
from transformers import AutoModelForCausalLM, PreTrainedModel
from tuned_lens import TunedLens
from tuned_lens.nn import LogitLens

from tiebias.config.environment import cell_timeout
from tiebias.config.lens import LensFit, LensSettings
from tiebias.lens import evaluate as lens_eval
from tiebias.lens import fit as lens_fit
from tiebias.lens import lenses as tl
from tiebias.models import anatomy

VOCAB = 300
SEQ = 32
KEYS = [(f, tied) for f in FAMILIES for tied in (True, False)]
IDS = [f"{f}-{'tied' if t else 'untied'}" for f, t in KEYS]
TOKENS = torch.from_numpy(np.random.default_rng(0).integers(0, VOCAB, 1024))


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, bool], Path]:
    """(family, tied) -> one tiny random model saved with save_pretrained, built on first use (a family the
    installed transformers lacks skips only the tests that ask for it)."""
    root = tmp_path_factory.mktemp("families")
    cache: dict[tuple[str, bool], Path] = {}

    def get(family: str, tied: bool) -> Path:
        if (family, tied) not in cache:
            cache[(family, tied)] = save_tiny(family, tied, root / f"{family}-{int(tied)}", VOCAB)
        return cache[(family, tied)]

    return get


def _load(path: Path) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_family_lensed_by_layout(saved, key, tmp_path: Path) -> None:
    family, tied = key
    model = _load(saved(family, tied))
    tied_now = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied_now == tied, "the saved model's tying must survive save/load"
    n = model.config.num_hidden_layers
    layout = anatomy.find_layout(model)
    assert anatomy.check_model(model) == model.config.model_type

    # L + 1 hidden states; the last is after the final norm: norm(stream entering it) == hidden_states[-1].
    x = TOKENS[:SEQ].unsqueeze(0)
    pre: list[torch.Tensor] = []
    handle = layout.final_norm.register_forward_pre_hook(lambda _m, a: pre.append(a[0]))
    with torch.no_grad():
        out = model(input_ids=x, output_hidden_states=True)
        handle.remove()
        assert len(out.hidden_states) == n + 1
        torch.testing.assert_close(layout.final_norm(pre[0]), out.hidden_states[-1], rtol=0, atol=1e-6)
        assert not torch.allclose(pre[0], out.hidden_states[-1])  # the norm did something
        torch.testing.assert_close(model.get_output_embeddings()(out.hidden_states[-1]), out.logits)

    # Identity tuned lens = logit lens at every layer; both are the model's head at the last layer.
    df = lens_eval.evaluate(model, TOKENS, tl.new_lens(model), seq_len=SEQ, max_tokens=256)
    assert list(df.layer) == list(range(n + 1))
    last = df[df.layer == n].iloc[0]
    assert abs(last.kl_logit_bits) < 1e-6 and abs(last.kl_tuned_bits) < 1e-6
    np.testing.assert_allclose(df.kl_tuned_bits, df.kl_logit_bits, rtol=1e-5, atol=1e-6)
    assert df.kl_logit_bits.iloc[0] > 1e-5  # layer 0 is not the output

    # A briefly trained lens moves, saves in the package's format, loads and scores the same.
    lens = lens_fit.train_lens(model, TOKENS, LensFit(steps=3, seq_len=SEQ, tokens_per_step=2 * SEQ, warmup_steps=0),
                               progress=False)
    assert any(float(t.weight.detach().abs().sum()) > 0 for t in lens.layer_translators)
    path = tl.save_lens(lens, tmp_path / "lens")
    assert {"config.json", "params.pt"} <= {p.name for p in path.iterdir()}
    before = lens_eval.evaluate(model, TOKENS, lens, seq_len=SEQ, max_tokens=256)
    again = lens_eval.evaluate(model, TOKENS, tl.load_lens(model, path), seq_len=SEQ, max_tokens=256)
    pd.testing.assert_frame_equal(before, again)
    assert abs(before.kl_tuned_bits.iloc[-1]) < 1e-6
    if family in PACKAGE_FAMILIES:  # the package's own loader reads the same files
        pkg = TunedLens.from_model_and_pretrained(model, str(path), map_location="cpu", weights_only=True)
        pd.testing.assert_frame_equal(before, lens_eval.evaluate(model, TOKENS, pkg, seq_len=SEQ, max_tokens=256))



@pytest.mark.parametrize("family", ["olmo", "qwen3", "gemma", "opt"])
def test_trajectory_and_top_tokens(saved, family: str) -> None:
    """The package's PredictionTrajectory and the top-token table work for families it does not know."""
    model = _load(saved(family, False))
    lens = tl.new_lens(model)
    tok = char_tokenizer()
    traj = lens_eval.trajectory(model, lens, tok, "the cat sat")
    n = model.config.num_hidden_layers
    assert traj.log_probs.shape[0] == n + 1
    with torch.no_grad():
        ids = torch.tensor([tok.encode("the cat sat")])
        want = model(input_ids=ids).logits.log_softmax(-1)[0].numpy()
    np.testing.assert_allclose(traj.log_probs[-1], want, rtol=1e-5, atol=1e-5)
    top = lens_eval.top_tokens_by_layer(model, lens, tok, "the cat", k=2)
    assert set(top.layer) == set(range(n + 1)) and set(top.lens) == {"tuned", "logit"}
    ll = tl.new_logit_lens(model)
    assert isinstance(ll, LogitLens)


def test_trajectory_of_a_bf16_model() -> None:
    """bf16 models (GPU lens training) get a trajectory too: logits reach numpy in float32."""
    model = AutoModelForCausalLM.from_config(tiny_config("olmo", False, VOCAB)).to(torch.bfloat16).eval()
    lens = tl.new_lens(model)
    tok = char_tokenizer()
    traj = lens_eval.trajectory(model, lens, tok, "the cat")
    with torch.no_grad():
        want = model(input_ids=torch.tensor([tok.encode("the cat")])).logits.float().log_softmax(-1)[0].numpy()
    assert traj.log_probs.shape == (model.config.num_hidden_layers + 1, 7, VOCAB)
    np.testing.assert_allclose(traj.log_probs[-1], want, rtol=1e-6, atol=1e-6)


def test_opt_with_projection_after_the_norm(tmp_path: Path) -> None:
    """OPT with word_embed_proj_dim != hidden_size projects after the final norm; the lens includes it."""
    model = _load(save_tiny("opt", False, tmp_path / "opt", VOCAB, word_embed_proj_dim=16))
    layout = anatomy.find_layout(model)
    assert layout.project_out is not None and layout.norm_path == "decoder.final_layer_norm"
    df = lens_eval.evaluate(model, TOKENS, tl.new_lens(model), seq_len=SEQ, max_tokens=256)
    assert df.kl_logit_bits.abs().iloc[-1] < 1e-6 and df.kl_tuned_bits.abs().iloc[-1] < 1e-6


def test_soft_capped_logits_are_refused() -> None:
    """Gemma2's default final_logit_softcapping cannot be reproduced by final norm + head: refused, named."""
    model = AutoModelForCausalLM.from_config(tiny_config("gemma2", True, VOCAB, final_logit_softcapping=30.0))
    with pytest.raises(ValueError, match=r"model_type='gemma2' .*final_logit_softcapping=30\.0.*allowed: "
                                         r"final_logit_softcapping=None"):
        anatomy.check_model(model)


def test_logits_the_head_does_not_reproduce_are_refused() -> None:
    """The forward-pass check catches a family that changes its logits after the head."""
    model = AutoModelForCausalLM.from_config(tiny_config("llama", False, VOCAB))

    def scale(_module, _args, out):
        out.logits = out.logits * 2.0
        return out

    model.register_forward_hook(scale)
    with pytest.raises(ValueError, match=r"model_type='llama'.*does not reproduce the model's logits"):
        tl.new_lens(model)


def test_model_without_head_is_refused() -> None:
    from transformers import AutoModel

    base = AutoModel.from_config(tiny_config("qwen3", False, VOCAB))
    with pytest.raises(ValueError, match=r"model_type='qwen3' \(Qwen3Model\) has no causal-LM head"):
        anatomy.check_model(base)


# --------------------------------------------------------------------------- which families are checked


def test_a_family_transformers_lacks_is_skipped_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import _families
    import transformers

    monkeypatch.setitem(_families._SPECS, "nofamily", ("NoSuchConfig", {}))
    version = ".".join(transformers.__version__.split(".")[:2])
    with pytest.raises(pytest.skip.Exception,
                       match=rf"^transformers {re.escape(version)} has no NoSuchConfig: family nofamily not checked$"):
        tiny_config("nofamily", True)
    assert missing("llama") is None


def test_every_family_is_a_test_parameter() -> None:
    """No family is dropped from the parameters: one the installed transformers lacks is a named skip instead."""
    import _families

    assert FAMILIES == list(_families._SPECS)
    assert KEYS == [(f, t) for f in _families._SPECS for t in (True, False)]


def test_locked_transformers_has_every_family() -> None:
    """With the transformers of the lock (constraints.txt) no family is skipped: "verified" holds for that version."""
    import transformers

    lock = (Path(__file__).resolve().parents[1] / "constraints.txt").read_text()
    locked = re.search(r"^transformers==(\S+)$", lock, re.MULTILINE)
    assert locked is not None, "constraints.txt has no transformers pin"
    if transformers.__version__ != locked.group(1):
        pytest.skip(f"installed transformers {transformers.__version__}, lock says {locked.group(1)} "
                    "(tests/test_install.py reports it)")
    assert [f for f in FAMILIES if missing(f) is not None] == []


# --------------------------------------------------------------------------- notebook 03 on external pairs

NB = Path(__file__).resolve().parents[1] / "notebooks"
EXTERNAL_FAMILIES = ["olmo", "olmo2", "qwen3", "mistral", "gpt2", "gpt_neo", "gpt_neox"]
PAPER_PAIRS = [("olmo", "olmo"), ("gpt_neo", "gpt_neox"), ("qwen3", "qwen3")]
"""Families of the paper's pairs: OLMo-1B / OLMo-1B-0724, GPT-Neo-2.7B / Pythia-2.8B, Qwen3-4B / Qwen3-8B."""
NOTEBOOK_PAIRS = PAPER_PAIRS + [(f, f) for f in ("olmo2", "mistral", "gpt2")]
"""Every family the claim-3 work names, through notebook 03 by path."""


def test_lens_study_on_external_pairs_by_path(tmp_path: Path) -> None:
    """03's library path for every family: load_sources by path (own tokenizer), train_pair_lens_ladders, last-layer KL 0.
    The families the installed transformers has are checked; then the test is skipped naming any it lacks."""
    from _families import corpus_tokenizer

    from tiebias.lens import ladder as lens_ladder
    from tiebias.models import sources

    tok = corpus_tokenizer()
    models = {}
    lacking = [reason for f in EXTERNAL_FAMILIES if (reason := missing(f)) is not None]
    for f in (f for f in EXTERNAL_FAMILIES if missing(f) is None):
        pair = sources.load_models({
            "tied": save_tiny(f, True, tmp_path / f / "tied", len(tok), seed=0, tokenizer=tok),
            "untied": save_tiny(f, False, tmp_path / f / "untied", len(tok), seed=1, tokenizer=tok)})
        models.update({f"{f}-{role}": m for role, m in pair.items()})
    if not models:
        pytest.skip("; ".join(lacking))
    lens = LensSettings(steps=2, tokens_per_step=64, seq_len=32, eval_tokens=128)
    df, lenses = lens_ladder.train_pair_lens_ladders(models, None, lens, folder=tmp_path / "lenses", progress=False)
    assert set(df.variant) == set(models) == set(lenses)
    last = df[df.layer == df.groupby("variant").layer.transform("max")]
    assert len(last) == len(models)
    assert last.kl_tuned_bits.abs().max() < 1e-6 and last.kl_logit_bits.abs().max() < 1e-6
    if lacking:
        pytest.skip("; ".join(lacking))


@pytest.fixture(scope="module")
def lens_notebook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """03_lens with one extra last cell that writes the last-layer rows of its KL table to kl_last.json."""
    import nbformat

    nb = nbformat.read(NB / "03_lens.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json\n"
        "_last = KL[KL.layer == KL.layer.max()][['variant', 'kl_tuned_bits', 'kl_logit_bits']]\n"
        "json.dump(_last.to_dict('records'), open('kl_last.json', 'w'))"))
    path = tmp_path_factory.mktemp("nb") / "03_lens_kl_last.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("pair", NOTEBOOK_PAIRS, ids=lambda p: "-".join(p))
def test_notebook_03_runs_on_external_pair(pair: tuple[str, str], lens_notebook: Path, tmp_path: Path) -> None:
    """03_lens by path on a tiny tied / untied pair of the paper's families: the last-layer KL in its table is 0."""
    import json

    import papermill as pm
    from _families import corpus_tokenizer

    tok = corpus_tokenizer()
    tied = save_tiny(pair[0], True, tmp_path / "tied", len(tok), seed=0, tokenizer=tok)
    untied = save_tiny(pair[1], False, tmp_path / "untied", len(tok), seed=1, tokenizer=tok)
    pm.execute_notebook(str(lens_notebook), str(tmp_path / "out.ipynb"), cwd=str(tmp_path), kernel_name="python3",
                        execution_timeout=cell_timeout(), progress_bar=False,
                        parameters={"profile": "smoke", "run_dir": str(tmp_path / "run"), "tied_source": str(tied),
                                    "untied_source": str(untied), "lens_steps": 2, "lens_tokens_per_step": 64,
                                    "lens_eval_tokens": 128, "lens_budgets": [1], "lens_recipes": ["cpu"]})
    rows = json.loads((tmp_path / "kl_last.json").read_text())
    assert sorted(r["variant"] for r in rows) == ["tied", "untied"]
    for r in rows:
        assert abs(r["kl_tuned_bits"]) < 1e-6 and abs(r["kl_logit_bits"]) < 1e-6, r
