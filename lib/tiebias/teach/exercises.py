"""The what-if exercises of ``notebooks/exercises.toml``: each changes one thing with one study command
(``make exercise ID=<id>``); ``scripts/exercise_answers.py`` renders them into the notebooks."""

from __future__ import annotations

import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiebias.config.paths import NOTEBOOKS, notebooks_dir

FIELDS = ("id", "notebook", "title", "predict", "set", "only", "look", "answer")


@dataclass(frozen=True)
class Exercise:
    """One exercise: its notebook, its change (``--set`` and ``--only``), and its texts."""

    id: str
    notebook: str
    title: str
    predict: str
    set: tuple[str, ...]
    only: tuple[str, ...]
    look: str
    answer: str

    def argv(self, profile: str, run_dir: str | Path | None = None) -> list[str]:
        """Arguments after ``python -m tiebias``; the run folder defaults to ``runs/ex-<id>``."""
        args = ["study", "--profile", profile, "--run-dir", str(run_dir or f"runs/ex-{self.id}")]
        for s in self.set:
            args += ["--set", s]
        for name in self.only:
            args += ["--only", name]
        return args

    def command(self, profile: str) -> str:
        """The study command the exercise runs (what ``make exercise`` prints before it starts)."""
        return shlex.join(["python", "-m", "tiebias", *self.argv(profile)])


def find(exercise_id: str, known: list[Exercise]) -> Exercise:
    """The exercise with this id; an unknown id is refused, naming the ones there are."""
    for e in known:
        if e.id == exercise_id.strip():
            return e
    raise ValueError(f"exercise: {exercise_id!r} is not an exercise id; there are {', '.join(e.id for e in known)}")


def load(path: str | Path | None = None) -> tuple[dict[str, Any], list[Exercise]]:
    """The file's header (``profile``, ``intro``) and its exercises, checked; errors name the exercise and field."""
    data = tomllib.loads(Path(path or notebooks_dir() / "exercises.toml").read_text())
    header = {k: data.get(k) for k in ("profile", "intro")}
    if not isinstance(header["profile"], str) or not isinstance(header["intro"], str):
        raise ValueError("exercises: the file needs a 'profile' (the profile of the commands) and an 'intro' text")
    out = []
    for raw in data.get("exercise", []):
        name = raw.get("id", "?")
        if set(raw) != set(FIELDS):
            raise ValueError(f"exercise {name}: fields {sorted(raw)}; needs exactly {list(FIELDS)}")
        for nb in [raw["notebook"], *raw["only"]]:
            if nb not in NOTEBOOKS:
                raise ValueError(f"exercise {name}: notebook {nb!r} is not one of {', '.join(NOTEBOOKS)}")
        if not raw["set"] or any("=" not in s or " " in s for s in raw["set"]):
            raise ValueError(f"exercise {name}: set {raw['set']!r}; needs one or more NAME=VALUE items without spaces")
        out.append(Exercise(**{**raw, "set": tuple(raw["set"]), "only": tuple(raw["only"])}))
    return header, out
