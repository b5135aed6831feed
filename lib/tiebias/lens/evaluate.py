"""Reading a tuned lens: the per-layer KL and cross-entropy table under either protocol, and per-prompt views."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from torch import Tensor
from transformers import PreTrainedModel
from tuned_lens import TunedLens
from tuned_lens.nn import Lens

from tiebias.config.checks import is_int
from tiebias.config.choices import LENS_PROTOCOLS
from tiebias.config.lens import LENS_BATCH_SIZE, LENS_SEQ_LEN
from tiebias.lens.lenses import LN2, _check_lens, new_logit_lens, sequences
from tiebias.models.anatomy import check_model, checked_layout
from tiebias.system.parallel import check_arg
from tiebias.system.threads import loop_threads

if TYPE_CHECKING:  # plotting pulls in plotly; imported where used
    from tuned_lens.plotting import PredictionTrajectory

__all__ = ["evaluate", "kl_bits", "top_tokens_by_layer", "trajectory"]


def kl_bits(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """KL(p || q) in bits over the last axis, from logits or log-probabilities of p and q."""
    log_p = p_logits.float().log_softmax(-1)
    log_q = q_logits.float().log_softmax(-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1) / LN2


@contextmanager
def _capture_final_norm_input(model: PreTrainedModel) -> Iterator[list[Tensor]]:
    """The stream entering the final norm (hidden_states[-1] is already normed)."""
    store: list[Tensor] = []
    handle = checked_layout(model).final_norm.register_forward_pre_hook(lambda _m, args: store.append(args[0]))
    try:
        yield store
    finally:
        handle.remove()


def evaluate(model: PreTrainedModel, tokens: Tensor, lens: TunedLens | None = None, *, seq_len: int = LENS_SEQ_LEN,
             max_tokens: int = 32768, batch_size: int = LENS_BATCH_SIZE, num_threads: int | str | None = "auto",
             per_sequence: bool = False, logit_lens: bool = True, protocol: str = "package") -> pd.DataFrame:
    """Per layer 0..L: KL(final || lens) in bits and next-token CE in nats of the tuned and logit lens, and the model's CE.

    Args: model, tokens, lens: the model, a 1-D token stream, its tuned lens (None: the logit lens only);
        seq_len, max_tokens, batch_size, num_threads: the sequences read (the stream's first ``max_tokens``), their
        batches, the threads (None: as they are); per_sequence: one row per sequence and layer; logit_lens: read the
        logit lens too; protocol: "package" (translator i reads hidden state i, row L the stream entering the final
        norm) or "reference" (the paper's code: row i through translator max(0, i - 1), row L normed twice).
    Returns: ``layer``, ``kl_tuned_bits``, ``kl_logit_bits``, ``ce_tuned_nats``, ``ce_logit_nats``, ``ce_model_nats``,
        ``n_tokens`` (NaN for a lens not read), and ``sequence`` per sequence.
    """
    if protocol not in LENS_PROTOCOLS:
        raise ValueError(f"protocol: {protocol!r} is not allowed; allowed: {', '.join(LENS_PROTOCOLS)}")
    check_model(model)
    seqs = sequences(tokens, seq_len, model.config.vocab_size, max_tokens, batch_size)
    if lens is not None:
        _check_lens(model, lens)
    check_arg("num_threads", num_threads)
    logit = new_logit_lens(model) if logit_lens else None
    sums, ce_model = _score(model, seqs, {"l": logit, "t": lens}, batch_size, num_threads, protocol)
    n_layers, n_seq, n_ce = len(sums["kl_t"]) - 1, len(seqs), seq_len - 1
    cols = {"kl_tuned_bits": (sums["kl_t"] / seq_len, lens), "kl_logit_bits": (sums["kl_l"] / seq_len, logit),
            "ce_tuned_nats": (sums["ce_t"] / n_ce, lens), "ce_logit_nats": (sums["ce_l"] / n_ce, logit)}
    if per_sequence:
        frame: dict[str, Any] = {"sequence": torch.arange(n_seq).repeat(n_layers + 1).numpy(),
                                 "layer": torch.arange(n_layers + 1).repeat_interleave(n_seq).numpy()}
        frame.update({k: v.reshape(-1).numpy() if read is not None else math.nan for k, (v, read) in cols.items()})
        return pd.DataFrame({**frame, "ce_model_nats": (ce_model / n_ce).repeat(n_layers + 1).numpy(),
                             "n_tokens": seq_len})
    frame = {"layer": list(range(n_layers + 1))}
    frame.update({k: [float(v[i].mean()) for i in range(n_layers + 1)] if read is not None else math.nan
                  for k, (v, read) in cols.items()})
    return pd.DataFrame({**frame, "ce_model_nats": float(ce_model.sum() / (n_ce * n_seq)), "n_tokens": n_seq * seq_len})


def _score(model: PreTrainedModel, seqs: Tensor, readers: dict[str, Lens | None], batch_size: int,
           num_threads: int | str | None, protocol: str) -> tuple[dict[str, Tensor], Tensor]:
    """Per-layer, per-sequence float64 sums ``kl_t``, ``kl_l`` (bits), ``ce_t``, ``ce_l`` (nats), and the model's CE."""
    n_layers, n_seq = model.config.num_hidden_layers, len(seqs)
    sums = {k: torch.zeros(n_layers + 1, n_seq, dtype=torch.float64) for k in ("kl_t", "kl_l", "ce_t", "ce_l")}
    ce_model = torch.zeros(n_seq, dtype=torch.float64)

    def ce_per_seq(log_q: Tensor, targets: Tensor) -> Tensor:  # summed next-token CE (nats) per sequence
        return -log_q[:, :-1].gather(-1, targets.unsqueeze(-1)).squeeze(-1).sum(-1, dtype=torch.float64).cpu()

    was_training = model.training
    model.eval()
    try:
        with (torch.no_grad(), loop_threads(num_threads, model.device.type) as tuner,
              _capture_final_norm_input(model) as pre_norm):
            for start in range(0, n_seq, batch_size):
                x = seqs[start : start + batch_size].to(model.device)
                rows = slice(start, start + x.shape[0])
                pre_norm.clear()
                with tuner.step():
                    out = model(input_ids=x, output_hidden_states=True)
                    if len(out.hidden_states) != n_layers + 1 or len(pre_norm) != 1:
                        raise RuntimeError(f"unexpected hidden-state layout: {len(out.hidden_states)} hidden states, "
                                           f"{len(pre_norm)} final-norm calls for {n_layers} layers")
                    log_p = out.logits.float().log_softmax(-1)
                    p = log_p.exp()
                    neg_entropy = torch.linalg.vecdot(p, log_p)
                    ce_model[rows] = ce_per_seq(log_p, x[:, 1:])
                    # package: translator i reads hidden state i, row L the stream entering the final norm;
                    # reference: hidden state i through translator max(0, i - 1), the last one normed twice
                    ref = protocol == "reference"
                    for i, h in enumerate(out.hidden_states if ref else [*out.hidden_states[:-1], pre_norm[0]]):
                        for tag, reader in readers.items():
                            if reader is None:
                                continue
                            # row L of the package reading has no translator: the tuned lens is the model's head
                            logits = reader.unembed(h) if tag == "t" and not ref and i == n_layers \
                                else reader(h, max(0, i - 1) if ref else i)
                            log_q = logits.float().log_softmax(-1)
                            kl_nats = neg_entropy - torch.linalg.vecdot(p, log_q)
                            sums[f"kl_{tag}"][i, rows] = kl_nats.sum(-1, dtype=torch.float64).cpu() / LN2
                            sums[f"ce_{tag}"][i, rows] = ce_per_seq(log_q, x[:, 1:])
    finally:
        model.train(was_training)
    return sums, ce_model


def _encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids for ``text`` without special tokens, from a transformers or tokenizers tokenizer."""
    if hasattr(tokenizer, "encode"):
        try:
            enc = tokenizer.encode(text, add_special_tokens=False)
        except TypeError:
            enc = tokenizer.encode(text)
        return list(getattr(enc, "ids", enc))
    raise ValueError(f"tokenizer: expected an object with .encode(), got {type(tokenizer).__name__}")


def trajectory(model: PreTrainedModel, lens: Lens, tokenizer: Any, text: str) -> PredictionTrajectory:
    """The package's PredictionTrajectory of ``text``, each position's target the next token (the last: eos).

    Args: model, lens: a decoder and a TunedLens or LogitLens for it; tokenizer: one with ``encode``; text: 2+ tokens.
    Returns: the ``tuned_lens.plotting.PredictionTrajectory`` (16-bit logits handed over in float32: numpy has no bf16).
    """
    from tuned_lens.plotting import PredictionTrajectory

    check_model(model)
    if isinstance(lens, TunedLens):
        _check_lens(model, lens)
    ids = _encode(tokenizer, text)
    if len(ids) < 2:
        raise ValueError(f"text: needs at least 2 tokens, got {len(ids)} from {text!r}")
    eos = getattr(tokenizer, "eos_token_id", None)
    targets = ids[1:] + [eos if eos is not None else ids[-1]]
    if next(model.parameters()).dtype in (torch.float32, torch.float64):
        return PredictionTrajectory.from_lens_and_model(lens, model, ids, tokenizer=tokenizer, targets=targets)
    return PredictionTrajectory.from_lens_and_model(
        _Float32Logits(lens), _Float32Logits(model), ids, tokenizer=tokenizer, targets=targets  # type: ignore[arg-type]
    )


class _Float32Logits:
    """A model or lens whose logits come out in float32."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.device = getattr(inner, "device", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        if isinstance(out, Tensor):
            return out.float()
        out.logits = out.logits.float()
        return out

    forward = __call__  # the package calls a lens's forward


def top_tokens_by_layer(model: PreTrainedModel, lens: TunedLens | None, tokenizer: Any, prompt: str,
                        k: int = 5) -> pd.DataFrame:
    """Top-k next tokens after ``prompt`` at every layer, tuned and logit lens: ``layer``, ``lens``, ``rank``,
    ``token_id``, ``token``, ``prob``."""
    check_model(model)
    if lens is not None:
        _check_lens(model, lens)
    if not is_int(k) or not 1 <= k <= model.config.vocab_size:
        raise ValueError(f"k: must be an int in [1, {model.config.vocab_size}] (vocab_size), got {k!r}")
    ids = _encode(tokenizer, prompt)
    if not ids:
        raise ValueError(f"prompt: must encode to at least 1 token, got {prompt!r}")
    logit_lens, n_layers, rows = new_logit_lens(model), model.config.num_hidden_layers, []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _capture_final_norm_input(model) as pre_norm:
            out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=True)
            for i, h in enumerate([*out.hidden_states[:-1], pre_norm[0]]):
                last = h[:, -1]
                readers = {} if lens is None else {"tuned": lens(last, i) if i < n_layers else lens.unembed(last)}
                for name, logits in {**readers, "logit": logit_lens(last, i)}.items():
                    top = logits.float().softmax(-1)[0].topk(k)
                    pairs = zip(top.values.tolist(), top.indices.tolist(), strict=True)
                    rows += [{"layer": i, "lens": name, "rank": r + 1, "token_id": tid, "token": _decode(tokenizer, tid),
                              "prob": pr} for r, (pr, tid) in enumerate(pairs)]
    finally:
        model.train(was_training)
    return pd.DataFrame(rows)


def _decode(tokenizer: Any, token_id: int) -> str:
    """Readable text of one token id."""
    try:
        return str(tokenizer.decode([token_id]))
    except Exception:  # any tokenizer quirk falls back to the raw id
        return str(token_id)
