"""Bad inputs and faults against a run folder: each names the parameter or file, and leaves the folder as it was.

A refused call must not edit the folder (every file's name, size, mtime and hash are compared before
and after); a damaged file is named with what to do; a second writer is refused with the holder's PID.
Recoveries (a damaged newest checkpoint, a half-written log row, a kill before the completion marker)
end with the same weights and logs as an uninterrupted run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from _untrusted import save_hostile, zero_fill
from conftest import TINY
from safetensors.torch import load_file, save_file

from tiebias.align import comparisons, embeddings
from tiebias.config.lens import LensSettings
from tiebias.config.params import coerce
from tiebias.lens import ladder as lens_ladder
from tiebias.output import report
from tiebias.run import inventory
from tiebias.run.files import DamagedFileError, RunFolderError, UnsafeFileError, write_json_atomic
from tiebias.run.folder import FINGERPRINTS, ForeignModelError, Run, RunLockedError
from tiebias.run.layout import LOCK_HOLDER
from tiebias.train.trainer import TrainConfig, train
from tiebias.verdicts import claims, records

CFG = replace(TrainConfig(**TINY), steps=8)  # checkpoints 0, 1, 2, 4, 8; validation at 0, 4, 8
HINT = "overwrite=True (notebook parameter / --set overwrite=true)"


# -- fixtures -----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def fault_base(prepared_run: Run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    """(run, ref): run has a finished tied-s0 and an untied-s0 stopped at step 5; ref a finished untied-s0."""
    root = tmp_path_factory.mktemp("faults")
    run, ref = Run(root / "run"), Run(root / "ref")
    for r in (run, ref):
        shutil.copytree(prepared_run.path, r.path, ignore=shutil.ignore_patterns("models", "metrics"))
    train(run, "tied", 0, CFG, progress=False)
    train(run, "untied", 0, CFG, progress=False, stop_at=5)
    train(ref, "untied", 0, CFG, progress=False)
    return run, ref


@pytest.fixture(scope="session")
def other_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A run on another corpus (20 of the embedded works in capitals), its tokenizer of the same size, with a
    finished tied-s0 trained as the fault run's."""
    from tiebias.data import load_corpus

    root = tmp_path_factory.mktemp("other")
    (root / "corpus").mkdir()
    for i, text in enumerate(load_corpus(None)["train"]["text"][:20]):
        (root / "corpus" / f"w{i:02d}.txt").write_text(text[:20000].upper())
    other = Run.prepare(root / "run", corpus=str(root / "corpus"), vocab_size=512)
    train(other, "tied", 0, CFG, progress=False)
    return other


@pytest.fixture
def run(fault_base: tuple[Run, Run], tmp_path: Path) -> Run:
    """A private copy of the fault run folder."""
    dst = Run(tmp_path / "run")
    shutil.copytree(fault_base[0].path, dst.path)
    return dst


@pytest.fixture
def ref(fault_base: tuple[Run, Run]) -> Run:
    return fault_base[1]


