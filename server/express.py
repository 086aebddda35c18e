"""The express lane's own engine on the CPU, beside a bulk engine whose threads run niced.

With one CTranslate2 translator per engine, a short request's batch runs on whichever worker
is free and shares the cores evenly with the documents' batches: on 2 cores its decoding took
25-27 ms at the tail against 9 ms alone (docs/benchmarks.md), a large part of its p95 beside
documents. The scheduler can favour it only if it runs on threads of its own. So on the CPU
an engine is two translators of the same files (``LaneEngines``): the express lane's, one
worker at the server's priority, and the bulk slots', whose threads have a higher nice value.
Whenever a short request decodes it gets the cores first; otherwise the bulk workers have every
core, so documents lose little throughput. The cost is a second copy of the weights (an
engine's bytes count both).

Linux gives a new thread its creator's nice value, and CTranslate2 (and ONNX Runtime, for a
hybrid engine) start their worker and intra-op threads from the thread that opens the model.
Opening the bulk translator on a thread of its own, niced first, so lowers exactly its threads
(a hybrid engine's search loop runs in the caller's thread and keeps its priority). That
thread is thrown away because an unprivileged thread cannot lower its nice value again. The
express translator opens meanwhile, so a cold route takes about as long as before. Elsewhere
(no per-thread nice) both open as they are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from lsmt_bundle.contracts import Engine

T = TypeVar("T")
log = logging.getLogger("server.express")

# setpriority(PRIO_PROCESS, tid) changes one thread on Linux only (the whole process elsewhere).
PER_THREAD_NICE = sys.platform.startswith("linux")


@dataclass
class LaneEngines:
    """An engine as two translators of the same model: ``bulk`` (niced threads) and
    ``express``. To the registry it is one engine: the translator calls it makes (unload,
    load, ``model_is_loaded``) apply to both."""

    bulk: Engine
    express: Engine

    def unload_model(self, to_cpu: bool = False) -> None:
        self.bulk.unload_model(to_cpu=to_cpu)
        self.express.unload_model(to_cpu=to_cpu)

    def load_model(self) -> None:
        self.bulk.load_model()
        self.express.load_model()

    @property
    def model_is_loaded(self) -> bool:
        return bool(self.bulk.model_is_loaded and self.express.model_is_loaded)

    @property
    def num_active_batches(self) -> int:
        return self.bulk.num_active_batches + self.express.num_active_batches


# What the registry holds for an engine key: one engine, or the express pair.
RouteEngine = Engine | LaneEngines


def lane_translator(translator: RouteEngine, express: bool) -> Engine:
    """The translator that runs a batch of the express lane (``express``) or of a bulk slot."""
    if isinstance(translator, LaneEngines):
        return translator.express if express else translator.bulk
    return translator


def open_lanes(bulk_nice: int) -> Callable[..., tuple[LaneEngines, int]]:
    """An engine opener (``lsmt_bundle.engine_cache.load_route_engine``'s ``opener``): the
    engine's files opened twice at once, for the bulk slots (``inter_threads``, the engine's
    workers, less the lane's one; on a thread ``bulk_nice`` nicer) and for the express lane
    (one worker); their bytes summed. Both open side by side, so a cold route waits for the
    slower of the two, not for both."""

    def open_pair(model: Path, *, inter_threads: int, **options: object) -> tuple[LaneEngines, int]:
        from lsmt_bundle.engines import open_engine

        bulk_opening = start_niced(
            bulk_nice, lambda: open_engine(model, inter_threads=inter_threads - 1, **options)
        )
        try:
            express, express_bytes = open_engine(model, inter_threads=1, **options)
        except BaseException:
            with contextlib.suppress(Exception):
                bulk_opening.result()[0].unload_model()
            raise
        try:
            bulk, bulk_bytes = bulk_opening.result()
        except BaseException:
            express.unload_model()
            raise
        return LaneEngines(bulk, express), bulk_bytes + express_bytes

    return open_pair


def start_niced(nice: int, fn: Callable[[], T]) -> Future[T]:
    """``fn()`` started on a new thread whose nice value is ``nice`` above the caller's (the
    threads it starts keep that value); its result or exception comes in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            if PER_THREAD_NICE and nice > 0:
                lower_this_thread(nice)
            future.set_result(fn())
        except BaseException as exc:  # the caller's, through the future
            future.set_exception(exc)

    threading.Thread(target=run, name="lsmt-open-bulk-engine", daemon=True).start()
    return future


def lower_this_thread(nice: int) -> None:
    """Raise this thread's nice value by ``nice`` (up to 19). Where the system refuses (a
    sandbox's syscall filter), the engine still opens, without the priority: logged."""
    tid = threading.get_native_id()  # a new thread starts with its creator's value
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:
        log.warning("thread %s keeps its priority: setpriority failed (%s)", tid, exc)
