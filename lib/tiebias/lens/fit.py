"""Training a tuned lens (paper claim 3): the package's recipe, re-implemented to fit a CPU.

Follows ``tuned_lens.scripts.train_loop``, which cannot be imported here (it needs
``torchdata.dataloader2``, which torchdata 0.10+ removed): KL loss against the model's final
distribution at the same position, translator i fed ``hidden_states[i]``, one backward per
layer (the loss is the sum over layers), gradient clipping at ``max_grad_norm``, weight
decay, linear warmup then linear decay to zero.

Defaults differ from the package's where its values do not suit a small model on a CPU. The package trains 250
steps of 2**18 tokens with SGD + Nesterov momentum 0.9 at lr 1.0 (its ``lr_scale``, applied as ``lr * (1 -
momentum)``) and no warmup. The kit's models are far smaller and its CPU slower, so the default is fewer tokens per
step; with that little data the package's SGD recipe (``optimizer="sgd", lr=1.0, warmup_steps=0``) and Adam at a
small learning rate stop short of convergence at layer 0, where a tied model's translator has to move furthest from
the identity. An under-trained lens inflates early-layer KL, the quantity claim 3 compares, hence Adam at 1e-2 with
a short warmup (the README's "Measured here" gives the measurements). Adam follows the package's Adam branch (amsgrad,
beta1 = ``momentum``).

``num_threads`` defaults to ``"auto"``: a :class:`tiebias.system.threads.ThreadTuner` chooses the intra-op
threads from measured steps (two threads help on a quiet machine and hurt when another process holds a core). The
lens does not depend on it.

A step runs the frozen model and reduces its logits to the loss's target statistics (a sizeable part of a step),
then the lens's loss and backward per layer; ``cache=``
(:mod:`tiebias.lens.cache`) takes the former from activations computed once, with the same lens bit for bit: both
run :func:`tiebias.lens.frozen.frozen_forward`. Token streams and settings are checked by :mod:`tiebias.lens.inputs`.

Continuing (the lens-budget ladder of :mod:`tiebias.lens.ladder`): :func:`train_lens` can train a
given lens in place and fill or resume from a ``state`` dict (optimiser moments, the data
generator, the shuffled order and its cursor, ``steps_done``). Each call runs its own schedule
(warmup, then linear decay to 0 over its ``steps``), so every call ends with an annealed lens.
Two chained calls give bit for bit the same lens whether or not the lens and state went through
disk in between (``torch.save`` of ``state``).
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
from tiebias.lens.lenses import LN2, _check_lens, check_model, new_lens
from tiebias.lens.precision import logits_precision
from tiebias.system.parallel import Stopped
from tiebias.system.threads import loop_threads

if TYPE_CHECKING:
    from tiebias.lens.cache import LensCache

__all__ = ["train_lens"]


# --------------------------------------------------------------------------- loss


class _LensKL(torch.autograd.Function):
    """Per-position KL(p || softmax(W n + b)) in nats with a hand-written backward.

    KL = sum_v p log p + logsumexp(z) - sum_v p z_v, and sum_v p z_v = (p W) . n + p . b, so
    with ``target_mean = p W``, ``target_bias = p . b`` and ``neg_entropy = sum p log p``
    fixed per position, only ``logsumexp(z)`` needs the vocabulary. Its gradient in n is
    ``softmax(z) W - p W``: one matmul, no vocabulary-sized gradient tensor. Same value and
    gradient as the package's ``sum(p * (log p - log_softmax(z)))`` at a fraction of the
    memory traffic, which is what lets CPU training fit in a minute. The logits, the
    softmax and both matmuls run in ``weight.dtype`` (bf16 for the package's autocast
    precision); sums and the returned KL are float32.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        n: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        target_mean: Tensor,
        target_bias: Tensor,
        neg_entropy: Tensor,
    ) -> Tensor:
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


_kl_nats_fused = _LensKL.apply
"""Per-position KL(p || softmax(W n + b)) in nats; see :class:`_LensKL`."""


# --------------------------------------------------------------------------- training


