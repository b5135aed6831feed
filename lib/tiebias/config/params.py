"""The parameter vocabulary: one typed model, :class:`Params`, whose names are the profile keys, notebook parameters,
``--set`` names and ``make`` variables; a field without a default is a key every profile gives."""

import difflib
import itertools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError, field_validator
from pydantic_core import PydanticUndefined

from tiebias.config import training
from tiebias.config.choices import INGREDIENTS, LENS_PROTOCOLS, LENS_RECIPES, METHODS
from tiebias.config.corpus import BYTE_ALPHABET_SIZE, EMBEDDED_CORPUS, SPECIAL_TOKENS, looks_like_hub_name
from tiebias.config.paths import NOTEBOOKS, check_encodable
from tiebias.config.presets import FAMILIES, PRESETS, get_preset
from tiebias.config.training import DEFAULT_PROFILE
from tiebias.config.variants import Variant

PATH_PARAMETERS = ("corpus", "tied_source", "untied_source")  # local paths or hub names
MIN_VOCAB = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS)
MAX_LR = 1.0  # Adam moves each weight by about lr per step and weights start near 0.02: above 1 training diverges
LR_RANGE = (f"need a finite number > 0 and at most {MAX_LR:g} (Adam moves each weight by about lr per step; the "
            "profiles use 1e-3 to 3e-3)")


def _rule(problem: Callable[[Any], str | None]) -> AfterValidator:
    """A rule on a typed value: ``problem`` says what is allowed when the value breaks it, else None."""
    def check(v: Any) -> Any:
        if why := problem(v):
            raise ValueError(why)
        return v
    return AfterValidator(check)


def _no_flag(v: Any) -> Any:
    if isinstance(v, bool):  # True would pass as 1
        raise ValueError("need a number, not true or false")
    return v


def _variants(v: list[str]) -> str | None:
    try:
        names = [Variant.parse(x).name for x in v]
    except ValueError as e:
        return str(e).removeprefix("variant: ")
    return None if len(set(names)) == len(names) else f"{names!r} repeats a variant"


def _corpus(v: str) -> str | None:
    """The embedded corpus, an existing path, or a hub name (loaded, and checked further, before writing)."""
    if v.strip().lower() == EMBEDDED_CORPUS or Path(v).expanduser().exists() or looks_like_hub_name(v):
        return None
    return (f"need {EMBEDDED_CORPUS!r}, an existing file or folder, or a hub dataset name "
            "('name' or 'user/name', optionally ':config')")


Int = Annotated[int, BeforeValidator(_no_flag)]
Num = Annotated[float, BeforeValidator(_no_flag)]
Preset = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
UNIQUE = _rule(lambda v: None if len(set(v)) == len(v) else "a value is repeated")
INCREASING = _rule(lambda v: None if all(a < b for a, b in itertools.pairwise(v)) else "need strictly increasing values")
SEEDS = _rule(lambda v: None if all(0 <= x < training.SEED_LIMIT for x in v) else
              f"need one or more integers 0 <= seed < 2**32 ({training.SEED_LIMIT}), e.g. [0, 1, 2] or '0,1,2'")
_TRAIN = "01 03 04"
_NONEMPTY = {"min_length": 1}


def _p(help: str, notebooks: str, default: Any = PydanticUndefined, *, profile: bool = True,
       defaults: Mapping[str, Any] | None = None, **rules: Any) -> Any:
    """One name: its meaning, the notebooks using it (``"01 03"``), its default, notebooks' own defaults, rules."""
    extra = {"notebooks": tuple(n for n in NOTEBOOKS if n[:2] in notebooks.split()), "profile": profile,
             "defaults": dict(defaults or {})}
    return Field(default, description=help, json_schema_extra=extra, **rules)  # type: ignore[arg-type]


