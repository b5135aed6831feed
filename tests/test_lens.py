"""Tests for tiebias.lens.lenses, lens_fit and lens_eval: indexing, KL units, training, save/load and input checks on tiny models."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from _families import char_tokenizer
from _untrusted import save_hostile, zero_fill
from transformers import (
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)
from tuned_lens import TunedLens

from tiebias.config.lens import LensFit, LensSettings
from tiebias.lens import evaluate as E
from tiebias.lens import fit as F
from tiebias.lens import ladder
from tiebias.lens import lenses as L
from tiebias.output.plotting import lens as lplot
from tiebias.run.files import DamagedFileError, UnsafeFileError

VOCAB = 256
SEQ = 64
FAMILIES = [("llama", True), ("llama", False), ("gpt_neox", True), ("gpt_neox", False)]


def _config(family: str, tied: bool, layers: int = 3, hidden: int = 32) -> LlamaConfig | GPTNeoXConfig:
    """Tiny config of the given family."""
    kw = dict(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        tie_word_embeddings=tied,
        max_position_embeddings=2 * SEQ,
    )
    return LlamaConfig(**kw) if family == "llama" else GPTNeoXConfig(**kw)


def _build(family: str, tied: bool, layers: int = 3, hidden: int = 32, seed: int = 0) -> PreTrainedModel:
    """Untrained tiny model."""
    torch.manual_seed(seed)
    cfg = _config(family, tied, layers, hidden)
    model = LlamaForCausalLM(cfg) if family == "llama" else GPTNeoXForCausalLM(cfg)
    return model.eval()


def _stream(n: int, seed: int) -> torch.Tensor:
    """Markov-chain token stream (each token has one likely successor) with repeated spans."""
    rng = np.random.default_rng(seed)
    succ = rng.permutation(VOCAB)
    out = np.empty(n, dtype=np.int64)
    t = int(rng.integers(VOCAB))
    jumps = rng.random(n) < 0.2
    fresh = rng.integers(0, VOCAB, n)
    for i in range(n):
        out[i] = t
        t = int(fresh[i]) if jumps[i] else int(succ[t])
    # Copy spans make later layers (attention) matter.
    for start in range(0, n - 64, 256):
        out[start + 32 : start + 64] = out[start : start + 32]
    return torch.from_numpy(out)


TRAIN = _stream(24_000, 0)
EVAL = _stream(4_096, 1)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models() -> dict[tuple[str, bool], PreTrainedModel]:
    """One briefly trained tiny model per (family, tied), so lens behaviour is not degenerate."""
    out = {}
    seqs = TRAIN[: (len(TRAIN) // SEQ) * SEQ].view(-1, SEQ)
    for family, tied in FAMILIES:
        model = _build(family, tied)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(0)
        for _ in range(40):
            x = seqs[torch.randint(0, len(seqs), (16,), generator=gen)]
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad()
        out[(family, tied)] = model.eval().requires_grad_(False)
    return out


@pytest.fixture(scope="module")
def lenses(models: dict[tuple[str, bool], PreTrainedModel]) -> dict[tuple[str, bool], TunedLens]:
    """A short-trained lens per model."""
    return {
        key: F.train_lens(
            m, TRAIN, LensFit(steps=40, seq_len=SEQ, tokens_per_step=512, warmup_steps=4, lr=1e-2), progress=False
        )
        for key, m in models.items()
    }


def _eval(model: PreTrainedModel, lens: TunedLens | None) -> pd.DataFrame:
    return E.evaluate(model, EVAL, lens, seq_len=SEQ, max_tokens=1024, batch_size=8)


# --------------------------------------------------------------------------- indexing


@pytest.mark.parametrize("family", ["llama", "gpt_neox"])
def test_last_hidden_state_is_post_norm(family: str) -> None:
    """transformers 5 records hidden_states[-1] after the final norm: the head alone gives the logits."""
    model = _build(family, tied=False)
    x = EVAL[:SEQ].unsqueeze(0)
    with torch.no_grad():
        out = model(input_ids=x, output_hidden_states=True)
        head = model.get_output_embeddings()
        assert len(out.hidden_states) == model.config.num_hidden_layers + 1
        torch.testing.assert_close(head(out.hidden_states[-1]), out.logits)


@pytest.mark.parametrize("key", FAMILIES, ids=lambda k: f"{k[0]}-{'tied' if k[1] else 'untied'}")
def test_final_layer_kl_is_zero(models, lenses, key) -> None:
    df = _eval(models[key], lenses[key])
    n = models[key].config.num_hidden_layers
    assert list(df.layer) == list(range(n + 1))
    final = df.iloc[-1]
    assert final.kl_tuned_bits < 1e-4 and final.kl_logit_bits < 1e-4
    assert final.ce_tuned_nats == pytest.approx(final.ce_model_nats, abs=1e-5)
    assert final.ce_logit_nats == pytest.approx(final.ce_model_nats, abs=1e-5)
    assert (df.kl_logit_bits.iloc[:-1] > 1e-3).all(), "intermediate layers should differ from the output"


@pytest.mark.parametrize("key", FAMILIES, ids=lambda k: f"{k[0]}-{'tied' if k[1] else 'untied'}")
def test_training_lowers_kl(models, lenses, key) -> None:
    model = models[key]
    identity = _eval(model, L.new_lens(model))
    trained = _eval(model, lenses[key])
    # The identity lens is exactly the logit lens.
    np.testing.assert_allclose(identity.kl_tuned_bits, identity.kl_logit_bits, rtol=1e-6, atol=1e-7)
    inner = slice(0, model.config.num_hidden_layers)
    assert trained.kl_tuned_bits.iloc[inner].mean() < 0.8 * identity.kl_tuned_bits.iloc[inner].mean()
    assert trained.kl_tuned_bits.iloc[0] < identity.kl_tuned_bits.iloc[0]


def test_translator_i_reads_hidden_state_i(models, lenses) -> None:
    """Evaluation row i equals the package lens applied to hidden_states[i] by hand."""
    model, lens = models[("llama", True)], lenses[("llama", True)]
    x = EVAL[: 8 * SEQ].view(8, SEQ)
    df = E.evaluate(model, EVAL[: 8 * SEQ], lens, seq_len=SEQ, max_tokens=8 * SEQ)
    with torch.no_grad():
        out = model(input_ids=x, output_hidden_states=True)
        for i in range(model.config.num_hidden_layers):
            logits = lens(out.hidden_states[i], i)
            manual = E.kl_bits(out.logits, logits).mean().item()
            assert df.kl_tuned_bits.iloc[i] == pytest.approx(manual, rel=1e-4, abs=1e-7)
            ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))
            assert df.ce_tuned_nats.iloc[i] == pytest.approx(ce.item(), rel=1e-5)
        ce_model = torch.nn.functional.cross_entropy(
            out.logits[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1)
        )
        assert df.ce_model_nats.iloc[0] == pytest.approx(ce_model.item(), rel=1e-5)


# --------------------------------------------------------------------------- units and loss


def test_kl_bits_hand_made_pair() -> None:
    p = torch.tensor([0.5, 0.5])
    q = torch.tensor([0.25, 0.75])
    nats = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    expected = nats / math.log(2)
    assert expected == pytest.approx(0.5 + 0.5 * math.log2(2 / 3))
    assert E.kl_bits(p.log(), q.log()).item() == pytest.approx(expected, rel=1e-6)
    # Logits up to an additive constant give the same answer.
    assert E.kl_bits(p.log() + 3.0, q.log() - 1.0).item() == pytest.approx(expected, rel=1e-6)
    assert E.kl_bits(q.log(), q.log()).item() == pytest.approx(0.0, abs=1e-7)


def test_fused_training_loss_equals_kl() -> None:
    """The training loss (hand-written backward) matches the plain KL in value and gradient."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(40, 16, generator=gen)
    b = torch.randn(40, generator=gen)
    final = torch.randn(5, 7, 40, generator=gen) * 3
    log_p = final.log_softmax(-1)
    p = log_p.exp()
    stats = (p @ w, p @ b, (p * log_p).sum(-1))
    for mine, ref in zip(F.target_stats(final, w, b), stats, strict=True):
        torch.testing.assert_close(mine, ref, rtol=1e-5, atol=1e-5)
    n = torch.randn(5, 7, 16, generator=gen, requires_grad=True)
    fused = F.LensKL.apply(n, w, b, *stats)
    plain = E.kl_bits(final, n @ w.T + b) * L.LN2
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-5)
    (g_fused,) = torch.autograd.grad(fused.sum(), n)
    (g_plain,) = torch.autograd.grad(plain.sum(), n)
    torch.testing.assert_close(g_fused, g_plain, rtol=1e-4, atol=1e-5)
    # bf16 logits (the package's autocast precision) stay close.
    low = F.LensKL.apply(n, w.bfloat16(), b, *stats)
    torch.testing.assert_close(low, plain, rtol=5e-2, atol=5e-2)


