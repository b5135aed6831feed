"""Training a tuned lens (claim 3): the package's training loop, re-implemented to fit a CPU.

Follows ``tuned_lens.scripts.train_loop`` (not importable: it needs the removed ``torchdata.dataloader2``): KL to the
model's final distribution, translator i fed ``hidden_states[i]``, the loss summed over layers, gradient clipping,
weight decay, linear warmup then decay to 0. The default recipe (Adam at 1e-2, short warmup) differs from the
package's SGD because with a CPU's few tokens per step SGD stops short at layer 0 (README: "Measured here"). A call
can continue a given lens from a ``state`` dict, bit for bit as if uninterrupted; ``cache=`` replaces the frozen
model's forward with :mod:`tiebias.lens.cache`, the same lens bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers import PreTrainedModel
from tuned_lens import TunedLens

from tiebias.config.lens import LensFit
from tiebias.lens.frozen import LensTarget, frozen_forward
from tiebias.lens.inputs import check_train_args, sequences
from tiebias.lens.lenses import LN2, _check_lens, new_lens
from tiebias.lens.precision import logits_precision
from tiebias.models.anatomy import check_model
from tiebias.system.parallel import Stopped
from tiebias.system.threads import loop_threads

if TYPE_CHECKING:
    from tiebias.lens.cache import LensCache

__all__ = ["train_lens"]


class _LensKL(torch.autograd.Function):
    """Per-position KL(p || softmax(W n + b)) in nats with a hand-written backward: the fast path.

    KL = sum p log p + logsumexp(z) - (p W) . n - p . b, so with ``target_mean = p W``, ``target_bias = p . b`` and
    ``neg_entropy`` fixed per position only logsumexp needs the vocabulary, and the gradient in n is
    ``softmax(z) W - p W``: no vocabulary-sized gradient tensor. Matmuls in ``weight.dtype``, sums in float32.
    """

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
               state: dict[str, Any] | None = None, cache: LensCache | None = None,
               log: list[dict[str, float]] | None = None, progress: bool = True,
               num_threads: int | Literal["auto"] | None = "auto",
               should_stop: Callable[[], bool] | None = None) -> TunedLens:
    """Train a TunedLens on the frozen ``model`` to minimise the sum over layers of KL(final || lens); return it.

    ``tokens`` is cut into ``fit.seq_len`` sequences, shuffled with ``fit.seed`` and cycled. ``lens`` is trained in
    place; an empty ``state`` is filled on return, a filled one resumes. ``log`` gets one dict per step
    (``kl_bits_<i>``, ``lr``); ``should_stop`` True raises :class:`tiebias.system.parallel.Stopped`.
    """
    model_type = check_model(model)
    fit = LensFit() if fit is None else fit
    tokens = check_train_args(model, tokens, fit, num_threads, should_stop)
    low_precision = fit.low_precision if fit.low_precision is not None else logits_precision(model.device) == "bf16"
    steps, seq_len, optimizer = fit.steps, fit.seq_len, fit.optimizer
    if lens is not None:
        _check_lens(model, lens)
    lens = new_lens(model) if lens is None else lens
    resume = _resume_from(state, optimizer, seq_len)
    was_training = model.training
    model.eval()
    params = [p for p in lens.parameters() if p.requires_grad]
    opt, base_lr, feed = _start(params, tokens, fit, resume)
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
                factor = _lr_factor(step, steps, fit.warmup_steps)
                for g, base in zip(opt.param_groups, base_lr, strict=True):
                    g["lr"] = base * factor
                idx = feed.take(per_step)
                with tuner.step():
                    layer_loss = _accumulate_gradients(model, lens, target, feed.seqs, idx, fit.batch_size, cache)
                    torch.nn.utils.clip_grad_norm_(params, fit.max_grad_norm)
                    opt.step()
                    opt.zero_grad(set_to_none=False)
                _record(bar, log, layer_loss, opt.param_groups[0]["lr"])
        finally:
            bar.close()
            model.train(was_training)
    lens.zero_grad(set_to_none=True)
    if state is not None:
        _fill_state(state, opt, optimizer, feed, steps, seq_len)
    return lens


def _resume_from(state: Any, optimizer: str, seq_len: int) -> dict[str, Any] | None:
    """A copy of a filled ``state`` to continue from (None: start afresh), checked against this call's settings."""
    if state is not None and not isinstance(state, dict):
        raise ValueError(f"state: expected a dict (empty to start) or None, got {type(state).__name__}")
    resume = dict(state) if state else None
    if resume is not None and resume.get("optimizer_name") != optimizer:
        raise ValueError(
            f"optimizer: {optimizer!r} cannot continue a lens trained with "
            f"{resume.get('optimizer_name')!r}; continue with the same optimizer or start a new lens"
        )
    if resume is not None and resume.get("seq_len") != seq_len:
        raise ValueError(f"seq_len: {seq_len} differs from the {resume.get('seq_len')} the lens was trained with")
    return resume


