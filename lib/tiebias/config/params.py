"""The parameter vocabulary shared by profiles, notebooks, the command line and ``make``.

One vocabulary: a profile key, a notebook parameter, a ``--set`` name and a ``make`` variable are the
same name for the same thing. :data:`PARAMS` is the single definition of those names (type, default,
meaning, the notebooks that use each, the rule a value must follow); :func:`coerce` checks and types
one value. Profiles (:mod:`tiebias.config.profiles`), ``python -m tiebias profiles`` and the README table
are derived from it.

Where defaults live: a profile key marked :data:`REQUIRED` has no default but each profile's value; the
``default`` profile's values are also the defaults in code (``TrainConfig()``, ``lens.fit.train_lens``), read
from the file (:data:`tiebias.config.training.DEFAULT_PROFILE`); an optional key's default is its
``Param.default`` here.
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from tiebias.config.checks import is_int
from tiebias.config.choices import INGREDIENTS, LENS_PROTOCOLS, METHODS
from tiebias.config.choices import LENS_RECIPES as _RECIPES
from tiebias.config.corpus import BYTE_ALPHABET_SIZE, EMBEDDED_CORPUS, SPECIAL_TOKENS, looks_like_hub_name
from tiebias.config.paths import NOTEBOOKS, check_encodable
from tiebias.config.presets import FAMILIES, PRESETS
from tiebias.config.training import (
    DOSE_RESPONSE_FACTORS,
    SEED_LIMIT,
    TrainConfig,
    factors_problem,
    lr_problem,
)
from tiebias.config.variants import parse_variants

REQUIRED: Any = object()  # default of a profile key every profile must give
PATH_PARAMETERS = ("corpus", "tied_source", "untied_source")  # local paths or hub names
KINDS = ("int", "float", "bool", "str", "ints", "floats", "strs")
LENS_RECIPES: tuple[str, ...] = tuple(_RECIPES)  # the names of tiebias.config.choices.LENS_RECIPES


@dataclass(frozen=True)
class Param:
    """One name of the vocabulary: its type, default, meaning, where it goes and which notebooks use it."""

    name: str
    kind: str  # one of KINDS; "ints" etc. are lists
    help: str
    notebooks: tuple[str, ...]
    configures: str  # what the value reaches, e.g. "TrainConfig.steps in train()"
    default: Any = REQUIRED  # profile keys: REQUIRED or the value when a profile omits it; others: notebook default
    profile: bool = True  # False: a notebook parameter only, never a profile key
    optional: bool = False  # None is a valid value (e.g. tied_source: "use the run's models")
    check: Callable[[Any], str | None] | None = None  # extra rule: returns what is allowed when the value breaks it
    notebook_defaults: Mapping[str, Any] = field(default_factory=dict)  # a notebook whose default differs

    @property
    def required(self) -> bool:
        """A profile key every profile file must give."""
        return self.profile and self.default is REQUIRED

    def default_for(self, notebook: str) -> Any:
        """The value the notebook's parameters cell declares (None for profile keys: "from the profile")."""
        if self.profile or self.name in ("profile", "run_dir"):
            return None
        return self.notebook_defaults.get(notebook, self.default)

    def type_text(self) -> str:
        """The type in words, for listings and docs."""
        words = {"int": "int", "float": "number", "bool": "bool", "str": "text", "ints": "list of int",
                 "floats": "list of numbers", "strs": "list of text"}[self.kind]
        return words + (" or none" if self.optional else "")


# -- rules used by several keys ------------------------------------------------------------------
def _at_least(n: float) -> Callable[[Any], str | None]:
    """Every number (or every item of a list) must be >= n."""
    def rule(v: Any) -> str | None:
        """What is allowed, when a value is below n."""
        items = v if isinstance(v, list) else [v]
        return None if all(x >= n for x in items) else f"need {'values' if isinstance(v, list) else 'a value'} >= {n:g}"
    return rule


def _positive(v: Any) -> str | None:
    """Numbers (or every item of a list) must be finite and > 0."""
    items = v if isinstance(v, list) else [v]
    return None if all(math.isfinite(x) and x > 0 for x in items) else "need finite numbers > 0"