def snapshot(path: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``path``: (size, mtime_ns, sha256)."""
    out = {}
    for p in sorted(path.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(path))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def refused(run: Run, call: Callable[[], object], exc: type[BaseException], *names: str) -> str:
    """Run ``call``, expect ``exc`` whose message contains every one of ``names``; the folder must not change."""
    before = snapshot(run.path)
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    for n in names:
        assert n in msg, f"{n!r} not in {msg!r}"
    assert snapshot(run.path) == before, "a refused call changed the run folder"
    return msg


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def weights(run: Run, variant: str, seed: int) -> dict[str, torch.Tensor]:
    return load_file(str(run.model_dir(variant, seed) / "model.safetensors"))


def same_weights(a: Run, b: Run, variant: str, seed: int) -> bool:
    wa, wb = weights(a, variant, seed), weights(b, variant, seed)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def strict_json(path: Path) -> dict:
    """Parse as a strict parser would (browsers' JSON.parse): NaN/Infinity are errors."""
    def no_constants(c: str) -> None:
        raise ValueError(f"{path.name} contains {c}")

    return json.loads(path.read_text(), parse_constant=no_constants)


# -- bad parameters: refused before anything is written -------------------------------------------------
@pytest.mark.parametrize("field,value,name", [
    ("seq_len", 1, "seq_len: 1"),
    ("eval_tokens", 16, "eval_tokens: 16 is shorter than seq_len=32"),
    ("warmup_steps", -1, "warmup_steps: -1"),
    ("checkpoint_every", 0, "checkpoint_every: 0"),
    ("batch_size", 0, "batch_size: 0"),
    ("eval_every", 0, "eval_every: 0"),
    ("lr", float("inf"), "lr: inf"),
    ("precision", "fp8", "precision: unknown value 'fp8'"),
])
def test_bad_train_parameter(run: Run, field: str, value: object, name: str) -> None:
    cfg = replace(CFG, **{field: value})
    refused(run, lambda: train(run, "untied", 0, cfg, progress=False), ValueError, name)


@pytest.mark.parametrize("kwargs,name", [
    ({"seed": -1}, "seed: -1"),
    ({"stop_at": -2}, "stop_at: -2"),
    ({"variant": "tide"}, "variant: cannot parse 'tide'"),
])
def test_bad_train_argument(run: Run, kwargs: dict, name: str) -> None:
    args = {"variant": "untied", "seed": 0, **kwargs}
    stop = args.pop("stop_at", None)
    refused(run, lambda: train(run, args["variant"], args["seed"], CFG, progress=False, stop_at=stop),
            ValueError, name)


def test_seq_len_longer_than_validation_split(run: Run) -> None:
    np.save(run.path / "tokens" / "validation.npy", np.arange(20, dtype=np.uint16))
    refused(run, lambda: train(run, "untied", 3, CFG, progress=False), ValueError,
            "seq_len: 32 is longer than the validation tokens available (split 20")


def test_different_config_refused_without_touching_config(run: Run) -> None:
    msg = refused(run, lambda: train(run, "tied", 0, replace(CFG, lr=1e-3), progress=False), ValueError,
                  "lr: folder has 0.003, asked 0.001", HINT)
    assert "pass overwrite" not in msg


def test_prepare_too_small_vocabulary_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="vocab_size: 100 is not allowed"):
        Run.prepare(tmp_path / "new", vocab_size=100)
    assert not (tmp_path / "new").exists()


def test_prepare_other_vocabulary_refused(run: Run) -> None:
    refused(run, lambda: Run.prepare(run.path, vocab_size=1024), ValueError,
            "vocab_size: folder has 512, asked 1024", "Run.prepare(..., overwrite=True)")


def test_study_with_another_vocabulary_and_overwrite_is_refused_before_it_writes(run: Run, capsys) -> None:
    """overwrite=true retrains models; it never rebuilds the tokenizer, so the command stops up front (exit 2)."""
    from tiebias.__main__ import main

    before = snapshot(run.path)
    assert main(["study", "--profile", "smoke", "--run-dir", str(run.path), "--only", "01_train",
                 "--set", "vocab_size=1024", "--set", "overwrite=true"]) == 2
    assert snapshot(run.path) == before, "refused before anything is written"
    msg = capsys.readouterr().err
    assert msg.startswith("error: vocab_size: folder has 512, asked 1024 (") and "delete that folder" in msg, msg
    assert "overwrite=true retrains models only" in msg


def test_prepare_overwrite_with_missing_corpus_keeps_the_folder(run: Run, tmp_path: Path) -> None:
    bad = tmp_path / "nope.txt"
    refused(run, lambda: Run.prepare(run.path, corpus=str(bad), vocab_size=512, overwrite=True), ValueError,
            "source:", str(bad), "does not exist")


def test_non_utf8_corpus_named(tmp_path: Path) -> None:
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes(b"To be, or not to be\n" * 50 + "caf\xe9 cr\xe8me\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"source: file '.*latin1\.txt' is not UTF-8 text \(byte 0xe9 at offset 1003"):
        Run.prepare(tmp_path / "new", corpus=str(corpus), vocab_size=512)
    assert not (tmp_path / "new").exists()


def test_update_config_refuses_data_keys(run: Run) -> None:
    refused(run, lambda: run.update_config(vocab_size=9), ValueError, "update_config: ['vocab_size']")


def test_update_config_refuses_unserialisable_value(run: Run) -> None:
    refused(run, lambda: run.update_config(study={"when": object()}), TypeError, "study.when: object")


def test_update_config_without_a_run_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        Run(tmp_path / "none").update_config(study={"steps": 8})
    assert not (tmp_path / "none").exists()


def test_update_config_writes_after_success(run: Run) -> None:
    run.update_config(study={"steps": 8, "seeds": [0]})
    assert run.config["study"] == {"steps": 8, "seeds": [0]} and run.config["vocab_size"] == 512


def test_empty_variants_named() -> None:
    with pytest.raises(ValueError, match="variants: .*need one or more values"):
        coerce("variants", [])
    with pytest.raises(ValueError, match="variants: .* cannot parse 'tide'"):
        coerce("variants", "tied,tide")
    with pytest.raises(ValueError, match="variants: .* repeats a variant"):
        coerce("variants", ["tied", "tied_in1"])
    assert coerce("variants", "tied, untied") == ["tied", "untied"]


def test_knn_k_zero_named() -> None:
    with pytest.raises(ValueError, match="knn_k: 0 is not allowed"):
        comparisons.table1({}, knn_k=0)
    with pytest.raises(ValueError, match="models: empty"):
        comparisons.table1({}, knn_k=10)


@pytest.mark.parametrize("kwargs,name", [
    ({"claim": "claim9"}, "claim: unknown value 'claim9'"),
    ({"value": float("nan")}, "value: nan"),
    ({"value": "high"}, "value: 'high' is not a number"),
    ({"threshold": float("inf")}, "threshold: inf"),
    ({"n_seeds": 0}, "n_seeds: 0"),
])
def test_bad_record(run: Run, kwargs: dict, name: str) -> None:
    args = {"claim": "claim2_gradient_flow", "value": 0.7, "threshold": 0.5, "statement": "s", **kwargs}
    claim = args.pop("claim")
    refused(run, lambda: records.record(run, records.Headline(claim, **args)), ValueError, name)


def test_bad_timings(run: Run) -> None:
    refused(run, lambda: report.write_summary(run, {"01_train": float("nan")}), ValueError, "timings: '01_train'")


# -- strict outputs ----------------------------------------------------------------------------------
def test_json_outputs_are_strict(run: Run) -> None:
    e = records.record(run, records.Headline("claim3_tuned_lens", value=0.2, threshold=0.0, statement="s",
                                             spread=float("nan"), n_seeds=1,
                                             details={"sd": float("nan"), "per_layer": [{"gap": np.float64("inf")}]}))
    assert e["spread"] is None
    data = strict_json(run.path / "results" / "claim3_tuned_lens.json")
    assert data["spread"] is None and data["details"]["sd"] is None
    assert data["null_reasons"]["spread"].startswith("one seed")
    assert set(data["null_reasons"]) == {"spread", "details.sd", "details.per_layer[0].gap"}
    summary = strict_json(report.write_summary(run, {"03_lens": 1.5}))
    assert summary["claims"]["claim3_tuned_lens"]["details"]["sd"] is None
    strict_json(run.model_dir("tied", 0) / "complete.json")


def test_unserialisable_json_leaves_file_alone(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    write_json_atomic(p, {"a": 1})
    before = snapshot(tmp_path)
    with pytest.raises(TypeError, match="b: object"):
        write_json_atomic(p, {"b": object()})
    assert snapshot(tmp_path) == before


def test_completion_marker_after_kill_has_real_numbers(run: Run) -> None:
    first = run.summary("tied", 0)
    (run.model_dir("tied", 0) / "complete.json").unlink()  # killed after the last step, before the marker
    again = train(run, "tied", 0, CFG, progress=False)
    for k in ("final_train_loss", "final_val_loss", "initial_val_loss", "steps"):
        assert again[k] == first[k], k
    assert again["tokens_per_second"] > 0 and math.isfinite(again["tokens_per_second"])
    assert list(run.metrics("tied", 0).step) == list(range(1, 9))


def test_two_optimiser_states_kept_until_finished(run: Run) -> None:
    states = sorted(p.parent.name for p in run.model_dir("untied", 0).glob("checkpoints/*/trainer_state.pt"))
    assert states == ["step-2", "step-4"]
    assert [p.parent.name for p in run.model_dir("tied", 0).glob("checkpoints/*/trainer_state.pt")] == ["step-8"]


# -- resume: logs checked, damaged checkpoints skipped -------------------------------------------------
def test_resume_from_step0_writes_no_duplicate_rows(fresh_run: Run, ref: Run) -> None:
    train(fresh_run, "untied", 0, CFG, progress=False, stop_at=0)
    train(fresh_run, "untied", 0, CFG, progress=False)
    assert list(fresh_run.metrics("untied", 0, kind="val").step) == [0, 4, 8]
    assert list(fresh_run.metrics("untied", 0).step) == list(range(1, 9))
    assert same_weights(fresh_run, ref, "untied", 0)


def test_half_written_row_dropped_and_recomputed(run: Run, ref: Run) -> None:
    log = run.metrics_dir / "untied-s0.csv"
    with log.open("a") as f:
        f.write("6,3.21")  # killed in the middle of a row
    assert list(run.metrics("untied", 0).step) == [1, 2, 3, 4, 5]  # readers skip it too
    with pytest.warns(UserWarning, match="untied-s0.csv: dropped a last row cut mid-write"):
        train(run, "untied", 0, CFG, progress=False)
    assert same_weights(run, ref, "untied", 0)
    assert run.metrics("untied", 0).equals(ref.metrics("untied", 0).assign(
        elapsed_s=run.metrics("untied", 0).elapsed_s))


def test_damaged_newest_checkpoint_skipped(run: Run, ref: Run) -> None:
    bad = run.model_dir("untied", 0) / "checkpoints" / "step-4" / "model.safetensors"
    truncate(bad)
    with pytest.warns(UserWarning, match=r"step-4: .*step-4/model.safetensors: damaged.*resuming from step-2"):
        train(run, "untied", 0, CFG, progress=False)
    assert same_weights(run, ref, "untied", 0)
    assert list(run.metrics("untied", 0).step) == list(range(1, 9))


def test_damaged_newest_optimiser_state_skipped(run: Run, ref: Run) -> None:
    truncate(run.model_dir("untied", 0) / "checkpoints" / "step-4" / "trainer_state.pt")
    with pytest.warns(UserWarning, match=r"step-4: .*trainer_state.pt: damaged or unreadable.*resuming from step-2"):
        train(run, "untied", 0, CFG, progress=False)
    assert same_weights(run, ref, "untied", 0)


def test_no_optimiser_state_refuses_instead_of_restarting(run: Run) -> None:
    for p in run.model_dir("untied", 0).glob("checkpoints/*/trainer_state.pt"):
        p.unlink()
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), ValueError,
            "model untied-s0: no checkpoint in", "step-4: no optimiser state", "restart from step 0", HINT)


def test_garbage_log_row_refused(run: Run) -> None:
    log = run.metrics_dir / "untied-s0.csv"
    lines = log.read_bytes().decode().split("\r\n")
    lines[2] = "2,garbage,,"
    log.write_bytes("\r\n".join(lines).encode())
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), DamagedFileError,
            str(log), "line 3", HINT)
    refused(run, lambda: run.metrics("untied", 0), DamagedFileError, str(log), "line 3")


