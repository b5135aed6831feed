"""The notebooks' explorers: a word's nearest neighbours in each embedding space (02), the top next tokens by layer
after a prompt (03). Typed text gives a one-line message and a table, never a traceback."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from tiebias.align import comparisons
from tiebias.align.embeddings import Embeddings
from tiebias.align.tokenizers import load_tokenizer
from tiebias.config.checks import is_int
from tiebias.output import token_text
from tiebias.output.token_text import show

EMPTY_WORD = "Type a word (e.g. king) or a token as the tables show it (e.g. ␣king), then Enter."
EMPTY_PROMPT = "Type a prompt, then Enter, to see the top next tokens layer by layer."
MAX_WORD_CHARS = 40  # a word or a token; longer input is cut (a pasted paragraph would list hundreds of pieces)
MAX_PROMPT_CHARS = 300  # about 100 tokens, within every profile's training sequence length
MAX_PIECES = 6  # pieces listed in a message; the rest are counted
QUOTE_CHARS = 40  # typed text echoed in a message at most this long


class View(NamedTuple):
    """What an explorer shows: a one-line message and a table (None when there is nothing to tabulate)."""

    message: str
    table: pd.DataFrame | None


class Resolved(NamedTuple):
    """How typed text maps onto one vocabulary: the pieces it became and the token id shown (None: none)."""

    pieces: list[str]
    shown: int | None
    message: str


@dataclass(eq=False)
class Space:
    """One embedding matrix to search (``which``: "input" or "output" of ``emb``) with its vocabulary's tokenizer."""

    emb: Embeddings
    which: str
    tokenizer: Any
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.emb.matrix(self.which)  # raises ValueError naming `which` unless 'input' or 'output'
        self.index = {t: i for i, t in enumerate(self.emb.tokens)}


def _clean(text: Any, limit: int) -> tuple[str, str]:
    """``text`` stripped and cut to ``limit`` characters, and a note saying what was cut ("" when nothing was)."""
    text = text.strip() if isinstance(text, str) else ""
    if len(text) <= limit:
        return text, ""
    return text[:limit].rstrip(), f"input cut to its first {limit} characters (it had {len(text):,})"


