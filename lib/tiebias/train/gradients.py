"""Exact per-path gradient provenance and scaling for the (shared) embedding matrix.

A tied model uses one matrix W twice, as the input lookup ``W[ids]`` and the output projection ``h W^T``; autograd
sums both into ``W.grad``. Here each use reads W through its own identity alias, whose backward sees exactly its
path's gradient on the weight, records it and can scale it (no extra matmul). The paper's proxy (the gradient on the
lookup's output, one vector per token position) is recorded beside it (``proxy_input_norm``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel

from tiebias.config.training import check_factor
from tiebias.models.anatomy import is_tied


def _world_size() -> int:
    """Number of data-parallel processes (1 when torch.distributed is not initialised)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _ActivationProbe(torch.autograd.Function):
    """Identity on the embedding lookup's output whose backward hands the activation gradient to a recorder."""

    @staticmethod
    def forward(ctx: Any, emb_out: Tensor, recorder: GradientProvenance) -> Tensor:  # type: ignore[override]
        ctx.recorder = recorder
        return emb_out.view_as(emb_out)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        ctx.recorder._on_activation_grad(grad)
        return grad, None


class _PathAlias(torch.autograd.Function):
    """Identity on the weight whose backward hands the path's gradient to a recorder."""

    @staticmethod
    def forward(ctx: Any, weight: Tensor, recorder: GradientProvenance, path: str) -> Tensor:  # type: ignore[override]
        ctx.recorder = recorder
        ctx.path = path
        return weight.view_as(weight)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        return ctx.recorder._on_grad(ctx.path, grad), None, None


@dataclass
class PathStats:
    """Statistics of one optimiser step's embedding gradient, split by path (after any scaling)."""

    input_norm: float
    output_norm: float
    output_share: float
    cosine: float
    input_rows: int
    input_factor: float
    output_factor: float
    input_l1: float = float("nan")
    output_l1: float = float("nan")
    proxy_input_norm: float = float("nan")
    proxy_input_l1: float = float("nan")

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


