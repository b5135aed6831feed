import json
from pathlib import Path

import numpy as np
import pytest

from tiebias.config.variants import Variant, model_key, parse_key
from tiebias.run.folder import Run


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
    from tiebias.train.trainer import train

    train(fresh_run, "untied", 4, tiny_config, progress=False)
    df = fresh_run.models()
    assert df.key.tolist() == ["untied-s4"] and df.complete.all()
    assert fresh_run.seeds("untied") == [4] and fresh_run.seeds("tied") == []
    with pytest.raises(FileNotFoundError, match="tied-s0.*complete models: untied-s4"):
        fresh_run.model_path("tied", 0)
    with pytest.raises(ValueError, match="step: no checkpoint 3"):
        fresh_run.model_path("untied", 4, step=3)
    assert json.loads((fresh_run.model_dir("untied", 4) / "train_config.json").read_text())["seed"] == 4


def test_step_folder_names() -> None:
    from tiebias.config.variants import step_of

    assert step_of("step-128") == 128 and step_of(Path("/x/checkpoints/step-7")) == 7
    for name in ("step-", "step-1a", ".tmp-step-3", "step-3.tmp", "lens"):
        assert step_of(name) is None, name
    assert all(step_of(f"step-{s}") == s for s in (0, 1, 2, 4, 1000))


def test_run_paths(tmp_path) -> None:
    run = Run(tmp_path / "r")
    m = tmp_path / "r" / "models" / "tied_in5-s3"
    assert run.model_dir("tied_in5", 3) == m
    assert run.checkpoints_dir("tied_in5", 3) == m / "checkpoints"
    assert run.train_config_path("tied_in5", 3) == m / "train_config.json"
    assert run.complete_path("tied_in5", 3) == m / "complete.json"
    assert run.lens_dir("tied_in5", 3) == m / "lens"
    assert run.metrics_path("untied", 0) == tmp_path / "r" / "metrics" / "untied-s0.csv"
    assert run.metrics_path("untied", 0, "val") == tmp_path / "r" / "metrics" / "untied-s0_val.csv"
    with pytest.raises(ValueError, match="kind: unknown value 'x'"):
        run.metrics_path("untied", 0, "x")
    assert run.table_path("ablation_alignment") == tmp_path / "r" / "metrics" / "ablation_alignment.csv"
    assert run.result_path("claim1_alignment") == tmp_path / "r" / "results" / "claim1_alignment.json"
    assert run.tokens_path("test") == tmp_path / "r" / "tokens" / "test.npy"
    assert run.frequencies_path == tmp_path / "r" / "token_frequencies.csv"
    assert (run.notebooks_dir, run.report_dir, run.report_path, run.summary_path) == (
        tmp_path / "r" / "notebooks", tmp_path / "r" / "report", tmp_path / "r" / "report.html",
        tmp_path / "r" / "summary.json")
    assert run.figure_path("fig1") == tmp_path / "r" / "figures" / "fig1.html"
    assert not (tmp_path / "r").exists()  # paths only: nothing is created (figures_dir does create)
    assert run.depth_dir("small-deep") == tmp_path / "r" / "depth" / "small-deep"
    with pytest.raises(ValueError, match="step: no checkpoint 4"):
        run.lens_dir("tied", 0, step=4)  # a checkpoint's lens needs the checkpoint


def test_checkpoint_paths_match_training(fresh_run: Run, tiny_config) -> None:
    from tiebias.train.trainer import train

    train(fresh_run, "tied", 0, tiny_config, progress=False)
    steps = [s for s, _ in fresh_run.checkpoints("tied", 0)]
    assert steps == [0, 1, 2, 4, 8, 12]
    assert all(d == fresh_run.checkpoints_dir("tied", 0) / f"step-{s}" for s, d in fresh_run.checkpoints("tied", 0))
    assert fresh_run.lens_dir("tied", 0, step=4) == fresh_run.checkpoints_dir("tied", 0) / "step-4" / "lens"
    assert fresh_run.train_config_path("tied", 0).is_file() and fresh_run.complete_path("tied", 0).is_file()


