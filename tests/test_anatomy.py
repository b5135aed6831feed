"""models.anatomy: the one answer to "is this model tied?" and "what is its text config?", for every kind of
input the former copies handled (a loaded model, a meta-device skeleton, a config, a multimodal config)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import transformers as tr

from tiebias.models.anatomy import TyingError, check_loaded_tying, is_tied, text_config
from tiebias.models.build import build, make_config


@pytest.mark.parametrize("family", ["llama", "neox"])
@pytest.mark.parametrize("tied", [True, False])
def test_a_model_and_its_config_agree(family: str, tied: bool) -> None:
    model = build("tiny", family=family, tied=tied, vocab_size=300, seed=0)
    assert is_tied(model) is tied
    assert is_tied(model.config) is tied


@pytest.mark.parametrize("tied", [True, False])
def test_a_meta_skeleton_is_judged_by_its_tensors_not_their_address(tied: bool) -> None:
    # meta tensors have no storage (data_ptr() is 0 for all of them): only the object can say "shared"
    with torch.device("meta"):
        skeleton = tr.AutoModelForCausalLM.from_config(make_config("tiny", vocab_size=300, tied=tied))
    assert skeleton.get_input_embeddings().weight.data_ptr() == skeleton.get_output_embeddings().weight.data_ptr()
    assert is_tied(skeleton) is tied


def test_two_parameters_on_one_storage_are_tied() -> None:
    model = build("tiny", tied=False, vocab_size=300, seed=0)
    model.get_output_embeddings().weight = torch.nn.Parameter(model.get_input_embeddings().weight.data)
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    assert is_tied(model)


def test_a_model_without_an_output_embedding_is_untied() -> None:
    base = tr.LlamaModel(make_config("tiny", vocab_size=300))
    assert base.get_output_embeddings() is None and not is_tied(base)


@pytest.mark.parametrize("tied", [True, False])
def test_a_multimodal_config_answers_from_its_text_config(tied: bool) -> None:
    text = make_config("tiny", vocab_size=300, tied=tied)
    composite = tr.LlavaConfig(text_config=text.to_dict())
    assert text_config(composite).tie_word_embeddings is tied
    assert is_tied(composite) is tied
    # the text part decides even where the outer config says otherwise
    outer_disagrees = SimpleNamespace(tie_word_embeddings=not tied,
                                      get_text_config=lambda: SimpleNamespace(tie_word_embeddings=tied))
    assert is_tied(outer_disagrees) is tied


def test_a_text_config_is_its_own_text_part_and_a_missing_flag_means_untied() -> None:
    config = make_config("tiny", vocab_size=300)
    assert text_config(config) is config
    assert is_tied(SimpleNamespace()) is False


def test_weights_decide_tying_when_the_config_disagrees() -> None:
    """check_loaded_tying reads the loaded tensors: shared storage or equal values are one matrix, whatever the config
    says; it refuses a config that says otherwise, naming where the model came from."""
    tied, untied = (build("tiny", tied=t, vocab_size=300, seed=0) for t in (True, False))
    assert check_loaded_tying(tied, "m") and not check_loaded_tying(untied, "m")
    untied.config.tie_word_embeddings = True  # a tied config over two different matrices
    with pytest.raises(TyingError, match=r"^here: its config.json says tie_word_embeddings=True, but its weights hold "
                                         r"an output matrix of their own"):
        check_loaded_tying(untied, "here")
    untied.config.tie_word_embeddings = False
    with pytest.raises(TyingError, match="says tie_word_embeddings=False, but its weights hold no output matrix"):
        check_loaded_tying(untied, "here", missing_keys={"lm_head.weight"})
    with torch.no_grad():
        untied.get_output_embeddings().weight.copy_(untied.get_input_embeddings().weight)
    assert not is_tied(untied)  # equal values, two tensors: check_loaded_tying calls them one matrix
    with pytest.raises(TyingError, match="says tie_word_embeddings=False, but its output matrix equals its input"):
        check_loaded_tying(untied, "here")