def _quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """Typed text for a message: quoted, shortened with "…" in the middle when longer than ``limit``."""
    return repr(text[: limit // 2] + "…" + text[-(limit // 2 - 1):] if len(text) > limit else text)


def fixed(x: float, digits: int = 2) -> str:
    """``x`` with ``digits`` decimals and no negative zero (-0.001 prints 0.00, not -0.00)."""
    return f"{round(float(x), digits) + 0.0:.{digits}f}"


def _check_k(k: Any) -> None:
    if not is_int(k) or k < 1:
        raise ValueError(f"k: must be an int >= 1, got {k!r}")


def resolve_token(text: str, space: Space) -> Resolved:
    """Typed text as a token of ``space``: a word, tokenized with a leading space or as typed (fewer pieces wins),
    else a token string as shown or stored (``␣king``, ``Ġking``); the message says what it became."""
    text, cut = _clean(text, MAX_WORD_CHARS)
    if not text:
        return Resolved([], None, EMPTY_WORD)
    tok, n, note = space.tokenizer, len(space.emb.tokens), f" ({cut})" if cut else ""
    encoded = min((list(tok.encode(f, add_special_tokens=False)) for f in (" " + text, text)), key=len)  # ties: " "
    exact = next((space.index[t] for t in token_text.spellings(text) if t in space.index), None)
    if exact is not None and len(encoded) != 1:
        return Resolved([space.emb.tokens[exact]], exact, f"{_quote(text)} is a token: showing "
                        f"{show(space.emb.tokens[exact])}{note}")
    unk, literal_unk = getattr(tok, "unk_token_id", None), text == getattr(tok, "unk_token", None)
    pieces = [space.emb.tokens[i] if 0 <= i < n else str(getattr(tok, "unk_token", "?")) for i in encoded]
    listed = " + ".join(show(p) for p in pieces[:MAX_PIECES])
    listed += f" + … ({len(pieces) - MAX_PIECES} more)" if len(pieces) > MAX_PIECES else ""
    if not encoded:
        return Resolved([], None, f"{_quote(text)} gives no token in this vocabulary{note}")
    if any(not 0 <= i < n or (i == unk and not literal_unk) for i in encoded):
        return Resolved(pieces, None, f"{_quote(text)} is not in this vocabulary (it became {listed}){note}")
    msg = f"{_quote(text)} -> {listed}: showing {show(pieces[0])}"
    if len(pieces) > 1:
        msg += f", the first of {len(pieces)} tokens (type another piece, e.g. {show(pieces[1])}, to see it)"
    return Resolved(pieces, encoded[0], msg + note)


def neighbour_view(text: str, spaces: Mapping[str, Space], k: int = 10) -> View:
    """The ``k`` nearest neighbours (cosine) of the typed word's token in each space, a column per space; the message
    groups spaces that agree.

    Args: text: the typed word; spaces: name -> space (:func:`neighbour_spaces`); k: neighbours per space.
    Returns: a :class:`View` (its table None when no space names the token)."""
    _check_k(k)
    if not spaces:
        raise ValueError("spaces: give at least one embedding space to search")
    if not isinstance(text, str) or not text.strip():
        return View(EMPTY_WORD, None)
    resolved = {name: resolve_token(text, sp) for name, sp in spaces.items()}
    groups: dict[str, list[str]] = {}
    for name, r in resolved.items():
        groups.setdefault(r.message, []).append(name)
    message = next(iter(groups)) if len(groups) == 1 else " · ".join(f"{', '.join(names)}: {m}"
                                                                       for m, names in groups.items())
    cols = {}
    for name, r in resolved.items():
        if r.shown is not None:
            sp = spaces[name]
            nb = comparisons.neighbour_table(sp.emb, sp.which, r.shown, min(k, len(sp.emb.tokens) - 1))
            cols[name] = pd.Series([f"{show(t)} {fixed(c)}" for t, c in zip(nb.token, nb.cosine, strict=True)],
                                   index=pd.RangeIndex(1, len(nb) + 1, name="rank"))
    return View(message, pd.DataFrame(cols) if cols else None)


def neighbour_spaces(pair: Mapping[str, Embeddings], tied_tokenizer: Any,
                     untied_tokenizer: Any = None) -> dict[str, Space]:
    """02's three spaces of a ``{"tied", "untied"}`` embeddings pair: tied, untied input, untied output.

    Args: pair: ``{"tied", "untied"}`` -> embeddings; tied_tokenizer, untied_tokenizer: the models' tokenizers
        (objects, folders or hub ids; untied None: the tied one's).
    Returns: the spaces by name (``tied``, ``untied input``, ``untied output``)."""
    missing = [k for k in ("tied", "untied") if k not in pair]
    if missing:
        raise ValueError(f"pair: needs 'tied' and 'untied' embeddings, missing {missing}; got {sorted(pair)}")
    toks = []
    for label, source in (("tied_tokenizer", tied_tokenizer),
                          ("untied_tokenizer", tied_tokenizer if untied_tokenizer is None else untied_tokenizer)):
        source = load_tokenizer(source) if isinstance(source, (str, Path)) else source
        if not hasattr(source, "convert_ids_to_tokens"):
            raise ValueError(f"{label}: expected a transformers tokenizer, a folder or a hub id, got "
                             f"{type(source).__name__}")
        toks.append(source)
    tt, ut = toks
    return {"tied": Space(pair["tied"], "input", tt), "untied input": Space(pair["untied"], "input", ut),
            "untied output": Space(pair["untied"], "output", ut)}


def prompt_view(text: str, loaded: Mapping[str, tuple[Any, Any, Any]], k: int = 3) -> View:
    """Top-``k`` next tokens by layer (tuned lens) after the typed prompt, a column per model.

    Args: text: the typed prompt; loaded: label -> ``(model, lens, tokenizer)``; k: tokens per layer.
    Returns: a :class:`View` (its table None when no model gives a reading)."""
    from tiebias.lens import evaluate

    _check_k(k)
    text, cut = _clean(text, MAX_PROMPT_CHARS)
    if not text:
        return View(EMPTY_PROMPT, None)
    cols, notes = {}, [cut] if cut else []
    for label, (model, lens, tok) in loaded.items():
        if not tok.encode(text, add_special_tokens=False):
            notes.append(f"{label}: {_quote(text)} gives no token in its vocabulary")
            continue
        try:
            t = evaluate.top_tokens_by_layer(model, lens, tok, text, k=k)
        except ValueError as exc:  # the library's bad-input errors name the parameter; show them as text
            notes.append(f"{label}: {exc}")
            continue
        cols[label] = {int(layer): "  ".join(f"{show(x)} {fixed(p)}" for x, p in zip(g.token, g.prob, strict=True))
                       for layer, g in t[t.lens == "tuned"].groupby("layer")}
    message = f"top-{k} next tokens by layer after {_quote(text, 2 * QUOTE_CHARS)} (tuned lens)"
    message += "; " + "; ".join(notes) if notes else ""
    return View(message, pd.DataFrame(cols).rename_axis("layer") if cols else None)


def explorer(view: Callable[[str], View], *, value: str = "", description: str = "",
             placeholder: str = "", width: str = "80%") -> Any:
    """A text box (updates on Enter), a message line and ``view(text)``'s table; prints the token legend once.

    Args: view: text -> :class:`View`; value, description, placeholder, width: the text box's settings.
    Returns: the ``ipywidgets.VBox``."""
    import ipywidgets as widgets

    print(f"Tokens are shown with {token_text.LEGEND}.")
    box = widgets.Text(value=value, description=description, placeholder=placeholder, continuous_update=False,
                       layout=widgets.Layout(width=width))
    msg, out = widgets.HTML(), widgets.Output()

    def redraw(change: Any = None) -> None:
        v = view(box.value)
        # the table goes into the Output widget's state, not through a captured display() (``with out:``): for a
        # captured output an executed notebook's client (nbclient) sends the widget's state back to the kernel while
        # the cell runs, and a run of 03 was seen to wait forever for that cell's reply
        out.outputs = ()
        if v.table is not None:
            out.append_display_data(v.table)
        msg.value = f"<span class='tiebias-explorer-message'>{html.escape(v.message)}</span>"

    box.observe(redraw, names="value")
    redraw()
    ui = widgets.VBox([box, msg, out])
    ui.add_class("tiebias-explorer")
    return ui
