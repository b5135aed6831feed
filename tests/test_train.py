import shutil
from dataclasses import replace

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from tiebias.config.training import checkpoint_steps
from tiebias.run.folder import Run
from tiebias.train.trainer import TrainConfig, lr_at, train


def _weights(run: Run, variant: str, seed: int) -> dict[str, torch.Tensor]:
    return load_file(str(run.model_dir(variant, seed) / "model.safetensors"))


def test_trains_and_writes_run_layout(fresh_run: Run, tiny_config: TrainConfig) -> None:
    s = train(fresh_run, "tied", 0, tiny_config, progress=False)
    assert s["complete"] and s["final_val_loss"] < s["initial_val_loss"]
    d = fresh_run.model_dir("tied", 0)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "train_config.json", "complete.json"):
        assert (d / f).exists(), f
    steps = [s for s, _ in fresh_run.checkpoints("tied", 0)]
    assert steps == checkpoint_steps(12, 4) == [0, 1, 2, 4, 8, 12]
    # only the newest checkpoint keeps the optimiser state
    assert [p.parent.name for p in d.glob("checkpoints/*/trainer_state.pt")] == ["step-12"]
    m = fresh_run.metrics("tied", 0)
    assert list(m.step) == list(range(1, 13))
    assert m.output_share.between(0, 1).all() and (m.input_rows > 0).all()
    val = fresh_run.metrics("tied", 0, kind="val")
    assert list(val.step) == [0, 4, 8, 12]
    model = fresh_run.load_model("tied", 0)
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    ck = fresh_run.load_model("tied", 0, step=0)
    assert not torch.equal(ck.get_input_embeddings().weight, model.get_input_embeddings().weight)


def test_same_seed_same_curve_bit_for_bit(fresh_run: Run, tiny_config: TrainConfig, tmp_path) -> None:
    other = Run(tmp_path / "copy")
    shutil.copytree(fresh_run.path, other.path)
    train(fresh_run, "untied", 1, tiny_config, progress=False)
    train(other, "untied", 1, tiny_config, progress=False)
    a, b = fresh_run.metrics("untied", 1), other.metrics("untied", 1)
    assert a.loss.tolist() == b.loss.tolist()
    wa, wb = _weights(fresh_run, "untied", 1), _weights(other, "untied", 1)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("stop", [1, 5, 8])
def test_interrupted_run_resumes_to_identical_weights(fresh_run: Run, tiny_config: TrainConfig, tmp_path,
                                                      stop: int) -> None:
    ref = Run(tmp_path / "ref")
    shutil.copytree(fresh_run.path, ref.path)
    train(ref, "tied_in5", 0, tiny_config, progress=False)
    r = train(fresh_run, "tied_in5", 0, tiny_config, progress=False, stop_at=stop)
    assert not r["complete"] and not fresh_run.is_complete("tied_in5", 0)
    # a crash in the middle of writing a checkpoint leaves a temporary folder behind
    (fresh_run.model_dir("tied_in5", 0) / "checkpoints" / ".tmp-step-9").mkdir()
    train(fresh_run, "tied_in5", 0, tiny_config, progress=False)
    wa, wb = _weights(ref, "tied_in5", 0), _weights(fresh_run, "tied_in5", 0)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    a, b = ref.metrics("tied_in5", 0), fresh_run.metrics("tied_in5", 0)
    pd.testing.assert_series_equal(a.loss, b.loss)
    assert list(b.step) == list(range(1, 13))
    assert not list((fresh_run.model_dir("tied_in5", 0) / "checkpoints").glob(".tmp-*"))


def test_recording_does_not_change_training(fresh_run: Run, tiny_config: TrainConfig, tmp_path) -> None:
    plain = Run(tmp_path / "plain")
    shutil.copytree(fresh_run.path, plain.path)
    train(fresh_run, "tied", 2, tiny_config, progress=False)
    train(plain, "tied", 2, replace(tiny_config, record_provenance=False), progress=False)
    wa, wb = _weights(fresh_run, "tied", 2), _weights(plain, "tied", 2)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert plain.metrics("tied", 2).output_share.isna().all()


def test_input_factor_changes_trajectory_and_share(fresh_run: Run, tiny_config: TrainConfig) -> None:
    train(fresh_run, "tied", 0, tiny_config, progress=False)
    train(fresh_run, "tied_in10", 0, tiny_config, progress=False)
    a, b = fresh_run.metrics("tied", 0), fresh_run.metrics("tied_in10", 0)
    assert a.loss.iloc[0] == b.loss.iloc[0]  # same init, same first batch
    assert a.loss.iloc[-1] != b.loss.iloc[-1]
    assert (b.output_share < a.output_share).mean() > 0.9
    assert (b.input_factor == 10).all()
    assert fresh_run.summary("tied_in10", 0)["variant"] == "tied_in10"


