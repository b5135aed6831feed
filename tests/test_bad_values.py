"""Careless values are refused up front, naming the parameter and what is allowed; a diverged training is named.

Profile-level rules are checked by ``profiles.resolve`` / ``study.check_study`` before anything is written;
a training whose loss or gradient norm stops being a number is recorded as diverged and every analysis
refuses it by name instead of deriving a claim from it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from _families import corpus_tokenizer, save_tiny
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tiebias import study
from tiebias.ablate import sweep as ablate
from tiebias.align import comparisons
from tiebias.config import profiles
from tiebias.config.choices import LENS_RECIPES
from tiebias.config.lens import LensSettings, lens_seq_len
from tiebias.config.params import PARAMS, coerce
from tiebias.config.training import check_factor
from tiebias.config.variants import Variant
from tiebias.lens import ladder as lens_ladder
from tiebias.models import sources
from tiebias.run.folder import FINGERPRINTS, Run
from tiebias.train import divergence
from tiebias.train.gradients import GradientProvenance
from tiebias.train.trainer import TrainConfig, train

LENS = LensSettings(steps=2, tokens_per_step=64, seq_len=32, eval_tokens=64)


def _files(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# -- case 10: lr far beyond what AdamW trains with ----------------------------------------------------------
def test_lr_above_one_is_refused_up_front() -> None:
    with pytest.raises(ValueError, match=r"^lr: 1000000.0 is not allowed; need a finite number > 0 and at most 1"):
        profiles.resolve("smoke", "/tmp/never", lr=1e6)
    assert profiles.resolve("smoke", "/tmp/never", lr=1.0)["lr"] == 1.0
    # one rule, two callers: the library's TrainConfig refuses what the schema refuses, in the same words
    with pytest.raises(ValueError, match=r"^lr: 1000000.0 is not allowed; need a finite number > 0 and at most 1"):
        TrainConfig(preset="tiny", lr=1e6).validate()
    for bad in (0, -1e-3, math.nan, True):
        with pytest.raises(ValueError) as schema:
            coerce("lr", bad)
        with pytest.raises(ValueError, match=r"^lr: .* is not allowed; ") as library:
            TrainConfig(preset="tiny", lr=bad).validate()
        assert str(library.value) == str(schema.value)
    assert TrainConfig(preset="tiny", lr=1.0).validate().lr == 1.0


# -- case 11: warmup as long as training ------------------------------------------------------------------
def test_warmup_not_shorter_than_steps_is_refused() -> None:
    msg = r"^warmup_steps: 40 is not allowed with steps=40; need warmup_steps < steps, else the learning rate never "
    with pytest.raises(ValueError, match=msg + r"reaches its peak lr=0.003"):
        profiles.resolve("smoke", "/tmp/never", warmup_steps=40)
    with pytest.raises(ValueError, match=r"^warmup_steps: 50 is not allowed with steps=30"):
        TrainConfig(preset="tiny", steps=30, warmup_steps=50).validate()
    assert profiles.resolve("smoke", "/tmp/never", warmup_steps=39)["warmup_steps"] == 39


def test_lens_recipes_warm_up_for_fewer_steps_than_they_train() -> None:
    for recipe in LENS_RECIPES:
        for steps in range(1, 400):
            assert LensSettings().fit(recipe, steps).warmup_steps < steps, (recipe, steps)


# -- case 12: seeds beyond what seeding accepts ----------------------------------------------------------------
def test_seeds_are_bounded(fresh_run: Run, tiny_config: TrainConfig) -> None:
    for name in ("seeds", "ablate_seeds"):
        with pytest.raises(ValueError, match=rf"^{name}: .* need one or more integers 0 <= seed < 2\*\*32"):
            profiles.resolve("smoke", "/tmp/never", **{name: "12345678901234567890"})
        assert profiles.resolve("smoke", "/tmp/never", **{name: f"0,{2**32 - 1}"})[name] == [0, 2**32 - 1]
    with pytest.raises(ValueError, match=r"^seed: 4294967296 is not allowed; need an integer 0 <= seed < 2\*\*32"):
        train(fresh_run, "tied", 2**32, tiny_config, progress=False)
    assert _files(fresh_run.models_dir) == []


# -- case 13: gradient factors that overflow ----------------------------------------------------------------
def test_gradient_factors_are_bounded(fresh_run: Run, tiny_config: TrainConfig) -> None:
    allowed = "a finite number between 0.001 and 1000"
    with pytest.raises(ValueError, match=rf"^ablate_factors: .*not allowed; each factor k must be {allowed}"):
        profiles.resolve("smoke", "/tmp/never", ablate_factors="1,1e30")
    with pytest.raises(ValueError, match=rf"^variants: .*'tied_in1e30' has a bad factor .*must be {allowed}"):
        profiles.resolve("smoke", "/tmp/never", variants="tied,tied_in1e30")
    with pytest.raises(ValueError, match=rf"^factors: 1e\+30 is not allowed; a gradient factor must be {allowed}"):
        ablate.check_factors([1, 1e30])
    with pytest.raises(ValueError, match=rf"^input_factor: 1e\+30 is not allowed; a gradient factor must be {allowed}"):
        GradientProvenance(torch.nn.Module(), input_factor=1e30)
    with pytest.raises(ValueError, match="^variant: 'tied_in2000' has a bad factor"):
        train(fresh_run, "tied_in2000", 0, tiny_config, progress=False)
    assert check_factor("k", 1000) == 1000.0 and check_factor("k", 0.001) == 0.001
    assert ablate.sweep_variants([1, 1000], inverse_output=True)[-1].output_factor == 0.001


# -- case 14: lens settings that do not fit the training recipe -----------------------------------------------
def test_lens_checkpoints_beyond_steps_are_refused_before_anything_runs(tmp_path: Path) -> None:
    msg = (r"^lens_checkpoints: \[128, 1024\] is not allowed: 1024 is beyond the training's steps=200; allowed: "
           r"steps at which training saves a checkpoint \(.*: 0, 1, 2, 4, 8, 16, 32, 64, 128, 200\), or \[\] for none")
    with pytest.raises(ValueError, match=msg):
        profiles.resolve("long", tmp_path / "run", steps=200)
    with pytest.raises(ValueError, match=msg):
        study.run_study("long", tmp_path / "run", {"steps": 200}, progress=False)
    assert not (tmp_path / "run").exists()
    # a study without 03 does not use them; 03 alone is refused
    assert study.check_study("long", tmp_path / "run", {"steps": 200}, only=["01_train"])[0]["steps"] == 200
    ns = {n: PARAMS[n].default_for("03_lens") for n in profiles.notebook_parameters("03_lens")}
    ns.update(profile="long", steps=200)
    with pytest.raises(ValueError, match=msg):
        profiles.resolve_notebook("03_lens", ns)
    assert profiles.resolve("long", tmp_path, steps=200, lens_checkpoints="128,200")["lens_checkpoints"] == [128, 200]


def test_lens_checkpoint_the_training_does_not_save_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^lens_checkpoints: \[20, 40\] is not allowed: training saves no "
                                         r"checkpoint at step 20 \(checkpoint_every=7\)"):
        profiles.resolve("smoke", "/tmp/never", checkpoint_every=7)


def test_lens_tokens_are_checked_up_front_with_their_own_names() -> None:
    unit = r"the lens sequence length 64 \(min\(seq_len=64, 128\)\)"
    with pytest.raises(ValueError, match=rf"^lens_tokens_per_step: 100 is not allowed with seq_len=64; need a multiple "
                                         rf"of {unit}, e.g. 64 or 128"):
        profiles.resolve("smoke", "/tmp/never", lens_tokens_per_step=100)
    with pytest.raises(ValueError, match=r"^lens_tokens_per_step: 32 .* e.g. 64 or 128"):
        profiles.resolve("smoke", "/tmp/never", lens_tokens_per_step=32)
    with pytest.raises(ValueError, match=rf"^lens_eval_tokens: 10 is not allowed with seq_len=64; need at least one "
                                         rf"lens sequence, i.e. >= {unit}"):
        profiles.resolve("smoke", "/tmp/never", lens_eval_tokens=10)
    with pytest.raises(ValueError, match=r"^lens_tokens_per_step: 256 is not allowed with seq_len=48"):
        profiles.resolve("smoke", "/tmp/never", seq_len=48)  # the lens sequence follows seq_len
    p = profiles.resolve("smoke", "/tmp/never", seq_len=512, preset="mini", lens_tokens_per_step=384)
    assert lens_seq_len(p["seq_len"]) == 128


def test_lens_depth_presets_are_checked_against_the_recipe() -> None:
    with pytest.raises(ValueError, match=r"^lens_depth_presets: 'tiny' cannot be trained with this recipe \(seq_len: "
                                         r"512 exceeds preset 'tiny''s 256 positions\)"):
        profiles.resolve("smoke", "/tmp/never", preset="mini", seq_len=512, lens_depth_presets=["mini", "tiny"])


# -- case 10: a training that diverges ---------------------------------------------------------------------
def _blows_up_at_call(n: int):  # noqa: ANN202
    """``torch.nn.utils.clip_grad_norm_`` that clips as usual and reports an infinite norm from its n-th call on."""
    clip, calls = torch.nn.utils.clip_grad_norm_, [0]

    def blown(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls[0] += 1
        norm = clip(*args, **kwargs)
        return norm if calls[0] < n else torch.full_like(norm, math.inf)

    return blown


@pytest.fixture(scope="module")
def diverged_run(prepared_run: Run, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Tied and untied models of seed 0 whose training diverges at step 5: the gradient norm turns infinite there.

    Injected (the clipping call reports inf from its fifth call on), because no learning rate TrainConfig accepts
    (at most 1, the schema's rule) makes the tiny model diverge reliably in 40 steps; what is under test is what the
    kit does once a step is not finite."""
    import shutil

    run = Run(tmp_path_factory.mktemp("runs") / "diverged")
    shutil.copytree(prepared_run.path, run.path, ignore=shutil.ignore_patterns("models", "metrics"), dirs_exist_ok=True)
    cfg = TrainConfig(preset="tiny", steps=40, batch_size=4, seq_len=32, lr=1.0, warmup_steps=2, eval_every=20,
                      eval_tokens=512, checkpoint_every=20)
    for v in ("tied", "untied"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(torch.nn.utils, "clip_grad_norm_", _blows_up_at_call(5))
            train(run, v, 0, cfg, progress=False)
    return run


def test_diverged_training_stops_and_is_recorded(diverged_run: Run) -> None:
    s = diverged_run.summary("tied", 0)
    d = s["diverged"]
    assert 1 <= d["step"] < 40 and not (math.isfinite(float(d["loss"])) and math.isfinite(float(d["grad_norm"])))
    assert list(diverged_run.metrics("tied", 0).step) == list(range(1, d["step"] + 1))  # stopped there
    assert diverged_run.metrics("tied", 0, kind="val").step.iloc[-1] == d["step"]  # its last loss is that step's
    assert divergence.reason(s) == (f"training diverged at step {d['step']} (loss {d['loss']}, gradient norm "
                                    f"{d['grad_norm']})")
    recorded = json.loads(diverged_run.train_config_path("tied", 0).read_text())
    cfg = TrainConfig(**{k: v for k, v in recorded.items()
                                 if k not in ("variant", "seed", "vocab_size", *FINGERPRINTS)})
    assert train(diverged_run, "tied", 0, cfg, progress=False) == s  # not trained again in vain


def test_01_reports_diverged_models_plainly(diverged_run: Run) -> None:
    S = pd.DataFrame([diverged_run.summary(v, 0) for v in ("tied", "untied")]).set_index("key")
    S.loc["tied-s0", "final_val_loss"] = None  # the record may hold null for a loss that was not a number
    why = {k: divergence.reason(row) for k, row in S.iterrows()}  # what 01 prints beside divergence.ADVICE
    assert all(why[key].startswith("training diverged at step") for key in ("tied-s0", "untied-s0"))
    assert "lower lr and train it again in a fresh run_dir" in divergence.ADVICE
    # a record written before the diverged field: a final loss that is null is enough
    legacy = pd.Series({"final_train_loss": None, "final_val_loss": None, "initial_val_loss": 6.9})
    assert "training diverged (final_train_loss is not a finite number)" in divergence.reason(legacy)
    assert divergence.reason(pd.Series({"final_val_loss": 5.0, "initial_val_loss": 6.9})) is None


def test_analyses_refuse_a_diverged_model_by_name(diverged_run: Run) -> None:
    before = _files(diverged_run.path)
    named = r"model tied-s0 in .*: training diverged at step \d+ .*lower lr \(it trained with lr=1\) and train " \
            r"it again in a fresh run_dir"
    with pytest.raises(ValueError, match=named):  # 02
        comparisons.load_models(diverged_run, [0])
    with pytest.raises(ValueError, match=named):  # 03
        lens_ladder.train_lens_ladders(diverged_run, ["tied", "untied"], [0], LENS, progress=False)
    for call in (lambda: ablate.alignment_table(diverged_run, [Variant(True)], [0]),  # 04
                 lambda: ablate.perplexities(diverged_run, [Variant(True)], [0], seq_len=32),
                 lambda: ablate.gradient_shares(diverged_run, [Variant(True)], [0])):
        with pytest.raises(ValueError, match=named):
            call()
    assert _files(diverged_run.path) == before  # refused before any lens or table was written


# -- case 13: gradients that stop being numbers --------------------------------------------------------------
def test_non_finite_gradient_norm_marks_the_model_diverged(fresh_run: Run, tiny_config: TrainConfig,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The overflow of case 13 (finite loss, gradient norm inf, clipping zeroes every update): diverged, refused."""
    real, calls = torch.nn.utils.clip_grad_norm_, []

    def overflowing(params, max_norm):
        calls.append(1)
        norm = real(params, max_norm)
        return norm * math.inf if len(calls) >= 3 else norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", overflowing)
    s = train(fresh_run, "tied_in5", 0, tiny_config, progress=False)
    assert s["diverged"] == {"step": 3, "loss": s["diverged"]["loss"], "grad_norm": "inf"}
    assert math.isfinite(float(s["diverged"]["loss"])) and math.isfinite(s["final_train_loss"])
    assert fresh_run.metrics("tied_in5", 0).step.max() == 3
    monkeypatch.undo()
    train(fresh_run, "untied", 0, tiny_config, progress=False)  # clean: the reference is not the problem
    assert "diverged" not in fresh_run.summary("untied", 0)
    with pytest.raises(ValueError, match=r"model tied_in5-s0 .*training diverged at step 3 \(loss .*, gradient norm "
                                         r"inf\), so claim 4's alignment from its weights would mean nothing"):
        ablate.alignment_table(fresh_run, [Variant(True, 5.0)], [0])


# -- case 16: an external pair whose tokenizers cannot read the corpus, or share nothing ---------------------
def _word_tokenizer() -> PreTrainedTokenizerFast:
    """Four words and an unknown token: most of Shakespeare becomes <unk>."""
    vocab = {"<unk>": 0, "the": 1, ",": 2, ".": 3, "and": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<unk>")


def _byte_tokenizer() -> PreTrainedTokenizerFast:
    """Bytes as <0xNN> tokens (byte fallback): reads any text, shares no token string with a byte-level BPE."""
    vocab = {"<eos>": 0, **{f"<0x{i:02X}>": i + 1 for i in range(256)}}
    backend = Tokenizer(models.BPE(vocab, [], unk_token="<eos>", byte_fallback=True))
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>")


def _pair(tmp_path: Path, tied_tok, untied_tok) -> dict[str, tuple]:
    t = save_tiny("olmo", True, tmp_path / "tied", len(tied_tok), seed=0, tokenizer=tied_tok)
    u = save_tiny("olmo", False, tmp_path / "untied", max(len(untied_tok), 300), seed=1, tokenizer=untied_tok)
    return sources.load_models({"tied": t, "untied": u})


def test_03_refuses_a_pair_whose_tokenizer_cannot_read_the_corpus(tmp_path: Path) -> None:
    tok = _word_tokenizer()
    pair = _pair(tmp_path, tok, tok)
    with pytest.raises(ValueError, match=r"^tied_source: the tokenizer of '.*tied' writes 8\d% of the corpus "
                                         r"'shakespeare' as its unknown token '<unk>', so a lens would be measured on "
                                         r"that token, not on the text; allowed: at most 1%"):
        lens_ladder.train_pair_lens_ladders(pair, None, LENS, folder=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()  # refused before any lens was trained


def test_03_refuses_a_pair_sharing_no_token_as_02_does(tmp_path: Path) -> None:
    pair = _pair(tmp_path, corpus_tokenizer(), _byte_tokenizer())
    with pytest.raises(ValueError, match=r"^no shared tokens between '.*tied' and '.*tied'"):  # 02's refusal
        comparisons.table1(comparisons.load_sources(tmp_path / "tied", tmp_path / "untied"), ["orthogonal"],
                           knn_k=None)
    with pytest.raises(ValueError, match=r"^tied_source, untied_source: no shared tokens between '.*tied' and "
                                         r"'.*untied'; .*allowed: models whose tokenizers share tokens"):
        lens_ladder.train_pair_lens_ladders(pair, None, LENS, folder=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_04_refuses_lens_settings_its_row1_lenses_could_not_use_before_training() -> None:
    with pytest.raises(ValueError, match=r"^lens_tokens_per_step: 256 is not allowed with seq_len=48"):
        profiles.resolve("smoke", "/tmp/never", notebooks=["04_ablate"], seq_len=48)
    profiles.resolve("smoke", "/tmp/never", notebooks=["04_ablate"], seq_len=48, lens_tokens_per_step=240)