def _seed_list(v: list[int]) -> str | None:
    """Seeds: one or more distinct integers 0 <= seed < 2**32 (see :data:`tiebias.config.training.SEED_LIMIT`)."""
    if not v or any(not 0 <= x < SEED_LIMIT for x in v):
        return f"need one or more integers 0 <= seed < 2**32 ({SEED_LIMIT}), e.g. [0, 1, 2] or '0,1,2'"
    return None if len(set(v)) == len(v) else "a seed is repeated"


def _lr(v: float) -> str | None:
    """The schema's learning-rate check: :func:`tiebias.config.training.lr_problem`, the rule TrainConfig applies."""
    return lr_problem(v)


def _variants(v: list[str]) -> str | None:
    """Variants: one or more distinct names, as :func:`tiebias.config.variants.parse_variants` accepts them."""
    if not v:
        return "need one or more variants, e.g. ['tied', 'untied']"
    try:
        parse_variants(v)
    except ValueError as e:
        return str(e).removeprefix("variants: ").removeprefix("variant: ")
    return None


def _vocab(v: int) -> str | None:
    """A vocabulary size the byte-level BPE tokenizer can be trained to."""
    minimum = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
    return None if v >= minimum else f"byte-level BPE needs at least {minimum} ({BYTE_ALPHABET_SIZE} bytes + specials)"


def _corpus(v: str) -> str | None:
    """A corpus the loader can open: the embedded one, an existing path, or a hub name (checked before writing)."""
    if v.strip().lower() == EMBEDDED_CORPUS or Path(v).expanduser().exists() or looks_like_hub_name(v):
        return None
    return (f"need {EMBEDDED_CORPUS!r}, an existing file or folder, or a hub dataset name "
            "('name' or 'user/name', optionally ':config')")


def _choice(allowed: tuple[str, ...], empty_ok: bool = False) -> Callable[[Any], str | None]:
    """The value (or each list item) must be one of ``allowed``; lists must be non-empty and not repeat."""
    def rule(v: Any) -> str | None:
        """What is allowed, when a value is not one of the choices."""
        items = v if isinstance(v, list) else [v]
        shown = ", ".join(repr(a) for a in allowed) + (" or ''" if empty_ok else "")
        if isinstance(v, list) and not v:
            return f"need one or more of {shown}"
        if any(x not in allowed and not (empty_ok and x == "") for x in items):
            return f"allowed: {shown}"
        return None if len(set(items)) == len(items) else "a value is repeated"
    return rule


