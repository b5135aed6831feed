"""Profiles (TOML files of profile keys) and the resolution of a study's or a notebook's values: a profile key left
``None`` takes the profile's value, one given explicitly (papermill ``-p``, ``--set``, ``make``) wins."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tiebias.config.checks import check_run_dir_text
from tiebias.config.environment import check_environment
from tiebias.config.lens import check_shape, lens_seq_len
from tiebias.config.params import (
    PARAMS,
    PROFILE_KEYS,
    TRAIN_KEYS,
    TrainConfig,
    coerce,
    notebook_parameters,
    unknown_name,
)
from tiebias.config.paths import NOTEBOOKS, PROFILE_DIR, check_encodable, repo_root, runs_dir
from tiebias.config.training import checkpoint_steps
from tiebias.config.variants import Variant

PROFILE_ENV = "TIEBIAS_PROFILE"
RUN_DIR_ENV = "TIEBIAS_RUN_DIR"
NOTEBOOK_PROFILE = "class"  # a notebook opened on its own (no $TIEBIAS_PROFILE) takes the lesson's profile
RESOLVED: list[Callable[[str, Path], None]] = []  # called with (notebook, run folder) once it is resolved


def available() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name: str | Path) -> dict[str, Any]:
    """A shipped profile (by name) or any TOML file (by path), checked: an unknown key, a notebook-only name, a missing
    required key or a bad value is an error naming the key; an optional key left out gets its default."""
    path = Path(name) if Path(name).suffix == ".toml" else PROFILE_DIR / f"{name}.toml"
    if not path.exists():
        raise ValueError(f"profile: unknown value {str(name)!r}; allowed: {', '.join(available())} "
                         "or a path to a .toml file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"profile: {path} is not valid TOML ({e})") from None
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in PARAMS:
            raise unknown_name(key, PROFILE_KEYS, f"unknown key in profile {path}")
        if not PARAMS[key].profile:
            raise ValueError(f"{key}: a notebook parameter ({', '.join(PARAMS[key].notebooks)}), not a profile key (in "
                             f"{path}); give it with --set {key}=... or papermill -p {key} ...; profile keys: "
                             f"{', '.join(PROFILE_KEYS)}")
        try:
            out[key] = coerce(key, value)
        except ValueError as e:
            raise ValueError(f"{e} (in profile {path})") from None
    required = [k for k in PROFILE_KEYS if PARAMS[k].required]
    if missing := [k for k in required if k not in out]:
        raise ValueError(f"{missing[0]}: missing from profile {path} ({PARAMS[missing[0]].help}); "
                         f"every profile needs: {', '.join(required)}")
    return out | {k: coerce(k, PARAMS[k].default) for k in PROFILE_KEYS if k not in out}


def resolve(profile: str | Path | None = None, run_dir: str | Path | None = None, *,
            notebooks: Sequence[str] | None = None, **overrides: Any) -> dict[str, Any]:
    """A profile with overrides (``None``: not given) and the run folder, checked before anything is written: each
    value, the recipe as a whole, what must agree for the ``notebooks`` that run (None: all), the machine's variables."""
    check_environment()
    name = profile or os.environ.get(PROFILE_ENV, "default")
    check_encodable("profile", name)
    params = load_profile(name)
    for k, v in overrides.items():
        if v is not None or k not in PARAMS or not PARAMS[k].profile:
            params[k] = coerce(k, v)  # an unknown name is refused there
    train_config(params)  # the recipe as a whole (seq_len within the preset's positions, warmup_steps < steps)
    notebooks = NOTEBOOKS if notebooks is None else notebooks
    if {"03_lens", "04_ablate"} & set(notebooks):  # whole lens sequences (04's row-1 lenses too)
        check_shape(params["lens_tokens_per_step"], params["lens_eval_tokens"], lens_seq_len(params["seq_len"]),
                    params["seq_len"])
    if "03_lens" in notebooks:
        _check_lens(params)
    _check_pairs(params, notebooks)
    check_run_dir_text(run_dir)  # "" is a mistake, not "not given" (that is None)
    env = os.environ.get(RUN_DIR_ENV)  # a relative one lies under the checkout (JupyterLab runs in notebooks/)
    rd = run_dir or (env and repo_root() / Path(env).expanduser()) or runs_dir() / Path(str(name)).stem
    check_encodable("run_dir", rd)
    return params | {"profile": str(name), "run_dir": str(Path(rd).expanduser().resolve())}


