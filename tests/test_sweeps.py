"""Several models side by side (tiebias.system.parallel, tiebias.train.sweeps): same models as one at a time, clean stops."""

from __future__ import annotations

import shutil
import threading

import pytest
import torch
from safetensors.torch import load_file

from tiebias.run.folder import Run, RunLockedError
from tiebias.system import parallel
from tiebias.train.sweeps import train_many
from tiebias.train.trainer import TrainConfig

JOBS = [("tied", 0), ("untied", 0), ("tied_in5", 1)]


def _weights(run: Run, variant: str, seed: int) -> dict[str, torch.Tensor]:
    return load_file(str(run.model_dir(variant, seed) / "model.safetensors"))


def _copy(run: Run, dst) -> Run:
    shutil.copytree(run.path, dst)
    return Run(dst)


def test_side_by_side_trains_the_same_models_as_one_at_a_time(fresh_run: Run, tiny_config: TrainConfig,
                                                                tmp_path) -> None:
    alone, paired = _copy(fresh_run, tmp_path / "alone"), _copy(fresh_run, tmp_path / "paired")
    before = torch.get_num_threads()
    a = train_many(alone, JOBS, tiny_config, workers=1, progress=False)
    b = train_many(paired, JOBS, tiny_config, workers=2, progress=False)
    assert torch.get_num_threads() == before
    assert [s["key"] for s in a] == [s["key"] for s in b] == ["tied-s0", "untied-s0", "tied_in5-s1"]
    for v, s in JOBS:
        wa, wb = _weights(alone, v, s), _weights(paired, v, s)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), (v, s)
        assert alone.metrics(v, s).loss.tolist() == paired.metrics(v, s).loss.tolist()
    # finished models are returned as they are, not retrained
    again = train_many(paired, JOBS, tiny_config, workers=2, progress=False)
    assert [s["train_seconds"] for s in again] == [s["train_seconds"] for s in b]


def test_an_error_in_one_job_stops_the_others_and_is_raised(fresh_run: Run) -> None:
    stopped = threading.Event()

    def slow(should_stop) -> str:
        while not should_stop():
            threading.Event().wait(0.01)
        stopped.set()
        return "stopped"

    def bad(should_stop) -> str:
        raise RuntimeError("job failed")

    with pytest.raises(RuntimeError, match="job failed"):
        parallel.side_by_side([slow, bad], workers=2)
    assert stopped.is_set()


def test_interrupted_models_resume_to_the_same_weights(fresh_run: Run, tiny_config: TrainConfig, tmp_path) -> None:
    """An interrupt stops both trainings at their next step; the next call finishes them as if never stopped."""
    ref, cut = _copy(fresh_run, tmp_path / "ref"), _copy(fresh_run, tmp_path / "cut")
    train_many(ref, JOBS[:2], tiny_config, workers=1, progress=False)
    real = parallel.side_by_side

    def interrupting(tasks, workers):
        # each job is asked should_stop before every step: each stops at its 6th step, whatever the other does
        def wrap(task):
            def run(should_stop):
                asked = {"n": 0}

                def stop() -> bool:
                    asked["n"] += 1
                    return asked["n"] > 5 or should_stop()
                return task(stop)
            return run
        return real([wrap(t) for t in tasks], workers)

    import tiebias.train.sweeps as sweeps
    sweeps.side_by_side = interrupting
    try:
        partial = train_many(cut, JOBS[:2], tiny_config, workers=2, progress=False)
    finally:
        sweeps.side_by_side = real
    assert [p["complete"] for p in partial] == [False, False]
    done = train_many(cut, JOBS[:2], tiny_config, workers=2, progress=False)
    assert all(s["complete"] for s in done)
    for v, s in JOBS[:2]:
        wa, wb = _weights(ref, v, s), _weights(cut, v, s)
        assert all(torch.equal(wa[k], wb[k]) for k in wa), (v, s)


