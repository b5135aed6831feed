"""The notebooks' exercises: defined once in ``notebooks/exercises.toml``, rendered into each notebook's last cells.

Each exercise asks for a prediction, changes one thing with one command (``make exercise ID=<id>``, which runs a
``python -m tiebias study`` line into a fresh run folder), says what to look at, and hides an answer in a collapsible
block. The answer is a template whose numbers come from a class run and the exercise's own run
(:mod:`tiebias.teach.answers`, stored in ``notebooks/exercise_numbers.json``). Each notebook's coding exercise is
written in the notebook itself, under the heading (its checker: :mod:`tiebias.teach.coding`). Keeping the definitions in one file lets a test run every command
and check the notebooks show them as written.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiebias.config.paths import NOTEBOOKS, notebooks_dir
from tiebias.output.markup import md_fence
from tiebias.run.files import read_json, write_text_atomic
from tiebias.teach import answers

CELL_PREFIX = "exercise-"
"""Notebook cell ids of rendered exercise cells start with this (``exercise-01_train`` is the heading cell)."""
FIELDS = ("id", "notebook", "title", "predict", "set", "only", "look", "answer")


@dataclass(frozen=True)
class Exercise:
    """One exercise: where it appears, the change it makes (``--set`` and ``--only``), and its texts."""

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

    @property
    def make(self) -> str:
        """The command a student pastes: it needs no active environment (make uses ``.venv/bin/python``)."""
        return f"make exercise ID={self.id}"


def find(exercise_id: str, known: list[Exercise]) -> Exercise:
    """The exercise with this id; an unknown id is refused, naming the ones there are."""
    for e in known:
        if e.id == exercise_id.strip():
            return e
    raise ValueError(f"exercise: {exercise_id!r} is not an exercise id; there are {', '.join(e.id for e in known)}")


def default_path() -> Path:
    """``notebooks/exercises.toml`` in the checkout."""
    return notebooks_dir() / "exercises.toml"


def load(path: str | Path | None = None) -> tuple[dict[str, Any], list[Exercise]]:
    """The file's header (``profile``, ``intro``) and its exercises, checked; errors name the exercise and field."""
    data = tomllib.loads(Path(path or default_path()).read_text())
    header = {k: data.get(k) for k in ("profile", "intro")}
    if not isinstance(header["profile"], str) or not isinstance(header["intro"], str):
        raise ValueError("exercises: the file needs a 'profile' (the profile of the commands) and an 'intro' text")
    return header, [_parse(raw) for raw in data.get("exercise", [])]


def _parse(raw: dict[str, Any]) -> Exercise:
    """One ``[[exercise]]`` table as an Exercise, refusing missing fields, unknown notebooks and bad --set items."""
    name = raw.get("id", "?")
    missing = [f for f in FIELDS if f not in raw]
    if missing or set(raw) - set(FIELDS):
        raise ValueError(f"exercise {name}: fields {sorted(raw)}; needs exactly {list(FIELDS)}")
    for nb in [raw["notebook"], *raw["only"]]:
        if nb not in NOTEBOOKS:
            raise ValueError(f"exercise {name}: notebook {nb!r} is not one of {', '.join(NOTEBOOKS)}")
    bad = [s for s in raw["set"] if "=" not in s or " " in s]
    if bad or not raw["set"]:
        raise ValueError(f"exercise {name}: set {raw['set']!r}; needs one or more NAME=VALUE items without spaces")
    return Exercise(**{**raw, "set": tuple(raw["set"]), "only": tuple(raw["only"])})


def numbers_path() -> Path:
    """``notebooks/exercise_numbers.json``: the measured numbers the answers quote."""
    return notebooks_dir() / answers.NUMBERS_FILE


def load_numbers(path: str | Path | None = None) -> dict[str, Any]:
    """The stored numbers: ``base`` (the class run) and, per exercise id, ``ex`` (its own run); a damaged file is
    named, with what to do."""
    return read_json(Path(path or numbers_path()), "restore it with `git checkout notebooks/exercise_numbers.json`, or "
                     "measure it again with `python scripts/exercise_answers.py`")


def answer(ex: Exercise, numbers: dict[str, Any]) -> str:
    """The exercise's answer with its numbers filled in from the class run and the exercise's run."""
    if ex.id not in numbers["exercises"]:
        raise ValueError(f"exercise {ex.id}: no measured numbers in {answers.NUMBERS_FILE}; run "
                         "python scripts/exercise_answers.py")
    return answers.fill(ex.answer.strip(), numbers["base"], numbers["exercises"][ex.id]["ex"])


def markdown(ex: Exercise, profile: str, numbers: dict[str, Any]) -> str:
    """The markdown cell of one exercise: predict, the command, what to look at, the collapsible answer."""
    return (f"### Exercise {ex.id} · {ex.title}\n\n**Predict first.** {ex.predict.strip()}\n\n"
            f"**Change one thing.** In JupyterLab's terminal (File > New > Terminal; it opens at the repository "
            f"root) type\n\n{md_fence(ex.make, 'bash')}\n\nor, in a notebook cell, `!make -C .. exercise ID={ex.id}`. "
            f"It trains into a fresh run folder, `runs/ex-{ex.id}/`, so your run stays as it is, and prints the "
            f"command it runs: `{ex.command(profile)}`.\n\n**Look at** {ex.look.strip()}\n\n"
            f"<details><summary>Answer</summary>\n\n{answer(ex, numbers)}\n\n</details>")


def rendered(nb: dict[str, Any], name: str, path: str | Path | None = None,
             numbers: str | Path | None = None) -> list[dict[str, Any]]:
    """The notebook's cells with its exercises (always its last cells) rendered anew: a heading, the coding exercise's
    cells as the notebook holds them (they are written there), then one cell per what-if exercise."""
    header, exercises = load(path)
    measured = load_numbers(numbers)
    mine = [e for e in exercises if e.notebook == name]
    if not 2 <= len(mine) <= 3:
        raise ValueError(f"notebook {name}: {len(mine)} exercises in the file; each notebook has 2 or 3")
    texts = [(f"{CELL_PREFIX}{name}", f"## Exercises\n\n{header['intro'].strip()}")]
    texts += [(f"{CELL_PREFIX}{e.id}", markdown(e, header["profile"], measured)) for e in mine]
    md = [{"cell_type": "markdown", "id": cid, "metadata": {}, "source": text.splitlines(keepends=True)}
          for cid, text in texts]
    own = [c for c in nb["cells"] if not c["id"].startswith(CELL_PREFIX)]
    coding = [c for c in nb["cells"] if c["id"].startswith(f"{CELL_PREFIX}{name[:2]}-code-")]
    return own + md[:1] + coding + md[1:]


def sync(notebook_path: str | Path, path: str | Path | None = None) -> bool:
    """Write the notebook with its exercise cells rendered anew (:func:`rendered`); True if it changed."""
    nb_path = Path(notebook_path)
    nb = json.loads(nb_path.read_text())
    new = rendered(nb, nb_path.stem, path)
    if new == nb["cells"]:
        return False
    nb["cells"] = new
    write_text_atomic(nb_path, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True
