"""The niced threads of a route's bulk twin (server/express.py, server/bulk_twin.py): real
CTranslate2 engines of the tiny bundle, real threads and their nice values (Linux). The
twin's life on a real server: tests/server/test_server_bulk_twin.py."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

import pytest

from lsmt_bundle import load_bundle
from lsmt_core.routes import Route
from server.engine_loader import bulk_twin_loader, default_loader
from server.engine_slots import wait_until_idle
from server.express import start_niced
from server.settings import Settings

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's"
)

SENTENCES = ["Follow me.", "Where is the station?", "The house is small."]


def nice_of(tid: int | str) -> int:
    """A thread's nice value, from /proc (field 19 of its stat line)."""
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def threads() -> set[str]:
    """This process's threads, less the one-off threads that open a niced engine (which may
    still be ending as the engine is returned)."""
    names = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            names[tid] = Path(f"/proc/self/task/{tid}/comm").read_text()
    return {tid for tid, name in names.items() if not name.startswith("lsmt-open")}


def test_threads_started_by_a_niced_call_keep_its_value_and_the_caller_keeps_its_own():
    mine = nice_of(threading.get_native_id())
    seen: dict[str, int] = {}
    release = threading.Event()

    def start_a_worker() -> int:
        seen["opener"] = nice_of(threading.get_native_id())
        worker = threading.Thread(target=release.wait)  # as CTranslate2 starts its workers
        worker.start()
        return worker.native_id or 0

    worker_id = start_niced(7, start_a_worker).result()
    try:
        assert seen["opener"] == min(19, mine + 7)
        assert nice_of(worker_id) == min(19, mine + 7)  # inherited, still running
        assert nice_of(threading.get_native_id()) == mine
    finally:
        release.set()


def test_a_niced_call_raises_what_it_raised():
    def fails() -> None:
        raise ValueError("no such engine")

    with pytest.raises(ValueError, match="no such engine"):
        start_niced(5, fails).result()


def test_where_the_system_refuses_a_nice_value_the_call_still_runs(monkeypatch, caplog):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    mine = nice_of(threading.get_native_id())
    with caplog.at_level("WARNING", logger="server.express"):
        assert start_niced(5, lambda: nice_of(threading.get_native_id())).result() == mine
    assert "setpriority failed" in caplog.text


def test_an_engine_is_one_translator_and_its_twin_has_only_niced_threads(tiny_bundle):
    bundle = load_bundle(tiny_bundle)
    settings = Settings(device="cpu", inter_threads=2, intra_threads=1)
    assert settings.bulk_twins and settings.bulk_nice == 10
    mine = nice_of(threading.get_native_id())
    before = threads()
    engine, nbytes = default_loader(bundle, Route("en", "de"), settings)
    # one translator: a worker per bulk slot and the express lane's, at the caller's value
    assert sorted(nice_of(t) for t in threads() - before) == [mine] * 3
    before = threads()
    twin, twin_bytes = bulk_twin_loader(bundle, Route("en", "de"), settings)
    # the twin: a worker per bulk slot, niced
    assert sorted(nice_of(t) for t in threads() - before) == [min(19, mine + 10)] * 2
    assert twin_bytes == nbytes  # the same weights: the budget counts them again

    served = [["<2de>", *s.split()] for s in SENTENCES]
    want = [r.hypotheses for r in engine.translate_batch(served, beam_size=2)]
    assert [r.hypotheses for r in twin.translate_batch(served, beam_size=2)] == want
    # as a drop does: wait until its pool counts its batches done, then unload
    assert wait_until_idle(twin, timeout=30), "a finished batch still counted as active"
    twin.unload_model()
    assert not twin.model_is_loaded and engine.model_is_loaded


def test_no_twin_where_the_lane_is_off_or_the_device_a_gpu():
    assert Settings(device="cpu").bulk_twins
    assert not Settings(device="cpu", bulk_nice=0).bulk_twins
    assert not Settings(device="cpu", express_batch_size=0).bulk_twins
    assert not Settings(device="cuda").bulk_twins  # a GPU: one more CUDA worker