def test_missing_log_rows_refused(run: Run) -> None:
    log = run.metrics_dir / "untied-s0.csv"
    lines = log.read_bytes().decode().split("\r\n")
    del lines[3]  # step 3, before the checkpoint at step 4
    log.write_bytes("\r\n".join(lines).encode())
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), DamagedFileError,
            str(log), "lacks the rows of steps [3]", HINT)


def test_missing_validation_log_refused(run: Run) -> None:
    (run.metrics_dir / "untied-s0_val.csv").unlink()
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), DamagedFileError,
            "untied-s0_val.csv: missing", "steps [0, 4]")


def test_missing_train_config_with_checkpoints_refused(run: Run) -> None:
    (run.model_dir("untied", 0) / "train_config.json").unlink()
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), DamagedFileError,
            "untied-s0/train_config.json: missing", HINT)


# -- damaged files: named, with what to do ---------------------------------------------------------------
def test_truncated_run_config(run: Run) -> None:
    truncate(run.config_path)
    refused(run, lambda: run.config, DamagedFileError, str(run.config_path), "JSONDecodeError", HINT)
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), DamagedFileError, str(run.config_path))
    refused(run, lambda: Run.prepare(run.path, vocab_size=512), DamagedFileError, str(run.config_path))


def test_truncated_train_config(run: Run) -> None:
    p = run.model_dir("tied", 0) / "train_config.json"
    truncate(p)
    refused(run, lambda: train(run, "tied", 0, CFG, progress=False), DamagedFileError, str(p), HINT)
    assert train(run, "tied", 0, CFG, progress=False, overwrite=True)["complete"]  # the named way out works
    assert run.summary("tied", 0)["steps"] == 8