def test_bad_arguments_name_the_parameter(fresh_run: Run, tiny_config: TrainConfig) -> None:
    for jobs, match in [([], "jobs"), ([("tied",)], "jobs"), (5, "jobs"), ([("tied", -1)], "seed"),
                        ([("tied", True)], "seed"), ([("bogus", 0)], "bogus")]:
        with pytest.raises(ValueError, match=match):
            train_many(fresh_run, jobs, tiny_config, progress=False)
    for w in (0, -1, "two", True, 1.5):
        with pytest.raises(ValueError, match="workers"):
            train_many(fresh_run, JOBS, tiny_config, workers=w, progress=False)
    assert not fresh_run.models_dir.exists() or not any(fresh_run.models_dir.iterdir())


def test_workers_setting(monkeypatch) -> None:
    monkeypatch.delenv(parallel.WORKERS_ENV, raising=False)
    assert parallel.workers_for(1) == 1
    assert parallel.workers_for(5, 3) == 3
    monkeypatch.setenv(parallel.WORKERS_ENV, "1")
    assert parallel.workers_for(5) == 1
    monkeypatch.setenv(parallel.WORKERS_ENV, "lots")
    with pytest.raises(ValueError, match="TIEBIAS_WORKERS"):
        parallel.workers_for(5)


def test_a_second_process_holding_the_run_is_refused(fresh_run: Run, tiny_config: TrainConfig) -> None:
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import sys, time
        from tiebias.run.folder import Run
        with Run({str(fresh_run.path)!r}).writing("holding"):
            print("held", flush=True)
            time.sleep(30)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=str(p.pid)):
            train_many(fresh_run, JOBS, tiny_config, workers=2, progress=False)
    finally:
        p.kill()
        p.wait()


def test_lens_ladders_side_by_side_match_one_at_a_time(two_seed_run: Run, tmp_path) -> None:
    from tiebias.config.lens import LensSettings
    from tiebias.lens import ladder as lens_ladder

    lens = LensSettings(steps=4, tokens_per_step=2 * 32, seq_len=32, eval_tokens=4 * 32, budgets=(1, 2))
    tables = {}
    for w in (1, 2):
        run = Run(tmp_path / f"w{w}")
        shutil.copytree(two_seed_run.path, run.path)
        tables[w] = lens_ladder.train_lens_ladders(run, ["tied", "untied"], [0, 1], lens, workers=w, progress=False)
    assert tables[1].equals(tables[2])


def test_a_stopped_job_does_not_hide_the_real_error() -> None:
    def stops(should_stop) -> None:
        while not should_stop():
            threading.Event().wait(0.01)
        raise parallel.Stopped("stopped")

    def bad(should_stop) -> None:
        threading.Event().wait(0.05)
        raise RuntimeError("the real error")

    with pytest.raises(RuntimeError, match="the real error"):
        parallel.side_by_side([stops, bad], workers=2)


def test_bad_thread_and_stop_settings_stop_before_anything_is_written(fresh_run: Run, tiny_config: TrainConfig,
                                                                       two_seed_run: Run, tmp_path) -> None:
    from tiebias.config.lens import LensSettings
    from tiebias.lens import ladder as lens_ladder
    from tiebias.train.trainer import train

    for kw, match in [({"num_threads": 0}, "num_threads"), ({"num_threads": "fast"}, "num_threads"),
                      ({"should_stop": True}, "should_stop")]:
        with pytest.raises(ValueError, match=match):
            train(fresh_run, "tied", 0, tiny_config, progress=False, **kw)
        assert not fresh_run.model_dir("tied", 0).exists()
    run = _copy(two_seed_run, tmp_path / "lens")  # the shared run may already hold lenses: compare before / after
    before = sorted((p, p.stat().st_mtime_ns) for p in run.path.rglob("*"))
    for w in (0, "two", True):
        with pytest.raises(ValueError, match="workers"):
            lens_ladder.train_lens_ladders(run, ["tied"], [0],
                                           LensSettings(steps=2, tokens_per_step=64, seq_len=32, eval_tokens=64),
                                           workers=w, progress=False)
        assert sorted((p, p.stat().st_mtime_ns) for p in run.path.rglob("*")) == before
