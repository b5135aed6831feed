"""Profiles: small TOML files of study parameters (``smoke``, ``class``, ``default``, ``gpu``, ``long``).

Profile keys are names of the parameter vocabulary (:mod:`tiebias.config.params`), checked against it.
Every notebook's papermill parameters that are profile keys default to ``None``, meaning "take it from
the profile"; any value given explicitly (papermill ``-p``, ``--set``, ``make study STEPS=...``) wins.
The profile is chosen by the ``profile`` parameter, whose default is the ``TIEBIAS_PROFILE`` environment
variable, so a test harness (nbval) can pick the smoke profile without editing the notebook.
"""

from __future__ import annotations

import ast
import copy
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tiebias.config.checks import check_run_dir_text
from tiebias.config.environment import check_environment
from tiebias.config.lens import check_shape, lens_seq_len
from tiebias.config.params import (
    PARAM_LIST,
    PARAMS,
    PROFILE_KEYS,
    REQUIRED,
    TRAIN_KEYS,
    coerce,
    notebook_parameters,
    unknown_name,
)
from tiebias.config.paths import NOTEBOOKS, PROFILE_DIR, check_encodable, repo_root, runs_dir
from tiebias.config.training import TrainConfig, checkpoint_steps
from tiebias.config.variants import parse_variants

PROFILE_ENV = "TIEBIAS_PROFILE"
RUN_DIR_ENV = "TIEBIAS_RUN_DIR"


def available() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name: str | Path) -> dict[str, Any]:
    """Parameters of a shipped profile (by name) or of any TOML file (by path), checked against the vocabulary.

    Unknown keys, notebook-only names, missing required keys and bad values are errors naming the key;
    optional keys a profile leaves out get their default.
    """
    path = Path(name)
    if path.suffix != ".toml":
        path = PROFILE_DIR / f"{name}.toml"
    if not path.exists():
        raise ValueError(f"profile: unknown value {str(name)!r}; allowed: {', '.join(available())} "
                         "or a path to a .toml file")
    try:
        with path.open("rb") as f:
            raw = tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"profile: {path} is not valid TOML ({e})") from None
    out: dict[str, Any] = {}
    for key, value in raw.items():
        p = PARAMS.get(key)
        if p is None:
            raise unknown_name(key, PROFILE_KEYS, f"unknown key in profile {path}")
        if not p.profile:
            raise ValueError(f"{key}: a notebook parameter ({', '.join(p.notebooks)}), not a profile key (in {path}); "
                             f"give it with --set {key}=... or papermill -p {key} ...; profile keys: "
                             f"{', '.join(PROFILE_KEYS)}")
        try:
            out[key] = coerce(key, value)
        except ValueError as e:
            raise ValueError(f"{e} (in profile {path})") from None
    missing = [k for k in PROFILE_KEYS if k not in out and PARAMS[k].required]
    if missing:
        raise ValueError(f"{missing[0]}: missing from profile {path} ({PARAMS[missing[0]].help}); "
                         f"every profile needs: {', '.join(k for k in PROFILE_KEYS if PARAMS[k].required)}")
    for k in PROFILE_KEYS:
        if k not in out:
            out[k] = coerce(k, copy.deepcopy(PARAMS[k].default))
    return out


def default_profile() -> str:
    """The profile used when none is given: $TIEBIAS_PROFILE, else 'default'."""
    return os.environ.get(PROFILE_ENV, "default")


def env_run_dir() -> Path | None:
    """``$TIEBIAS_RUN_DIR`` as a folder (None when unset); a relative one lies under the repository root.

    ``make lab`` announces ``runs/...`` from the root, and JupyterLab's kernels run in ``notebooks/``: the
    same value must name the same folder in a notebook and on the command line.
    """
    raw = os.environ.get(RUN_DIR_ENV)
    if not raw:
        return None
    path = Path(raw).expanduser()
    return path if path.is_absolute() else repo_root() / path


