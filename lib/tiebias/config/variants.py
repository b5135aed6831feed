"""Names in a run folder with their parsers: variants, model folders ``<variant>-s<seed>``, checkpoints ``step-<N>``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tiebias.config.training import check_factor

_VARIANT_RE = re.compile(r"^(tied|untied)(?:_in([0-9.eE+-]+))?(?:_out([0-9.eE+-]+))?$")
_KEY_RE = re.compile(r"^(?P<variant>.+)-s(?P<seed>\d+)$")
STEP_PREFIX = "step-"
_STEP_RE = re.compile(rf"{STEP_PREFIX}(\d+)")


@dataclass(frozen=True)
class Variant:
    """A training variant: tied or untied, and for tied models the input/output gradient factors."""

    tied: bool
    input_factor: float = 1.0
    output_factor: float = 1.0

    @classmethod
    def parse(cls, name: str | Variant) -> Variant:
        """A variant from its name.

        Args:
            name: ``tied``, ``untied``, ``tied_in5``, ``tied_out0.2``, ``tied_in5_out0.2``, or a :class:`Variant`.

        Returns:
            The variant; factors not named are 1.
        """
        if isinstance(name, Variant):
            return name
        m = _VARIANT_RE.match(str(name))
        if not m:
            raise ValueError(
                f"variant: cannot parse {name!r}; allowed: 'tied', 'untied', 'tied_in<k>', 'tied_out<k>', "
                "'tied_in<k>_out<k>' with k a number > 0 (e.g. 'tied_in5', 'tied_in10_out0.1')")
        kind, fin, fout = m.groups()
        try:
            fi = check_factor("variant input factor", float(fin)) if fin is not None else 1.0
            fo = check_factor("variant output factor", float(fout)) if fout is not None else 1.0
        except ValueError as e:
            raise ValueError(f"variant: {name!r} has a bad factor ({e})") from None
        if kind == "untied" and (fin is not None or fout is not None):
            raise ValueError(f"variant: {name!r} asks for gradient scaling on an untied model; scaling is defined "
                             "for tied models only (use 'tied_in<k>')")
        return cls(kind == "tied", fi, fo)

    @property
    def name(self) -> str:
        """Canonical name, the inverse of :meth:`parse`."""
        return (("tied" if self.tied else "untied") + (f"_in{self.input_factor:g}" if self.input_factor != 1.0 else "")
                + (f"_out{self.output_factor:g}" if self.output_factor != 1.0 else ""))

    def __str__(self) -> str:
        return self.name


def model_key(variant: str | Variant, seed: int) -> str:
    """Folder name of one trained model.

    Args:
        variant: a variant or its name.
        seed: the training seed.

    Returns:
        The key, e.g. ``tied_in5-s0``; :func:`parse_key` reads it back.
    """
    return f"{Variant.parse(variant).name}-s{int(seed)}"


def parse_key(key: str) -> tuple[Variant, int]:
    """Inverse of :func:`model_key`."""
    m = _KEY_RE.match(key)
    if not m:
        raise ValueError(f"model key: cannot parse {key!r}; expected '<variant>-s<seed>' such as 'tied-s0'")
    return Variant.parse(m["variant"]), int(m["seed"])


def step_of(path: str | Path) -> int | None:
    """The step a ``step-<N>`` folder (name or path) holds; None for any other name."""
    m = _STEP_RE.fullmatch(Path(path).name)
    return int(m.group(1)) if m else None
