"""One vocabulary: every profile key, notebook parameter, --set name and make variable is the same name for the
same thing, and every one of them reaches what it configures. Bad names and values are refused, naming the
parameter, before anything is written."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from tiebias import study
from tiebias.__main__ import main
from tiebias.ablate import sweep as ablate
from tiebias.config import LensSettings, profiles
from tiebias.config.environment import cell_timeout
from tiebias.config.params import (
    NOTEBOOKS,
    PARAMS,
    PROFILE_KEYS,
    TRAIN_KEYS,
    coerce,
    notebook_parameters,
)

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks"
SMOKE = profiles.load_profile("smoke")

# A value of every name, as typed on the command line, different from the smoke profile's value; each one alone and
# all together agree with the rest of the smoke profile (lens settings with the training recipe, profiles.resolve).
DISTINCT = {
    "corpus": "wikitext:wikitext-2-raw-v1", "vocab_size": "333", "preset": "mini", "family": "neox", "steps": "80",
    "batch_size": "5", "seq_len": "32", "lr": "0.0021", "warmup_steps": "2", "eval_every": "3", "eval_tokens": "777",
    "checkpoint_every": "10", "seeds": "5,6", "variants": "tied,untied,tied_in3", "heldout_folds": "3", "knn_k": "4",
    "lens_steps": "13", "lens_tokens_per_step": "128", "lens_depth_presets": "mini", "lens_eval_tokens": "555",
    "lens_budgets": "1,2,8", "lens_recipes": "package", "lens_protocols": "reference", "lens_checkpoints": "4,8", "ablate_factors": "1,3",
    "ablate_seeds": "7", "ablate_budget_minutes": "1.5", "ablate_ingredients": "warmup10,sgd",
    "scale_vocab_sizes": "700,900", "scale_presets": "mini", "scale_steps": "60,80", "overwrite": "true", "methods": "linear,identity",
    "tied_source": "someone/tied-lm", "untied_source": "someone/untied-lm", "prompt": "Once more unto the breach",
    "inverse_output": "true",
}
# Lens keys whose use in 03's body lands with the lens-budget work; once 03 reads them, drop them from here.
PENDING: set[tuple[str, str]] = set()
# Profile keys a notebook reads from its own parameter on purpose (None there means something else).
RAW = {("02_align", "seeds"): "None compares every seed with both models in the run"}


def parameters_cell(name: str) -> str:
    nb = nbformat.read(NB / f"{name}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))


def used_names(name: str) -> set[str]:
    """Parameters a notebook's code reads after its parameters cell: P["key"], train_config(P) or the bare name.

    Arguments of the profiles.resolve* call itself do not count (passing a name on is not using it).
    """
    nb = nbformat.read(NB / f"{name}.ipynb", as_version=4)
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_Call(self, node: ast.Call) -> None:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("resolve", "resolve_notebook"):
                return
            if isinstance(f, ast.Attribute) and f.attr == "train_config":
                found.update(f"P:{k}" for k in TRAIN_KEYS)
            if isinstance(f, ast.Attribute) and f.attr == "from_params":
                found.update(f"P:{k}" for k in LensSettings.PARAM_KEYS)
            self.generic_visit(node)

        def visit_Subscript(self, node: ast.Subscript) -> None:
            if isinstance(node.value, ast.Name) and node.value.id == "P" and isinstance(node.slice, ast.Constant):
                found.add(f"P:{node.slice.value}")
            self.generic_visit(node)

        def visit_Name(self, node: ast.Name) -> None:
            if isinstance(node.ctx, ast.Load):
                found.add(node.id)

    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" not in cell.metadata.get("tags", []):
            Visitor().visit(ast.parse(cell.source))
    return found


def snapshot(path: Path) -> dict[str, str]:
    """Every file under a folder with a hash of its content (and every folder), to prove nothing changed."""
    if not path.exists():
        return {}
    return {str(p.relative_to(path)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


def injected(executed: Path) -> dict:
    """The parameters papermill injected into an executed notebook."""
    nb = nbformat.read(executed, as_version=4)
    cell = next(c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))
    ns: dict = {}
    exec(cell.source, ns)
    return {k: v for k, v in ns.items() if not k.startswith("__")}


# -- the vocabulary itself --------------------------------------------------------------------------
def test_every_name_has_a_distinct_test_value() -> None:
    assert set(DISTINCT) == set(PARAMS) - {"profile", "run_dir"}
    for k, text in DISTINCT.items():
        value = coerce(k, text)
        if k in PROFILE_KEYS:
            assert value != SMOKE[k], k


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_parameters_are_the_vocabulary(name: str) -> None:
    declared = pm.inspect_notebook(str(NB / f"{name}.ipynb"))
    assert set(declared) == set(notebook_parameters(name)), name
    for k, d in declared.items():
        if k in ("profile", "run_dir"):
            continue
        assert ast.literal_eval(d["default"]) == PARAMS[k].default_for(name), (name, k)


def test_every_name_is_used_by_a_notebook() -> None:
    for p in PARAMS.values():
        assert p.notebooks and set(p.notebooks) <= set(NOTEBOOKS), p.name


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_parameter_is_read_after_resolution(name: str) -> None:
    used = used_names(name)
    for k in notebook_parameters(name):
        if k in ("profile", "run_dir"):
            continue
        if PARAMS[k].profile and (name, k) not in RAW:
            ok = f"P:{k}" in used  # a profile key must be read resolved, else the profile's value is dropped
        else:
            ok = f"P:{k}" in used or k in used
        assert ok != ((name, k) in PENDING), f"{name} declares {k} but never reads it" if not ok else \
            f"{name} now reads {k}: drop it from PENDING"


def test_methods_are_the_alignment_methods() -> None:
    from tiebias.align.maps import METHODS

    assert PARAMS["methods"].default == list(METHODS)


# -- every key reaches its target (library level: cheap, all keys) -----------------------------------
@pytest.mark.parametrize("key", PROFILE_KEYS)
def test_profile_key_reaches_resolution_and_the_train_config(key: str, tmp_path: Path) -> None:
    value = coerce(key, DISTINCT[key])
    p = profiles.resolve("smoke", tmp_path, **{key: value})
    assert p[key] == value
    assert profiles.study_record(p)[key] == value
    if key in TRAIN_KEYS:
        assert getattr(profiles.train_config(p), key) == value
    # the same from a profile file
    path = tmp_path / "mine.toml"
    text = (profiles.PROFILE_DIR / "smoke.toml").read_text()
    path.write_text(re.sub(rf"(?m)^{key} = .*$", "", text) + f"{key} = {json.dumps(value)}\n")
    assert profiles.resolve(path, tmp_path)[key] == value


def test_set_reaches_exactly_the_notebooks_that_declare_it(tmp_path: Path, monkeypatch) -> None:
    calls: dict[str, dict] = {}
    monkeypatch.setattr(study.pm, "execute_notebook",
                        lambda src, out, parameters, **kw: calls.__setitem__(Path(src).stem, parameters))
    overrides = study.parse_set([f"{k}={v}" for k, v in DISTINCT.items()])
    study.run_study("smoke", tmp_path / "run", overrides, progress=False)
    assert list(calls) == list(NOTEBOOKS)
    for nb, params in calls.items():
        assert params.pop("profile") == "smoke" and params.pop("run_dir") == str(tmp_path / "run")
        want = {k: coerce(k, v) for k, v in DISTINCT.items() if nb in PARAMS[k].notebooks}
        assert params == want, nb


def test_relative_paths_are_made_absolute_for_the_notebooks(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "texts").mkdir()
    monkeypatch.chdir(tmp_path)
    assert study.parse_set(["corpus=texts", "tied_source=texts"]) == {
        "corpus": str(tmp_path / "texts"), "tied_source": str(tmp_path / "texts")}
    assert study.parse_set(["corpus=user/dataset"]) == {"corpus": "user/dataset"}


def test_readme_table_is_the_vocabulary() -> None:
    text = (ROOT / "README.md").read_text()
    table = text.split("<!-- parameters:start -->\n", 1)[1].split("\n<!-- parameters:end -->", 1)[0]
    assert table == profiles.markdown_table(), "regenerate with: python -m tiebias profiles --markdown"


# run from inside `make test`: the outer make's MAKEFLAGS / MAKELEVEL must not change the inner dry run
_NO_MAKE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "MFLAGS"}


def test_make_variables_are_the_parameter_names() -> None:
    makefile = (ROOT / "Makefile").read_text()
    pairs = re.findall(r"\$\(if \$\((\w+)\),--set (\w+)=\$\(\1\)\)", makefile)
    assert len(pairs) >= 5
    for var, name in pairs:
        assert var == name.upper() and name in PARAMS, (var, name)
    assert "$(filter 1 true yes,$(OVERWRITE)),--set overwrite=true" in makefile
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "--no-print-directory", "study", "PROFILE=smoke", "RUN=/tmp/x", "STEPS=5", "SEEDS=0,1", "PRESET=mini",
                          "CORPUS=shakespeare", "VOCAB_SIZE=300", "OVERWRITE=1", "SET=warmup_steps=2 knn_k=3"],
                         cwd=ROOT, env=_NO_MAKE_ENV, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    args = out.split()
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert study.parse_set(sets) == {"steps": 5, "seeds": [0, 1], "preset": "mini", "corpus": "shakespeare",
                                     "vocab_size": 300, "overwrite": True, "warmup_steps": 2, "knn_k": 3}
    out = subprocess.run(["make", "-n", "--no-print-directory", "study", "OVERWRITE=0"], cwd=ROOT, env=_NO_MAKE_ENV, capture_output=True, text=True,
                         check=True).stdout
    assert "overwrite" not in out


# -- bad input: refused before anything is written, naming the parameter ---------------------------
BAD_CLI = [
    (["--set", "learning_rate=1"], "learning_rate"),
    (["--set", "warmup_steps=-1"], "warmup_steps"),
    (["--set", "checkpoint_every=0"], "checkpoint_every"),
    (["--set", "ablate_factors=0"], "ablate_factors"),
    (["--set", "eval_every=0"], "eval_every"),
    (["--set", "eval_tokens=many"], "eval_tokens"),
    (["--set", "ablate_seeds=-1"], "ablate_seeds"),
    (["--set", "lens_depth_presets=bogus"], "lens_depth_presets"),
    (["--set", "ablate_budget_minutes=0"], "ablate_budget_minutes"),
    (["--set", "seq_len=1"], "seq_len"),
    (["--set", "seq_len=4096"], "seq_len"),
    (["--set", "seeds=a,b"], "seeds"),
    (["--set", "variants=tied,bogus"], "variants"),
    (["--set", "methods=procrustes"], "methods"),
    (["--set", "overwrite=maybe"], "overwrite"),
    (["--set", "inverse_output=2"], "inverse_output"),
    (["--set", "heldout_folds=1"], "heldout_folds"),
    (["--set", "knn_k=0"], "knn_k"),
    (["--set", "family=gpt"], "family"),
    (["--set", "preset=huge"], "preset"),
    (["--set", "vocab_size=10"], "vocab_size"),
    (["--set", "lr=nan"], "lr"),
    (["--set", "prompt= "], "prompt"),
    (["--set", "tied_source="], "tied_source"),
    (["--set", "corpus=./no/such/texts"], "corpus"),
    (["--set", "lens_budgets=4,1"], "lens_budgets"),
    (["--set", "lens_recipes=gpu"], "lens_recipes"),
    (["--set", "lens_checkpoints=-5"], "lens_checkpoints"),
    (["--set", "steps"], "--set"),
    (["--set", "profile=smoke"], "profile"),
    (["--set", "steps=10", "--only", "02_align"], "steps"),
    (["--only", "05_extra"], "notebook"),
]

SMOKE_TEXT = (profiles.PROFILE_DIR / "smoke.toml").read_text()
BAD_PROFILES = [
    (SMOKE_TEXT + "learning_rate = 1e-3\n", "learning_rate"),
    (SMOKE_TEXT.replace("\nsteps = 40", "\nstep = 40"), "step"),
    (SMOKE_TEXT.replace("\nsteps = 40", "\n"), "steps"),
    (SMOKE_TEXT + "methods = ['linear']\n", "methods"),
    (SMOKE_TEXT.replace("\nsteps = 40", '\nsteps = "many"'), "steps"),
    (SMOKE_TEXT.replace("\nwarmup_steps = 6", "\nwarmup_steps = -1"), "warmup_steps"),
    (SMOKE_TEXT.replace("ablate_factors = [1, 5]", "ablate_factors = []"), "ablate_factors"),
    (SMOKE_TEXT + "steps = = 3\n", "profile"),
]


def _existing_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "models" / "tied-s0").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"corpus": "shakespeare", "vocab_size": 1024, "study": {"steps": 40}}))
    (run / "models" / "tied-s0" / "train_config.json").write_text(json.dumps({"steps": 40}))
    return run


def _refused(argv: list[str], name: str, run: Path, capsys) -> str:
    before = snapshot(run)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {name}:"), err
    assert snapshot(run) == before
    return err


@pytest.mark.parametrize(("args", "name"), BAD_CLI, ids=[" ".join(a) for a, _ in BAD_CLI])
def test_bad_cli_input_is_refused_before_anything_is_written(args: list[str], name: str, tmp_path: Path,
                                                            capsys) -> None:
    absent = tmp_path / "absent"
    _refused(["study", "--profile", "smoke", "--run-dir", str(absent), *args], name, absent, capsys)
    assert not absent.exists()
    run = _existing_run(tmp_path)
    err = _refused(["study", "--profile", "smoke", "--run-dir", str(run), *args], name, run, capsys)
    if name == "learning_rate":
        assert "allowed:" in err and " lr," in err


@pytest.mark.parametrize(("text", "name"), BAD_PROFILES, ids=[n for _, n in BAD_PROFILES])
def test_bad_profile_file_is_refused_before_anything_is_written(text: str, name: str, tmp_path: Path,
                                                               capsys) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    run = _existing_run(tmp_path)
    err = _refused(["study", "--profile", str(path), "--run-dir", str(run)], name, run, capsys)
    assert str(path) in err
    absent = tmp_path / "absent"
    _refused(["study", "--profile", str(path), "--run-dir", str(absent)], name, absent, capsys)
    assert not absent.exists()


def test_bad_notebook_parameter_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    run = _existing_run(tmp_path)
    before = snapshot(run)
    with pytest.raises(pm.PapermillExecutionError, match="warmup_steps: -1 is not allowed"):
        pm.execute_notebook(str(NB / "01_train.ipynb"), str(tmp_path / "out.ipynb"), cwd=str(NB), progress_bar=False,
                            kernel_name="python3", execution_timeout=cell_timeout(),
                            parameters={"profile": "smoke", "run_dir": str(run), "warmup_steps": -1})
    assert snapshot(run) == before


# -- overwrite reaches train() through the ablation sweep ------------------------------------------
def test_sweep_overwrite_reaches_train(fresh_run, tiny_config) -> None:
    cfg = replace(tiny_config, steps=4)
    variants = [ablate.Variant(True)]
    ablate.run_sweep(fresh_run, variants, [0], cfg, progress=False)
    with pytest.raises(ValueError, match="overwrite=True"):
        ablate.run_sweep(fresh_run, variants, [0], replace(cfg, steps=5), progress=False)
    assert fresh_run.metrics("tied", 0).step.max() == 4
    ablate.run_sweep(fresh_run, variants, [0], replace(cfg, steps=5), progress=False, overwrite=True)
    assert fresh_run.metrics("tied", 0).step.max() == 5 and fresh_run.metrics("untied", 0).step.max() == 5


# -- real runs: the notebooks take the values all the way to train() and config.json ----------------
TRAIN = {"vocab_size": 300, "preset": "tiny", "family": "neox", "steps": 9, "batch_size": 3, "seq_len": 24,
         "lr": 0.0025, "warmup_steps": 3, "eval_every": 4, "eval_tokens": 640, "checkpoint_every": 5}


def _train_config(run: Path, key: str) -> dict:
    return json.loads((run / "models" / key / "train_config.json").read_text())


@pytest.mark.slow
def test_training_keys_reach_train_and_config_is_recorded_only_after_success(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = {**TRAIN, "seeds": [4], "variants": ["tied"]}
    study.run_study("smoke", run, first, only=["01_train"], progress=False)
    cfg = _train_config(run, "tied-s4")
    assert {k: cfg[k] for k in TRAIN_KEYS} == {k: TRAIN[k] for k in TRAIN_KEYS}
    config = json.loads((run / "config.json").read_text())
    assert config["vocab_size"] == 300 and config["corpus"] == "shakespeare"
    assert config["study"] == profiles.study_record(profiles.resolve("smoke", run, notebooks=["01_train"], **first))
    assert {k: v for k, v in injected(run / "notebooks" / "01_train.ipynb").items() if k in first} == first
    steps = sorted(int(p.name.split("-")[1]) for p in (run / "models" / "tied-s4" / "checkpoints").glob("step-*"))
    assert steps == [0, 1, 2, 4, 5, 8, 9]  # log-spaced, every checkpoint_every=5, and the last
    val = (run / "metrics" / "tied-s4_val.csv").read_text().split()
    assert [r.split(",")[0] for r in val[1:]] == ["0", "4", "8", "9"]  # eval_every=4

    # a rerun with another config is refused and leaves the whole folder as it was (config.json included)
    before = {k: v for k, v in snapshot(run).items() if not k.startswith("notebooks")}
    with pytest.raises(pm.PapermillExecutionError, match="overwrite=True"):
        study.run_study("smoke", run, {**first, "steps": 10}, only=["01_train"], progress=False)
    assert {k: v for k, v in snapshot(run).items() if not k.startswith("notebooks")} == before
    assert json.loads((run / "config.json").read_text())["study"]["steps"] == 9

    # overwrite=true retrains it, and only then is the new config recorded
    study.run_study("smoke", run, {**first, "steps": 10, "overwrite": True}, only=["01_train"], progress=False)
    assert _train_config(run, "tied-s4")["steps"] == 10
    assert json.loads((run / "config.json").read_text())["study"]["steps"] == 10

    # 04: the ablation keys, its notebook parameters and the same training keys
    ab = {**TRAIN, "steps": 10, "lens_tokens_per_step": 240, "ablate_factors": [1, 3], "ablate_seeds": [4], "ablate_budget_minutes": 7.5,
          "inverse_output": True, "methods": ["linear"]}
    study.run_study("smoke", run, ab, only=["04_ablate"], progress=False)
    variants = ablate.sweep_variants([1, 3], inverse_output=True)
    record = json.loads((run / "config.json").read_text())["ablation"]
    assert record == {"profile": "smoke", "steps": 10, "ablate_factors": [1.0, 3.0], "ablate_seeds": [4],
                      "ablate_budget_minutes": 7.5, "inverse_output": True, "methods": ["linear"],
                      "variants": [v.name for v in variants]}
    for v in [*variants, ablate.Variant(False)]:
        cfg = _train_config(run, f"{v.name}-s4")
        assert {k: cfg[k] for k in TRAIN_KEYS} == {**{k: TRAIN[k] for k in TRAIN_KEYS}, "steps": 10}
    table = (run / "metrics" / "ablation_alignment.csv").read_text().splitlines()
    method_col = table[0].split(",").index("method")
    assert {r.split(",")[method_col] for r in table[1:]} == {"linear"}
    assert "(budget 7.5 min)" in (run / "notebooks" / "04_ablate.ipynb").read_text()