def _none_or(rule: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """An empty list, or a list ``rule`` accepts."""
    def check(v: Any) -> str | None:
        """What is allowed, when a non-empty value breaks ``rule``."""
        return None if v == [] else rule(v)
    return check


def _factors(v: list[float]) -> str | None:
    """Gradient factors of a dose-response (training.factors_problem, at least DOSE_RESPONSE_FACTORS)."""
    return factors_problem(v, DOSE_RESPONSE_FACTORS)


def _vocab_list(v: list[int]) -> str | None:
    """Every vocabulary size valid, none repeated."""
    for x in v:
        bad = _vocab(x)
        if bad:
            return bad
    return None if len(set(v)) == len(v) else "a size is repeated"


def _step_counts(v: list[int]) -> str | None:
    """Training lengths: integers >= 1, none repeated ([] = none)."""
    if any(x < 1 for x in v):
        return "need training lengths of one step or more (e.g. [1200, 4800]), or [] for none"
    return None if len(set(v)) == len(v) else "a length is repeated"


def _budgets(v: list[float]) -> str | None:
    """Lens budgets: one or more numbers > 0, strictly increasing."""
    if not v or _positive(v):
        return "need one or more finite numbers > 0"
    return None if all(a < b for a, b in itertools.pairwise(v)) else "need strictly increasing numbers (e.g. [1, 4, 16])"


def _steps(v: list[int]) -> str | None:
    """Checkpoint steps: integers >= 0 (0 = the initialisation), strictly increasing ([] = none)."""
    if any(x < 0 for x in v):
        return "need training steps >= 0 at which the run saved checkpoints (e.g. [128, 1024]), or [] for none"
    return None if all(a < b for a, b in itertools.pairwise(v)) else "need strictly increasing steps"


def _folds(v: int) -> str | None:
    """Held-out folds: 0 (in-sample) or k >= 2."""
    return None if v == 0 or v >= 2 else "need 0 (in-sample only) or an integer >= 2 (k-fold)"


def _non_empty(v: str) -> str | None:
    """Text with something in it."""
    return None if v.strip() else "need a non-empty text"


_TRAIN = ("01_train", "03_lens", "04_ablate")  # notebooks that train (03: the second depth) and need the recipe


def _train(name: str, kind: str, help: str, check: Callable[[Any], str | None] | None) -> Param:
    """A TrainConfig field: used by every notebook that trains, and reaching train() through train_config()."""
    return Param(name, kind, help, _TRAIN, f"TrainConfig.{name} in train()", check=check)


PARAM_LIST: tuple[Param, ...] = (
    # -- data -------------------------------------------------------------------------------------
    Param("corpus", "str", "'shakespeare' (embedded), a local .txt/.jsonl/.parquet file or folder, or a hub dataset",
          ("01_train", "03_lens", "04_ablate"), "Run.prepare(corpus=): the run's data", check=_corpus),
    Param("vocab_size", "int", "byte-level BPE vocabulary size", ("01_train", "04_ablate"),
          "Run.prepare(vocab_size=): the run's tokenizer", check=_vocab),
    # -- training (TrainConfig) ---------------------------------------------------------------------
    _train("preset", "str", "model shape (tiebias.config.presets.PRESETS)", _choice(tuple(PRESETS))),
    _train("family", "str", "llama (OLMo-like) or neox (Pythia-like)", _choice(FAMILIES)),
    _train("steps", "int", "optimiser steps per model", _at_least(1)),
    _train("batch_size", "int", "sequences per step", _at_least(1)),
    _train("seq_len", "int", "tokens per sequence", _at_least(2)),
    _train("lr", "float", "peak learning rate (AdamW, warmup then cosine), at most 1", _lr),
    _train("warmup_steps", "int", "linear warmup steps (fewer than steps)", _at_least(0)),
    _train("eval_every", "int", "validation loss every N steps", _at_least(1)),
    _train("eval_tokens", "int", "validation tokens per evaluation", _at_least(1)),
    _train("checkpoint_every", "int", "regular checkpoints every N steps (log-spaced ones are always written)",
           _at_least(1)),
    Param("seeds", "ints", "seeds of the study: one model per variant and seed (02: the seeds compared)",
          ("01_train", "02_align", "03_lens"), "01: models trained; 02: pairs compared; 03: lenses trained",
          check=_seed_list),
    Param("variants", "strs", "model variants: tied, untied, tied_in<k>, tied_out<k>, tied_in<k>_out<k>",
          ("01_train", "03_lens"), "01: models trained; 03: models given a lens", check=_variants),
    # -- 02_align ---------------------------------------------------------------------------------
    Param("heldout_folds", "int", "k-fold held-out alignment maps (0 = in-sample only, as in the paper)",
          ("02_align",), "align.comparisons.table1(heldout_folds=)", check=_folds),
    Param("knn_k", "int", "neighbours for the KNN@k overlap", ("02_align",), "align.comparisons.table1(knn_k=)",
          check=_at_least(1)),
    # -- 03_lens ----------------------------------------------------------------------------------
    Param("lens_steps", "int", "tuned-lens training steps", ("03_lens", "04_ablate"), "config.lens.LensSettings(steps=)", check=_at_least(1)),
    Param("lens_tokens_per_step", "int", "tuned-lens tokens per step", ("03_lens", "04_ablate"), "config.lens.LensSettings(tokens_per_step=)",
          check=_at_least(1)),
    Param("lens_depth_presets", "strs", "other model depths for 03_lens, same width ([] = off), e.g. "
          "['small-deep', 'small-16']", ("03_lens",), "train.train_depth_models(preset=)", default=[],
          check=_none_or(_choice(tuple(PRESETS)))),
    Param("lens_eval_tokens", "int", "lens evaluation tokens (test split)", ("03_lens", "04_ablate"), "config.lens.LensSettings(eval_tokens=)",
          check=_at_least(1)),
    Param("lens_budgets", "ints", "lens-budget ladder: multiples of lens_steps, strictly increasing; the last carries "
          "the claim-3 verdict", ("03_lens",), "03 lens-budget ladder (config.lens.LensSettings(budgets=))", default=[1], check=_budgets),
    Param("lens_recipes", "strs", f"lens training recipes, from {', '.join(LENS_RECIPES)}", ("03_lens", "04_ablate"),
          "03 lens recipe comparison (config.lens.LensSettings(recipes=))", default=["cpu"], check=_choice(LENS_RECIPES)),
    Param("lens_protocols", "strs", f"readings of every trained lens, from {', '.join(LENS_PROTOCOLS)} (the "
          "tuned-lens package's, the paper's code's); the first carries claim 3's headline verdict", ("03_lens",),
          "03 lens evaluation (config.lens.LensSettings(protocols=))", default=["package", "reference"],
          check=_choice(LENS_PROTOCOLS)),
    Param("lens_checkpoints", "ints", "training steps whose checkpoints also get a lens ([] = final models only)",
          ("03_lens",), "03 lens over training (lens.ladder.train_checkpoint_lens_ladders)", default=[], check=_steps),
    # -- 04_ablate --------------------------------------------------------------------------------
    Param("ablate_factors", "floats", "input-gradient factors k (tied_in<k>), 0.001 to 1000; 1 is the plain tied model",
          ("04_ablate",), "ablate.sweep.sweep_variants(factors)", check=_factors),
    Param("ablate_seeds", "ints", "seeds of the ablation sweep", ("04_ablate",), "ablate.sweep.run_sweep(seeds)",
          check=_seed_list),
    Param("ablate_ingredients", "strs", "claim 4's ingredients: the k = 1 and k = 5 tied models retrained with one "
          f"change of recipe each, from {', '.join(INGREDIENTS)} ([] = off; needs 5 in ablate_factors)", ("04_ablate",),
          "ablate.ingredients.train_ingredients(names)", default=[], check=_none_or(_choice(tuple(INGREDIENTS)))),
    Param("scale_vocab_sizes", "ints", "scale axis: other vocabulary sizes at the run's preset ([] = off)",
          ("04_ablate",), "ablate.scale.points(vocab_sizes=)", default=[], check=_vocab_list),
    Param("scale_presets", "strs", "scale axis: other presets (widths) at the run's vocabulary ([] = off), e.g. "
          "['small-w64', 'small-w256']", ("04_ablate",), "ablate.scale.points(presets=)", default=[],
          check=_none_or(_choice(tuple(PRESETS)))),
    Param("scale_steps", "ints", "scale axis: other training lengths (steps) at the run's vocabulary and preset, the "
          "same warmup ([] = off)", ("04_ablate",), "ablate.scale.points(step_counts=)", default=[],
          check=_step_counts),
    Param("ablate_budget_minutes", "float", "warn before starting a sweep estimated to take longer",
          ("04_ablate",), "ablate.sweep.plan(budget_minutes=)", check=_positive),
    # -- notebook parameters that are not profile keys ----------------------------------------------
    Param("profile", "str", "profile name or path to a .toml file (default: $TIEBIAS_PROFILE, else 'default' on the "
          "command line and 'class' in a notebook opened on its own)",
          NOTEBOOKS, "config.profiles.resolve", default="default", profile=False, check=_non_empty),
    Param("run_dir", "str", "run folder (default: $TIEBIAS_RUN_DIR, else runs/<profile>)", NOTEBOOKS,
          "config.profiles.resolve", default=None, profile=False, optional=True),
    Param("overwrite", "bool", "retrain models whose folder was made with a different config", ("01_train", "04_ablate"),
          "train.train(overwrite=)", default=False, profile=False),
    Param("methods", "strs", f"alignment methods, from {', '.join(METHODS)}", ("02_align", "04_ablate"),
          "align.comparisons.table1 / ablate.sweep.alignment_table(methods=)", default=list(METHODS), profile=False,
          check=_choice(METHODS), notebook_defaults={"04_ablate": ["orthogonal", "linear"]}),
    Param("tied_source", "str", "a tied HF causal LM (folder or hub id) instead of the run's models",
          ("02_align", "03_lens"), "align.comparisons.load_sources / models.sources.load_models", default=None, profile=False, optional=True,
          check=_non_empty),
    Param("untied_source", "str", "its untied counterpart", ("02_align", "03_lens"),
          "align.comparisons.load_sources / models.sources.load_models", default=None, profile=False, optional=True, check=_non_empty),
    Param("prompt", "str", "prompt for the lens trajectory and the explorer", ("03_lens",), "lens.evaluate.trajectory(prompt)",
          default="Friends, Romans, countrymen, lend me your", profile=False, check=_non_empty),
    Param("inverse_output", "bool", "also multiply the output path by 1/k", ("04_ablate",),
          "ablate.sweep.sweep_variants(inverse_output=)", default=False, profile=False),
)
PARAMS: dict[str, Param] = {p.name: p for p in PARAM_LIST}
PROFILE_KEYS: tuple[str, ...] = tuple(p.name for p in PARAM_LIST if p.profile)
TRAIN_KEYS: tuple[str, ...] = tuple(f.name for f in fields(TrainConfig) if f.name in PARAMS)


def notebook_parameters(notebook: str) -> list[str]:
    """Names a notebook's parameters cell declares, in vocabulary order.

    Args:
        notebook: a kit notebook's name without extension (``"03_lens"``), one of
            :data:`tiebias.config.paths.NOTEBOOKS`, else ValueError.

    Returns:
        The parameter names, in the order of :data:`PARAM_LIST`.
    """
    if notebook not in NOTEBOOKS:
        raise ValueError(f"notebook: unknown value {notebook!r}; allowed: {', '.join(NOTEBOOKS)}")
    return [p.name for p in PARAM_LIST if notebook in p.notebooks]


def unknown_name(name: str, allowed: list[str] | tuple[str, ...], what: str) -> ValueError:
    """An error for a name outside the vocabulary, with the closest allowed name when there is one."""
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValueError(f"{name}: {what}{hint}; allowed: {', '.join(allowed)}")


def coerce(name: str, value: Any) -> Any:
    """Check one value against the vocabulary and return it typed (text from the command line is parsed)."""
    if name not in PARAMS:
        raise unknown_name(name, list(PARAMS), "not a parameter")
    p = PARAMS[name]
    if value is None or (p.optional and isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if p.optional:
            return None
        raise ValueError(f"{name}: None is not allowed; need a value ({p.type_text()})")
    out = _typed(p, value)
    if name in PATH_PARAMETERS:
        check_encodable(name, out)
    if p.check is not None and (why := p.check(out)):
        raise ValueError(f"{name}: {value!r} is not allowed; {why}")
    return out


def _typed(p: Param, value: Any) -> Any:
    """The value converted to the parameter's kind, or a ValueError naming the parameter and the value."""
    article = "an" if p.type_text()[0] in "aeiou" else "a"
    bad = ValueError(f"{p.name}: {value!r} is not {article} {p.type_text()}" + {
        "ints": " (e.g. [0, 1, 2] or '0,1,2')", "floats": " (e.g. [1, 5] or '1,5')",
        "strs": " (e.g. ['a', 'b'] or 'a,b')", "bool": " (true or false)"}.get(p.kind, ""))
    if p.kind in ("ints", "floats", "strs"):
        if isinstance(value, str):
            text = value.strip().removeprefix("[").removesuffix("]")
            items: list[Any] = [v.strip().strip("'\"") for v in text.split(",") if v.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            items = [value]
        return [_scalar(p.kind[:-1], x, bad) for x in items]
    return _scalar(p.kind, value, bad)


def _scalar(kind: str, x: Any, bad: ValueError) -> Any:
    """One scalar of ``kind`` (int, float, bool, str) from a typed value or from text."""
    if kind == "bool":
        if isinstance(x, bool):
            return x
        if isinstance(x, str) and x.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
            return x.strip().lower() in ("true", "yes", "1")
        if isinstance(x, int) and x in (0, 1):
            return bool(x)
        raise bad
    if kind == "str":
        if isinstance(x, (str, os.PathLike)):
            return os.fspath(x)
        raise bad
    if isinstance(x, bool):
        raise bad
    if isinstance(x, str):
        try:
            x = float(x) if kind == "float" else int(x.strip())
        except ValueError:
            raise bad from None
    if kind == "int":
        if isinstance(x, float) and x.is_integer():
            x = int(x)
        if not is_int(x):
            raise bad
        return x
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        raise bad
    return float(x)
