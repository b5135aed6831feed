"""The precision of the lens logits in lens training (bf16 where bf16 matmuls are supported, like the package's
autocast, else fp32), overridden by ``$TIEBIAS_LENS_PRECISION``; recorded with every lens (README: "Lens precision").
"""

from __future__ import annotations

import os

import torch


def _bf16_matmul_supported(device: torch.device) -> bool:
    """Whether bf16 matmuls are fast here (CUDA with bf16, or a CPU with oneDNN bf16 support)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    return False


PRECISION_ENV = "TIEBIAS_LENS_PRECISION"
PRECISIONS = ("auto", "bf16", "fp32")


def logits_precision(device: torch.device, requested: str | None = None) -> str:
    """The precision of the lens logits in lens training: ``"bf16"`` or ``"fp32"``.

    Args:
        device: the device the lens trains on (where bf16 support is asked).
        requested: ``"auto"``, ``"bf16"`` or ``"fp32"`` (None: ``$TIEBIAS_LENS_PRECISION``, else ``"auto"``); any
            other value is a ValueError naming where it came from.

    Returns:
        ``"bf16"`` or ``"fp32"``.

    ``requested`` (default: ``$TIEBIAS_LENS_PRECISION``, else ``"auto"``) is one of :data:`PRECISIONS`; ``auto``
    is bf16 where bf16 matmuls are supported (a CUDA GPU with bf16, a CPU whose oneDNN reports bf16), like the
    package's autocast, else fp32. It moves the trained lens by a rounding-sized amount (README: "Lens precision").
    """
    req = requested if requested is not None else os.environ.get(PRECISION_ENV, "auto").strip().lower() or "auto"
    if req not in PRECISIONS:
        where = PRECISION_ENV if requested is None else "precision"
        raise ValueError(f"{where}: {req!r} is not allowed; allowed: {', '.join(PRECISIONS)}")
    if req == "auto":
        return "bf16" if _bf16_matmul_supported(device) else "fp32"
    return req


__all__ = ["PRECISIONS", "PRECISION_ENV", "logits_precision"]
