from pathlib import Path

import pytest

from tiebias.config import profiles
from tiebias.config.environment import cell_timeout
from tiebias.config.params import PARAMS, PROFILE_KEYS, coerce, notebook_parameters
from tiebias.study import parse_set, run_study

SMOKE = (profiles.PROFILE_DIR / "smoke.toml").read_text()


def write_profile(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return path


def test_shipped_profiles_resolve_to_valid_train_configs() -> None:
    assert {"smoke", "default", "gpu", "long"} <= set(profiles.available())
    for name in profiles.available():
        p = profiles.resolve(name, "/tmp/x")
        profiles.train_config(p)  # validates
        assert p["run_dir"] == "/tmp/x" and p["profile"] == name
        assert len(p["seeds"]) >= 2
        assert set(PROFILE_KEYS) <= set(p)


def test_default_profile_has_three_seeds_and_small_preset() -> None:
    p = profiles.load_profile("default")
    assert len(p["seeds"]) >= 3 and p["preset"] == "small"


def test_overrides_win_and_none_means_profile() -> None:
    p = profiles.resolve("smoke", "/tmp/x", steps=60, lr=None, seeds="3,4", variants="tied, untied")
    assert p["steps"] == 60 and p["lr"] == profiles.load_profile("smoke")["lr"]
    assert p["seeds"] == [3, 4] and p["variants"] == ["tied", "untied"]


def test_notebook_parameters_pass_through_resolve_checked() -> None:
    p = profiles.resolve("smoke", "/tmp/x", overwrite="true", methods="linear", inverse_output=False,
                         tied_source=None, prompt="To be")
    assert p["overwrite"] is True and p["methods"] == ["linear"] and p["inverse_output"] is False
    assert p["tied_source"] is None and p["prompt"] == "To be"
    assert "untied_source" not in p  # only the notebook parameters given come back


def test_bad_profile_and_parameter() -> None:
    with pytest.raises(ValueError, match="profile: unknown value 'fast'"):
        profiles.resolve("fast")
    with pytest.raises(ValueError, match=r"stepz: not a parameter \(did you mean 'steps'\?\); allowed: .*warmup_steps"):
        profiles.resolve("smoke", stepz=3)
    with pytest.raises(ValueError, match=r"seeds: 'a,b' is not allowed \(item 1\); input should be a valid integer"):
        profiles.resolve("smoke", seeds="a,b")
    with pytest.raises(ValueError, match="seq_len: 4096 exceeds preset 'tiny'"):
        profiles.resolve("smoke", seq_len=4096)  # the recipe as a whole is checked too
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_set(["steps"])
    with pytest.raises(ValueError, match="stepz: not a parameter"):
        run_study("smoke", "/tmp/never", {"stepz": 1})
    with pytest.raises(ValueError, match="^run_dir: give it with --run-dir \\(the run_dir argument\\)"):
        run_study("smoke", "/tmp/never", {"run_dir": "/tmp/elsewhere"})
    assert not Path("/tmp/never").exists()


@pytest.mark.parametrize(("name", "text", "typed"), [
    ("steps", "100", 100), ("lr", "1e-3", 1e-3), ("seeds", "0,1", [0, 1]), ("seeds", "[2, 3]", [2, 3]),
    ("seeds", "5", [5]), ("inverse_output", "true", True), ("overwrite", "0", False),
    ("ablate_factors", "1,5", [1.0, 5.0]), ("variants", "tied,tied_in5", ["tied", "tied_in5"]),
    ("methods", "orthogonal", ["orthogonal"]), ("lens_checkpoints", "", []), ("lens_depth_presets", "", []), ("lens_depth_presets", "small-deep,small-16", ["small-deep", "small-16"]),
    ("tied_source", "none", None), ("corpus", "user/texts", "user/texts"), ("ablate_budget_minutes", "2", 2.0),
])
def test_text_values_are_typed(name: str, text: str, typed: object) -> None:
    assert coerce(name, text) == typed
    assert type(coerce(name, text)) is type(typed)


@pytest.mark.parametrize(("name", "value", "msg"), [
    ("steps", 0, "greater than or equal to 1"), ("steps", True, "need a number, not true or false"),
    ("steps", 2.5, "valid integer"), ("warmup_steps", -1, "greater than or equal to 0"),
    ("lr", float("nan"), "finite number"), ("lr", 0, "finite number > 0 and at most 1"),
    ("lr", 1e6, "at most 1"), ("seeds", [12345678901234567890], "0 <= seed < 2**32"),
    ("seeds", "0,4294967296", "0 <= seed < 2**32"), ("ablate_seeds", [2**32], "0 <= seed < 2**32"),
    ("ablate_factors", [1, 1e30], "between 0.001 and 1000"), ("ablate_factors", [1e-4, 1], "between 0.001 and 1000"),
    ("variants", ["tied", "tied_in1e30"], "between 0.001 and 1000"),
    ("family", "gpt", "'llama' or 'neox'"), ("preset", "huge", "'tiny'"),
    ("seeds", [], "one or more"), ("seeds", [1, 1], "repeated"), ("variants", ["tied", "bogus"], "cannot parse 'bogus'"),
    ("heldout_folds", 1, "0 (in-sample only) or an integer >= 2"), ("ablate_factors", [5], "at least 2 factors"),
    ("ablate_factors", [1, -2], "between 0.001 and 1000"), ("lens_budgets", [4, 1], "increasing"),
    ("lens_recipes", ["gpu"], "'cpu'"), ("lens_checkpoints", [-1], "greater than or equal to 0"),
    ("methods", ["procrustes"], "'orthogonal'"), ("overwrite", "maybe", "valid boolean"),
    ("prompt", " ", "non-empty"), ("vocab_size", 10, "at least 257"), ("lens_depth_presets", "deep", "'small-deep'"),
])
def test_bad_values_name_the_parameter(name: str, value: object, msg: str) -> None:
    with pytest.raises(ValueError, match=rf"^{name}: ") as e:
        coerce(name, value)
    assert msg in str(e.value) and f"{value!r} is not allowed" in str(e.value)  # the name, the value, what is allowed


def test_parse_set() -> None:
    assert parse_set(["steps=100", "lr=1e-3", "seeds=0,1", "inverse_output=true", "Methods=linear"]) == {
        "steps": 100, "lr": 1e-3, "seeds": [0, 1], "inverse_output": True, "methods": ["linear"]}
    with pytest.raises(ValueError, match=r"^profile: give it with --profile \(the profile argument\), not --set"):
        run_study("smoke", "/tmp/never", parse_set(["profile=smoke"]))
    with pytest.raises(ValueError, match="^learning_rate: not a parameter"):
        parse_set(["learning_rate=1"])


def test_env_var_picks_profile(monkeypatch) -> None:
    monkeypatch.setenv(profiles.PROFILE_ENV, "smoke")
    monkeypatch.setenv(profiles.RUN_DIR_ENV, "/tmp/from-env")
    p = profiles.resolve()
    assert p["profile"] == "smoke" and p["run_dir"] == "/tmp/from-env"


def test_profile_file_with_unknown_key_names_it(tmp_path: Path) -> None:
    path = write_profile(tmp_path, SMOKE + "learning_rate = 1e-3\n")
    with pytest.raises(ValueError, match=r"^learning_rate: unknown key in profile .*mine.toml.*; allowed: corpus, "):
        profiles.load_profile(path)


def test_profile_file_with_misspelt_key_suggests_the_right_one(tmp_path: Path) -> None:
    path = write_profile(tmp_path, SMOKE.replace("\nsteps = 40", "\nstep = 40"))
    with pytest.raises(ValueError, match=r"^step: unknown key .*did you mean 'steps'"):
        profiles.load_profile(path)


def test_profile_file_missing_a_required_key_names_it(tmp_path: Path) -> None:
    path = write_profile(tmp_path, SMOKE.replace("\nsteps = 40", "\n"))
    with pytest.raises(ValueError, match=r"^steps: missing from profile .*mine.toml.*every profile needs: corpus"):
        profiles.load_profile(path)


def test_profile_file_with_notebook_parameter_or_bad_value_names_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^methods: a notebook parameter \(02_align, 04_ablate\), not a profile key"):
        profiles.load_profile(write_profile(tmp_path, SMOKE + "methods = ['linear']\n"))
    with pytest.raises(ValueError, match=r"^steps: 'many' is not allowed; .*integer .*\(in profile .*mine.toml\)"):
        profiles.load_profile(write_profile(tmp_path, SMOKE.replace("\nsteps = 40", '\nsteps = "many"')))
    with pytest.raises(ValueError, match=r"^profile: .*mine.toml is not valid TOML"):
        profiles.load_profile(write_profile(tmp_path, SMOKE + "steps = = 3\n"))


def test_optional_profile_keys_get_their_defaults(tmp_path: Path) -> None:
    base = "".join(line for line in SMOKE.splitlines(keepends=True)
                   if not line.startswith(("lens_budgets", "lens_recipes", "lens_checkpoints")))
    p = profiles.load_profile(write_profile(tmp_path, base + "lens_budgets = [1, 4]\n"))
    assert p["lens_budgets"] == [1, 4] and p["lens_recipes"] == ["cpu"] and p["lens_checkpoints"] == []
    assert not PARAMS["lens_budgets"].required and PARAMS["steps"].required


def test_resolve_notebook_reads_every_declared_parameter() -> None:
    ns = {n: None for n in notebook_parameters("04_ablate")}
    ns.update(profile="smoke", run_dir="/tmp/x", ablate_factors="1,3", steps=9, methods=["linear"],
              inverse_output=True, overwrite=False)
    p = profiles.resolve_notebook("04_ablate", ns)
    assert p["ablate_factors"] == [1.0, 3.0] and p["steps"] == 9 and p["inverse_output"] is True
    assert profiles.train_config(p).steps == 9
    del ns["warmup_steps"]
    with pytest.raises(ValueError, match="04_ablate: its parameters cell does not declare warmup_steps"):
        profiles.resolve_notebook("04_ablate", ns)
    with pytest.raises(ValueError, match="^notebook: unknown value '05_x'"):
        notebook_parameters("05_x")


def test_study_record_holds_every_profile_key() -> None:
    p = profiles.resolve("smoke", "/tmp/x", warmup_steps=3, overwrite=True)
    rec = profiles.study_record(p)
    assert set(rec) == {"profile", *PROFILE_KEYS} and rec["warmup_steps"] == 3
    assert "overwrite" not in rec and "run_dir" not in rec


def test_listing_names_every_parameter_and_profile(capsys) -> None:
    from tiebias.__main__ import main

    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in PARAMS)
    assert all(n in out for n in profiles.available())
    assert main(["profiles", "smoke"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {k} " in out for k in PROFILE_KEYS) and "steps                 = 40" in out
    assert main(["profiles", "nope"]) == 2
    assert "profile: unknown value 'nope'" in capsys.readouterr().err


def test_train_config_defaults_are_the_default_profiles_recipe() -> None:
    """TrainConfig's defaults for profile keys are read from the default profile: one owner, no second set."""
    from dataclasses import fields

    from tiebias.config.params import TRAIN_KEYS, TrainConfig

    default = profiles.load_profile("default")
    cfg = TrainConfig()
    assert {k: getattr(cfg, k) for k in TRAIN_KEYS} == {k: default[k] for k in TRAIN_KEYS}
    assert set(TRAIN_KEYS) < {f.name for f in fields(TrainConfig)}  # the others keep their default in the class
    assert profiles.train_config(default) == cfg


def test_lens_trainer_defaults_are_the_default_profile_and_cpu_recipe() -> None:
    """LensFit's defaults (train_lens's without a fit): the default profile's lens steps and tokens, the 'cpu'
    recipe (config owns both)."""
    from dataclasses import fields

    from tiebias.config.choices import LENS_RECIPES
    from tiebias.config.lens import LensFit

    defaults = {f.name: f.default for f in fields(LensFit)}
    default = profiles.load_profile("default")
    assert (defaults["steps"], defaults["tokens_per_step"]) == (250, 512)
    assert (default["lens_steps"], default["lens_tokens_per_step"], default["lens_recipes"][0]) == (250, 512, "cpu")
    assert {k: defaults[k] for k in LENS_RECIPES["cpu"]} == {"optimizer": "adam", "lr": 1e-2, "momentum": 0.9,
                                                             "weight_decay": 1e-3}


# -- parameters later notebooks cannot work with are refused before 01 trains -------------------------------
def test_variants_02_and_03_cannot_compare_are_refused_up_front(tmp_path: Path) -> None:
    from tiebias.__main__ import main

    with pytest.raises(ValueError, match=r"^variants: \['tied'\] is not allowed with 02_align and 03_lens: .*Need "
                                         r"both 'tied' and 'untied' .*variants=tied,untied, or run 01_train alone"):
        profiles.resolve("smoke", tmp_path / "run", notebooks=["01_train", "02_align", "03_lens"], variants=["tied"])
    with pytest.raises(ValueError, match=r"^variants: \['tied', 'tied_in5'\] is not allowed with 03_lens: .*"
                                         r"variants=tied,untied,tied_in5$"):
        profiles.resolve("smoke", tmp_path / "run", notebooks=["03_lens"], variants="tied,tied_in5")
    with pytest.raises(ValueError, match=r"^variants: \['untied'\] is not allowed with 02_align:"):
        profiles.resolve("smoke", tmp_path / "run", notebooks=["01_train", "02_align"], variants="untied")
    assert main(["study", "--profile", "class", "--run-dir", str(tmp_path / "run"), "--set", "variants=tied"]) == 2
    assert not (tmp_path / "run").exists(), "refused before anything is written"
    # what the later notebooks can work with passes: 01 alone, 02 alone (it has no variants), an external pair
    for notebooks, extra in ((["01_train"], {}), (["02_align"], {}), (["01_train", "04_ablate"], {}),
                             (["01_train", "02_align", "03_lens"], {"tied_source": "a/t", "untied_source": "b/u"})):
        profiles.resolve("smoke", tmp_path / "run", notebooks=notebooks, variants=["tied"], **extra)
    profiles.resolve("smoke", tmp_path / "run", variants="tied,untied,tied_in5")


# -- a relative $TIEBIAS_RUN_DIR names the same folder from the root and from notebooks/ -------------------
def test_relative_run_dir_from_the_environment_lies_under_the_repository(monkeypatch) -> None:
    monkeypatch.setenv(profiles.RUN_DIR_ENV, "runs/from-env")
    want = str((profiles.repo_root() / "runs" / "from-env").resolve())
    for cwd in (profiles.repo_root(), profiles.repo_root() / "notebooks"):  # make lab; a JupyterLab kernel
        monkeypatch.chdir(cwd)
        assert profiles.resolve("smoke")["run_dir"] == want
    assert not Path(want).exists()
    monkeypatch.setenv(profiles.RUN_DIR_ENV, "/tmp/from-env")
    assert profiles.resolve("smoke")["run_dir"] == "/tmp/from-env"


# -- a papermill -p name the notebook does not declare is refused like --set ----------------------------------
def test_injected_parameters_the_notebook_does_not_declare_are_refused() -> None:
    declared = {n: PARAMS[n].default_for("01_train") for n in notebook_parameters("01_train")}
    declared |= {"profile": "smoke", "run_dir": "/tmp/never"}
    ran = ["", "# Parameters (papermill overrides any of these)\nsteps = None\n", "# Parameters\nsteps = 50\n"]
    assert profiles.injected_names({"In": ran}) == ["steps"]
    assert profiles.resolve_notebook("01_train", {**declared, "In": ran, "steps": 50})["steps"] == 50
    with pytest.raises(ValueError, match=r"^step: not a parameter \(did you mean 'steps'\?\); allowed: corpus, ") as e:
        profiles.resolve_notebook("01_train", {**declared, "In": [*ran, "# Parameters\nstep = 5\n"], "step": 5})
    with pytest.raises(ValueError) as from_set:
        parse_set(["step=5"])
    assert str(e.value) == str(from_set.value)  # the same message as --set
    with pytest.raises(ValueError, match=r"^knn_k: not a parameter of the notebooks run \(01_train\); used by 02_align"):
        profiles.resolve_notebook("01_train", {**declared, "In": ["# Parameters\nknn_k = 3\n"], "knn_k": 3})
    assert profiles.injected_names({}) == [] and profiles.injected_names({"In": "not a history"}) == []


@pytest.mark.slow
def test_papermill_typo_stops_the_notebook_before_it_writes(tmp_path: Path) -> None:
    import papermill as pm

    nb = profiles.repo_root() / "notebooks" / "01_train.ipynb"
    with pytest.raises(pm.PapermillExecutionError, match=r"step: not a parameter \(did you mean 'steps'\?\)"):
        pm.execute_notebook(str(nb), str(tmp_path / "01.ipynb"), cwd=str(nb.parent), kernel_name="python3",
                            execution_timeout=cell_timeout(), progress_bar=False,
                            parameters={"profile": "smoke", "run_dir": str(tmp_path / "run"), "step": 5})
    assert not (tmp_path / "run").exists()


def test_a_notebook_opened_on_its_own_uses_the_class_profile_and_says_so(monkeypatch, capsys) -> None:
    import json
    from pathlib import Path

    cells = {}
    for nb in sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("0*.ipynb")):
        first_code = next(c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code")
        cells[nb.stem] = "".join(first_code["source"])
        assert f'os.environ.get("TIEBIAS_PROFILE", "{profiles.NOTEBOOK_PROFILE}")' in cells[nb.stem], nb
    monkeypatch.delenv(profiles.PROFILE_ENV, raising=False)
    ns: dict = {}
    exec(cells["02_align"], ns)  # the parameters cell as JupyterLab runs it, nothing injected
    ns["run_dir"] = "/tmp/x"
    assert profiles.resolve_notebook("02_align", ns)["profile"] == "class"
    out = capsys.readouterr().out
    assert "profile: 'class', because TIEBIAS_PROFILE is not set" in out and "make lab PROFILE=default" in out
    monkeypatch.setenv(profiles.PROFILE_ENV, "class")  # make lab and the study set it: nothing to explain
    profiles.resolve_notebook("02_align", ns)
    assert capsys.readouterr().out == ""
    assert profiles.resolve()["profile"] == "class" and profiles.NOTEBOOK_PROFILE == "class"
    monkeypatch.delenv(profiles.PROFILE_ENV)
    assert profiles.resolve()["profile"] == "default"  # the command line's default is the full study


def test_train_config_refuses_a_key_that_is_not_a_recipe_key() -> None:
    p = profiles.resolve("smoke", "/tmp/never")
    assert profiles.train_config(p, steps=7).steps == 7
    with pytest.raises(ValueError, match=r"^stpes: not a training recipe key; allowed: .*steps"):
        profiles.train_config(p, stpes=7)
