"""The two readings of a tuned lens (tiebias.config.choices.LENS_PROTOCOLS), checked against a lens whose translators differ.

Translator i of the hand-made lens adds a bias only it has, so reading hidden state i with translator i - 1
(the reference code's indexing) or with translator i (the package's) gives a different, checkable number;
an off-by-one in either reading fails here.
"""

from __future__ import annotations

import pytest
import torch
import transformers as tr
from _families import tiny_config

from tiebias.lens import evaluate as E
from tiebias.lens import lenses as L

VOCAB, SEQ, LAYERS = 300, 16, 3
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_and_lens():
    torch.manual_seed(0)
    model = tr.AutoModelForCausalLM.from_config(tiny_config("llama", True, VOCAB, num_hidden_layers=LAYERS, initializer_range=0.3)).eval()
    lens = L.new_lens(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for i, t in enumerate(lens.layer_translators):
            t.weight.zero_()
            t.bias.copy_((i + 1) * torch.randn(t.bias.shape, generator=gen))  # translator i: its own bias
    x = torch.randint(0, VOCAB, (4 * SEQ,), generator=gen)
    return model, lens, x


def _by_hand(model, lens, x, reading) -> list[float]:
    """Mean KL(final || lens) in bits per row, with ``reading(i, hidden_states, pre_norm) -> logits``."""
    out_rows = []
    seqs = x.view(-1, SEQ)
    store: list = []
    norm = model.model.norm  # the model's own final norm (the lens holds a copy)
    handle = norm.register_forward_pre_hook(lambda _m, args: store.append(args[0]))
    try:
        with torch.no_grad():
            out = model(input_ids=seqs, output_hidden_states=True)
            for i in range(LAYERS + 1):
                out_rows.append(E.kl_bits(out.logits, reading(i, out.hidden_states, store[0])).mean().item())
    finally:
        handle.remove()
    return out_rows


def test_package_reading_is_translator_i_on_hidden_state_i(model_and_lens) -> None:
    model, lens, x = model_and_lens
    df = E.evaluate(model, x, lens, seq_len=SEQ, max_tokens=x.numel(), protocol="package")
    want = _by_hand(model, lens, x, lambda i, hs, pre: lens(hs[i], i) if i < LAYERS else lens.unembed(pre))
    assert df.kl_tuned_bits.tolist() == pytest.approx(want, rel=1e-5, abs=1e-7)
    assert df.kl_tuned_bits.iloc[LAYERS] == pytest.approx(0.0, abs=1e-5)  # the model's own head


def test_reference_reading_is_translator_i_minus_1_and_the_last_entry_normed_twice(model_and_lens) -> None:
    model, lens, x = model_and_lens
    df = E.evaluate(model, x, lens, seq_len=SEQ, max_tokens=x.numel(), protocol="reference")
    want = _by_hand(model, lens, x, lambda i, hs, pre: lens(hs[i], max(0, i - 1)))
    assert df.kl_tuned_bits.tolist() == pytest.approx(want, rel=1e-5, abs=1e-7)
    # the off-by-one readings give other numbers: the test above can tell them apart
    same_index = _by_hand(model, lens, x, lambda i, hs, pre: lens(hs[i], min(i, LAYERS - 1)))
    for i in range(1, LAYERS):
        assert abs(want[i] - same_index[i]) > 1e-3, i
    # the last entry is hidden_states[L] (already normed) through translator L - 1 and the final norm again
    assert df.kl_tuned_bits.iloc[LAYERS] > 1e-3
    # the logit lens: rows 0..L-1 as in the package reading, row L normed twice
    pkg = E.evaluate(model, x, lens, seq_len=SEQ, max_tokens=x.numel(), protocol="package")
    assert df.kl_logit_bits.iloc[:LAYERS].tolist() == pytest.approx(pkg.kl_logit_bits.iloc[:LAYERS].tolist(), rel=1e-6)
    twice = _by_hand(model, lens, x, lambda i, hs, pre: lens.unembed(hs[i]))
    assert df.kl_logit_bits.iloc[LAYERS] == pytest.approx(twice[LAYERS], rel=1e-5, abs=1e-7)
    # row 0 reads the embedding output with translator 0 in both readings
    assert df.kl_tuned_bits.iloc[0] == pytest.approx(pkg.kl_tuned_bits.iloc[0], rel=1e-6)


def test_bad_protocol_is_named(model_and_lens) -> None:
    model, lens, x = model_and_lens
    with pytest.raises(ValueError, match="protocol: 'paper' is not allowed; allowed: package, reference"):
        E.evaluate(model, x, lens, seq_len=SEQ, max_tokens=x.numel(), protocol="paper")