def test_truncated_completion_marker(run: Run) -> None:
    p = run.model_dir("tied", 0) / "complete.json"
    truncate(p)
    refused(run, lambda: run.summary("tied", 0), DamagedFileError, str(p), "train tied-s0 again")


def test_truncated_final_weights(run: Run) -> None:
    p = run.model_dir("tied", 0) / "model.safetensors"
    truncate(p, 0.9)
    refused(run, lambda: run.load_model("tied", 0), DamagedFileError, str(p), "complete.json and train tied-s0")


@pytest.mark.parametrize("key,value,step", [("num_hidden_layers", 100000, None), ("hidden_size", 4096, 4),
                                             ("vocab_size", 10**9, None), ("model_type", "gpt_neox", None)])
def test_absurd_model_config_refused_before_anything_is_allocated(run: Run, monkeypatch: pytest.MonkeyPatch,
                                                                  key: str, value: object, step: int | None) -> None:
    """A model's config.json must be what its train_config.json's preset, family and vocabulary give."""
    import transformers

    path = run.model_path("tied", 0, step) / "config.json"
    saved = json.loads(path.read_text())
    before = saved[key]
    path.write_text(json.dumps({**saved, key: value}))

    def allocates(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built from the edited config.json")
    for name in ("from_pretrained", "from_config"):
        monkeypatch.setattr(transformers.AutoModelForCausalLM, name, allocates)
    names = (str(path), key, repr(value), repr(before), str(run.train_config_path("tied", 0)))
    refused(run, lambda: run.load_model("tied", 0, step=step), DamagedFileError, *names)
    refused(run, lambda: embeddings.from_run(run, "tied", 0, step), DamagedFileError, *names)


def test_truncated_checkpoint_weights(run: Run) -> None:
    p = run.model_dir("tied", 0) / "checkpoints" / "step-4" / "model.safetensors"
    truncate(p, 0.001)
    refused(run, lambda: run.load_model("tied", 0, step=4), DamagedFileError, str(p),
            "use another step (available: [0, 1, 2, 8])")


def test_truncated_checkpoint_in_analysis(run: Run) -> None:
    p = run.model_dir("tied", 0) / "checkpoints" / "step-1" / "model.safetensors"
    truncate(p, 0.6)
    refused(run, lambda: embeddings.checkpoint_matrices(run.model_dir("tied", 0)), DamagedFileError, str(p),
            "use another step")


def test_truncated_checkpoint_config(run: Run) -> None:
    p = run.model_dir("tied", 0) / "checkpoints" / "step-2" / "config.json"
    truncate(p)
    refused(run, lambda: run.load_model("tied", 0, step=2), DamagedFileError, str(p))


def test_missing_tokenizer(run: Run) -> None:
    shutil.rmtree(run.tokenizer_dir)
    msg = refused(run, run.tokenizer, FileNotFoundError, f"tokenizer: {run.tokenizer_dir} is missing",
                  "tied-s0", "Run.prepare")
    # the advice lists the files a model folder holds (transformers 5 writes no special_tokens_map.json)
    copy = run.model_dir("tied", 0)
    listed = re.search(rf"copy the tokenizer files of {re.escape(str(copy))} \(([^)]*)\) into it", msg).group(1)
    assert listed == "tokenizer.json, tokenizer_config.json"
    assert all((copy / f).is_file() for f in listed.split(", "))
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), FileNotFoundError, str(run.tokenizer_dir))
    refused(run, lambda: comparisons.load_models(run, [0]), FileNotFoundError, str(run.tokenizer_dir))
    refused(run, lambda: embeddings.extract(run.model_dir("tied", 0) / "checkpoints" / "step-0", run.tokenizer_dir),
            FileNotFoundError, f"tokenizer: folder '{run.tokenizer_dir}' does not exist")


