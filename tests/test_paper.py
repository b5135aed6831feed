"""The paper's numbers (tiebias.paper): each quantity held once, each value with its source."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tiebias import paper

_CITES = re.compile(r"the paper's (Table|Figure) \d|\b[\w/.-]+\.(py|csv|md|yaml|png)\b")
"""A source names a table or figure of the paper, or a file of its reference repository."""


def _numbers() -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every value held in a top-level dict of tiebias.paper, walked here independently of the report's walker."""
    def walk(path: tuple[str, ...], x: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
        if isinstance(x, dict):
            for k, v in x.items():
                yield from walk((*path, str(k)), v)
        elif not isinstance(x, str):
            yield path, x

    for name, value in vars(paper).items():
        if name.isupper() and isinstance(value, dict) and name != "SOURCES":
            yield from walk((name,), value)


def _source(key: tuple[str, ...]) -> str:
    """The SOURCES entry of the longest prefix of ``key`` (KeyError when none covers it)."""
    return next(paper.SOURCES[k] for n in range(len(key), 0, -1) if (k := "/".join(key[:n])) in paper.SOURCES)


def test_every_value_is_one_number_with_its_source() -> None:
    for key, value in _numbers():
        assert isinstance(value, (int, float)) and not isinstance(value, bool), (key, value)  # no range, no midpoint
        assert _CITES.search(_source(key)), (key, _source(key))
    held = {"/".join(k[:n]) for k, _ in _numbers() for n in range(1, len(k) + 1)}
    assert set(paper.SOURCES) <= held, sorted(set(paper.SOURCES) - held)  # no source for a number no longer held


def test_no_quantity_is_held_twice() -> None:
    """Each model pair's tuned-lens KL at a layer is held under one key (OLMo-1B's layer 0 was held twice: a
    midpoint of 8.9-9.2 and the plotted 8.86); the side-by-side view holds no copy."""
    kl = [(k[0], k) for k, _ in _numbers() if "KL_BITS" in k[0]]
    pairs = {"FIG2_OLMO_KL_BITS": "OLMo-1B", "FIG6_INPUT_LAYER_KL_BITS": "GPT-Neo / Pythia",
             "FIG7_INPUT_LAYER_KL_BITS": "Qwen3"}
    assert {name for name, _ in kl} == set(pairs), "a tuned-lens KL held outside the one dict of its model pair"
    ids = [(pairs[name], k[1] if name == "FIG2_OLMO_KL_BITS" else "0", k[-1]) for name, k in kl]
    assert len(ids) == len(set(ids))
    view = paper.FIG2_INPUT_LAYER_KL_BITS
    assert not isinstance(view, dict) and view["OLMo-1B"] is paper.FIG2_OLMO_KL_BITS[0]
    values = [(k, v) for k, v in _numbers()]
    assert len({k for k, _ in values}) == len(values)
    for inc in paper.INCONSISTENCIES:  # a stated value set beside the one held, not a second copy of it
        assert tuple(str(inc["held"]).split("/")) in dict(values) and _CITES.search(str(inc["where"]))


def test_transcriptions_follow_the_papers_tables_and_the_reference_scripts() -> None:
    """The values the reference repository prints as the paper's (reproduce_table6.py, reproduce_table5.py)."""
    assert paper.TABLE6_STEP1K[2.0]["vs untied input"] == 0.173
    assert paper.TABLE5["Qwen3"]["tied vs untied output"] == 0.710
    assert "reproduce_table6.py" in _source(("TABLE6_STEP1K", "2.0", "vs untied input"))
    assert "831b708" in _source(("FIG4_OUTPUT_SHARE", "reproduction_log_mean"))
    assert "rolling mean" in _source(("FIG4_OUTPUT_SHARE", "reproduction_log_mean"))
