"""The express lane's own translator on the CPU, beside the niced bulk one (server/express.py):
real CTranslate2 engines of the tiny bundle, real threads and their nice values (Linux)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from lsmt_bundle import load_bundle
from lsmt_core.routes import Route
from server.engine_loader import default_loader
from server.engine_slots import wait_until_idle
from server.express import LaneEngines, lane_translator, start_niced
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
    return set(os.listdir("/proc/self/task"))


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


def test_an_engine_on_the_cpu_is_a_pair_with_only_the_bulk_threads_niced(tiny_bundle):
    bundle = load_bundle(tiny_bundle)
    settings = Settings(device="cpu", inter_threads=2, intra_threads=1)
    assert settings.express_engine_apart and settings.bulk_nice == 10
    mine = nice_of(threading.get_native_id())
    before = threads()
    pair, nbytes = default_loader(bundle, Route("en", "de"), settings)
    started = [nice_of(t) for t in threads() - before]
    assert isinstance(pair, LaneEngines)
    # two bulk workers, niced; the express lane's one worker at the caller's value
    assert sorted(started) == [mine, min(19, mine + 10), min(19, mine + 10)], started

    one, one_bytes = default_loader(
        bundle, Route("en", "de"), settings.model_copy(update={"bulk_nice": 0})
    )
    assert not isinstance(one, LaneEngines)
    assert nbytes == 2 * one_bytes  # the weights twice, and the budget counts both

    served = [["<2de>", *s.split()] for s in SENTENCES]
    want = [r.hypotheses for r in one.translate_batch(served, beam_size=2)]
    for express in (False, True):
        got = lane_translator(pair, express).translate_batch(served, beam_size=2)
        assert [r.hypotheses for r in got] == want

    # as eviction does: wait until both pools count their batches done (CTranslate2 keeps a
    # model it counts busy, and the count lags translate_batch's return), then unload both
    assert wait_until_idle(pair, timeout=30), "a finished batch still counted as active"
    pair.unload_model()
    assert not pair.bulk.model_is_loaded and not pair.express.model_is_loaded
    assert not pair.model_is_loaded


def test_one_translator_where_the_lane_is_off_or_the_device_a_gpu():
    assert Settings(device="cpu").express_engine_apart
    assert not Settings(device="cpu", bulk_nice=0).express_engine_apart
    assert not Settings(device="cpu", express_batch_size=0).express_engine_apart
    assert not Settings(device="cuda").express_engine_apart  # a GPU: one more CUDA worker
    assert lane_translator("one", express=True) == "one"