def test_truncated_token_stream(run: Run) -> None:
    p = run.path / "tokens" / "train.npy"
    truncate(p, 0.3)
    refused(run, lambda: train(run, "untied", 1, CFG, progress=False), DamagedFileError, str(p), "Run.prepare")


def test_truncated_result(run: Run) -> None:
    records.record(run, records.Headline("claim1_alignment", value=0.2, threshold=0.0, statement="s"))
    p = run.path / "results" / "claim1_alignment.json"
    truncate(p)
    refused(run, lambda: report.write_summary(run), DamagedFileError, str(p), "rerun notebook 02_align")


# -- files that are not what the kit wrote: never run, named with what to do ------------------------------
def test_optimiser_state_with_code_refused_and_not_run(run: Run, ref: Run, tmp_path: Path) -> None:
    state = run.model_dir("untied", 0) / "checkpoints" / "step-4" / "trainer_state.pt"
    marker = tmp_path / "ran"
    save_hostile(state, marker, optimizer={}, step=4, elapsed_s=1.0)
    msg = refused(run, lambda: train(run, "untied", 0, CFG, progress=False), UnsafeFileError,
                  f"{state}: refused", "io.open", "optimiser state", "delete it", "previous checkpoint", HINT)
    assert not marker.exists(), "loading the optimiser state ran the file's code"
    assert "weights_only" not in msg
    state.unlink()  # what the message says to do: the kit's own state of step-2 loads as plain data
    with pytest.warns(UserWarning, match=r"step-4: no optimiser state.*resuming from step-2"):
        train(run, "untied", 0, CFG, progress=False)
    assert same_weights(run, ref, "untied", 0)


def test_zero_filled_optimiser_state_skipped_and_named(run: Run, ref: Run) -> None:
    state = run.model_dir("untied", 0) / "checkpoints" / "step-4" / "trainer_state.pt"
    zero_fill(state)
    with pytest.warns(UserWarning, match=r"resuming from step-2") as caught:
        train(run, "untied", 0, CFG, progress=False)
    msg = " ".join(str(w.message) for w in caught)
    assert f"{state}: damaged or unreadable" in msg and "weights_only" not in msg
    assert same_weights(run, ref, "untied", 0)


def test_tied_checkpoint_with_an_output_matrix_of_its_own_not_resumed(run: Run) -> None:
    (run.model_dir("tied", 0) / "complete.json").unlink()
    ckpt = run.model_dir("tied", 0) / "checkpoints" / "step-8" / "model.safetensors"
    sd = load_file(str(ckpt))
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"].flip(0).contiguous()
    save_file(sd, str(ckpt), metadata={"format": "pt"})
    refused(run, lambda: train(run, "tied", 0, CFG, progress=False), ValueError, "model tied-s0: no checkpoint",
            "step-8", "the model is tied but the checkpoint holds different matrices")


def flip_tying(folder: Path) -> None:
    """Edit a saved model's config.json: tie_word_embeddings the other way round."""
    cfg = json.loads((folder / "config.json").read_text())
    cfg["tie_word_embeddings"] = not cfg["tie_word_embeddings"]
    (folder / "config.json").write_text(json.dumps(cfg))


def with_finished_untied(run: Run, ref: Run) -> Run:
    """``run`` with ref's finished untied-s0 in place of its interrupted one (seed 0 complete for 02)."""
    shutil.rmtree(run.model_dir("untied", 0))
    shutil.copytree(ref.model_dir("untied", 0), run.model_dir("untied", 0))
    for name in ("untied-s0.csv", "untied-s0_val.csv"):
        shutil.copy2(ref.metrics_dir / name, run.metrics_dir / name)
    return run


@pytest.mark.parametrize("variant,says", [("tied", "tie_word_embeddings=False"),
                                         ("untied", "tie_word_embeddings=True")])
