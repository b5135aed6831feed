import math

import pytest
import torch

from tiebias.models.build import build
from tiebias.train.gradients import GradientProvenance


def _batch(vocab: int = 300) -> torch.Tensor:
    return torch.randint(0, vocab, (3, 24), generator=torch.Generator().manual_seed(0))


def _untied_copy(tied):
    """An explicitly untied model whose two matrices hold the tied model's values."""
    untied = build("tiny", family=tied.config.model_type.replace("gpt_neox", "neox"), tied=False,
                   vocab_size=tied.config.vocab_size, seed=0)
    sd = {k: v.clone() for k, v in tied.state_dict().items()}
    untied.load_state_dict(sd, strict=False)
    with torch.no_grad():
        untied.get_output_embeddings().weight.copy_(tied.get_input_embeddings().weight)
    return untied


@pytest.mark.parametrize("family", ["llama", "neox"])
def test_paths_sum_to_weight_grad(family: str) -> None:
    m = build("tiny", family=family, vocab_size=300, seed=0)
    x = _batch()
    with GradientProvenance(m) as prov:
        m(input_ids=x, labels=x).loss.backward()
        g = prov.path_grads()
        total = m.get_input_embeddings().weight.grad
        torch.testing.assert_close(g["input"] + g["output"], total, rtol=0, atol=0)
        # the input path only touches the rows of tokens in the batch
        touched = (g["input"].abs().sum(1) > 0).nonzero().flatten()
        assert set(touched.tolist()) <= set(x.unique().tolist())
        stats = prov.pop()
    assert stats.input_rows == touched.numel() <= x.unique().numel()
    assert stats.input_norm == pytest.approx(g["input"].norm().item(), rel=1e-6)
    assert stats.output_norm == pytest.approx(g["output"].norm().item(), rel=1e-6)
    assert stats.output_share == pytest.approx(stats.output_norm / (stats.input_norm + stats.output_norm))
    cos = torch.nn.functional.cosine_similarity(g["input"].flatten(), g["output"].flatten(), dim=0).item()
    assert stats.cosine == pytest.approx(cos, abs=1e-5)


@pytest.mark.parametrize("fin,fout", [(5.0, 1.0), (1.0, 0.2), (2.0, 3.0)])
def test_factor_changes_exactly_its_path(fin: float, fout: float) -> None:
    tied = build("tiny", vocab_size=300, seed=0)
    untied = _untied_copy(tied)
    x = _batch()
    untied(input_ids=x, labels=x).loss.backward()
    ref = fin * untied.get_input_embeddings().weight.grad + fout * untied.get_output_embeddings().weight.grad
    with GradientProvenance(tied, input_factor=fin, output_factor=fout) as prov:
        tied(input_ids=x, labels=x).loss.backward()
        stats = prov.pop()
    torch.testing.assert_close(tied.get_input_embeddings().weight.grad, ref, rtol=1e-5, atol=1e-8)
    assert stats.input_norm == pytest.approx(fin * untied.get_input_embeddings().weight.grad.norm().item(), rel=1e-5)
    assert stats.output_norm == pytest.approx(fout * untied.get_output_embeddings().weight.grad.norm().item(), rel=1e-5)
    # every other parameter receives exactly the unscaled gradient
    un = dict(untied.named_parameters())
    for name, p in tied.named_parameters():
        if "embed" not in name:
            torch.testing.assert_close(p.grad, un[name].grad, rtol=1e-5, atol=1e-8)


def test_recording_is_bit_identical_to_plain_backward() -> None:
    a = build("tiny", vocab_size=300, seed=0)
    b = build("tiny", vocab_size=300, seed=0)
    x = _batch()
    a(input_ids=x, labels=x).loss.backward()
    with GradientProvenance(b):
        b(input_ids=x, labels=x).loss.backward()
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(pa.grad, pb.grad), n


def test_exit_restores_plain_modules() -> None:
    m = build("tiny", vocab_size=300, seed=0)
    with GradientProvenance(m, input_factor=3.0):
        pass
    assert "forward" not in m.get_input_embeddings().__dict__
    assert "forward" not in m.get_output_embeddings().__dict__


def test_accumulates_over_backwards() -> None:
    m = build("tiny", vocab_size=300, seed=0)
    x = _batch()
    with GradientProvenance(m) as prov:
        m(input_ids=x, labels=x).loss.backward()
        m(input_ids=x, labels=x).loss.backward()
        two = prov.pop()
        m.zero_grad()
        m(input_ids=x, labels=x).loss.backward()
        one = prov.pop()
        assert prov.pop() is None
    assert two.input_norm == pytest.approx(2 * one.input_norm, rel=1e-5)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "5", None, True])
def test_bad_factors(bad) -> None:
    m = build("tiny", vocab_size=300, seed=0)
    with pytest.raises(ValueError, match="input_factor"):
        GradientProvenance(m, input_factor=bad)


def test_scaling_refused_on_untied_but_recording_works() -> None:
    m = build("tiny", vocab_size=300, tied=False, seed=0)
    with pytest.raises(ValueError, match="untied"):
        GradientProvenance(m, input_factor=5.0)
    x = _batch()
    with GradientProvenance(m) as prov:
        m(input_ids=x, labels=x).loss.backward()
        s = prov.pop()
    assert s.input_norm == pytest.approx(m.get_input_embeddings().weight.grad.norm().item(), rel=1e-6)
    assert not math.isnan(s.output_share)