class Params(BaseModel):
    """Every name of the vocabulary, its type and rule; text from the command line is parsed by one validator."""

    model_config = {"validate_assignment": True, "allow_inf_nan": False}

    corpus: Annotated[str, _rule(_corpus)] = _p(
        "'shakespeare' (embedded), a local .txt/.jsonl/.parquet file or folder, or a hub dataset", "01 03 04")
    vocab_size: Annotated[Int, _rule(lambda v: None if v >= MIN_VOCAB else f"byte-level BPE needs at least {MIN_VOCAB} "
                                     f"({BYTE_ALPHABET_SIZE} bytes + specials)")] = _p(
        "byte-level BPE vocabulary size", "01 04")
    preset: Preset = _p("model shape (tiebias.config.presets.PRESETS)", _TRAIN)
    family: Literal[FAMILIES] = _p(  # type: ignore[valid-type]
        "llama (OLMo-like) or neox (Pythia-like)", _TRAIN)
    steps: Int = _p("optimiser steps per model", _TRAIN, ge=1)
    batch_size: Int = _p("sequences per step", _TRAIN, ge=1)
    seq_len: Int = _p("tokens per sequence", _TRAIN, ge=2)
    lr: Annotated[Num, _rule(lambda v: None if 0 < v <= MAX_LR else LR_RANGE)] = _p("peak learning rate (AdamW, warmup then cosine), at most 1", _TRAIN)
    warmup_steps: Int = _p("linear warmup steps (fewer than steps)", _TRAIN, ge=0)
    eval_every: Int = _p("validation loss every N steps", _TRAIN, ge=1)
    eval_tokens: Int = _p("validation tokens per evaluation", _TRAIN, ge=1)
    checkpoint_every: Int = _p("regular checkpoints every N steps (log-spaced ones are always written)", _TRAIN, ge=1)
    seeds: Annotated[list[Int], SEEDS, UNIQUE] = _p(
        "seeds of the study: one model per variant and seed (02: the seeds compared)", "01 02 03", **_NONEMPTY)
    variants: Annotated[list[str], _rule(_variants)] = _p(
        "model variants: tied, untied, tied_in<k>, tied_out<k>, tied_in<k>_out<k>", "01 03", **_NONEMPTY)
    heldout_folds: Annotated[Int, _rule(lambda v: None if v == 0 or v >= 2 else
                                        "need 0 (in-sample only) or an integer >= 2 (k-fold)")] = _p(
        "k-fold held-out alignment maps (0 = in-sample only, as in the paper)", "02")
    knn_k: Int = _p("neighbours for the KNN@k overlap", "02", ge=1)
    lens_steps: Int = _p("tuned-lens training steps", "03 04", ge=1)
    lens_tokens_per_step: Int = _p("tuned-lens tokens per step", "03 04", ge=1)
    lens_depth_presets: Annotated[list[Preset], UNIQUE] = _p(
        "other model depths for 03_lens, same width ([] = off), e.g. ['small-deep', 'small-16']", "03", [])
    lens_eval_tokens: Int = _p("lens evaluation tokens (test split)", "03 04", ge=1)
    lens_budgets: Annotated[list[Annotated[Int, Field(gt=0)]], INCREASING] = _p(
        "lens-budget ladder: multiples of lens_steps, strictly increasing; the last carries the claim-3 verdict", "03", [1], **_NONEMPTY)
    lens_recipes: Annotated[list[Literal[tuple(LENS_RECIPES)]], UNIQUE] = _p(  # type: ignore[valid-type]
        f"lens training recipes, from {', '.join(LENS_RECIPES)}", "03 04", ["cpu"], **_NONEMPTY)
    lens_protocols: Annotated[list[Literal[LENS_PROTOCOLS]], UNIQUE] = _p(  # type: ignore[valid-type]
        f"readings of every trained lens, from {', '.join(LENS_PROTOCOLS)} (the tuned-lens package's, the paper's "
        "code's); the first carries claim 3's headline verdict", "03", ["package", "reference"], **_NONEMPTY)
    lens_checkpoints: Annotated[list[Annotated[Int, Field(ge=0)]], INCREASING] = _p(
        "training steps whose checkpoints also get a lens ([] = final models only)", "03", [])
    ablate_factors: Annotated[list[Num], _rule(lambda v: training.factors_problem(v, training.DOSE_RESPONSE_FACTORS))] = _p(
        "input-gradient factors k (tied_in<k>), 0.001 to 1000; 1 is the plain tied model", "04")
    ablate_seeds: Annotated[list[Int], SEEDS, UNIQUE] = _p("seeds of the ablation sweep", "04", **_NONEMPTY)
    ablate_ingredients: Annotated[list[Literal[tuple(INGREDIENTS)]], UNIQUE] = _p(  # type: ignore[valid-type]
        "claim 4's ingredients: the k = 1 and k = 5 tied models retrained with one change of recipe each, from "
        f"{', '.join(INGREDIENTS)} ([] = off; needs 5 in ablate_factors)", "04", [])
    scale_vocab_sizes: Annotated[list[Annotated[Int, Field(ge=MIN_VOCAB)]], UNIQUE] = _p(
        "scale axis: other vocabulary sizes at the run's preset ([] = off)", "04", [])
    scale_presets: Annotated[list[Preset], UNIQUE] = _p(
        "scale axis: other presets (widths) at the run's vocabulary ([] = off), e.g. ['small-w64', 'small-w256']",
        "04", [])
    scale_steps: Annotated[list[Annotated[Int, Field(ge=1)]], UNIQUE] = _p(
        "scale axis: other training lengths (steps) at the run's vocabulary and preset, the same warmup ([] = off)",
        "04", [])
    ablate_budget_minutes: Num = _p("warn before starting a sweep estimated to take longer", "04", gt=0)
    # -- notebook parameters, not profile keys
    profile: str = _p("profile name or path to a .toml file (default: $TIEBIAS_PROFILE, else 'default' on the "
                      "command line and 'class' in a notebook opened on its own)", "01 02 03 04", "default", profile=False,
                      pattern=r"\S")
    run_dir: str | None = _p("run folder (default: $TIEBIAS_RUN_DIR, else runs/<profile>)", "01 02 03 04", None,
                             profile=False)
    overwrite: bool = _p("retrain models whose folder was made with a different config", "01 04", False, profile=False)
    methods: Annotated[list[Literal[METHODS]], UNIQUE] = _p(  # type: ignore[valid-type]
        f"alignment methods, from {', '.join(METHODS)}", "02 04", list(METHODS), profile=False,
        defaults={"04_ablate": ["orthogonal", "linear"]}, **_NONEMPTY)
    tied_source: str | None = _p("a tied HF causal LM (folder or hub id) instead of the run's models", "02 03", None,
                                 profile=False, pattern=r"\S")
    untied_source: str | None = _p("its untied counterpart", "02 03", None, profile=False, pattern=r"\S")
    prompt: str = _p("prompt for the lens trajectory and the explorer", "03",
                     "Friends, Romans, countrymen, lend me your", profile=False, pattern=r"\S")
    inverse_output: bool = _p("also multiply the output path by 1/k", "04", False, profile=False)

    @field_validator("*", mode="before")
    @classmethod
    def _from_text(cls, v: Any, info: Any) -> Any:
        """Values as the command line gives them: ``none`` for an optional name, ``0,1,2`` or ``[0, 1]`` for a list."""
        ann = cls.model_fields[info.field_name].annotation
        v = os.fspath(v) if isinstance(v, os.PathLike) else v
        if isinstance(v, str) and type(None) in get_args(ann) and v.strip().lower() in ("none", "null"):
            return None
        if get_origin(ann) is not list or v is None:
            return v
        if isinstance(v, str):
            return [x.strip().strip("'\"") for x in v.strip().removeprefix("[").removesuffix("]").split(",") if x.strip()]
        return list(v) if isinstance(v, (list, tuple)) else [v]


