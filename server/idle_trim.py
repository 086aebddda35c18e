"""Freed memory given back to the system when the translations pause (issue 49: the memory a
server holds after every route has served).

Under concurrent traffic CTranslate2's worker threads allocate their batches' buffers from
glibc's arenas (one per thread, up to eight per core), and what they free stays there, spread
over half-used pages that glibc does not return by itself. Measured on the default model
(page traffic from 32 users for 20 s, 2-core AMD EPYC, docs/benchmarks.md): 753 MiB resident
after the traffic and 7 s later, 624 MiB after one ``malloc_trim(0)``. So once no batch has
ended for ``memory_trim_idle_s`` after some did, the server trims once, on a worker thread;
never while batches run, whose next buffers would fault the pages straight back in. The
trims are counted in ``lsmt_memory_trims_total``; the resident memory before and after is
logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Protocol

from lsmt_bundle.engines import return_freed_memory

from .metrics import Metrics

log = logging.getLogger("server")


class Batches(Protocol):
    releases: int  # engine uses ended so far (a batch's, a warm-up's): server.engine_registry


async def trim_when_idle(batches: Batches, idle_s: float, metrics: Metrics) -> None:
    """Trim once after every pause of ``idle_s`` that follows batches; runs until cancelled."""
    seen, quiet_since, owed = batches.releases, time.monotonic(), False
    while True:
        await asyncio.sleep(min(max(idle_s / 4, 0.05), 0.5))
        now = time.monotonic()
        if batches.releases != seen:
            seen, quiet_since, owed = batches.releases, now, True
        elif owed and now - quiet_since >= idle_s:
            owed = False
            before = resident_bytes()
            await asyncio.to_thread(return_freed_memory)
            metrics.memory_trims.inc()
            log.info(
                "translations paused for %.1f s: freed memory returned, resident %d -> %d MiB",
                idle_s,
                before >> 20,
                resident_bytes() >> 20,
            )


def resident_bytes() -> int:
    """This process's resident memory (Linux; 0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
