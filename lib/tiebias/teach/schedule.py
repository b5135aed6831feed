"""The 90-minute lesson's minute marks, checked against each notebook's measured run time: a notebook runs while the
previous one is discussed and must have finished when the block that needs it begins."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiebias.config.paths import notebooks_dir

LESSON_MINUTES = 90
MARGIN = 1.0  # the run times the blocks allow, as a multiple of the measured ones (a shared, loaded 2-core machine)
MIN_WRAP = 5
START_MINUTES = 1  # opening a notebook and choosing Run All
TIMING_FILE = notebooks_dir() / "class_timing.json"  # what scripts/time_class.py measured


@dataclass(frozen=True)
class Block:
    """A block's ``minutes`` (None: what is left), the notebook it ``starts``, the one it ``needs`` finished."""

    key: str
    minutes: int | None
    starts: str | None = None
    needs: str | None = None
    exercise: bool = False


BLOCKS = (
    Block("start", 5, starts="01_train"),  # make lab, open 01, Run All; read the question aloud
    Block("idea", 10),  # the idea on the board while 01 trains
    Block("run02", 1, starts="02_align", needs="01_train"),
    Block("discuss01", 12),  # while 02 runs
    Block("run03", 1, starts="03_lens", needs="02_align"),
    Block("discuss02", 12),  # while 03 runs
    Block("run04", 1, starts="04_ablate", needs="03_lens"),
    Block("discuss03", 14),  # while 04 runs
    Block("discuss04", 11, needs="04_ablate"),
    Block("code", 15, exercise=True),  # coding exercise 01-code, in pairs
    Block("wrap", None),
)
CODE_MARKS = (("read", 3), ("write", 9), ("check", 3))  # the coding exercise's marks


def _windows() -> dict[str, tuple[int, int]]:
    """Per notebook: the minute it starts running and the minute it must have finished."""
    starts, ends, t = {}, {}, 0
    for b in BLOCKS:
        if b.needs:
            ends[b.needs] = t
        if b.starts:
            starts[b.starts] = t + START_MINUTES
        t += b.minutes or 0
    return {nb: (starts[nb], ends[nb]) for nb in starts}


def check(seconds: Mapping[str, float], slowdown: float = MARGIN) -> list[str]:
    """One line per notebook that would still run when the block needing it begins, ``slowdown`` times slower."""
    missing = [nb for nb in _windows() if not (nb in seconds and seconds[nb] >= 0)]
    if missing:
        raise ValueError(f"seconds: no run time for {', '.join(missing)}; measure the class run first")
    out = []
    for nb, (start, end) in _windows().items():
        took = seconds[nb] * slowdown / 60
        if start + took > end:
            out.append(f"{nb} would take about {took:.1f} min, but the plan gives it minutes {start}-{end}")
    return out


def layout(seconds: Mapping[str, float], lesson: int = LESSON_MINUTES) -> dict[str, str]:
    """The plan's fields (``{key}``, ``{key}_at``, ``code_<mark>``, ``wrap_minutes``, ``window_<notebook>``); a
    ValueError when a notebook would be late or the wrap-up too short."""
    late = check(seconds)
    if late:
        raise ValueError("seconds: " + "; ".join(late) + "; lengthen the discussion before it")
    used = sum(b.minutes or 0 for b in BLOCKS)
    wrap = lesson - used
    if wrap < MIN_WRAP:
        raise ValueError(f"seconds: the blocks take {used} of {lesson} minutes, leaving {wrap} for the wrap-up (at "
                         f"least {MIN_WRAP}); shorten a discussion")
    out: dict[str, str] = {"wrap_minutes": str(wrap)}
    out.update({f"window_{nb}": str(end - start) for nb, (start, end) in _windows().items()})
    t = 0
    for b in BLOCKS:
        n = b.minutes if b.minutes is not None else wrap
        out[b.key], out[f"{b.key}_at"] = f"{t}-{t + n}", str(t)
        if b.exercise:
            m = t
            for mark, length in CODE_MARKS:
                out[f"code_{mark}"] = f"{m}-{m + length}"
                m += length
        t += n
    return out


def load_timing(path: Path = TIMING_FILE) -> dict[str, Any]:
    """The stored measurement; a missing or damaged file named with what to do."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        float(data["plumbing_seconds"]), data["class_seconds"]["01_train"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a timing measurement ({type(e).__name__}: {e}); run python "
                         "scripts/time_class.py (or git checkout the file)") from None
    return data


def _size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def timing_fields(data: dict[str, Any]) -> dict[str, str]:
    """The plan's ``{timing.NAME}`` fields."""
    load, dl = data["load_average_1min"], data.get("download")
    return {"machine": f"{data['cpu']} ({data['cores']} cores, 1-minute load average {load['before']:g} before and "
                       f"{load['after']:g} after: a shared machine; a quiet laptop is faster)",
            "download": (f"{_size(dl['bytes'])} ({dl['files']} files, torch as {dl['torch_wheel']})" if dl
                         else "(not measured)"),
            "venv": _size(data["venv_bytes"]), "plumbing_seconds": f"{data['plumbing_seconds']:.0f}"}