@dataclass(frozen=True)
class Param:
    """One name as listings and callers read it, taken from :class:`Params`."""

    name: str
    type: str  # in words: "int", "list of text", "text or none", ...
    help: str
    notebooks: tuple[str, ...]
    required: bool  # a profile key every profile gives
    default: Any  # what a profile leaves out, or a notebook parameter's default
    profile: bool  # False: a notebook parameter only
    defaults: Mapping[str, Any]  # notebooks whose default differs

    def default_for(self, notebook: str) -> Any:
        """The value the notebook's parameters cell declares (None for profile keys: "from the profile")."""
        if self.profile or self.name in ("profile", "run_dir"):
            return None
        return self.defaults.get(notebook, self.default)


def _words(ann: Any) -> str:
    """A field's type in words, for listings and docs."""
    optional = type(None) in get_args(ann)
    t = next(a for a in get_args(ann) if a is not type(None)) if optional else ann
    inner = get_args(t)[0] if get_origin(t) is list else t
    inner = get_args(inner)[0] if get_origin(inner) is Annotated else inner
    word = "text" if get_origin(inner) is Literal else {int: "int", float: "number", bool: "bool", str: "text"}[inner]
    if get_origin(t) is list:
        word = "list of " + {"number": "numbers"}.get(word, word)
    return word + (" or none" if optional else "")


PARAMS: dict[str, Param] = {
    name: Param(name, _words(f.annotation), f.description or "", f.json_schema_extra["notebooks"],  # type: ignore[index]
                f.is_required(), None if f.is_required() else f.default, f.json_schema_extra["profile"],  # type: ignore[index]
                f.json_schema_extra["defaults"])  # type: ignore[index]
    for name, f in Params.model_fields.items()}
PROFILE_KEYS: tuple[str, ...] = tuple(k for k, p in PARAMS.items() if p.profile)


def notebook_parameters(notebook: str) -> list[str]:
    """Names a notebook's parameters cell declares.

    Args:
        notebook: a kit notebook's name, e.g. ``"03_lens"`` (else ValueError).

    Returns:
        The names, in vocabulary order.
    """
    if notebook not in NOTEBOOKS:
        raise ValueError(f"notebook: unknown value {notebook!r}; allowed: {', '.join(NOTEBOOKS)}")
    return [k for k, p in PARAMS.items() if notebook in p.notebooks]


