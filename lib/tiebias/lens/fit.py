"""Training a tuned lens: the package's ``train_loop`` (not importable: it needs the removed ``torchdata.dataloader2``)
for a CPU, with a fused KL, exact resume and the lens logits' precision."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from tuned_lens import TunedLens
from tuned_lens.nn import Unembed

from tiebias.config.lens import LensFit
from tiebias.lens.lenses import LN2, _check_lens, new_lens, sequences
from tiebias.models.anatomy import check_model
from tiebias.system.parallel import Stopped, check_arg
from tiebias.system.threads import loop_threads

__all__ = ["PRECISIONS", "PRECISION_ENV", "LensKL", "LensTarget", "frozen_forward", "logits_precision", "target_stats",
           "train_lens"]

PRECISION_ENV = "TIEBIAS_LENS_PRECISION"
PRECISIONS = ("auto", "bf16", "fp32")


def logits_precision(device: torch.device, requested: str | None = None) -> str:
    """The precision of the lens logits in lens training (README: "Lens precision").

    Args: device: where the lens trains; requested: "auto" (bf16 where bf16 matmuls are supported), "bf16" or "fp32"
        (None: ``$TIEBIAS_LENS_PRECISION``, else "auto").
    Returns: ``"bf16"`` or ``"fp32"``.
    """
    req = requested if requested is not None else os.environ.get(PRECISION_ENV, "auto").strip().lower() or "auto"
    if req not in PRECISIONS:
        where = PRECISION_ENV if requested is None else "precision"
        raise ValueError(f"{where}: {req!r} is not allowed; allowed: {', '.join(PRECISIONS)}")
    return req if req != "auto" else "bf16" if _bf16_matmul_supported(device) else "fp32"


def _bf16_matmul_supported(device: torch.device) -> bool:
    """Whether bf16 matmuls are fast here (CUDA with bf16, or a CPU whose oneDNN supports bf16)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def target_stats(logits: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """The loss's fixed statistics of the final distribution p = softmax(logits), in float32, exponentiating once.

    Args: logits: the model's final logits; weight, bias: the unembedding.
    Returns: (p W, p . b, sum p log p), what :class:`LensKL` takes after its first three arguments.
    """
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
    """The frozen unembedding of the loss: final norm, weight (float32, and in the lens logits' precision), bias."""

    unembed: Unembed
    weight: Tensor
    bias: Tensor | None
    lens_weight: Tensor

    @classmethod
    def of(cls, lens: TunedLens, low_precision: bool) -> LensTarget:
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


def check_train_args(model: PreTrainedModel, tokens: Any, fit: Any, num_threads: Any, should_stop: object = None) -> Tensor:
    """Validate lens training's arguments (ValueError naming the first bad one); the checked sequences."""
    if not isinstance(fit, LensFit):
        raise ValueError(f"fit: expected a tiebias.config.lens.LensFit, got {type(fit).__name__}")
    check_arg("num_threads", num_threads)
    check_arg("should_stop", should_stop)
    return sequences(tokens, fit.seq_len, model.config.vocab_size)


class LensKL(torch.autograd.Function):
    """Per-position KL(p || softmax(W n + b)) in nats = sum p log p + logsumexp(z) - (p W) . n - p . b, with the
    gradient softmax(z) W - p W written by hand: no vocabulary-sized gradient. Matmuls in ``weight.dtype``."""

    @staticmethod
    def forward(ctx: Any, n: Tensor, weight: Tensor, bias: Tensor | None, target_mean: Tensor,  # type: ignore[override]
                target_bias: Tensor, neg_entropy: Tensor) -> Tensor:
        z = n.to(weight.dtype) @ weight.T
        if bias is not None:
            z += bias.to(z.dtype)
        top = z.amax(-1, keepdim=True)
        e = z.sub_(top).exp_()  # in place: z is not needed again
        total = e.sum(-1, keepdim=True, dtype=torch.float32)
        lse = (top.float() + total.log()).squeeze(-1)
        ctx.save_for_backward(e, total, weight, target_mean)
        ctx.n_dtype = n.dtype
        return neg_entropy + lse - (n.float() * target_mean).sum(-1) - target_bias

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        e, total, weight, target_mean = ctx.saved_tensors
        expected = (e @ weight).float() / total  # softmax(z) W
        grad_n = grad.unsqueeze(-1) * (expected - target_mean)
        return grad_n.to(ctx.n_dtype), None, None, None, None, None


def train_lens(model: PreTrainedModel, tokens: Tensor, fit: LensFit | None = None, *, lens: TunedLens | None = None,
               state: dict[str, Any] | None = None, cache: Any = None, log: list[dict[str, float]] | None = None,
               progress: bool = True, num_threads: int | Literal["auto"] | None = "auto",
               should_stop: Callable[[], bool] | None = None) -> TunedLens:
    """Train a TunedLens (``lens`` in place, else a new one) on the frozen ``model``: an empty ``state`` is filled on
    return, a filled one resumes bit for bit; ``cache`` (a ``LensCache``) replaces the model's forward, bit for bit."""
    model_type = check_model(model)
    fit = LensFit() if fit is None else fit
    seqs = check_train_args(model, tokens, fit, num_threads, should_stop)
    low_precision = fit.low_precision if fit.low_precision is not None else logits_precision(model.device) == "bf16"
    steps, seq_len, optimizer = fit.steps, fit.seq_len, fit.optimizer
    if lens is not None:
        _check_lens(model, lens)
    lens = new_lens(model) if lens is None else lens
    if state is not None and not isinstance(state, dict):
        raise ValueError(f"state: expected a dict (empty to start) or None, got {type(state).__name__}")
    params = [p for p in lens.parameters() if p.requires_grad]
    opt, base_lr, feed = _start(params, seqs, fit, dict(state) if state else None)
    was_training = model.training
    model.eval()
    target = LensTarget.of(lens, low_precision)
    per_step = fit.tokens_per_step // seq_len
    if cache is not None:
        cache.check(model, feed.seqs, tokens_per_step=fit.tokens_per_step, batch_size=fit.batch_size)
    with loop_threads(num_threads, model.device.type) as tuner:
        bar = tqdm(range(steps), desc=f"tuned lens ({model_type})", disable=not progress)
        try:
            for step in bar:
                if should_stop is not None and should_stop():
                    raise Stopped(f"lens training stopped at step {step} of {steps}")
                # linear warmup to 1, then linear decay to 0 at ``steps`` (not at steps - warmup, as the package)
                w = fit.warmup_steps
                factor = (step + 1) / w if step < w else max(0.0, (steps - step) / max(1, steps - w))
                for g, base in zip(opt.param_groups, base_lr, strict=True):
                    g["lr"] = base * factor
                idx = feed.take(per_step)
                with tuner.step():
                    layer_loss = _accumulate_gradients(model, lens, target, feed.seqs, idx, fit.batch_size, cache)
                    torch.nn.utils.clip_grad_norm_(params, fit.max_grad_norm)
                    opt.step()
                    opt.zero_grad(set_to_none=False)
                bar.set_postfix(kl_bits=f"{sum(layer_loss) / len(layer_loss) / LN2:.3f}")
                if log is not None:
                    log.append({**{f"kl_bits_{i}": v / LN2 for i, v in enumerate(layer_loss)},
                                "lr": opt.param_groups[0]["lr"]})
        finally:
            bar.close()
            model.train(was_training)
    lens.zero_grad(set_to_none=True)
    if state is not None:
        state.clear()
        state.update(optimizer=opt.state_dict(), optimizer_name=optimizer, generator=feed.gen.get_state(),
                     order=feed.order, cursor=feed.cursor, steps_done=feed.steps_done + steps, seq_len=seq_len)
    return lens


@dataclass
class _Feed:
    """The shuffled, cycled order of the training sequences: where a run (or a resumed one) draws from."""

    seqs: Tensor
    gen: torch.Generator
    order: Tensor
    cursor: int
    steps_done: int

    def take(self, n: int) -> Tensor:
        """Indices of the next ``n`` sequences, reshuffling (with ``gen``) each time the order runs out."""
        idx: list[int] = []
        while len(idx) < n:
            if self.cursor == len(self.order):
                self.order, self.cursor = torch.randperm(len(self.seqs), generator=self.gen), 0
            take = min(n - len(idx), len(self.order) - self.cursor)
            idx.extend(self.order[self.cursor : self.cursor + take].tolist())
            self.cursor += take
        return torch.tensor(idx)


def _start(params: list[torch.nn.Parameter], seqs: Tensor, fit: LensFit,
           resume: dict[str, Any] | None) -> tuple[torch.optim.Optimizer, list[float], _Feed]:
    """The package's optimiser (SGD + Nesterov, lr scaled by 1 - momentum; or Adam, amsgrad, beta1 = momentum), its
    base learning rates (read before a resumed state overwrites them) and the data feed."""
    if resume is not None and resume.get("optimizer_name") != fit.optimizer:
        raise ValueError(f"optimizer: {fit.optimizer!r} cannot continue a lens trained with "
                         f"{resume.get('optimizer_name')!r}; continue with the same optimizer or start a new lens")
    if resume is not None and resume.get("seq_len") != fit.seq_len:
        raise ValueError(f"seq_len: {fit.seq_len} differs from the {resume.get('seq_len')} the lens was trained with")
    if fit.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(params, lr=fit.lr * (1 - fit.momentum), momentum=fit.momentum,
                                                     nesterov=True, weight_decay=fit.weight_decay)
    else:
        opt = torch.optim.Adam(params, lr=fit.lr, betas=(fit.momentum, 0.999), amsgrad=True,
                               weight_decay=fit.weight_decay)
    base_lr = [g["lr"] for g in opt.param_groups]
    gen = torch.Generator().manual_seed(fit.seed)
    if resume is None:
        return opt, base_lr, _Feed(seqs, gen, torch.randperm(len(seqs), generator=gen), 0, 0)
    opt.load_state_dict(resume["optimizer"])
    gen.set_state(resume["generator"])
    order, cursor, steps_done = resume["order"], int(resume["cursor"]), int(resume["steps_done"])
    if len(order) != len(seqs):
        raise ValueError(f"tokens: {len(seqs)} sequences, but the lens was trained on {len(order)}; "
                         "continue on the same token stream")
    return opt, base_lr, _Feed(seqs, gen, order, cursor, steps_done)


def _accumulate_gradients(model: PreTrainedModel, lens: TunedLens, target: LensTarget, seqs: Tensor, idx: Tensor,
                          batch_size: int, cache: Any) -> list[float]:
    """One step's gradients on sequences ``idx`` over micro-batches of ``batch_size``; the mean KL per layer (nats)."""
    layer_loss = [0.0] * len(lens.layer_translators)
    per_step = len(idx)
    for start in range(0, per_step, batch_size):
        sel = idx[start : start + batch_size]
        frac = len(sel) / per_step
        if cache is not None:
            hidden, (target_mean, target_bias, neg_entropy) = cache.take(sel)
        else:
            hidden, (target_mean, target_bias, neg_entropy) = frozen_forward(model, target, seqs[sel].to(model.device))
        for i, h in enumerate(hidden):
            n = target.unembed.final_norm(lens.transform_hidden(h, i))
            kl = LensKL.apply(n, target.lens_weight, target.bias, target_mean, target_bias, neg_entropy)
            loss = kl.mean()
            (loss * frac).backward()
            layer_loss[i] += float(loss.detach()) * frac
    return layer_loss
