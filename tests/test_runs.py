import json

import numpy as np
import pytest

from tiebias.runs import Run, Variant, model_key, parse_key


@pytest.mark.parametrize("name,tied,fin,fout", [
    ("tied", True, 1, 1), ("untied", False, 1, 1), ("tied_in5", True, 5, 1),
    ("tied_out0.2", True, 1, 0.2), ("tied_in10_out0.1", True, 10, 0.1), ("tied_in1", True, 1, 1),
])
def test_variant_parse(name, tied, fin, fout) -> None:
    v = Variant.parse(name)
    assert (v.tied, v.input_factor, v.output_factor) == (tied, fin, fout)
    assert Variant.parse(v.name) == v


def test_keys_round_trip() -> None:
    assert model_key("tied_in5", 3) == "tied_in5-s3"
    assert parse_key("tied_in5-s3") == (Variant(True, 5.0, 1.0), 3)
    with pytest.raises(ValueError, match="model key"):
        parse_key("tied")


def test_prepared_run_layout(prepared_run: Run) -> None:
    cfg = prepared_run.config
    assert cfg["vocab_size"] == 512 and cfg["corpus"] == "shakespeare"
    tok = prepared_run.tokenizer()
    assert len(tok) == cfg["tokenizer_size"]
    for split in ("train", "validation", "test"):
        ids = prepared_run.tokens(split)
        assert ids.numel() == cfg["n_tokens"][split] and int(ids.max()) < len(tok)
    freq = prepared_run.frequencies()
    assert freq.shape == (len(tok),) and freq.sum() > 0
    assert np.issubdtype(freq.dtype, np.integer)
    with pytest.raises(ValueError, match="split: unknown value 'dev'"):
        prepared_run.tokens("dev")


def test_reopening_with_other_config_is_refused(prepared_run: Run) -> None:
    again = Run.prepare(prepared_run.path, vocab_size=512)  # same config: reopened, nothing redone
    assert again.config == prepared_run.config
    with pytest.raises(ValueError, match="vocab_size: folder has 512, asked 1024"):
        Run.prepare(prepared_run.path, vocab_size=1024)


def test_missing_corpus_and_config(tmp_path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        Run.prepare(tmp_path / "r", corpus=str(tmp_path / "nope.txt"), vocab_size=512)
    with pytest.raises(FileNotFoundError, match="config.json"):
        _ = Run(tmp_path / "empty").config
    with pytest.raises(ValueError, match="vocab_size"):
        Run.prepare(tmp_path / "r2", vocab_size=100)


def test_models_table_and_missing_model(fresh_run: Run, tiny_config) -> None:
    from tiebias.train import train

    train(fresh_run, "untied", 4, tiny_config, progress=False)
    df = fresh_run.models()
    assert df.key.tolist() == ["untied-s4"] and df.complete.all()
    assert fresh_run.seeds("untied") == [4] and fresh_run.seeds("tied") == []
    with pytest.raises(FileNotFoundError, match="tied-s0.*complete models: untied-s4"):
        fresh_run.model_path("tied", 0)
    with pytest.raises(ValueError, match="step: no checkpoint 3"):
        fresh_run.model_path("untied", 4, step=3)
    assert json.loads((fresh_run.model_dir("untied", 4) / "train_config.json").read_text())["seed"] == 4