def unknown_name(name: str, allowed: list[str] | tuple[str, ...], what: str) -> ValueError:
    """An error for a name outside the vocabulary, with the closest allowed name when there is one."""
    close = difflib.get_close_matches(name, allowed, n=1)
    return ValueError(f"{name}: {what}{f' (did you mean {close[0]!r}?)' if close else ''}; allowed: {', '.join(allowed)}")


_REWORDED = {"too_short": "need one or more values", "string_pattern_mismatch": "need a non-empty text"}


def coerce(name: str, value: Any, strict: bool = False) -> Any:
    """One value checked against :class:`Params` and typed (``strict``: no text or float for an int); a ValueError
    names the parameter, the value and the rule."""
    if name not in PARAMS:
        raise unknown_name(name, list(PARAMS), "not a parameter")
    try:
        model = Params.__pydantic_validator__.validate_assignment(Params.model_construct(), name, value, strict=strict)
        out = getattr(model, name)
    except ValidationError as e:
        err = e.errors()[0]
        why = str(err["ctx"]["error"]) if err["type"] == "value_error" else _REWORDED.get(
            err["type"], err["msg"][0].lower() + err["msg"][1:])
        item = f" (item {err['loc'][1] + 1})" if len(err["loc"]) > 1 else ""
        raise ValueError(f"{name}: {value!r} is not allowed{item}; {why}") from None
    if name in PATH_PARAMETERS and out is not None:
        check_encodable(name, out)
    return out


OPTIMIZERS = ("adamw", "sgd")  # sgd: momentum beta1, claim 4's contrast without per-coordinate scaling
# recipe keys added after models were first trained: recorded only when they differ, so older models still match
ADDED_KEYS: Mapping[str, Any] = MappingProxyType({"optimizer": "adamw", "decay_embeddings": True})


def recorded_recipe(cfg: "TrainConfig") -> dict[str, Any]:
    """A TrainConfig as a model's train_config.json records it (:data:`ADDED_KEYS` left out at their default)."""
    return {k: v for k, v in asdict(cfg).items() if not (k in ADDED_KEYS and v == ADDED_KEYS[k])}


@dataclass
class TrainConfig:
    """Everything that determines a trained model besides its variant and seed."""

    preset: str = DEFAULT_PROFILE["preset"]
    family: str = DEFAULT_PROFILE["family"]
    steps: int = DEFAULT_PROFILE["steps"]
    batch_size: int = DEFAULT_PROFILE["batch_size"]
    seq_len: int = DEFAULT_PROFILE["seq_len"]
    lr: float = float(DEFAULT_PROFILE["lr"])
    min_lr_ratio: float = 0.1
    warmup_steps: int = DEFAULT_PROFILE["warmup_steps"]
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = DEFAULT_PROFILE["eval_every"]
    eval_tokens: int = DEFAULT_PROFILE["eval_tokens"]
    checkpoint_every: int = DEFAULT_PROFILE["checkpoint_every"]
    record_provenance: bool = True
    precision: str = "auto"
    optimizer: str = "adamw"
    decay_embeddings: bool = True

    def validate(self) -> "TrainConfig":
        """Stop at once on a bad value, naming the parameter, the value and what is allowed (the vocabulary's rules)."""
        for name in (f.name for f in fields(self) if f.name in PARAMS):
            coerce(name, getattr(self, name), strict=True)
        for name, allowed in (("optimizer", OPTIMIZERS), ("precision", ("auto", "fp32", "bf16"))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}: unknown value {getattr(self, name)!r}; allowed: "
                                 f"{', '.join(map(repr, allowed))}")
        if not isinstance(self.decay_embeddings, bool):
            raise ValueError(f"decay_embeddings: {self.decay_embeddings!r} is not allowed; need true or false")
        if self.warmup_steps >= self.steps:  # the learning rate would still be ramping up when training ends
            raise ValueError(f"warmup_steps: {self.warmup_steps} is not allowed with steps={self.steps}; need "
                             f"warmup_steps < steps, else the learning rate never reaches its peak lr={self.lr:g}")
        for name in ("grad_clip", "min_lr_ratio", "weight_decay", "beta1", "beta2"):
            v, clip = getattr(self, name), name == "grad_clip"
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf if clip else 0 <= v <= 1):
                raise ValueError(f"{name}: {v!r} is not allowed; need {'a finite number > 0' if clip else 'a number in [0, 1]'}")
        if self.seq_len > (preset := get_preset(self.preset)).max_positions:
            raise ValueError(f"seq_len: {self.seq_len} exceeds preset {self.preset!r}'s {preset.max_positions} "
                             "positions")
        return self


TRAIN_KEYS: tuple[str, ...] = tuple(f.name for f in fields(TrainConfig) if f.name in PARAMS)