def injected_names(namespace: Mapping[str, Any]) -> list[str]:
    """Names papermill's injected cells (``# Parameters``) assigned, from IPython's history ``In`` (papermill only
    warns about a name the notebook does not declare)."""
    history = namespace.get("In")
    cells = [s for s in (history if isinstance(history, list) else []) if isinstance(s, str)
             and s.lstrip("\n").split("\n", 1)[0].rstrip() == "# Parameters"]
    return list(dict.fromkeys(re.findall(r"(?m)^([A-Za-z_]\w*) = ", "\n".join(cells))))


def check_used(name: str, notebooks: Sequence[str]) -> None:
    """Refuse a name that is not a parameter of any of ``notebooks``."""
    if name not in PARAMS:
        raise unknown_name(name, list(PARAMS), "not a parameter")
    if not set(notebooks) & set(PARAMS[name].notebooks):
        raise ValueError(f"{name}: not a parameter of the notebooks run ({', '.join(notebooks)}); used by "
                         f"{', '.join(PARAMS[name].notebooks)}")


def resolve_notebook(notebook: str, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter a notebook declares, from its namespace, resolved as :func:`resolve` does.

    Args:
        notebook: the notebook's name, e.g. ``"03_lens"``.
        namespace: its ``globals()``; None for a profile key means "the profile's value".

    Returns:
        Every parameter, checked, with ``profile`` and ``run_dir`` (absolute).
    """
    for name in injected_names(namespace):  # a papermill -p name it does not declare is refused as --set refuses it
        check_used(name, [notebook])
    if PROFILE_ENV not in os.environ and namespace.get("profile") == NOTEBOOK_PROFILE:
        print(f"profile: {NOTEBOOK_PROFILE!r}, because TIEBIAS_PROFILE is not set (a notebook opened on its own, outside "
              "`make lab` and `python -m tiebias study`, uses the lesson's profile: a few minutes for all four "
              "notebooks). For the full study set profile = \"default\" in the first cell, or start JupyterLab with "
              "`make lab PROFILE=default`.")
    names = [n for n in notebook_parameters(notebook) if n not in ("profile", "run_dir")]
    if missing := [n for n in names if n not in namespace]:
        raise ValueError(f"{notebook}: its parameters cell does not declare {', '.join(missing)}; "
                         f"it needs: {', '.join(notebook_parameters(notebook))}")
    params = resolve(namespace.get("profile"), namespace.get("run_dir"), notebooks=(notebook,),
                     **{n: namespace[n] for n in names})
    for hook in RESOLVED:
        hook(notebook, params["run_dir"])
    return params


def study_record(params: Mapping[str, Any]) -> dict[str, Any]:
    """What config.json records of a study.

    Args:
        params: resolved parameters.

    Returns:
        ``profile`` and every profile key with its value.
    """
    return {"profile": params["profile"], **{k: params[k] for k in PROFILE_KEYS}}


def train_config(params: Mapping[str, Any], **changes: Any) -> TrainConfig:
    """The training recipe of resolved parameters.

    Args:
        params: resolved parameters.
        **changes: recipe fields set on top (e.g. ``preset=...``).

    Returns:
        The validated :class:`tiebias.config.params.TrainConfig`.
    """
    if unknown := sorted(set(changes) - set(TRAIN_KEYS)):
        raise ValueError(f"{unknown[0]}: not a training recipe key; allowed: {', '.join(TRAIN_KEYS)}")
    return TrainConfig(**{**{k: params[k] for k in TRAIN_KEYS if k in params}, **changes}).validate()


def _check_lens(params: Mapping[str, Any]) -> None:
    """Refuse lens checkpoints training does not save and depths the recipe cannot train."""
    steps, every, wanted = params["steps"], params["checkpoint_every"], params["lens_checkpoints"]
    saved = checkpoint_steps(steps, every)
    if bad := [s for s in wanted if s not in saved]:
        beyond = [s for s in bad if s > steps]
        why = (f"{beyond[0]} is beyond the training's steps={steps}" if beyond
               else f"training saves no checkpoint at step {bad[0]} (checkpoint_every={every})")
        shown = ", ".join(map(str, saved)) if len(saved) <= 24 else ", ".join(map(str, saved[:16])) + f", ..., {steps}"
        raise ValueError(f"lens_checkpoints: {wanted} is not allowed: {why}; allowed: steps at which training saves a "
                         f"checkpoint (0, powers of two, multiples of checkpoint_every and the last: {shown}), "
                         "or [] for none")
    for depth in params["lens_depth_presets"]:
        try:
            train_config(params, preset=depth)
        except ValueError as e:
            raise ValueError(f"lens_depth_presets: {depth!r} cannot be trained with this recipe ({e})") from None


def _check_pairs(params: Mapping[str, Any], notebooks: Sequence[str]) -> None:
    """Refuse ``variants`` without tied and untied where 02 (after 01) or 03 compares them, unless on an external pair."""
    why = {nb: w for nb, w in (
        ("02_align", "it compares each seed's tied and untied models, which 01_train trains from them"),
        ("03_lens", "it gives a lens to each of them and compares each seed's tied model with its untied one"))
        if nb in notebooks and (nb == "03_lens" or "01_train" in notebooks)}
    names = [Variant.parse(v).name for v in params["variants"]]
    if not why or {"tied", "untied"} <= set(names) or params.get("tied_source") or params.get("untied_source"):
        return
    alone = ", or run 01_train alone (--only 01_train)" if "01_train" in notebooks else ""
    raise ValueError(f"variants: {params['variants']} is not allowed with {' and '.join(why)}: "
                     f"{'; '.join(f'{nb}: {w}' for nb, w in why.items())}. Need both 'tied' and 'untied' "
                     f"(others may be added), e.g. variants={','.join(dict.fromkeys(['tied', 'untied', *names]))}{alone}")


def _show(value: Any) -> str:
    """A value as written in a profile TOML (strings quoted, lists bracketed)."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else repr(value)


def markdown_table() -> str:
    """The vocabulary as a Markdown table (the README's key table is this text)."""
    profs = {n: load_profile(n) for n in available()}
    head = ["name", "type", "notebooks", *(f"`{n}`" for n in profs), "what it is"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in PARAMS.values():
        vals = [f"`{_show(v[p.name])}`" if p.profile else "-" for v in profs.values()]
        defaults = sorted({_show(p.default_for(nb)) for nb in p.notebooks})
        note = (("" if p.required else f" Optional in a profile, default `{_show(p.default)}`.") if p.profile else
                " Notebook parameter, not a profile key" + (f"; default `{'` / `'.join(defaults)}`." if
                                                            p.name not in ("profile", "run_dir") else "."))
        lines.append(f"| `{p.name}` | {p.type} | {', '.join(nb[:2] for nb in p.notebooks)} | " + " | ".join(vals)
                     + f" | {p.help}.{note} |")
    return "\n".join(lines)


def describe(name: str | None = None) -> str:
    """Text for ``python -m tiebias profiles``: the vocabulary, or one profile's values with their meaning."""
    rows = {k: (_show(v), PARAMS[k].help) for k, v in load_profile(name).items()} if name else {
        k: (f"{p.type}, {'profile key' if p.profile else 'notebook only'}, {' '.join(p.notebooks)}", p.help)
        for k, p in PARAMS.items()}
    head = f"[{name}]" if name else f"profiles: {', '.join(available())} (python -m tiebias profiles NAME shows one)"
    return "\n".join([head] + [f"  {k:<21} {'=' if name else ' '} {v:<24} # {h}" for k, (v, h) in rows.items()])