def test_finished_model_is_not_trained_again(fresh_run: Run, tiny_config: TrainConfig) -> None:
    first = train(fresh_run, "tied", 0, tiny_config, progress=False)
    mtime = (fresh_run.model_dir("tied", 0) / "model.safetensors").stat().st_mtime_ns
    again = train(fresh_run, "tied", 0, tiny_config, progress=False)
    assert again == first
    assert (fresh_run.model_dir("tied", 0) / "model.safetensors").stat().st_mtime_ns == mtime


def test_different_config_is_refused_unless_overwrite(fresh_run: Run, tiny_config: TrainConfig) -> None:
    train(fresh_run, "tied", 0, tiny_config, progress=False)
    other = replace(tiny_config, lr=1e-3)
    with pytest.raises(ValueError, match="lr: folder has 0.003, asked 0.001"):
        train(fresh_run, "tied", 0, other, progress=False)
    s = train(fresh_run, "tied", 0, other, progress=False, overwrite=True)
    assert s["complete"]


@pytest.mark.parametrize("field,value,msg", [
    ("preset", "huge", "preset: 'huge' is not allowed; input should be 'tiny'"),
    ("steps", 0, "steps: 0 is not allowed"),
    ("steps", -3, "steps: -3 is not allowed"),
    ("lr", float("nan"), "lr: nan"),
    ("family", "gpt2", "family: 'gpt2' is not allowed; input should be 'llama' or 'neox'"),
    ("batch_size", "4", "batch_size: '4' is not allowed; input should be a valid integer"),
    ("seq_len", 5000, "seq_len: 5000 exceeds"),
])
def test_bad_config(field: str, value, msg: str, fresh_run: Run) -> None:
    cfg = replace(TrainConfig(preset="tiny"), **{field: value})
    with pytest.raises(ValueError, match=msg):
        train(fresh_run, "tied", 0, cfg, progress=False)


@pytest.mark.parametrize("variant", ["tide", "untied_in5", "tied_in0", "tied_in-2", "tied_innan"])
def test_bad_variant(variant: str, fresh_run: Run, tiny_config: TrainConfig) -> None:
    with pytest.raises(ValueError, match="variant"):
        train(fresh_run, variant, 0, tiny_config, progress=False)


def test_schedule() -> None:
    cfg = TrainConfig(steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1)
    assert lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0)
    assert lr_at(99, cfg) == pytest.approx(0.1, abs=1e-3)
    lrs = [lr_at(s, cfg) for s in range(10, 100)]
    assert lrs == sorted(lrs, reverse=True)
    assert checkpoint_steps(100, 25) == [0, 1, 2, 4, 8, 16, 25, 32, 50, 64, 75, 100]


def test_thread_count_does_not_change_the_weights(fresh_run: Run, tiny_config: TrainConfig, tmp_path,
                                                  monkeypatch) -> None:
    """The thread tuner may switch counts mid-run: only speed may depend on it, never the weights."""
    before = torch.get_num_threads()
    runs = {}
    try:
        for n in ("1", "2"):
            monkeypatch.setenv("TIEBIAS_THREADS", n)
            runs[n] = Run(tmp_path / f"threads-{n}")
            shutil.copytree(fresh_run.path, runs[n].path)
            torch.set_num_threads(2)
            train(runs[n], "tied", 3, tiny_config, progress=False)
    finally:
        torch.set_num_threads(before)
    wa, wb = _weights(runs["1"], "tied", 3), _weights(runs["2"], "tied", 3)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert runs["1"].metrics("tied", 3).loss.tolist() == runs["2"].metrics("tied", 3).loss.tolist()


def test_allocator_setting_does_not_change_the_weights(fresh_run: Run, tiny_config: TrainConfig, tmp_path,
                                                       monkeypatch) -> None:
    """Keeping freed memory (tiebias.system.alloc) changes where tensors live, never the numbers."""
    runs = {}
    for mode in ("keep", "default"):
        monkeypatch.setenv("TIEBIAS_MALLOC", mode)
        runs[mode] = Run(tmp_path / f"malloc-{mode}")
        shutil.copytree(fresh_run.path, runs[mode].path)
        train(runs[mode], "tied", 3, tiny_config, progress=False)
    wa, wb = _weights(runs["keep"], "tied", 3), _weights(runs["default"], "tied", 3)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
