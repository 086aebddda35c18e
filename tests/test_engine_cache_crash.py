"""The engine cache (lsmt_bundle.engine_cache) killed at its worst moments, with SIGKILL in a
real child process (tests/kill_points.py): a writer killed mid-write leaves no entry, its
files are never counted in the bound and the next start removes them, while a live writer's
are kept; a process killed while removing an entry leaves one that is refused and built
again. And a read-only cache still serves the entries it holds."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lsmt_bundle.engine_cache import CONTENTS, WRITING, EngineCache
from tests.kill_points import Pause, PausedChild

pytestmark = pytest.mark.integration

KEY = "tiny-en-fr-" + "0" * 32
ENGINE = {"model.bin": bytes(range(256)) * 4096, "config.json": b'{"layers": 1}'}
BOUND = 1 << 30


def write_engine(out: Path) -> None:
    for name, data in ENGINE.items():
        (out / name).write_bytes(data)


def files_of(entry: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in entry.iterdir() if p.name != CONTENTS}


def store_pausing_mid_write(pause: Pause, root: Path) -> None:
    """In the child: store KEY, pausing when half of model.bin is written."""

    def write(out: Path) -> None:
        model = ENGINE["model.bin"]
        (out / "model.bin").write_bytes(model[: len(model) // 2])
        pause()
        write_engine(out)

    EngineCache(root, BOUND).store(KEY, write)


def discard_pausing_mid_way(pause: Pause, root: Path) -> None:
    """In the child: remove KEY's entry, pausing after its first file is gone."""
    unlink = os.unlink

    def unlink_then_pause(*args: object, **kwargs: object) -> None:
        unlink(*args, **kwargs)  # type: ignore[arg-type]
        pause()

    os.unlink = unlink_then_pause  # type: ignore[assignment]
    EngineCache(root, BOUND).discard(KEY)


def test_a_writer_killed_mid_write_leaves_no_entry_and_the_next_start_removes_its_files(
    tmp_path,
):
    root = tmp_path / "cache"
    running = EngineCache(root, BOUND)  # a server already running on the directory
    with PausedChild(store_pausing_mid_write, root) as child:
        child.wait_paused()
        child.kill()
    (left,) = root.iterdir()
    assert left.name.startswith(WRITING)
    assert (left / "model.bin").stat().st_size == len(ENGINE["model.bin"]) // 2  # torn
    assert running.get(KEY) is None and running.get(KEY, verify=False) is None
    assert running.size() == 0  # not counted in the bound
    restarted = EngineCache(root, BOUND)
    assert list(root.iterdir()) == []  # the killed writer's files removed
    assert restarted.get(KEY) is None
    entry = restarted.store(KEY, write_engine)  # built again, whole
    assert restarted.get(KEY) == entry and files_of(entry) == ENGINE


def test_a_start_keeps_the_files_of_a_writer_that_is_alive(tmp_path):
    """Another process starting on the directory while an entry is written (its writer holds a
    lock on them) leaves them alone: the writer finishes and stores a whole entry."""
    root = tmp_path / "cache"
    with PausedChild(store_pausing_mid_write, root) as child:
        child.wait_paused()
        assert EngineCache(root, BOUND).remove_abandoned() == []
        assert [p.name.startswith(WRITING) for p in root.iterdir()] == [True]
        child.go_on()
    cache = EngineCache(root, BOUND)
    assert [p.name for p in root.iterdir()] == [KEY]
    entry = cache.get(KEY)
    assert entry is not None and files_of(entry) == ENGINE


def test_an_entry_whose_removal_was_killed_is_refused_and_built_again(tmp_path):
    root = tmp_path / "cache"
    entry = EngineCache(root, BOUND).store(KEY, write_engine)
    with PausedChild(discard_pausing_mid_way, root) as child:
        child.wait_paused()
        child.kill()
    assert entry.is_dir() and len(list(entry.iterdir())) == len(ENGINE)  # one of three gone
    restarted = EngineCache(root, BOUND)
    assert restarted.get(KEY, verify=False) is None and not entry.exists()
    restarted.store(KEY, write_engine)
    assert restarted.get(KEY) == entry and files_of(entry) == ENGINE


def test_a_read_only_cache_still_serves_its_entries(tmp_path, monkeypatch):
    """A cache filled ahead of time and mounted read-only (an image's): a hit cannot mark its
    entry used, and is served all the same. Simulated: the tests may run as root, whom a
    directory's permissions do not stop, and mounting needs privileges they may lack."""
    cache = EngineCache(tmp_path / "cache", BOUND)
    entry = cache.store(KEY, write_engine)

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "utime", read_only)
    assert cache.get(KEY) == entry and cache.get(KEY, verify=False) == entry