def resolve(profile: str | Path | None = None, run_dir: str | Path | None = None, *,
            notebooks: Sequence[str] | None = None, **overrides: Any) -> dict[str, Any]:
    """Merge a profile with explicit overrides (``None`` means "not given") and fill in the run folder.

    Every value is checked (the training recipe as a whole too) before anything is written, so a bad
    value stops here with an error naming it. Notebook-only parameters given here come back checked too.
    Values that must agree with others (lens settings with the training recipe) are checked for the
    ``notebooks`` that will run (None: all of them), so a study stops here rather than hours later in 03.
    The machine's variables (``TIEBIAS_THREADS``, ``TIEBIAS_WORKERS``) are checked here too. A relative
    ``$TIEBIAS_RUN_DIR`` names a folder under the repository root, wherever the process runs (a notebook's
    kernel runs in ``notebooks/``).
    """
    check_environment()
    name = profile or default_profile()
    check_encodable("profile", name)
    params = load_profile(name)
    for k, v in overrides.items():
        if k not in PARAMS:
            raise unknown_name(k, [n for n in PARAMS if n not in ("profile", "run_dir")], "not a parameter")
        if v is None and PARAMS[k].profile:
            continue
        params[k] = coerce(k, v)
    train_config(params)  # the recipe as a whole (e.g. seq_len within the preset's positions, warmup_steps < steps)
    if notebooks is None or "03_lens" in notebooks:
        check_lens(params)
    elif "04_ablate" in notebooks:  # 04's row-1 lenses: the same whole lens sequences
        check_shape(params["lens_tokens_per_step"], params["lens_eval_tokens"], lens_seq_len(params["seq_len"]),
                    params["seq_len"])
    check_pairs(params, NOTEBOOKS if notebooks is None else notebooks)
    check_run_dir_text(run_dir)  # "" is a mistake, not "not given" (that is None)
    rd = run_dir or env_run_dir() or runs_dir() / Path(str(name)).stem
    params["profile"] = str(name)
    check_encodable("run_dir", rd)
    params["run_dir"] = str(Path(rd).expanduser().resolve())
    return params


INJECTED_HEADER = "# Parameters"
"""The first line of the cell papermill adds after a notebook's ``parameters`` cell (its ``-p`` values)."""


def injected_names(namespace: Mapping[str, Any]) -> list[str]:
    """The names papermill's injected cells assigned, read from IPython's input history (``In``) in ``namespace``.

    Papermill only warns about a name the parameters cell does not declare, and the cell then assigns it
    anyway: read here, such a name can be refused like an unknown ``--set`` name. No history (not IPython): [].
    """
    history = namespace.get("In")
    names: list[str] = []
    for source in history if isinstance(history, list) else []:
        if not isinstance(source, str) or source.lstrip("\n").split("\n", 1)[0].rstrip() != INJECTED_HEADER:
            continue
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        names += [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                  if isinstance(t, ast.Name)]
    return list(dict.fromkeys(names))


def check_injected(notebook: str, namespace: Mapping[str, Any]) -> None:
    """Refuse a papermill ``-p`` name that ``notebook`` does not declare, as ``--set`` refuses it (it would be ignored)."""
    declared = notebook_parameters(notebook)
    for name in injected_names(namespace):
        if name in declared:
            continue
        if name not in PARAMS:
            raise unknown_name(name, list(PARAMS), "not a parameter")
        raise ValueError(f"{name}: not a parameter of the notebooks run ({notebook}); used by "
                         f"{', '.join(PARAMS[name].notebooks)}")


NOTEBOOK_PROFILE = "class"
"""The profile of a notebook opened on its own (no ``$TIEBIAS_PROFILE``, no papermill parameter): the lesson's, a few
minutes for all four notebooks; the command line's default stays ``default``."""


RESOLVED: list[Callable[[str, Path], None]] = []
"""Called with (notebook, run folder) once a notebook's parameters are resolved: the notebooks' setup
(:func:`tiebias.output.notebook.setup`) adds the recording of their cells' times (:mod:`tiebias.run.kernel_times`),
which writes into the run folder, a layer this parameter vocabulary does not import."""