# --------------------------------------------------------------------------- save / load


def test_save_load_round_trip(models, lenses, tmp_path: Path) -> None:
    model, lens = models[("gpt_neox", False)], lenses[("gpt_neox", False)]
    path = L.save_lens(lens, tmp_path / "tiny-s0" / "lens")
    assert path == tmp_path / "tiny-s0" / "lens"
    assert (path / "config.json").is_file() and (path / "params.pt").is_file()
    before = _eval(model, lens)
    pd.testing.assert_frame_equal(before, _eval(model, L.load_lens(model, path)))
    # The package's own loader reads the same folder.
    pkg = TunedLens.from_model_and_pretrained(model, str(path))
    pd.testing.assert_frame_equal(before, _eval(model, pkg))


def test_training_is_deterministic(models) -> None:
    model = models[("llama", False)]
    fit = LensFit(steps=3, seq_len=SEQ, tokens_per_step=256, warmup_steps=1, seed=3)
    a, b = F.train_lens(model, TRAIN, fit, progress=False), F.train_lens(model, TRAIN, fit, progress=False)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_lens_does_not_depend_on_threads(models) -> None:
    """The thread tuner may switch counts mid-run: the trained lens must not change."""
    model = models[("llama", True)]
    fit = LensFit(steps=8, seq_len=SEQ, tokens_per_step=256, warmup_steps=1, seed=4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        one, two, auto = (F.train_lens(model, TRAIN, fit, num_threads=n, progress=False) for n in (1, 2, "auto"))
        assert torch.get_num_threads() == 2  # restored
    finally:
        torch.set_num_threads(before)
    for pa, pb, pc in zip(one.parameters(), two.parameters(), auto.parameters(), strict=True):
        assert torch.equal(pa, pb) and torch.equal(pa, pc)
    try:
        torch.set_num_threads(2)
        tables = [E.evaluate(model, EVAL, one, seq_len=SEQ, num_threads=n) for n in (1, 2, "auto")]
    finally:
        torch.set_num_threads(before)
    pd.testing.assert_frame_equal(tables[0], tables[1])
    pd.testing.assert_frame_equal(tables[0], tables[2])


def test_continued_training_through_disk_matches_in_memory(models, tmp_path: Path) -> None:
    """Two chained calls give the same lens whether the lens and its state went through disk or not."""
    model = models[("llama", True)]
    fit = LensFit(seq_len=SEQ, tokens_per_step=256, warmup_steps=1, seed=2)
    state: dict = {}
    log: list[dict[str, float]] = []
    a = F.train_lens(model, TRAIN, fit.replace(steps=3), state=state, progress=False)
    assert state["steps_done"] == 3 and state["optimizer_name"] == "adam"
    L.save_lens(a, tmp_path / "lens")
    torch.save(state, tmp_path / "state.pt")
    a = F.train_lens(model, TRAIN, fit.replace(steps=4), lens=a, state=state, log=log, progress=False)
    assert state["steps_done"] == 7
    # each call runs its own warmup and decay to 0
    assert log[0]["lr"] == pytest.approx(1e-2) and log[-1]["lr"] == pytest.approx(1e-2 / 3)
    b = L.load_lens(model, tmp_path / "lens")
    b_state = torch.load(tmp_path / "state.pt", weights_only=True)
    b = F.train_lens(model, TRAIN, fit.replace(steps=4), lens=b, state=b_state, progress=False)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    fresh = F.train_lens(model, TRAIN, fit.replace(steps=4), progress=False)
    assert not torch.equal(fresh.layer_translators[0].weight, a.layer_translators[0].weight)
    with pytest.raises(ValueError, match="optimizer: 'sgd' cannot continue a lens trained with 'adam'"):
        F.train_lens(model, TRAIN, fit.replace(steps=2, optimizer="sgd"), lens=b, state=dict(b_state), progress=False)
    with pytest.raises(ValueError, match="lens: its unembedding"):
        F.train_lens(models[("llama", False)], TRAIN, fit.replace(steps=2), lens=b, progress=False)


def test_per_sequence_evaluation_averages_to_the_table(models, lenses) -> None:
    model, lens = models[("gpt_neox", True)], lenses[("gpt_neox", True)]
    table = _eval(model, lens)
    seq = E.evaluate(model, EVAL, lens, seq_len=SEQ, max_tokens=1024, batch_size=3, per_sequence=True)
    assert list(seq.columns) == ["sequence", *table.columns]
    assert seq.sequence.nunique() == 1024 // SEQ and len(seq) == len(table) * (1024 // SEQ)
    assert seq.sequence.std() > 0 and seq.groupby("layer").kl_tuned_bits.std().iloc[0] > 0
    mean = seq.groupby("layer").mean(numeric_only=True).reset_index()
    for col in ("kl_tuned_bits", "kl_logit_bits", "ce_tuned_nats", "ce_logit_nats", "ce_model_nats"):
        np.testing.assert_allclose(mean[col].to_numpy(), table[col].to_numpy(), rtol=1e-6, atol=1e-9)
    no_logit = E.evaluate(model, EVAL, lens, seq_len=SEQ, max_tokens=1024, logit_lens=False)
    assert no_logit.kl_logit_bits.isna().all() and no_logit.ce_logit_nats.isna().all()
    np.testing.assert_allclose(no_logit.kl_tuned_bits, table.kl_tuned_bits, rtol=1e-6)


def test_load_rejects_other_shapes(models, lenses, tmp_path: Path) -> None:
    path = L.save_lens(lenses[("llama", True)], tmp_path / "lens")
    deeper = _build("llama", True, layers=4)
    with pytest.raises(ValueError, match=r"path: .*3 translators.*num_hidden_layers=4"):
        L.load_lens(deeper, path)
    wider = _build("llama", True, hidden=48)
    with pytest.raises(ValueError, match=r"path: .*\(32, 32\).*hidden_size=48"):
        L.load_lens(wider, path)
    with pytest.raises(FileNotFoundError, match="path"):
        L.load_lens(models[("llama", True)], tmp_path / "nowhere")


def test_load_rejects_other_model_of_same_shape(lenses, tmp_path: Path) -> None:
    path = L.save_lens(lenses[("llama", True)], tmp_path / "lens")
    other = _build("llama", True, seed=1)
    with pytest.raises(ValueError, match="different unembedding"):
        L.load_lens(other, path)
    assert isinstance(L.load_lens(other, path, strict=False), TunedLens)


def test_lens_params_with_code_refused_and_not_run(tmp_path: Path) -> None:
    model = _build("llama", True)
    path = L.save_lens(L.new_lens(model), tmp_path / "lens")
    marker = tmp_path / "ran"
    save_hostile(path / "params.pt", marker)
    with pytest.raises(UnsafeFileError) as info:
        L.load_lens(model, path)
    msg = str(info.value)
    assert f"{path / 'params.pt'}: refused" in msg and "io.open" in msg and "translators" in msg
    assert f"delete {path} and run 03_lens again" in msg and "weights_only" not in msg
    assert not marker.exists(), "loading the lens ran the file's code"


def test_zero_filled_lens_params_named(tmp_path: Path) -> None:
    model = _build("llama", True)
    path = L.save_lens(L.new_lens(model), tmp_path / "lens")
    zero_fill(path / "params.pt")
    with pytest.raises(DamagedFileError) as info:
        L.load_lens(model, path)
    msg = str(info.value)
    assert msg.startswith(f"{path / 'params.pt'}: damaged or unreadable") and "translators" in msg
    assert f"delete {path} and run 03_lens again" in msg and "weights_only" not in msg


@pytest.mark.parametrize("name,text,why", [
    ("config.json", "[1, 2]", "a JSON list, not an object"),
    ("config.json", '{"num_hidden_layers": "two", "d_model": 32}', "num_hidden_layers='two': not a whole number"),
    ("tiebias_lens.json", '"abc"', "a JSON str, not an object"),
])
def test_lens_json_that_is_not_its_settings_named(tmp_path: Path, name: str, text: str, why: str) -> None:
    model = _build("llama", True)
    path = L.save_lens(L.new_lens(model), tmp_path / "lens")
    assert (path / name).is_file()
    (path / name).write_text(text)
    with pytest.raises(DamagedFileError) as info:
        L.load_lens(model, path)
    msg = str(info.value)
    assert msg.startswith(f"{path / name}: damaged or unreadable") and why in msg, msg
    assert f"delete {path} and run 03_lens again" in msg


def test_rung_trainer_state_with_code_refused_and_not_run(tmp_path: Path) -> None:
    model = _build("llama", True)
    lens = LensSettings(steps=1, tokens_per_step=2 * SEQ, seq_len=SEQ, budgets=(1,))
    kw = dict(progress=False, max_cache_bytes=0)
    ladder.train_ladder(model, TRAIN, tmp_path / "lens", lens, **kw)
    state = ladder.rung_dir(tmp_path / "lens", "cpu", 1) / "trainer.pt"
    marker = tmp_path / "ran"
    save_hostile(state, marker, steps_done=1)
    with pytest.raises(UnsafeFileError) as info:
        ladder.train_ladder(model, TRAIN, tmp_path / "lens", lens.replace(budgets=(1, 2)), **kw)
    msg = str(info.value)
    assert f"{state}: refused" in msg and "delete it and run 03_lens again" in msg and "weights_only" not in msg
    assert not marker.exists(), "loading the rung's trainer state ran the file's code"


# --------------------------------------------------------------------------- bad inputs


def test_bad_inputs_raise(models, lenses) -> None:
    model = models[("llama", True)]
    with pytest.raises(ValueError, match=r"steps: .*got 0"):
        LensFit(steps=0)
    with pytest.raises(ValueError, match=r"tokens: .*100 tokens.*seq_len=128"):
        E.evaluate(model, EVAL[:100])
    with pytest.raises(ValueError, match=r"tokens: .*100 tokens.*seq_len=128"):
        F.train_lens(model, EVAL[:100], LensFit(steps=1, warmup_steps=0))
    with pytest.raises(ValueError, match=r"tokens: .*1-D"):
        E.evaluate(model, EVAL[:256].view(2, 128))
    with pytest.raises(ValueError, match=r"tokens: .*\[0, 255\]"):
        E.evaluate(model, EVAL[:256] + VOCAB)
    with pytest.raises(ValueError, match="tokens_per_step: .*seq_len=64"):
        LensFit(seq_len=64, tokens_per_step=100)
    with pytest.raises(ValueError, match="lens: shape mismatch: lens has 3 translators.*num_hidden_layers=4"):
        E.evaluate(_build("llama", True, layers=4), EVAL, lenses[("llama", True)], seq_len=SEQ)
    with pytest.raises(ValueError, match="lens: its unembedding"):
        E.evaluate(models[("llama", False)], EVAL, lenses[("llama", True)], seq_len=SEQ)


def test_thread_setting_is_restored(models) -> None:
    model = models[("llama", True)]
    torch.set_num_threads(2)
    try:
        E.evaluate(model, EVAL, seq_len=SEQ, max_tokens=SEQ, num_threads=1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    with pytest.raises(ValueError, match=r"num_threads: .*got 0"):
        E.evaluate(model, EVAL, seq_len=SEQ, num_threads=0)
    with pytest.raises(ValueError, match=r"num_threads: .*got 0"):
        F.train_lens(model, TRAIN, LensFit(seq_len=SEQ), num_threads=0)
    for bad in ("fast", True, 1.5):
        with pytest.raises(ValueError, match=r"num_threads: must be a positive int, 'auto' or None"):
            E.evaluate(model, EVAL, seq_len=SEQ, num_threads=bad)
    assert torch.get_num_threads() == 1  # a refusal leaves the thread count alone


def test_unsupported_family_names_model_type() -> None:
    """A family with no final norm (post-norm OPT, as OPT-350m) is refused naming its model_type."""
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=2,
                    word_embed_proj_dim=32, do_layer_norm_before=False)
    model = OPTForCausalLM(cfg)
    with pytest.raises(ValueError, match=r"model: model_type='opt' \(OPTForCausalLM\) has no final norm"):
        F.train_lens(model, TRAIN, LensFit(steps=1, warmup_steps=0))
    with pytest.raises(ValueError, match="model_type='opt'"):
        E.evaluate(model, EVAL)
    with pytest.raises(ValueError, match="model: expected a transformers PreTrainedModel"):
        E.evaluate(torch.nn.Linear(2, 2), EVAL)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- notebook helpers



def test_top_tokens_and_trajectory(models, lenses) -> None:
    model, lens = models[("gpt_neox", True)], lenses[("gpt_neox", True)]
    tok = char_tokenizer()
    df = E.top_tokens_by_layer(model, lens, tok, "the cat", k=3)
    n = model.config.num_hidden_layers
    assert len(df) == (n + 1) * 2 * 3
    assert set(df.lens) == {"tuned", "logit"}
    last = df[df.layer == n]
    # At the output both lenses are the model itself.
    assert list(last[last.lens == "tuned"].token_id) == list(last[last.lens == "logit"].token_id)
    traj = E.trajectory(model, lens, tok, "the cat sat.")
    assert traj.log_probs.shape == (n + 1, 12, VOCAB)
    fig = lplot.trajectory_figure(traj, "cross_entropy", title="ce")
    assert fig.data[0].type == "heatmap"
    with pytest.raises(ValueError, match="k: "):
        E.top_tokens_by_layer(model, lens, tok, "the", k=0)
