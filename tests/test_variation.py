"""A changed model-shaping parameter on an existing run folder: one short error naming a fresh run_dir."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from tiebias import __main__ as cli
from tiebias import study
from tiebias.run.files import ParameterChangedError
from tiebias.run.folder import Run
from tiebias.train.trainer import TrainConfig, train


def test_message_names_parameter_values_and_the_fresh_route() -> None:
    e = ParameterChangedError("runs/class", {"preset": ("tiny", "mini"), "steps": (40, 80)},
                              "model tied-s0 was trained with the folder's values", "retrain it")
    msg = str(e)
    assert msg.startswith("preset: folder has 'tiny', asked 'mini'; steps: folder has 40, asked 80 (runs/class: ")
    for route in ('run_dir = "runs/class-preset-mini"', "--run-dir runs/class-preset-mini",
                  "-p run_dir runs/class-preset-mini", "; or retrain it"):
        assert route in msg
    assert "\n" not in msg and len(msg) < 480 and e.fresh == "runs/class-preset-mini"
    assert e._render_traceback_() == [f"\x1b[0;31mParameterChangedError\x1b[0m: {msg}"]
    assert ParameterChangedError("/tmp/r", {"lr": (0.01, 0.001)}, "", "").fresh == "/tmp/r-lr-0.001"
    assert ParameterChangedError("runs/x", {"corpus": ("a", "/data/my texts/")}, "", "").fresh == \
        "runs/x-corpus-data_my_texts"


def test_training_with_another_preset_names_it(fresh_run: Run, tiny_config: TrainConfig) -> None:
    train(fresh_run, "tied", 0, tiny_config, progress=False)
    other = replace(tiny_config, preset="mini")
    with pytest.raises(ParameterChangedError, match=r"^preset: folder has 'tiny', asked 'mini' \(") as e:
        train(fresh_run, "tied", 0, other, progress=False)
    assert e.value.fresh == f"{fresh_run.path}-preset-mini" and "model tied-s0 was trained" in str(e.value)
    assert str(e.value).endswith("; or set overwrite=True (notebook parameter / --set overwrite=true) to retrain "
                                 "tied-s0 here")
    assert not Path(e.value.fresh).exists()  # named, not created


def test_reopening_with_another_vocabulary_names_it(prepared_run: Run) -> None:
    with pytest.raises(ParameterChangedError, match=r"^vocab_size: folder has 512, asked 1024 \(") as e:
        Run.prepare(prepared_run.path, vocab_size=1024)
    assert e.value.fresh.endswith("-vocab_size-1024")
    # the notebooks' overwrite parameter retrains models only: emptying the folder is Run.prepare's overwrite
    assert str(e.value).endswith("; or delete that folder to make it again with these values (overwrite=true "
                                 "retrains models only; it never rebuilds a folder's tokenizer and tokens; from "
                                 "Python, Run.prepare(..., overwrite=True) empties the folder first)")


def test_in_a_notebook_and_the_cli_it_is_one_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("profile = 'smoke'\nrun_dir = None")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "from tiebias.run.files import ParameterChangedError\n"
        "def deep(n):\n    return deep(n - 1) if n else ParameterChangedError('runs/x', {'preset': ('tiny', 'mini')}, "
        "'model tied-s0 was trained with the folder\\'s value', 'retrain it')\n"
        "raise deep(20)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "nb").mkdir()
    nbformat.write(nb, tmp_path / "nb" / "01_train.ipynb")
    monkeypatch.setattr(study, "notebooks_dir", lambda: tmp_path / "nb")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["study", "--profile", "smoke", "--run-dir", str(tmp_path / "run"), "--only", "01_train"])
    assert code == 1
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: 01_train failed: ParameterChangedError: preset: folder "
                                                   "has 'tiny', asked 'mini' (runs/x: "), lines
    assert '--run-dir runs/x-preset-mini' in lines[0] and lines[1].startswith("full traceback: ")
    executed = json.loads((tmp_path / "run" / "notebooks" / "01_train.ipynb").read_text())
    shown = [o for c in executed["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert len(shown) == 1 and len(shown[0]["traceback"]) == 1  # the message, not 20 frames
