"""Papermill parameters reach the notebooks and change what they do; committed notebooks carry no outputs."""

import json
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from tiebias.config.environment import cell_timeout
from tiebias.run.folder import Run

NB = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.parametrize("path", sorted(NB.glob("*.ipynb")), ids=lambda p: p.name)
def test_committed_notebooks_have_no_outputs_and_a_parameters_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name} has outputs"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name} needs exactly one cell tagged 'parameters'"
    assert "profile" in pm.inspect_notebook(str(path))


def test_papermill_parameters_change_the_training_notebook(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    out = tmp_path / "01.ipynb"
    pm.execute_notebook(str(NB / "01_train.ipynb"), str(out), cwd=str(NB), kernel_name="python3",
                        execution_timeout=cell_timeout(), progress_bar=False,
                        parameters={"profile": "smoke", "run_dir": str(run_dir), "steps": 7, "seeds": [3],
                                    "variants": ["untied"], "vocab_size": 300, "seq_len": 32})
    run = Run(run_dir)
    assert run.models().key.tolist() == ["untied-s3"]
    assert run.metrics("untied", 3).step.max() == 7
    assert run.config["vocab_size"] == 300
    cfg = json.loads((run.model_dir("untied", 3) / "train_config.json").read_text())
    assert cfg["steps"] == 7 and cfg["seq_len"] == 32
    text = out.read_text()
    assert "No plain tied model" in text