def test_own_model_with_flipped_tying_refused(run: Run, ref: Run, variant: str, says: str) -> None:
    """A run's model folder whose config.json says the other tying: named with the run's variant, never as
    tied_source / untied_source (the parameters of an external pair)."""
    run = with_finished_untied(run, ref)
    assert len(comparisons.load_models(run, [0])) == 1
    folder = run.model_dir(variant, 0)
    flip_tying(folder)
    hint = f"train {variant}-s0 again"
    msgs = [refused(run, lambda: run.load_model(variant, 0), RunFolderError, f"{folder}: the run's variant "
                    f"'{variant}' is {variant}", says, hint),
            refused(run, lambda: comparisons.load_models(run, [0]), RunFolderError, f"{folder}: the run's variant "
                    f"'{variant}' is {variant}", says, hint)]
    assert not any("_source" in m for m in msgs)
    (folder / "complete.json").unlink()  # what the message says to do
    train(run, variant, 0, CFG, progress=False)
    assert comparisons.load_models(run, [0])[0][variant].tied == (variant == "tied")
    model = run.load_model(variant, 0)
    assert (model.get_input_embeddings().weight is model.get_output_embeddings().weight) == (variant == "tied")


# -- the writer lock -----------------------------------------------------------------------------------
HOLDER = """
import sys, time
from tiebias.run.folder import Run
with Run(sys.argv[1]).writing("a test holder"):
    print("locked", flush=True)
    time.sleep(300)
"""


