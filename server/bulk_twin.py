"""The bulk twin: a route's second translator, niced, open only while the route has documents
and short requests at once.

On the CPU a short request decodes faster beside documents when the documents' batches run on
threads of their own with a higher nice value (server/express.py; docs/benchmarks.md: its p95
2.65x alone, against 5.1x when every batch shares one translator's threads). Holding that
second translator for every engine doubled the engines' memory, though most routes never see
both kinds of work at once. So an engine is one translator, shared by the express lane and the
bulk slots, and ``BulkTwins`` gives a route a twin (``server.engine_loader.bulk_twin_loader``)
only while it is worth one:

- It opens when the batcher sees a document's batch (a request of more sentences than the
  express lane takes, and of at least ``bulk_twin_min_sentences``) and a short request's work
  on the route at once (``want``); never for short requests only, nor for documents only, nor
  for requests of a few sentences (a web page's: under that traffic every route would hold a
  twin, whose loads and bytes cost more than it gives). It opens in the background (niced); the
  batches meanwhile run on the engine.
- It opens only when its bytes fit in the device budget beside the engines: a twin never
  evicts an engine (else: ``skipped``, tried again after the grace). From then on its bytes
  count in the budget, the gauges and ``/v1/models``.
- Documents' batches run on it while it is open; everything else runs on the engine.
- It is dropped once the route has run no document batch for ``bulk_twin_grace_s``, when
  its engine is evicted, or when a load needs its bytes (idle twins go before any engine, a
  busy one first takes no new batches); never under a running batch.

Touched only from the event loop, like the registry it belongs to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Protocol

from lsmt_bundle.contracts import Engine

from .engine_slots import EngineSlot, State, wait_until_idle
from .metrics import Metrics
from .settings import Settings

if TYPE_CHECKING:
    from .engine_loader import Loader

log = logging.getLogger("server.bulk_twin")


class TwinsRegistry(Protocol):
    """What the twins use of ``server.engine_registry.EngineRegistry`` (which holds them: a
    Protocol, not an import of it, so the two modules do not import each other)."""

    settings: Settings
    metrics: Metrics
    executor: Executor
    slots: dict[str, EngineSlot]
    device_budget: int
    reserved: int  # bytes promised to loads in progress; a twin opening takes its share

    @property
    def device_bytes(self) -> int: ...

    def changed(self) -> None: ...


class BulkTwins:
    """The bulk twins of a registry's engines (the module docstring)."""

    def __init__(self, registry: TwinsRegistry, loader: Loader) -> None:
        self.registry = registry
        self.loader = loader
        self.enabled = registry.settings.bulk_twins
        self.grace_s = registry.settings.bulk_twin_grace_s
        self._tasks: set[asyncio.Task[None]] = set()

    def want(self, slot: EngineSlot) -> None:
        """The route has documents and short requests at once: open its twin if it has none,
        and if it fits in the budget."""
        twin = slot.twin
        if not self.enabled or twin.engine is not None or twin.opening:
            return
        if slot.state != State.LOADED or slot.draining or time.monotonic() < twin.retry_at:
            return
        registry = self.registry
        if registry.device_bytes + registry.reserved + slot.nbytes > registry.device_budget:
            self._event("skipped")
            twin.retry_at = time.monotonic() + self.grace_s
            return
        twin.opening = True
        task = asyncio.create_task(self._open(slot))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def for_documents(self, slot: EngineSlot) -> Engine:
        """The translator a document's batch runs on (its twin when open, else the engine);
        call ``documents_done`` with it when the batch has ended."""
        twin = slot.twin
        twin.documents += 1
        if twin.engine is not None and not twin.draining:
            twin.batches += 1
            return twin.engine
        return slot.resident()

    def documents_done(self, slot: EngineSlot, engine: Engine) -> None:
        twin = slot.twin
        twin.documents -= 1
        if engine is twin.engine:
            twin.batches -= 1
            if twin.draining and twin.batches == 0:
                self._drop(slot, "a load needed its bytes")
        if twin.documents == 0:
            twin.documents_ended = time.monotonic()
            self._drop_when_quiet(slot)

    def drop_idle(self) -> bool:
        """Drop the least recently used twin that runs no batch (a load needs room); whether
        one was."""
        idle = [s for s in self.registry.slots.values() if s.twin.engine and not s.twin.batches]
        if not idle:
            return False
        self._drop(min(idle, key=lambda s: s.last_used), "a load needed its bytes")
        return True

    def drain_busy(self) -> None:
        """Every twin running a batch takes no new ones, and is dropped when they end."""
        for slot in self.registry.slots.values():
            if slot.twin.engine is not None:
                slot.twin.draining = True

    def drop(self, slot: EngineSlot) -> None:
        """The slot's engine goes: its twin too (the slot runs no batch)."""
        if slot.twin.engine is not None:
            self._drop(slot, "its engine was evicted")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        for slot in self.registry.slots.values():
            slot.twin.engine, slot.twin.nbytes = None, 0

    # Opening and dropping ---------------------------------------------------------------

    async def _open(self, slot: EngineSlot) -> None:
        registry, twin = self.registry, slot.twin
        estimate, generation = slot.nbytes, slot.loads
        registry.reserved += estimate
        loop = asyncio.get_running_loop()
        try:
            engine, nbytes = await loop.run_in_executor(
                registry.executor, self.loader, slot.served.bundle, slot.route, registry.settings
            )
        except Exception as exc:
            self._event("failed")
            twin.retry_at = time.monotonic() + max(self.grace_s, 1.0)
            log.warning("bulk twin of %s failed to open: %s", slot.key, exc)
            return
        finally:
            registry.reserved -= estimate
            twin.opening = False
        gone = slot.state != State.LOADED or slot.loads != generation
        if gone or registry.device_bytes + registry.reserved + nbytes > registry.device_budget:
            engine.unload_model()  # its engine went meanwhile, or the room did
            return
        twin.engine, twin.nbytes, twin.draining = engine, int(nbytes), False
        self._event("opened")
        log.info("bulk twin of %s opened: %d bytes", slot.key, twin.nbytes)
        registry.changed()
        if twin.documents == 0:
            twin.documents_ended = time.monotonic()
            self._drop_when_quiet(slot)

    def _drop_when_quiet(self, slot: EngineSlot) -> None:
        """Drop the twin once the route has run no document batch for the grace."""
        if slot.twin.engine is None:
            return
        quiet = time.monotonic() - slot.twin.documents_ended
        if slot.twin.documents == 0 and quiet >= self.grace_s:
            self._drop(slot, "its documents stopped")
            return
        if slot.twin.documents == 0 and slot.twin.timer is None:  # again after the grace
            loop = asyncio.get_running_loop()
            slot.twin.timer = loop.call_later(self.grace_s - quiet, self._quiet_timer, slot)

    def _quiet_timer(self, slot: EngineSlot) -> None:
        slot.twin.timer = None
        self._drop_when_quiet(slot)

    def _drop(self, slot: EngineSlot, why: str) -> None:
        twin = slot.twin
        engine, twin.engine, twin.nbytes, twin.draining = twin.engine, None, 0, False
        if engine is None:
            return
        if not wait_until_idle(engine):  # a cancelled request's batch runs on
            log.warning("bulk twin of %s still runs a batch as it is dropped", slot.key)
        with contextlib.suppress(Exception):
            engine.unload_model()
        self._event("dropped")
        log.info("bulk twin of %s dropped: %s", slot.key, why)
        self.registry.changed()

    def _event(self, event: str) -> None:
        self.registry.metrics.bulk_twin_events.labels(event).inc()

    def update_gauges(self) -> None:
        twins = [s.twin for s in self.registry.slots.values() if s.twin.engine is not None]
        self.registry.metrics.bulk_twins.set(len(twins))
        self.registry.metrics.bulk_twin_bytes.set(sum(t.nbytes for t in twins))
