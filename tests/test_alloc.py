"""Keeping freed memory during hot loops: what is set, when it is restored, and when it is left alone."""

from __future__ import annotations

import threading

import pytest
import torch

from tiebias.system import alloc, threads


class FakeLibc:
    """Records mallopt / malloc_trim calls instead of changing the allocator."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


@pytest.fixture
def fake(monkeypatch) -> FakeLibc:
    lib = FakeLibc()
    monkeypatch.setattr(alloc, "libc", lambda: lib)
    monkeypatch.delenv(alloc.MALLOC_ENV, raising=False)
    return lib


SET = [("mallopt", -4, 0), ("mallopt", -1, 2**31 - 1)]
RESTORE = [("mallopt", -4, 65536), ("mallopt", -1, 128 * 1024), ("malloc_trim", 0)]


def test_block_sets_then_restores_glibc_defaults(fake: FakeLibc) -> None:
    with alloc.kept_heap() as adjusted:
        assert adjusted and fake.calls == SET
    assert fake.calls == SET + RESTORE


def test_nested_blocks_set_once_and_restore_after_the_outermost(fake: FakeLibc) -> None:
    with alloc.kept_heap():
        with alloc.kept_heap():
            pass
        assert fake.calls == SET
    assert fake.calls == SET + RESTORE


def test_concurrent_loops_restore_only_when_the_last_one_ends(fake: FakeLibc) -> None:
    inside, release = threading.Barrier(3), threading.Event()

    def loop() -> None:
        with alloc.kept_heap():
            inside.wait()
            release.wait()

    workers = [threading.Thread(target=loop) for _ in range(2)]
    for w in workers:
        w.start()
    inside.wait()
    assert fake.calls == SET  # both loops inside: set once, nothing restored yet
    release.set()
    for w in workers:
        w.join()
    assert fake.calls == SET + RESTORE


def test_restored_when_the_loop_raises(fake: FakeLibc) -> None:
    with pytest.raises(RuntimeError), alloc.kept_heap():
        raise RuntimeError("interrupted")
    assert fake.calls == SET + RESTORE and alloc._depth == 0


def test_default_mode_leaves_the_allocator_alone(fake: FakeLibc, monkeypatch) -> None:
    monkeypatch.setenv(alloc.MALLOC_ENV, "default")
    with alloc.kept_heap() as adjusted:
        assert not adjusted
    assert fake.calls == []


def test_bad_setting_names_the_variable(fake: FakeLibc, monkeypatch) -> None:
    monkeypatch.setenv(alloc.MALLOC_ENV, "fast")
    with pytest.raises(ValueError, match="TIEBIAS_MALLOC.*'fast'.*keep"), alloc.kept_heap():
        pass
    assert fake.calls == []


@pytest.mark.parametrize("env", [{"MALLOC_MMAP_MAX_": "1"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"},
                                 {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}])
def test_user_allocator_settings_win(monkeypatch, env: dict[str, str]) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert alloc.libc.__wrapped__() is None


def test_real_allocator_round_trip() -> None:
    """On this platform's C library the block runs, large tensors come and go, and the depth returns to 0."""
    with alloc.kept_heap() as adjusted:
        for _ in range(3):
            x = torch.ones(64, 1024, 1024)  # 256 MiB, freed at once
            assert float(x[-1, -1, -1]) == 1.0
            del x
    assert alloc._depth == 0
    assert adjusted == (alloc.libc() is not None and alloc.mode() == "keep")


def test_loops_run_with_the_heap_kept(fake: FakeLibc) -> None:
    with threads.loop_threads(None):
        assert fake.calls == SET
    assert fake.calls == SET + RESTORE