@pytest.fixture
def holder(run: Run):
    """Another process holding the run's writer lock; killed (SIGKILL) at the end if still alive."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run.path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stdout.readline().strip() == "locked"
    yield proc
    proc.kill()
    proc.wait()


def test_second_writer_refused_with_holder_pid(run: Run, holder: subprocess.Popen) -> None:
    pid = f"PID {holder.pid}"
    refused(run, lambda: train(run, "untied", 0, CFG, progress=False), RunLockedError, pid, "training untied-s0",
            "a test holder")
    refused(run, lambda: records.record(run, records.Headline("claim2_gradient_flow", value=0.7, threshold=0.5, statement="s")),
            RunLockedError, pid)
    refused(run, lambda: Run.prepare(run.path, vocab_size=512, overwrite=True), RunLockedError, pid)
    refused(run, lambda: run.update_config(study={"steps": 8}), RunLockedError, pid)
    lens = LensSettings(steps=2, tokens_per_step=2 * CFG.seq_len, seq_len=CFG.seq_len, eval_tokens=2 * CFG.seq_len)
    refused(run, lambda: lens_ladder.train_lens_ladders(run, ["tied"], [0], lens, progress=False),
            RunLockedError, pid, "lenses of tied-s0")
    refused(run, lambda: run.save_table(pd.DataFrame({"a": [1]}), "lens_gap"), RunLockedError, pid,
            "saving table lens_gap")
    # readers are not blocked
    assert run.config["vocab_size"] == 512
    assert list(run.metrics("tied", 0).step) == list(range(1, 9))
    assert run.summary("tied", 0)["complete"]
    run.load_model("tied", 0)


def test_killed_holder_is_taken_over(run: Run, holder: subprocess.Popen) -> None:
    holder.kill()  # SIGKILL: no cleanup; the OS releases the lock, the holder file stays behind
    holder.wait()
    stale = json.loads((run.path / LOCK_HOLDER).read_text())
    assert stale["pid"] == holder.pid and run.lock_holder() is None
    records.record(run, records.Headline("claim2_gradient_flow", value=0.7, threshold=0.5, statement="s"))
    assert records.results(run)["claim2_gradient_flow"]["verdict"] is True
    assert not (run.path / LOCK_HOLDER).exists()


# -- a model folder of another run: refused by name wherever the run's models are used --------------------
def swap_in(run: Run, other: Run, variant: str = "tied", seed: int = 0) -> Path:
    """Replace a model folder of ``run`` by the same-named one of ``other``; the replaced folder."""
    mdir = run.model_dir(variant, seed)
    shutil.rmtree(mdir)
    shutil.copytree(other.model_dir(variant, seed), mdir)
    return mdir


def strip_fingerprints(run: Run, variant: str, seed: int) -> None:
    """Make a model folder look like one of an earlier version: no fingerprints in its train_config.json."""
    p = run.train_config_path(variant, seed)
    cfg = json.loads(p.read_text())
    write_json_atomic(p, {k: v for k, v in cfg.items() if k not in FINGERPRINTS})


def test_training_records_the_runs_fingerprints(run: Run, other_run: Run) -> None:
    mine, theirs = run.fingerprints(), other_run.fingerprints()
    assert run.config["tokenizer_size"] == other_run.config["tokenizer_size"] == 512  # same size, other tokenizer
    assert all(isinstance(mine[k], str) and mine[k] != theirs[k] for k in FINGERPRINTS)
    for key in ("tied", "untied"):  # a finished model and one stopped at step 5: written when training starts
        cfg = json.loads(run.train_config_path(key, 0).read_text())
        assert {k: cfg[k] for k in FINGERPRINTS} == mine


def test_model_of_another_run_refused_by_name(run: Run, other_run: Run) -> None:
    mdir = swap_in(run, other_run)
    names = (str(mdir), "corpus fingerprint", "tokenizer fingerprint", "retrain tied-s0 in this run", "01_train", HINT,
             "the run it came from")
    refused(run, lambda: run.load_model("tied", 0), ForeignModelError, *names)
    refused(run, lambda: run.load_model("tied", 0, step=4), ForeignModelError, *names)
    refused(run, lambda: inventory.require_complete(run, ["tied"], [0]), ForeignModelError, *names)
    refused(run, lambda: embeddings.extract(run.model_path("tied", 0), run.tokenizer_dir), ForeignModelError, *names)
    refused(run, lambda: comparisons.evolution_table(run, [0]), ForeignModelError, *names)  # reads every checkpoint
    refused(run, lambda: train(run, "tied", 0, CFG, progress=False), ForeignModelError, *names)
    assert other_run.load_model("tied", 0) is not None  # in the run it came from it is used as before
    assert train(run, "tied", 0, CFG, progress=False, overwrite=True)["complete"]  # the named way out works
    assert run.load_model("tied", 0) is not None and inventory.require_complete(run, ["tied"], [0]) == [0]


def test_resuming_a_model_of_another_run_refused(run: Run, other_run: Run) -> None:
    mdir = swap_in(run, other_run)
    (mdir / "complete.json").unlink()  # unfinished, and no saved tokenizer: only its train_config.json tells
    (mdir / "tokenizer.json").unlink()
    names = (str(mdir), "corpus fingerprint", "tokenizer fingerprint", HINT)
    refused(run, lambda: train(run, "tied", 0, CFG, progress=False), ForeignModelError, *names)
    refused(run, lambda: run.load_model("tied", 0, step=4), ForeignModelError, *names)


def test_model_of_an_earlier_version_is_refused_by_name(run: Run) -> None:
    """No fingerprint recorded (an earlier version's model folder): whether it was trained on this run's data cannot
    be told, so it is refused, finished or not, naming the folder and the way out."""
    for key in ("tied", "untied"):  # a finished model and one stopped at step 5
        strip_fingerprints(run, key, 0)
        names = (str(run.model_dir(key, 0)), "records no corpus or tokenizer fingerprint", HINT)
        refused(run, lambda k=key: train(run, k, 0, CFG, progress=False), ForeignModelError, *names)
        refused(run, lambda k=key: run.load_model(k, 0, step=4), ForeignModelError, *names)


@pytest.mark.parametrize("part,value", [
    ("normalizer", {"type": "Lowercase"}),
    ("normalizer", {"type": "Replace", "pattern": {"String": "e"}, "content": "a"}),
    ("pre_tokenizer", {"type": "Whitespace"}),
    ("post_processor", None),
    ("decoder", None),
    ("model", {"dropout": 0.5}),
])
def test_tokenizer_edited_anywhere_is_refused(run: Run, part: str, value: object) -> None:
    """Every part of tokenizer.json maps text to ids or back: an edit to any is a tokenizer the models never saw."""
    file = run.tokenizer_dir / "tokenizer.json"
    saved = json.loads(file.read_text())
    saved[part] = {**saved[part], **value} if part == "model" else value
    file.write_text(json.dumps(saved))
    refused(run, lambda: run.load_model("tied", 0), ForeignModelError, str(run.model_dir("tied", 0)),
            "tokenizer fingerprint")


# -- a record belongs to the models it was computed from ----------------------------------------------------------
def test_retrained_model_makes_its_records_stale(run: Run) -> None:
    ident = hashlib.sha256((run.model_dir("tied", 0) / "model.safetensors").read_bytes()).hexdigest()
    assert run.summary("tied", 0)["weights_sha256"] == ident == run.model_id("tied", 0)
    assert run.model_id("untied", 0) is None  # stopped at step 5
    e = records.record(run, records.Headline("claim1_alignment", value=0.3, threshold=0.1, statement="<gap>",
                                             models=["tied-s0", "untied-s0"]))
    assert e["models"] == {"tied-s0": ident}  # the unfinished model cannot have been used: left out
    records.record(run, records.Headline("claim2_gradient_flow", value=0.7, threshold=0.5, statement="s", models=["tied-s0"]))
    records.record(run, records.Headline("claim4_causality", value=2.0, threshold=1.0, statement="s"))  # names no model
    before = json.loads(report.write_summary(run).read_text())["claims"]
    assert {c: r["status"] for c, r in before.items()} == dict.fromkeys(before, "holds") and len(before) == 3
    train(run, "tied", 0, replace(CFG, steps=6), progress=False, overwrite=True)  # as 01 with overwrite, steps=6
    assert run.model_id("tied", 0) not in (None, ident)
    after = json.loads(report.write_summary(run).read_text())["claims"]
    for claim, nb in (("claim1_alignment", "02_align"), ("claim2_gradient_flow", "01_train")):
        c = after[claim]
        assert c["status"] == "stale" and c["verdict"] is None and c["stale"]["rerun"] == nb
        assert c["stale"]["recorded_status"] == "holds" and c["models"] == {"tied-s0": ident}
        assert "retrained since: tied-s0" in c["stale"]["reason"] and f"study --only {nb}" in c["stale"]["reason"]
    assert after["claim4_causality"] == before["claim4_causality"]
    page = report.write_report(run).read_text()
    assert page.count("<i>stale</i>: computed from models retrained since: tied-s0") == 2
    assert page.count("<b>holds</b>") == 1 and "&lt;gap&gt;" in page and "rerun 02_align" in page
    records.record(run, records.Headline("claim1_alignment", value=0.3, threshold=0.1, statement="s", models=["tied-s0"]))  # rerun
    now = records.current_results(run)
    assert now["claim1_alignment"]["status"] == "holds" and now["claim2_gradient_flow"]["status"] == "stale"
    shutil.rmtree(run.model_dir("tied", 0))
    why = records.current_results(run)["claim1_alignment"]["stale"]["reason"]
    assert "deleted or unfinished since: tied-s0" in why and "train them again" in why


@pytest.fixture
def seeds_run(two_seed_run: Run, tmp_path: Path) -> Run:
    """A private copy of the shared two-seed run (tied and untied, seeds 0 and 1)."""
    shutil.copytree(two_seed_run.path, tmp_path / "two_seed")
    return Run(tmp_path / "two_seed")


def test_model_copied_from_another_seed_is_refused(seeds_run: Run) -> None:
    """``cp -r models/tied-s1 models/tied-s0``: the folder's complete.json and train_config.json name another model."""
    run = seeds_run
    shutil.rmtree(run.model_dir("tied", 0))
    shutil.copytree(run.model_dir("tied", 1), run.model_dir("tied", 0))
    names = (str(run.complete_path("tied", 0)), "'tied-s1'", "'tied-s0'", "retrain tied-s0")
    refused(run, lambda: run.load_model("tied", 0), ForeignModelError, *names)
    refused(run, lambda: embeddings.extract(run.model_path("tied", 0), run.tokenizer_dir), ForeignModelError, *names)
    refused(run, lambda: run.load_model("tied", 0, step=4), ForeignModelError, *names)
    run.complete_path("tied", 0).unlink()  # unfinished: its train_config.json names the other seed
    refused(run, lambda: run.load_model("tied", 0, step=4), ForeignModelError, str(run.train_config_path("tied", 0)),
            "its seed is 1, not 0")
    assert run.load_model("tied", 1) is not None


def test_swapped_weights_are_refused_and_make_records_stale(seeds_run: Run) -> None:
    """Only model.safetensors replaced: the hash computed from the weights is not the one complete.json records."""
    run = seeds_run
    records.record(run, records.Headline("claim1_alignment", value=0.3, threshold=0.1, statement="s",
                                         models=["tied-s0", "tied-s1"]))
    assert records.current_results(run)["claim1_alignment"]["status"] == "holds"
    recorded = run.summary("tied", 0)["weights_sha256"]
    shutil.copy2(run.model_dir("tied", 1) / "model.safetensors", run.model_dir("tied", 0) / "model.safetensors")
    computed = hashlib.sha256((run.model_dir("tied", 0) / "model.safetensors").read_bytes()).hexdigest()
    assert run.model_id("tied", 0) == computed != recorded
    refused(run, lambda: run.load_model("tied", 0), ForeignModelError, str(run.complete_path("tied", 0)),
            "weights_sha256", recorded[:12], computed[:12], "model.safetensors", "retrain tied-s0")
    now = records.current_results(run)["claim1_alignment"]
    assert now["status"] == "stale" and "tied-s0" in now["stale"]["reason"]


def test_claims_name_their_models_in_the_record(run: Run) -> None:
    flow = pd.DataFrame({"mean_output_share": [0.7], "median_out_in_ratio": [3.0]}, index=["tied-s0"])
    e = claims.record(run, claims.claim2(flow, first_n=8))
    assert e["models"] == {"tied-s0": run.model_id("tied", 0)}
    with pytest.raises(ValueError, match="models: 'tied' is not a model key"):
        records.record(run, records.Headline("claim2_gradient_flow", value=0.7, threshold=0.5, statement="s", models=["tied"]))


def test_lock_is_reentrant_in_one_process(run: Run) -> None:
    with run.writing("01_train"):
        assert run.lock_holder()["pid"] == os.getpid()
        train(run, "tied", 0, CFG, progress=False)  # finished: returns its summary
        records.record(run, records.Headline("claim2_gradient_flow", value=0.7, threshold=0.5, statement="s"))
        run.update_config(study={"steps": 8})
        assert (run.path / LOCK_HOLDER).exists()
    assert not (run.path / LOCK_HOLDER).exists() and run.lock_holder() is None
