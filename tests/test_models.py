import pytest
import torch

from tiebias.config.presets import PRESETS
from tiebias.models.anatomy import is_tied
from tiebias.models.build import build, count_parameters, make_config


@pytest.mark.parametrize("family", ["llama", "neox"])
def test_tied_and_untied_share_initialisation(family: str) -> None:
    tied = build("tiny", family=family, tied=True, vocab_size=300, seed=7)
    untied = build("tiny", family=family, tied=False, vocab_size=300, seed=7)
    assert is_tied(tied) and not is_tied(untied)
    st, su = tied.state_dict(), untied.state_dict()
    out_key = [k for k in su if su[k] is untied.get_output_embeddings().weight or k == "lm_head.weight"]
    shared = [k for k in st if k in su and k not in out_key]
    assert len(shared) > 5
    for k in shared:
        assert torch.equal(st[k], su[k]), k
    # the tied matrix starts as the untied input matrix; the untied output matrix is its own draw
    assert torch.equal(tied.get_input_embeddings().weight, untied.get_input_embeddings().weight)
    w_in, w_out = untied.get_input_embeddings().weight, untied.get_output_embeddings().weight
    assert not torch.equal(w_in, w_out)
    assert abs(w_out.std().item() - 0.02) < 0.002
    cos = torch.nn.functional.cosine_similarity(w_in, w_out, dim=1).mean().item()
    assert abs(cos) < 0.05


def test_seeds_differ_and_repeat() -> None:
    a = build("tiny", vocab_size=300, seed=1)
    b = build("tiny", vocab_size=300, seed=1)
    c = build("tiny", vocab_size=300, seed=2)
    assert torch.equal(a.get_input_embeddings().weight, b.get_input_embeddings().weight)
    assert not torch.equal(a.get_input_embeddings().weight, c.get_input_embeddings().weight)


def test_families_have_expected_shape() -> None:
    llama = make_config("small", family="llama")
    neox = make_config("small", family="neox")
    assert llama.model_type == "llama" and llama.hidden_act == "silu"
    assert neox.model_type == "gpt_neox" and neox.intermediate_size == 4 * neox.hidden_size
    assert llama._attn_implementation == "sdpa"


def test_parameter_counts_grow_with_presets() -> None:
    counts = [count_parameters(build(p, vocab_size=512))["non_embedding"] for p in ("tiny", "mini", "small")]
    assert counts == sorted(counts)
    tied, untied = build("tiny", vocab_size=512), build("tiny", vocab_size=512, tied=False)
    assert count_parameters(untied)["embedding"] == 2 * count_parameters(tied)["embedding"]


def test_bad_preset_and_family() -> None:
    with pytest.raises(ValueError, match="preset: unknown value 'huge'.*tiny"):
        build("huge")
    with pytest.raises(ValueError, match="family: unknown value 'gpt2'"):
        build("tiny", family="gpt2")
    assert "small" in PRESETS and "gpu-150m" in PRESETS
