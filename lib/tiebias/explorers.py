"""The notebooks' interactive explorers: what a reader types becomes a message and a table, never a traceback.

Two explorers: nearest neighbours of a word in each embedding space (02_align) and the top next tokens by
layer for a prompt (03_lens). The logic is pure (:func:`resolve_token`, :func:`neighbour_view`,
:func:`prompt_view` return a :class:`View`); :func:`explorer` wraps any such function in a small
ipywidgets UI (a text box that updates on Enter, a message line and an output area).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from . import comparisons, embeddings
from .embeddings import Embeddings

EMPTY_WORD = "Type a word (e.g. king) or a token string (e.g. Ġking), then Enter."
EMPTY_PROMPT = "Type a prompt, then Enter, to see the top next tokens layer by layer."


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
    """One embedding matrix to search (``which`` of ``emb``) with the tokenizer of its vocabulary."""

    emb: Embeddings
    which: str
    tokenizer: Any
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """Check ``which`` and index the token strings once, for exact-token lookups."""
        self.emb.matrix(self.which)  # raises ValueError naming `which` unless 'input' or 'output'
        self.index = {t: i for i, t in enumerate(self.emb.tokens)}


def _encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (bos/eos) around it."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def resolve_token(text: str, space: Space) -> Resolved:
    """Map typed text onto a token of ``space``: a plain word, a word with its leading space, or a token string.

    A word is tokenized as it reads in running text (with a leading space) and as typed, whichever gives
    fewer pieces; text that is itself a token string (``Ġking``) is taken as that token when tokenizing it
    does not give a single token. The message says which token(s) it became and which one is shown.
    """
    if not isinstance(text, str) or not text.strip():
        return Resolved([], None, EMPTY_WORD)
    text = text.rstrip()  # a trailing space is a slip of the keyboard; a leading one means "as in running text"
    tok = space.tokenizer
    forms = [text] if text[0].isspace() else [" " + text, text]
    encoded = min((_encode(tok, f) for f in forms), key=len)  # stable: the leading-space form wins ties
    exact = space.index.get(text)
    if exact is not None and len(encoded) != 1:
        return Resolved([text], exact, f"{text!r} is a token: showing it")
    n = len(space.emb.tokens)
    unk = getattr(tok, "unk_token_id", None)
    literal_unk = text.strip() == getattr(tok, "unk_token", None)
    known = [i for i in encoded if 0 <= i < n and (i != unk or literal_unk)]
    pieces = [space.emb.tokens[i] if 0 <= i < n else str(getattr(tok, "unk_token", "?")) for i in encoded]
    if not encoded:
        return Resolved([], None, f"{text!r} gives no token in this vocabulary")
    if len(known) < len(encoded):
        return Resolved(pieces, None, f"{text!r} is not in this vocabulary (it became {pieces})")
    msg = f"{text!r} -> {pieces}: showing {pieces[0]!r}"
    if len(pieces) > 1:
        msg += f", the first of {len(pieces)} tokens (type another piece, e.g. {pieces[1]!r}, to see it)"
    return Resolved(pieces, encoded[0], msg)


def _check_k(k: Any) -> int:
    """``k`` must be a positive int."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k: must be an int >= 1, got {k!r}")
    return k


def neighbour_view(text: str, spaces: Mapping[str, Space], k: int = 10) -> View:
    """Nearest neighbours (cosine) of the typed word's token in every space, one column per space.

    Each space resolves the text with its own tokenizer, so a tied / untied pair with two vocabularies
    works; spaces whose token cannot be named are left out and the message says why.
    """
    _check_k(k)
    if not spaces:
        raise ValueError("spaces: give at least one embedding space to search")
    if not isinstance(text, str) or not text.strip():
        return View(EMPTY_WORD, None)
    resolved = {name: resolve_token(text, sp) for name, sp in spaces.items()}
    groups: dict[str, list[str]] = {}
    for name, r in resolved.items():
        groups.setdefault(r.message, []).append(name)
    if len(groups) == 1:
        message = next(iter(groups))
    else:
        message = " · ".join(f"{', '.join(names)}: {m}" for m, names in groups.items())
    cols = {}
    for name, r in resolved.items():
        if r.shown is None:
            continue
        sp = spaces[name]
        nb = comparisons.neighbour_table(sp.emb, sp.which, r.shown, min(k, len(sp.emb.tokens) - 1))
        cols[name] = pd.Series([f"{t!r} {c:.2f}" for t, c in zip(nb.token, nb.cosine, strict=True)],
                               index=pd.RangeIndex(1, len(nb) + 1, name="rank"))
    return View(message, pd.DataFrame(cols) if cols else None)