def test_save_table_writes_atomically(tmp_path) -> None:
    import pandas as pd

    run = Run(tmp_path / "r")
    df = pd.DataFrame({"layer": [0, 1], "kl": [0.5, 0.25]})
    path = run.save_table(df, "lens_gap")
    assert path == run.table_path("lens_gap") and pd.read_csv(path).equals(df)
    assert [p.name for p in run.metrics_dir.iterdir()] == ["lens_gap.csv"]  # no temporary file left
    for bad in ("../escape", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match=f"name: {bad!r} is not allowed"):
            run.save_table(df, bad)
    with pytest.raises(ValueError, match="table: dict is not a pandas DataFrame"):
        run.save_table({"a": [1]}, "lens_gap")
    assert [p.name for p in run.metrics_dir.iterdir()] == ["lens_gap.csv"]  # refusals write nothing


def test_atomic_path_replaces_whole_or_not_at_all(tmp_path) -> None:
    from tiebias.run.files import write_text_atomic
    from tiebias.system.atomic import atomic_path

    path = tmp_path / "table.csv"
    write_text_atomic(path, "a\n1\n")
    with pytest.raises(RuntimeError, match="stopped"), atomic_path(path) as tmp:
        tmp.write_text("a\n2\n")
        raise RuntimeError("stopped mid-write")
    assert path.read_text() == "a\n1\n" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]
    with atomic_path(path) as tmp, tmp.open("wb") as f:
        np.save(f, np.arange(3))  # a writer that would append .npy to a name gets a file object
    assert np.load(path).tolist() == [0, 1, 2] and [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_atomic_folder_replaces_a_folder_in_place(tmp_path) -> None:
    from tiebias.run.files import atomic_folder

    final = tmp_path / "step-4"
    (final / "old.txt").parent.mkdir()
    (final / "old.txt").write_text("old")
    (tmp_path / ".tmp-step-4").symlink_to(tmp_path / "elsewhere")  # a name a writer once used: never written through
    with atomic_folder(final, ".tmp-step-4.") as folder:
        assert folder.name == "step-4" and folder.parent.name.startswith(".tmp-step-4.") and not folder.exists()
        folder.mkdir()
        (folder / "new.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"] and not (tmp_path / "elsewhere").exists()
    with pytest.raises(RuntimeError, match="stopped"), atomic_folder(final) as folder:
        folder.mkdir()
        raise RuntimeError("stopped")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-step-4", "step-4"]
    assert (final / "new.txt").read_text() == "new"


def test_file_names_come_from_the_layout(tmp_path) -> None:
    from tiebias.run import layout

    run = Run(tmp_path / "r")
    assert run.config_path.name == layout.CONFIG_NAME == "config.json"
    assert run.train_config_path("tied", 0).name == layout.TRAIN_CONFIG_NAME
    assert run.tokenizer_dir.name == layout.TOKENIZER_SUBDIR
    assert (layout.WEIGHTS_NAME, layout.LENS_PARAMS_NAME) == ("model.safetensors", "params.pt")


def test_a_run_of_04_alone_names_its_profile(fresh_run, tmp_path) -> None:
    """04 records its profile under ``ablation``: a folder where 01 never ran still says which profile made it (so a
    smoke run of 04 alone is flagged as plumbing, and an exercise's folder can be checked against its exercise)."""
    from tiebias.run.folder import Run
    from tiebias.verdicts.evidence import not_meaningful

    assert Run(tmp_path / "nothing").profile is None
    run = fresh_run
    cfg = run.config
    cfg.pop("study", None)
    run.config_path.write_text(__import__("json").dumps(cfg))
    assert run.profile is None
    run.update_config(ablation={"profile": "smoke", "steps": 40})
    assert run.profile == "smoke" and "smoke" in (not_meaningful(run) or "")
    run.update_config(study={"profile": "class"})
    assert run.profile == "class"