class GradientProvenance:
    """Context manager that splits, records and optionally scales the embedding gradient by path::

        with GradientProvenance(model, input_factor=5.0) as prov:
            model(ids, labels=ids).loss.backward()
            stats = prov.pop()   # PathStats of the gradients applied (after scaling)

    Backward passes before :meth:`pop` are summed per path. Untied models work too (scaling refused unless
    ``allow_untied_scaling``). Under data parallelism the proxy is this process's slice of the batch.
    """

    def __init__(self, model: PreTrainedModel, *, input_factor: float = 1.0, output_factor: float = 1.0,
                 record: bool = True, allow_untied_scaling: bool = False, proxy: bool = True) -> None:
        self.model = model
        self.input_factor = check_factor("input_factor", input_factor)
        self.output_factor = check_factor("output_factor", output_factor)
        self.record = record
        self.proxy = proxy  # also record the paper's proxy (off: only to measure what it costs, bench/)
        emb = model.get_input_embeddings()
        out = model.get_output_embeddings()
        if not isinstance(emb, nn.Embedding) or not isinstance(out, nn.Linear):
            raise TypeError(
                f"model: {type(model).__name__} has input {type(emb).__name__} / output {type(out).__name__}; "
                "gradient provenance needs an nn.Embedding input and an nn.Linear output projection")
        self.emb, self.out = emb, out
        self.tied = is_tied(model)
        if not self.tied and not allow_untied_scaling and (self.input_factor != 1.0 or self.output_factor != 1.0):
            raise ValueError(
                f"input_factor/output_factor: scaling ({self.input_factor}, {self.output_factor}) was asked for "
                "an untied model; gradient scaling is defined for tied models only (factors must be 1)")
        self._grads: dict[str, Tensor | None] = {"input": None, "output": None}
        self._proxy: list[float] = [0.0, 0.0]  # squared L2 and L1 of the activation gradient (summed over backwards)
        self._active = False

    def __enter__(self) -> GradientProvenance:
        emb, out = self.emb, self.out

        def emb_forward(ids: Tensor) -> Tensor:
            w = _PathAlias.apply(emb.weight, self, "input")
            out = F.embedding(ids, w, emb.padding_idx, emb.max_norm, emb.norm_type,
                              emb.scale_grad_by_freq, emb.sparse)
            return _ActivationProbe.apply(out, self) if self.record and self.proxy else out

        def out_forward(h: Tensor) -> Tensor:
            w = _PathAlias.apply(out.weight, self, "output")
            return F.linear(h, w, out.bias)

        emb.forward = emb_forward  # type: ignore[method-assign]
        out.forward = out_forward  # type: ignore[method-assign]
        self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        for m in (self.emb, self.out):
            if "forward" in m.__dict__:
                del m.forward
        self._active = False
        self.reset()

    def _on_grad(self, path: str, grad: Tensor) -> Tensor:
        factor = self.input_factor if path == "input" else self.output_factor
        if factor != 1.0:
            grad = grad * factor
        if self.record:
            prev = self._grads[path]
            # keep a reference (not a copy) unless accumulating over several backward passes
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
        self._grads = {"input": None, "output": None}
        self._proxy = [0.0, 0.0]

    def pop(self) -> PathStats | None:
        """Statistics of the gradients received since the last call, then reset; None if nothing arrived."""
        g_in, g_out = self._grads["input"], self._grads["output"]
        if g_in is None and g_out is None:
            self.reset()
            return None
        with torch.no_grad():
            if _world_size() > 1:
                g_in, g_out = self._reduced(g_in)
            # rows the input path really reached (a token seen only at a sequence's last position gets none)
            rows = int((g_in != 0).any(dim=1).sum().item()) if g_in is not None else 0
            n_in = torch.linalg.vector_norm(g_in).item() if g_in is not None else 0.0
            n_out = torch.linalg.vector_norm(g_out).item() if g_out is not None else 0.0
            l1_in = g_in.abs().sum().item() if g_in is not None else 0.0
            l1_out = g_out.abs().sum().item() if g_out is not None else 0.0
            dot = (g_in * g_out).sum().item() if g_in is not None and g_out is not None else 0.0
        proxy_l2, proxy_l1 = self._proxy[0] ** 0.5, self._proxy[1]
        total = n_in + n_out
        stats = PathStats(
            input_norm=n_in,
            output_norm=n_out,
            output_share=n_out / total if total > 0 else float("nan"),
            cosine=dot / (n_in * n_out) if n_in > 0 and n_out > 0 else float("nan"),
            input_rows=rows,
            input_factor=self.input_factor,
            output_factor=self.output_factor,
            input_l1=l1_in,
            output_l1=l1_out,
            proxy_input_norm=proxy_l2 if g_in is not None and self.proxy else float("nan"),
            proxy_input_l1=proxy_l1 if g_in is not None and self.proxy else float("nan"),
        )
        self.reset()
        return stats

    def _reduced(self, g_in: Tensor | None) -> tuple[Tensor, Tensor]:
        """Per-path gradients after DDP averaging: the input path's is the all-reduced mean of the local ones, the
        output path's the rest of the (already averaged) ``weight.grad``. Once per step, after backward."""
        import torch.distributed as dist

        if self.tied:
            if g_in is None:
                raise RuntimeError("no input-path gradient recorded on this process")
            g_in = g_in.clone()
            dist.all_reduce(g_in)
            g_in /= dist.get_world_size()
            g_out = self.emb.weight.grad - g_in
        else:
            g_in, g_out = self.emb.weight.grad, self.out.weight.grad
        return g_in, g_out

    def path_grads(self) -> dict[str, Tensor | None]:
        """The per-path gradients held since the last :meth:`pop` (for tests and inspection)."""
        return dict(self._grads)


def summarise_flow(metrics: list[dict] | object, first_n: int | None = None) -> dict[str, float]:
    """Headline numbers of a tied model's training log (steps up to ``first_n``; steps without a share skipped): last
    step, mean and median output share, median output/input norm ratio, mean cosine and mean rows touched.

    Args:
        metrics: the training log (a DataFrame or per-step dicts).
        first_n: read steps up to this one (None: all).

    Returns:
        The headline numbers, by name.
    """
    import pandas as pd

    df = metrics if isinstance(metrics, pd.DataFrame) else pd.DataFrame(metrics)
    if first_n is not None:
        if first_n <= 0:
            raise ValueError(f"first_n: {first_n!r} is not allowed; need an integer > 0")
        df = df[df.step <= first_n]
    df = df.dropna(subset=["output_share"])
    if df.empty:
        raise ValueError("metrics: no gradient provenance recorded (was record_provenance off?)")
    ratio = df.output_norm / df.input_norm
    return {"steps": int(df.step.max()), "mean_output_share": float(df.output_share.mean()),
            "median_output_share": float(df.output_share.median()),
            "median_out_in_ratio": float(ratio.median()), "mean_cosine": float(df.cosine.mean()),
            "mean_input_rows": float(df.input_rows.mean())}
