"""The frozen model's side of lens training: its forward pass and the loss's target statistics.

Training (:mod:`tiebias.lens.fit`) and the cache (:mod:`tiebias.lens.cache`) both call :func:`frozen_forward`, so a
cached lens equals the uncached one bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel
from tuned_lens import TunedLens
from tuned_lens.nn import Unembed

__all__ = ["LensTarget", "frozen_forward", "target_stats"]


def target_stats(logits: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(p W, p . b, sum p log p) of the final distribution p = softmax(logits), in float32, exponentiating once."""
    z = logits.float()
    z = z - z.amax(-1, keepdim=True)
    e = z.exp()
    total = e.sum(-1, keepdim=True)
    neg_entropy = torch.linalg.vecdot(e, z) / total.squeeze(-1) - total.squeeze(-1).log()
    target_mean = (e @ weight.float()) / total
    target_bias = (e @ bias.float()) / total.squeeze(-1) if bias is not None else torch.zeros_like(neg_entropy)
    return target_mean, target_bias, neg_entropy


@dataclass(frozen=True)
class LensTarget:
    """The frozen unembedding the loss is computed with: final norm, weight (float32 and lens precision), bias."""

    unembed: Unembed
    weight: Tensor
    bias: Tensor | None
    lens_weight: Tensor

    @classmethod
    def of(cls, lens: TunedLens, low_precision: bool) -> LensTarget:
        """From the lens's own unembedding; ``low_precision`` keeps a bf16 copy of the weight for the lens logits."""
        unembed = lens.unembed
        weight = unembed.unembedding.weight.detach()
        lens_weight = weight.to(torch.bfloat16 if low_precision else torch.float32).contiguous()
        return cls(unembed, weight, unembed.unembedding.bias, lens_weight)


def frozen_forward(model: PreTrainedModel, target: LensTarget,
                   x: Tensor) -> tuple[tuple[Tensor, ...], tuple[Tensor, Tensor, Tensor]]:
    """(hidden_states[:-1], target statistics) of the frozen model on the sequences ``x``: what the loss needs."""
    with torch.no_grad():
        out = model(input_ids=x, output_hidden_states=True)
        return out.hidden_states[:-1], target_stats(out.logits, target.weight, target.bias)