def resolve_notebook(notebook: str, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Resolve every parameter a notebook declares (read from its namespace, e.g. ``globals()``).

    Args:
        notebook: the notebook's name (e.g. ``"03_lens"``), one of :data:`tiebias.config.paths.NOTEBOOKS`.
        namespace: the notebook's variables: every parameter it declares must be there (``profile`` and ``run_dir``
            may be missing or None); None for a profile key means "the profile's value".

    Returns:
        Every parameter, checked, as :func:`resolve` returns them: the profile's values with the notebook's overrides,
        ``profile`` (the name) and ``run_dir`` (an absolute path).

    The names come from the vocabulary, so a notebook cannot declare a parameter and then drop it; a name
    papermill injected that the notebook does not declare is refused (:func:`check_injected`). A notebook that took
    :data:`NOTEBOOK_PROFILE` because nothing named a profile says so. In a kernel a person started (JupyterLab), the
    notebook's cell times are recorded in the run folder from here on (:data:`RESOLVED`: :mod:`tiebias.run.kernel_times`,
    added by :func:`tiebias.output.notebook.setup`).
    """
    check_injected(notebook, namespace)
    if PROFILE_ENV not in os.environ and namespace.get("profile") == NOTEBOOK_PROFILE:
        print(f"profile: {NOTEBOOK_PROFILE!r}, because TIEBIAS_PROFILE is not set (a notebook opened on its own, outside "
              "`make lab` and `python -m tiebias study`, uses the lesson's profile: a few minutes for all four "
              "notebooks). For the full study set profile = \"default\" in the first cell, or start JupyterLab with "
              "`make lab PROFILE=default`.")
    names = [n for n in notebook_parameters(notebook) if n not in ("profile", "run_dir")]
    missing = [n for n in names if n not in namespace]
    if missing:
        raise ValueError(f"{notebook}: its parameters cell does not declare {', '.join(missing)}; "
                         f"it needs: {', '.join(notebook_parameters(notebook))}")
    params = resolve(namespace.get("profile"), namespace.get("run_dir"), notebooks=(notebook,),
                     **{n: namespace[n] for n in names})
    for hook in RESOLVED:
        hook(notebook, params["run_dir"])
    return params


def study_record(params: Mapping[str, Any]) -> dict[str, Any]:
    """The profile keys and the profile name of resolved parameters, as recorded in config.json.

    Args:
        params: resolved parameters (:func:`resolve` or :func:`resolve_notebook`), holding every profile key.

    Returns:
        ``profile`` and every key of :data:`tiebias.config.params.PROFILE_KEYS` with its value.
    """
    return {"profile": params["profile"], **{k: params[k] for k in PROFILE_KEYS}}


def train_config(params: Mapping[str, Any], **changes: Any) -> TrainConfig:
    """The TrainConfig named by resolved parameters (keys other than its fields are ignored).

    Args:
        params: resolved parameters; their TrainConfig fields are used, the others' defaults kept.
        **changes: field values set on top of ``params`` (e.g. ``steps=...``), before the whole is validated.

    Returns:
        The validated :class:`tiebias.config.training.TrainConfig`.
    """
    unknown = sorted(set(changes) - set(TRAIN_KEYS))
    if unknown:
        raise ValueError(f"{unknown[0]}: not a training recipe key; allowed: {', '.join(TRAIN_KEYS)}")
    return TrainConfig(**{**{k: params[k] for k in TRAIN_KEYS if k in params}, **changes}).validate()


def check_lens(params: Mapping[str, Any]) -> None:
    """Refuse lens settings 03 could not use with this training recipe, naming them, before anything trains.

    ``lens_tokens_per_step`` must be whole lens sequences and ``lens_eval_tokens`` at least one (the rules of
    ``lens.fit.train_lens`` and ``lens.evaluate.evaluate``), every ``lens_checkpoints`` step one at which training
    saves a checkpoint, and every ``lens_depth_presets`` entry a shape the recipe can train.
    """
    seq_len = params["seq_len"]
    check_shape(params["lens_tokens_per_step"], params["lens_eval_tokens"], lens_seq_len(seq_len), seq_len)
    _check_lens_checkpoints(params)
    for depth in params["lens_depth_presets"]:
        try:
            train_config(params, preset=depth)
        except ValueError as e:
            raise ValueError(f"lens_depth_presets: {depth!r} cannot be trained with this recipe ({e})") from None


PAIR = ("tied", "untied")


def check_pairs(params: Mapping[str, Any], notebooks: Sequence[str]) -> None:
    """Refuse ``variants`` that 02 or 03 could not compare, before 01 trains models they would then refuse.

    02 compares each seed's tied model with its untied one, the models 01 trains from ``variants``; 03 gives a
    lens to each of its ``variants`` and reads the tied - untied gap. An external pair (``tied_source`` /
    ``untied_source``) is read instead of the run's models, so then neither needs them.
    """
    if params.get("tied_source") is not None or params.get("untied_source") is not None:
        return
    names = [v.name for v in parse_variants(params["variants"])]
    lacking = [v for v in PAIR if v not in names]
    if not lacking:
        return
    why: dict[str, str] = {}
    if "01_train" in notebooks and "02_align" in notebooks:
        why["02_align"] = "it compares each seed's tied and untied models, which 01_train trains from them"
    if "03_lens" in notebooks:
        why["03_lens"] = "it gives a lens to each of them and compares each seed's tied model with its untied one"
    if not why:
        return
    alone = ", or run 01_train alone (--only 01_train)" if "01_train" in notebooks else ""
    raise ValueError(f"variants: {params['variants']} is not allowed with {' and '.join(why)}: "
                     f"{'; '.join(f'{nb}: {w}' for nb, w in why.items())}. Need both {' and '.join(map(repr, PAIR))} "
                     f"(others may be added), e.g. variants={','.join(dict.fromkeys([*PAIR, *names]))}{alone}")


def _check_lens_checkpoints(params: Mapping[str, Any]) -> None:
    """Every lens_checkpoints step must be one at which training (steps, checkpoint_every) saves a checkpoint."""
    steps, every, wanted = params["steps"], params["checkpoint_every"], params["lens_checkpoints"]
    saved = checkpoint_steps(steps, every)
    bad = [s for s in wanted if s not in saved]
    if not bad:
        return
    beyond = [s for s in bad if s > steps]
    why = (f"{beyond[0]} is beyond the training's steps={steps}" if beyond
           else f"training saves no checkpoint at step {bad[0]} (checkpoint_every={every})")
    shown = ", ".join(map(str, saved)) if len(saved) <= 24 else ", ".join(map(str, saved[:16])) + f", ..., {steps}"
    raise ValueError(f"lens_checkpoints: {wanted} is not allowed: {why}; allowed: steps at which training saves a "
                     f"checkpoint (0, powers of two, multiples of checkpoint_every and the last: {shown}), "
                     "or [] for none")


def _show(value: Any) -> str:
    """A value as written in a profile TOML (strings quoted, lists bracketed)."""
    if value is REQUIRED:
        return "required"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "none"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def markdown_table() -> str:
    """The vocabulary as a Markdown table (the README's key table is this text)."""
    names = available()
    profs = {n: load_profile(n) for n in names}
    head = ["name", "type", "notebooks", *(f"`{n}`" for n in names), "what it is"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in PARAM_LIST:
        if p.profile:
            vals = [f"`{_show(profs[n][p.name])}`" for n in names]
            note = "" if p.required else f" Optional in a profile, default `{_show(p.default)}`."
        else:
            vals = ["-"] * len(names)
            defaults = sorted({_show(p.default_for(nb)) for nb in p.notebooks}) if p.name not in ("profile", "run_dir") else []
            note = " Notebook parameter, not a profile key" + (f"; default `{'` / `'.join(defaults)}`." if defaults else ".")
        nbs = ", ".join(nb[:2] for nb in p.notebooks)
        lines.append(f"| `{p.name}` | {p.type_text()} | {nbs} | " + " | ".join(vals) + f" | {p.help}.{note} |")
    return "\n".join(lines)


def describe(name: str | None = None) -> str:
    """Text for ``python -m tiebias profiles``: the vocabulary, or one profile's values with their meaning."""
    if name is None:
        width = max(len(p.name) for p in PARAM_LIST)
        rows = [f"profiles: {', '.join(available())} (python -m tiebias profiles NAME shows one)", "",
                "parameters (profile key = notebook parameter = --set name = make variable, upper-case):"]
        for p in PARAM_LIST:
            where = "profile key" if p.profile else "notebook only"
            default = "" if p.required else f", default {_show(p.default)}"
            rows.append(f"  {p.name:<{width}}  {p.type_text()} ({where}{default}; {', '.join(p.notebooks)})")
            rows.append(f"  {'':<{width}}  {p.help} -> {p.configures}")
        return "\n".join(rows)
    values = load_profile(name)
    width = max(len(k) for k in values)
    return "\n".join([f"[{name}]"] + [f"  {k:<{width}} = {_show(v):<24} # {PARAMS[k].help}" for k, v in values.items()])