def train_lens(
    model: PreTrainedModel,
    tokens: Tensor,
    fit: LensFit | None = None,
    *,
    lens: TunedLens | None = None,
    state: dict[str, Any] | None = None,
    cache: LensCache | None = None,
    log: list[dict[str, float]] | None = None,
    progress: bool = True,
    num_threads: int | Literal["auto"] | None = "auto",
    should_stop: Callable[[], bool] | None = None,
) -> TunedLens:
    """Train the package's TunedLens on ``model`` (frozen) to minimise sum over layers of KL(final || lens).

    Args:
        model: the frozen model (a supported decoder, see :func:`tiebias.lens.lenses.check_model`).
        tokens: a 1-D token stream, cut into non-overlapping ``fit.seq_len`` sequences, shuffled with ``fit.seed``
            and cycled, ``fit.batch_size`` sequences per forward pass.
        fit: steps, data shape and optimiser recipe (:class:`tiebias.config.lens.LensFit`; None: its defaults, see
            the module docstring). ``fit.low_precision`` None: bf16 lens logits where :func:`logits_precision` says so, like the
            package's autocast.
        lens: trained in place instead of a new identity lens.
        state: empty: filled on return; filled: resumes where the call that filled it stopped.
        cache: :func:`tiebias.lens.cache.build_cache` of this model, tokens and settings, replacing the frozen
            model's forward (the same lens bit for bit); a cache built for anything else is refused (ValueError).
        log: receives one dict per step (``kl_bits_<i>`` per layer, ``lr``).
        progress: show a progress bar.
        num_threads: torch's intra-op CPU threads for the call (None: keep; ``"auto"``: a
            :class:`tiebias.system.threads.ThreadTuner` picks them from step times, restored after).
        should_stop: asked before every step; True raises :class:`tiebias.system.parallel.Stopped`.

    Returns:
        The trained lens.
    """
    model_type = check_model(model)
    fit = LensFit() if fit is None else fit
    tokens = check_train_args(model, tokens, fit, num_threads, should_stop)
    low_precision = fit.low_precision
    if low_precision is None:
        low_precision = logits_precision(model.device) == "bf16"
    steps, seq_len, optimizer = fit.steps, fit.seq_len, fit.optimizer
    if lens is None:
        lens = new_lens(model)
    else:
        _check_lens(model, lens)
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


def _new_optimizer(
    params: list[torch.nn.Parameter], optimizer: str, lr: float, momentum: float, weight_decay: float
) -> torch.optim.Optimizer:
    """The package's optimiser for ``optimizer``: SGD + Nesterov, or Adam (amsgrad, beta1 = momentum)."""
    if optimizer == "sgd":
        # Package convention: PyTorch's momentum scales the step by 1 / (1 - beta), undone here.
        return torch.optim.SGD(
            params, lr=lr * (1 - momentum), momentum=momentum, nesterov=True, weight_decay=weight_decay
        )
    # Package's Adam branch: amsgrad, beta1 = momentum.
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


def _start(
    params: list[torch.nn.Parameter], tokens: Tensor, fit: LensFit, resume: dict[str, Any] | None
) -> tuple[torch.optim.Optimizer, list[float], _Feed]:
    """Optimiser, its base learning rates and the data feed, fresh or restored from ``resume``.

    The base rates are read before a resumed optimiser state overwrites them with its last scheduled ones."""
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
        raise ValueError(
            f"tokens: {len(seqs)} sequences, but the lens was trained on {len(order)}; "
            f"continue on the same token stream"
        )
    return opt, base_lr, _Feed(seqs, gen, order, cursor, steps_done)


def _lr_factor(step: int, steps: int, warmup_steps: int) -> float:
    """Linear warmup to 1, then linear decay to 0 at ``steps``.

    (The package passes steps - warmup as the decay horizon, leaving the last ``warmup`` steps at lr 0.)"""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


def _accumulate_gradients(
    model: PreTrainedModel, lens: TunedLens, target: LensTarget, seqs: Tensor, idx: Tensor, batch_size: int,
    cache: LensCache | None,
) -> list[float]:
    """One step's gradients on sequences ``idx``, accumulated over micro-batches of ``batch_size``; returns the mean
    KL per layer (nats). The frozen model's activations come from ``cache`` when given."""
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
            kl = _kl_nats_fused(n, target.lens_weight, target.bias, target_mean, target_bias, neg_entropy)
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


def _fill_state(
    state: dict[str, Any], opt: torch.optim.Optimizer, optimizer: str, feed: _Feed, steps: int, seq_len: int
) -> None:
    """Replace ``state``'s contents with what a later call needs to continue exactly where this one stopped."""
    state.clear()
    state.update(optimizer=opt.state_dict(), optimizer_name=optimizer, generator=feed.gen.get_state(),
                 order=feed.order, cursor=feed.cursor, steps_done=feed.steps_done + steps, seq_len=seq_len)
