"""Exact per-path gradient provenance and scaling for the (shared) embedding matrix.

A tied model uses one matrix W twice, as the input lookup ``W[ids]`` and the output projection ``h W^T``; autograd
sums both into ``W.grad``. Here each use reads W through its own view, whose gradient hook sees exactly its path's
gradient on the weight, records it and can scale it (no extra matmul). The paper's proxy (the gradient on the
lookup's output, one vector per token position) is recorded beside it (``proxy_input_norm``)."""

from __future__ import annotations

from collections import namedtuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

from tiebias.config.training import check_factor
from tiebias.models.anatomy import is_tied

PathStats = namedtuple("PathStats", "input_norm output_norm output_share cosine input_rows input_factor output_factor "
                                    "input_l1 output_l1 proxy_input_norm proxy_input_l1")
"""Statistics of one optimiser step's embedding gradient, split by path (after any scaling)."""


class GradientProvenance:
    """Context manager that splits, records and optionally scales the embedding gradient by path::

        with GradientProvenance(model, input_factor=5.0) as prov:
            model(ids, labels=ids).loss.backward()
            stats = prov.pop()   # PathStats of the gradients applied (after scaling)

    Backward passes before :meth:`pop` are summed per path. Untied models can be recorded, not scaled. Under data
    parallelism the proxy is this process's slice of the batch; ``proxy=False`` skips it (to measure its cost).
    """

    def __init__(self, model: PreTrainedModel, *, input_factor: float = 1.0, output_factor: float = 1.0,
                 record: bool = True, proxy: bool = True) -> None:
        self.input_factor = check_factor("input_factor", input_factor)
        self.output_factor = check_factor("output_factor", output_factor)
        self.record, self.proxy = record, proxy
        self.emb, self.out = model.get_input_embeddings(), model.get_output_embeddings()
        if not isinstance(self.emb, nn.Embedding) or not isinstance(self.out, nn.Linear):
            raise TypeError(
                f"model: {type(model).__name__} has input {type(self.emb).__name__} / output "
                f"{type(self.out).__name__}; gradient provenance needs an nn.Embedding input and an nn.Linear output")
        self.tied = is_tied(model)
        if not self.tied and (self.input_factor != 1.0 or self.output_factor != 1.0):
            raise ValueError(
                f"input_factor/output_factor: scaling ({self.input_factor}, {self.output_factor}) was asked for "
                "an untied model; gradient scaling is defined for tied models only (factors must be 1)")
        self.reset()

    def _alias(self, weight: Tensor, path: str) -> Tensor:
        """W read through a view whose gradient hook receives (and may scale) this path's gradient."""
        w = weight.view_as(weight)
        if w.requires_grad:
            w.register_hook(lambda grad: self._on_grad(path, grad))
        return w

    def __enter__(self) -> GradientProvenance:
        emb, out = self.emb, self.out

        def emb_forward(ids: Tensor) -> Tensor:
            e = F.embedding(ids, self._alias(emb.weight, "input"), emb.padding_idx, emb.max_norm, emb.norm_type,
                            emb.scale_grad_by_freq, emb.sparse)
            if not (self.record and self.proxy):
                return e
            e = e.view_as(e)
            if e.requires_grad:
                e.register_hook(self._on_activation_grad)
            return e

        emb.forward = emb_forward  # type: ignore[method-assign]
        out.forward = lambda h: F.linear(h, self._alias(out.weight, "output"), out.bias)  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        for m in (self.emb, self.out):
            m.__dict__.pop("forward", None)
        self.reset()

    def _on_grad(self, path: str, grad: Tensor) -> Tensor:
        factor = self.input_factor if path == "input" else self.output_factor
        if factor != 1.0:
            grad = grad * factor
        if self.record:  # a reference (not a copy) unless accumulating over several backward passes
            prev = self._grads[path]
            self._grads[path] = grad if prev is None else prev + grad
        return grad

    def _on_activation_grad(self, grad: Tensor) -> None:
        """Record the paper's proxy: norms of the gradient on the lookup's output, scaled as the input path is."""
        with torch.no_grad():
            g = grad.float()
            self._proxy[0] += self.input_factor ** 2 * float(torch.linalg.vector_norm(g) ** 2)
            self._proxy[1] += self.input_factor * float(g.abs().sum())

    def reset(self) -> None:
        """Forget the gradients held since the last :meth:`pop`."""
        self._grads: dict[str, Tensor | None] = {"input": None, "output": None}
        self._proxy = [0.0, 0.0]  # squared L2 and L1 of the activation gradient (summed over backwards)

    def path_grads(self) -> dict[str, Tensor | None]:
        """The per-path gradients held since the last :meth:`pop`."""
        return dict(self._grads)

    def pop(self) -> PathStats | None:
        """Statistics of the gradients received since the last call, then reset; None if nothing arrived."""
        g_in, g_out = self._grads["input"], self._grads["output"]
        (proxy_l2, proxy_l1), nan = (self._proxy[0] ** 0.5, self._proxy[1]), float("nan")
        self.reset()
        if g_in is None or g_out is None:
            return None
        with torch.no_grad():
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                # after DDP averaging: the input path's is the all-reduced mean of the local ones, the output
                # path's the rest of the (already averaged) weight.grad
                if self.tied:
                    g_in = g_in.clone()
                    dist.all_reduce(g_in)
                    g_in /= dist.get_world_size()
                    g_out = self.emb.weight.grad - g_in
                else:
                    g_in, g_out = self.emb.weight.grad, self.out.weight.grad
            # rows the input path really reached (a token seen only at a sequence's last position gets none)
            rows = int((g_in != 0).any(dim=1).sum().item())
            n_in, n_out = torch.linalg.vector_norm(g_in).item(), torch.linalg.vector_norm(g_out).item()
            l1_in, l1_out = g_in.abs().sum().item(), g_out.abs().sum().item()
            dot = (g_in * g_out).sum().item()
        total = n_in + n_out
        return PathStats(n_in, n_out, n_out / total if total > 0 else nan,
                         dot / (n_in * n_out) if n_in > 0 and n_out > 0 else nan, rows, self.input_factor,
                         self.output_factor, l1_in, l1_out, proxy_l2 if self.proxy else nan,
                         proxy_l1 if self.proxy else nan)
