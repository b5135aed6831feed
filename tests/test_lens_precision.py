"""Lens-logit precision: one switch, recorded with every lens, and a rung trained at another precision is retrained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers as tr
from _families import tiny_config

from tiebias.config.lens import LensSettings
from tiebias.lens import fit as LP
from tiebias.lens import ladder as lens_ladder

VOCAB, SEQ = 300, 32
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("value,want", [("bf16", "bf16"), ("fp32", "fp32"), (" FP32 ", "fp32")])
def test_env_chooses(monkeypatch, value, want) -> None:
    monkeypatch.setenv(LP.PRECISION_ENV, value)
    assert LP.logits_precision(torch.device("cpu")) == want


def test_auto_follows_bf16_support(monkeypatch) -> None:
    monkeypatch.delenv(LP.PRECISION_ENV, raising=False)
    monkeypatch.setattr(LP, "_bf16_matmul_supported", lambda device: True)
    assert LP.logits_precision(torch.device("cpu")) == "bf16"
    monkeypatch.setattr(LP, "_bf16_matmul_supported", lambda device: False)
    assert LP.logits_precision(torch.device("cpu")) == "fp32"
    assert LP.logits_precision(torch.device("cpu"), "bf16") == "bf16"  # an explicit request wins


def test_bad_value_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv(LP.PRECISION_ENV, "fp16")
    with pytest.raises(ValueError, match="TIEBIAS_LENS_PRECISION: 'fp16' is not allowed; allowed: auto, bf16, fp32"):
        LP.logits_precision(torch.device("cpu"))


def test_ladder_records_precision_and_retrains_on_change(tmp_path: Path, monkeypatch) -> None:
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(tiny_config("llama", True, VOCAB)).eval().requires_grad_(False)
    tokens = torch.randint(0, VOCAB, (20 * SEQ,), generator=torch.Generator().manual_seed(0))
    settings = LensSettings(steps=6, tokens_per_step=4 * SEQ, seq_len=SEQ, budgets=(1,))
    kw = dict(progress=False)
    rung = lens_ladder.rung_dir(tmp_path, "cpu", 1)
    monkeypatch.setenv(LP.PRECISION_ENV, "fp32")
    fp32 = lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)[1]
    assert json.loads((rung / "rung.json").read_text())["logits_precision"] == "fp32"
    assert json.loads((rung / "tiebias_lens.json").read_text())["logits_precision"] == "fp32"
    stamp = (rung / "params.pt").stat().st_mtime_ns
    lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)  # same precision: loaded, not retrained
    assert (rung / "params.pt").stat().st_mtime_ns == stamp
    monkeypatch.setenv(LP.PRECISION_ENV, "bf16")
    bf16 = lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)[1]
    assert json.loads((rung / "rung.json").read_text())["logits_precision"] == "bf16"
    w32 = torch.cat([p.flatten() for p in fp32.parameters()])
    w16 = torch.cat([p.flatten() for p in bf16.parameters()])
    assert not torch.equal(w32, w16)  # another precision trains another (nearby) lens
    assert torch.allclose(w32, w16, atol=0.05)


def test_rung_recorded_before_the_precision_counts_as_auto(tmp_path: Path, monkeypatch) -> None:
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(tiny_config("llama", False, VOCAB)).eval().requires_grad_(False)
    tokens = torch.randint(0, VOCAB, (20 * SEQ,), generator=torch.Generator().manual_seed(1))
    settings = LensSettings(steps=2, tokens_per_step=4 * SEQ, seq_len=SEQ, budgets=(1,))
    kw = dict(progress=False)
    monkeypatch.delenv(LP.PRECISION_ENV, raising=False)
    lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)
    rung = lens_ladder.rung_dir(tmp_path, "cpu", 1)
    meta = json.loads((rung / "rung.json").read_text())
    auto = meta.pop("logits_precision")
    (rung / "rung.json").write_text(json.dumps(meta))  # as an earlier version of the kit wrote it
    stamp = (rung / "params.pt").stat().st_mtime_ns
    lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)
    assert (rung / "params.pt").stat().st_mtime_ns == stamp
    other = "fp32" if auto == "bf16" else "bf16"
    monkeypatch.setenv(LP.PRECISION_ENV, other)
    lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)
    assert (rung / "params.pt").stat().st_mtime_ns != stamp


def test_damaged_rung_record_and_evaluation_cache_are_named(tmp_path: Path) -> None:
    """A rung.json or a cached evaluation that does not parse stops with the file named and what to do."""
    from tiebias.run.files import DamagedFileError

    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(tiny_config("llama", True, VOCAB)).eval().requires_grad_(False)
    tokens = torch.randint(0, VOCAB, (20 * SEQ,), generator=torch.Generator().manual_seed(2))
    settings = LensSettings(steps=2, tokens_per_step=4 * SEQ, seq_len=SEQ, budgets=(1,))
    kw = dict(progress=False)
    lens = lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)[1]
    rung = lens_ladder.rung_dir(tmp_path, "cpu", 1)
    (rung / "rung.json").write_text('{"recipe": "cp')
    with pytest.raises(DamagedFileError, match=r"rung\.json: damaged or unreadable .*delete the rung's folder"):
        lens_ladder.train_ladder(model, tokens, tmp_path, settings, **kw)
    cache = rung / lens_ladder.eval_name(2 * SEQ, SEQ, "reference")
    cache.write_bytes(b'"a,b\n1,"2\n\xff\xfe')
    with pytest.raises(DamagedFileError, match=r"_reference\.csv: damaged or unreadable .*delete it"):
        lens_ladder.evaluate_cached(model, tokens, lens, cache, seq_len=SEQ, eval_tokens=2 * SEQ,
                                       logit_lens=False, protocol="reference")
