import pytest

from tiebias import profiles
from tiebias.study import parse_set, run_study


def test_shipped_profiles_resolve_to_valid_train_configs() -> None:
    assert {"smoke", "default", "gpu"} <= set(profiles.available())
    for name in profiles.available():
        p = profiles.resolve(name, "/tmp/x")
        profiles.train_config(p)  # validates
        assert p["run_dir"] == "/tmp/x" and p["profile"] == name
        assert len(p["seeds"]) >= 2


def test_default_profile_has_three_seeds_and_small_preset() -> None:
    p = profiles.load_profile("default")
    assert len(p["seeds"]) >= 3 and p["preset"] == "small"


def test_overrides_win_and_none_means_profile() -> None:
    p = profiles.resolve("smoke", "/tmp/x", steps=7, lr=None, seeds="3,4", variants="tied, untied_x")
    assert p["steps"] == 7 and p["lr"] == profiles.load_profile("smoke")["lr"]
    assert p["seeds"] == [3, 4] and p["variants"] == ["tied", "untied_x"]


def test_bad_profile_and_parameter() -> None:
    with pytest.raises(ValueError, match="profile: unknown value 'fast'"):
        profiles.resolve("fast")
    with pytest.raises(ValueError, match="stepz: not a parameter"):
        profiles.resolve("smoke", stepz=3)
    with pytest.raises(ValueError, match="seeds"):
        profiles.resolve("smoke", seeds="a,b")
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_set(["steps"])
    with pytest.raises(ValueError, match="not known"):
        run_study("smoke", "/tmp/never", {"stepz": 1})


def test_parse_set() -> None:
    assert parse_set(["steps=100", "lr=1e-3", "seeds=0,1", "inverse_output=true"]) == {
        "steps": 100, "lr": 1e-3, "seeds": "0,1", "inverse_output": True}


def test_env_var_picks_profile(monkeypatch) -> None:
    monkeypatch.setenv(profiles.PROFILE_ENV, "smoke")
    monkeypatch.setenv(profiles.RUN_DIR_ENV, "/tmp/from-env")
    p = profiles.resolve()
    assert p["profile"] == "smoke" and p["run_dir"] == "/tmp/from-env"
