"""Threads of a niced translator on the CPU: how the bulk twin (server/bulk_twin.py) runs
its batches below the express lane's priority.

With one CTranslate2 translator per engine, a short request's batch runs on whichever worker
is free and shares the cores evenly with the documents' batches: on 2 cores its decoding took
25-27 ms at the tail against 9 ms alone (docs/benchmarks.md), a large part of its p95 beside
documents. The scheduler can favour it only if the documents' batches run on threads of their
own with a higher nice value: the bulk twin, a second translator of the same files, opened
while a route has both kinds of work.

Linux gives a new thread its creator's nice value, and CTranslate2 (and ONNX Runtime, for a
hybrid engine) start their worker and intra-op threads from the thread that opens the model.
Opening the twin on a thread of its own, niced first (``start_niced``), so lowers exactly its
threads (a hybrid engine's search loop runs in the caller's thread and keeps its priority).
That thread is thrown away because an unprivileged thread cannot lower its nice value again.
Elsewhere (no per-thread nice) the twin opens as it is.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("server.express")

# setpriority(PRIO_PROCESS, tid) changes one thread on Linux only (the whole process elsewhere).
PER_THREAD_NICE = sys.platform.startswith("linux")


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