def _new_optimizer(params: list[torch.nn.Parameter], optimizer: str, lr: float, momentum: float,
                   weight_decay: float) -> torch.optim.Optimizer:
    """The package's optimiser: SGD + Nesterov (its lr scaled by 1 - momentum), or Adam (amsgrad, beta1 = momentum)."""
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr * (1 - momentum), momentum=momentum, nesterov=True,
                               weight_decay=weight_decay)
    return torch.optim.Adam(params, lr=lr, betas=(momentum, 0.999), amsgrad=True, weight_decay=weight_decay)


@dataclass
class _Feed:
    """The shuffled, cycled order of the training sequences: where a run (or a resumed one) draws from."""

    seqs: Tensor
    gen: torch.Generator
    order: Tensor
    cursor: int
    steps_done: int

    def take(self, n: int) -> Tensor:
        """Indices (into ``seqs``) of the next ``n`` sequences, reshuffling (with ``gen``) each time the order runs out."""
        idx: list[int] = []
        while len(idx) < n:
            if self.cursor == len(self.order):
                self.order, self.cursor = torch.randperm(len(self.seqs), generator=self.gen), 0
            take = min(n - len(idx), len(self.order) - self.cursor)
            idx.extend(self.order[self.cursor : self.cursor + take].tolist())
            self.cursor += take
        return torch.tensor(idx)


def _start(params: list[torch.nn.Parameter], tokens: Tensor, fit: LensFit,
           resume: dict[str, Any] | None) -> tuple[torch.optim.Optimizer, list[float], _Feed]:
    """Optimiser, its base learning rates (read before a resumed state overwrites them) and the data feed."""
    opt = _new_optimizer(params, fit.optimizer, fit.lr, fit.momentum, fit.weight_decay)
    base_lr = [g["lr"] for g in opt.param_groups]
    seqs = sequences(tokens, fit.seq_len)
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


def _lr_factor(step: int, steps: int, warmup_steps: int) -> float:
    """Linear warmup to 1, then linear decay to 0 at ``steps`` (not at steps - warmup, as the package does)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


def _accumulate_gradients(model: PreTrainedModel, lens: TunedLens, target: LensTarget, seqs: Tensor, idx: Tensor,
                          batch_size: int, cache: LensCache | None) -> list[float]:
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
            kl = _LensKL.apply(n, target.lens_weight, target.bias, target_mean, target_bias, neg_entropy)
            loss = kl.mean()
            (loss * frac).backward()
            layer_loss[i] += float(loss.detach()) * frac
    return layer_loss


def _record(bar: Any, log: list[dict[str, float]] | None, layer_loss: list[float], lr: float) -> None:
    """Show the step's mean KL on the progress bar and append its per-layer KL (bits) and lr to ``log``."""
    mean_bits = sum(layer_loss) / len(layer_loss) / LN2
    bar.set_postfix(kl_bits=f"{mean_bits:.3f}")
    if log is not None:
        entry = {f"kl_bits_{i}": v / LN2 for i, v in enumerate(layer_loss)}
        entry["lr"] = lr
        log.append(entry)


def _fill_state(state: dict[str, Any], opt: torch.optim.Optimizer, optimizer: str, feed: _Feed, steps: int,
                seq_len: int) -> None:
    """Replace ``state``'s contents with what a later call needs to continue exactly where this one stopped."""
    state.clear()
    state.update(optimizer=opt.state_dict(), optimizer_name=optimizer, generator=feed.gen.get_state(),
                 order=feed.order, cursor=feed.cursor, steps_done=feed.steps_done + steps, seq_len=seq_len)
