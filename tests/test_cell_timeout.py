"""A study does not wait forever for a kernel that lost a request: a reply that never came after the kernel went idle
ends the notebook without any time limit (the kernel's lost request), and TIEBIAS_CELL_TIMEOUT, when set, bounds every
cell (no limit unless it is set); every papermill call of the tests is bounded."""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import nbformat
import pytest

from tiebias import study
from tiebias.config.environment import CELL_TIMEOUT_ENV, cell_timeout, check_environment

DROP_NEXT_REPLY = """\
kernel = get_ipython().kernel
send = kernel.session.send

def drop_execute_reply(stream, msg_or_type, *args, **kwargs):  # this cell's reply never reaches the client
    if msg_or_type == "execute_reply":
        kernel.session.send = send
        return {"content": {"status": "ok"}}
    return send(stream, msg_or_type, *args, **kwargs)

kernel.session.send = drop_execute_reply
"""


def test_a_kernel_that_never_answers_stops_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel runs the cell and goes idle, but its reply is lost: papermill would wait for it forever. With the
    limit set, the study stops after it, naming the error and the variable."""
    src = tmp_path / "lost_reply.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(DROP_NEXT_REPLY),
                                                   nbformat.v4.new_code_cell("print('never reached')")]), src)
    monkeypatch.setenv(CELL_TIMEOUT_ENV, "5")
    t0 = time.monotonic()
    with pytest.raises(study.NotebookFailed, match=rf"lost_reply failed: CellTimeoutError: .*after 5 seconds.* "
                                                   rf"\({CELL_TIMEOUT_ENV}=5: a cell still running, or a kernel"):
        study._execute("lost_reply", src, tmp_path / "out.ipynb", {}, False)
    assert time.monotonic() - t0 < 120  # the kernel's start and the 5 s, not forever


def test_a_lost_reply_stops_the_study_without_a_time_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cell limit: the kernel went idle after the cell and its reply is overdue, so the request is lost (a cell that
    still runs has not said idle). The study stops naming it; the kernel is shut down."""
    src = tmp_path / "lost_reply.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(4)"),
                                                   nbformat.v4.new_code_cell(DROP_NEXT_REPLY),
                                                   nbformat.v4.new_code_cell("print('never reached')")]), src)
    monkeypatch.delenv(CELL_TIMEOUT_ENV)
    monkeypatch.setattr(study._WatchedClient, "lost_after_s", 3.0)  # the 4 s cell, longer than that, runs on
    t0 = time.monotonic()
    with pytest.raises(study.NotebookFailed, match=r"lost_reply failed: KernelLostRequest: the kernel finished a "
                                                   r"request but its reply did not come in 3 s \(a message between "
                                                   r"papermill and the kernel got lost"):
        study._execute("lost_reply", src, tmp_path / "out.ipynb", {}, False)
    assert time.monotonic() - t0 < 120
    cells = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells
    assert cells[0].execution_count == 1 and cells[2].execution_count is None and cells[2].outputs == []


@pytest.mark.parametrize(("raw", "want"), [(None, None), ("none", None), ("", None), (" NONE ", None), ("30", 30)])
def test_cell_timeout_values(raw: str | None, want: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if raw is None:
        monkeypatch.delenv(CELL_TIMEOUT_ENV, raising=False)
    else:
        monkeypatch.setenv(CELL_TIMEOUT_ENV, raw)
    assert cell_timeout() == want


@pytest.mark.parametrize("bad", ["0", "-5", "1.5", "10s", "auto"])
def test_a_bad_cell_timeout_is_refused(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CELL_TIMEOUT_ENV, bad)
    for check in (cell_timeout, check_environment):
        with pytest.raises(ValueError, match=rf"^{CELL_TIMEOUT_ENV}: '{bad}' is not allowed; use 'none' \(no limit\) "
                                             "or a whole number of seconds >= 1"):
            check()


def test_every_papermill_call_of_the_tests_is_bounded() -> None:
    """The tests run with a cell limit (conftest), and each of their own papermill or nbclient calls passes one."""
    assert cell_timeout() is not None, f"conftest sets {CELL_TIMEOUT_ENV} for the test run"
    unbounded = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            need = {"execute_notebook": "execution_timeout", "NotebookClient": "timeout"}.get(name)
            if need and need not in {k.arg for k in node.keywords}:
                unbounded.append(f"{path.name}:{node.lineno} {name} without {need}=")
    assert unbounded == []
    assert os.environ[CELL_TIMEOUT_ENV].isdigit()