def _tokenizer(source: Any, label: str) -> Any:
    """A tokenizer object from a tokenizer, a model or tokenizer folder, or a hub id (as ``embeddings.extract`` finds it)."""
    if source is None:
        raise ValueError(f"{label}: give a tokenizer, a folder holding one, or a hub id; got None")
    if not isinstance(source, (str, Path)):
        if not hasattr(source, "convert_ids_to_tokens"):
            raise ValueError(f"{label}: expected a transformers tokenizer, a folder or a hub id, "
                             f"got {type(source).__name__}")
        return source
    path = Path(source).expanduser()
    if path.is_dir():
        return embeddings._resolve_tokenizer(None, path, None, None, str(source))
    return embeddings._resolve_tokenizer(None, None, str(source), None, str(source))


def neighbour_spaces(pair: Mapping[str, Embeddings], tied_tokenizer: Any,
                     untied_tokenizer: Any = None) -> dict[str, Space]:
    """The three spaces of 02's explorer (tied, untied input, untied output) of one tied / untied pair.

    ``untied_tokenizer`` defaults to the tied one (a run's models share one); give it when the untied
    model has its own vocabulary. Tokenizers may be objects, folders or hub ids.
    """
    missing = [k for k in ("tied", "untied") if k not in pair]
    if missing:
        raise ValueError(f"pair: needs 'tied' and 'untied' embeddings, missing {missing}; got {sorted(pair)}")
    tt = _tokenizer(tied_tokenizer, "tied_tokenizer")
    ut = tt if untied_tokenizer is None else _tokenizer(untied_tokenizer, "untied_tokenizer")
    return {"tied": Space(pair["tied"], "input", tt), "untied input": Space(pair["untied"], "input", ut),
            "untied output": Space(pair["untied"], "output", ut)}


def prompt_view(text: str, loaded: Mapping[str, tuple[Any, Any, Any]], k: int = 3) -> View:
    """Top-k next tokens by layer (tuned lens) after a prompt, one column per model of ``loaded``.

    ``loaded`` maps a label to ``(model, lens, tokenizer)``. An empty prompt, or one a model's tokenizer
    turns into no token, gives a message instead of an error.
    """
    from . import lens_eval

    _check_k(k)
    if not isinstance(text, str) or not text.strip():
        return View(EMPTY_PROMPT, None)
    cols, notes = {}, []
    for label, (model, lens, tok) in loaded.items():
        if not _encode(tok, text):
            notes.append(f"{label}: {text!r} gives no token in its vocabulary")
            continue
        try:
            t = lens_eval.top_tokens_by_layer(model, lens, tok, text, k=k)
        except ValueError as exc:  # the library's bad-input errors name the parameter; show them as text
            notes.append(f"{label}: {exc}")
            continue
        t = t[t.lens == "tuned"]
        cols[label] = {int(layer): "  ".join(f"{x!r} {p:.2f}" for x, p in zip(g.token, g.prob, strict=True))
                       for layer, g in t.groupby("layer")}
    message = f"top-{k} next tokens by layer after {text!r} (tuned lens)"
    if notes:
        message += "; " + "; ".join(notes)
    table = pd.DataFrame(cols).rename_axis("layer") if cols else None
    return View(message, table)


def explorer(view: Callable[[str], View], *, value: str = "", description: str = "",
             placeholder: str = "", width: str = "80%") -> Any:
    """A text box (updates on Enter), a message line and an output area showing ``view(text)``.

    Returns the ``ipywidgets.VBox``; its children are the box, the message (HTML) and the output.
    """
    import ipywidgets as widgets
    from IPython.display import display

    box = widgets.Text(value=value, description=description, placeholder=placeholder, continuous_update=False,
                       layout=widgets.Layout(width=width))
    msg = widgets.HTML()
    out = widgets.Output()

    def show(change: Any = None) -> None:
        """Recompute the view for the box's text and redraw the message and the table."""
        v = view(box.value)
        out.clear_output()
        if v.table is not None:
            with out:
                display(v.table)
        msg.value = f"<span class='tiebias-explorer-message'>{html.escape(v.message)}</span>"

    box.observe(show, names="value")
    show()
    ui = widgets.VBox([box, msg, out])
    ui.add_class("tiebias-explorer")
    return ui
