"""Engine registry: route -> engine key -> engine, loaded lazily under a byte budget.

- Nothing is assembled until a route is first asked for (the app may warm some up).
- One load per key at a time: concurrent requests for a cold key wait on the same load.
- A failed load marks that key ``failed`` with the reason; requests get 503 until the retry
  time (exponential backoff), then the next request tries again. Other keys are unaffected.
- Device tier: loaded engines, bounded by ``device_budget_bytes``; before (estimate) and after
  (actual size) a load the least recently used idle engines are evicted. An engine with
  batches in flight is never evicted (reference count). When only busy engines could make
  room, the least recently used one is marked ``draining``: it takes no new batches, and is
  evicted as soon as its running batches finish, so a busy engine cannot starve a cold one.
  Waiting for room is bounded by ``request_timeout_s``; running out answers 503 (not a
  load failure: no backoff).
- On CUDA an evicted engine first moves to the host tier (``unload_model(to_cpu=True)``,
  then ``model_is_loaded`` is checked: CTranslate2 silently keeps a model that is busy), and
  is dropped when the host tier exceeds ``host_budget_bytes``. On CPU eviction drops it.
- CTranslate2 counts a batch done only just after ``translate_batch`` has returned, and keeps
  a model it counts busy: eviction first waits (up to ``SETTLE_S``) for the engine's count of
  active batches to reach zero. An engine still busy then (a batch whose request was
  cancelled runs on) is counted in ``lsmt_engine_evicted_busy``: it cannot move to the host,
  and its memory is freed only when that batch ends.
- On the CPU an engine may have a bulk twin (``server.bulk_twin``), counted in the budget.

All registry state is touched only from the event loop; the blocking work (assembling,
loading, restoring from host) runs in a thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from lsmt_bundle.contracts import Engine

from .bulk_twin import BulkTwins
from .bundles import ServedBundle, ServedRoute
from .engine_loader import Loader, bulk_twin_loader, default_loader
from .engine_slots import (
    BudgetExhausted,
    EngineSlot,
    EngineUnavailable,
    State,
    engine_info,
    wait_until_idle,
)
from .metrics import Metrics
from .schemas import EngineInfo
from .settings import Settings

log = logging.getLogger("server.engine_registry")


class EngineRegistry:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        loader: Loader | None = None,
        load_executor: ThreadPoolExecutor | None = None,
        twin_loader: Loader | None = None,
    ) -> None:
        """``twin_loader`` opens a bulk twin (server/bulk_twin.py): by default
        ``bulk_twin_loader``, or ``loader`` where that is given (a test's engine)."""
        self.settings = settings
        self.metrics = metrics
        self.loader = loader or default_loader
        self.twins = BulkTwins(self, twin_loader or loader or bulk_twin_loader)
        self.device = settings.resolved_device
        self.device_budget = settings.resolved_device_budget
        self.host_budget = settings.host_budget_bytes
        metrics.engine_budget_bytes.labels("device").set(self.device_budget)
        metrics.engine_budget_bytes.labels("host").set(self.host_budget)
        self.executor = load_executor or ThreadPoolExecutor(
            settings.load_workers, thread_name_prefix="lsmt-load"
        )
        self._own_executor = load_executor is None
        self.slots: dict[str, EngineSlot] = {}
        self.reserved = 0  # bytes promised to loads in progress
        self._changed = asyncio.Event()  # replaced and set on every state change
        self.load_count = 0  # total successful loads, all keys (tests)
        self.releases = 0  # engine uses ended, all keys: the idle trim's clock (server.idle_trim)
        self._tasks: set[asyncio.Task[None]] = set()

    # Accounting ------------------------------------------------------------------------

    def tier_bytes(self, state: State) -> int:
        return sum(slot.resident_bytes for slot in self.slots.values() if slot.state == state)

    @property
    def device_bytes(self) -> int:
        return self.tier_bytes(State.LOADED)

    @property
    def host_bytes(self) -> int:
        return self.tier_bytes(State.HOST)

    def update_gauges(self) -> None:
        metrics = self.metrics
        metrics.engines_failed.set(sum(slot.state == State.FAILED for slot in self.slots.values()))
        for tier, state in (("device", State.LOADED), ("host", State.HOST)):
            resident = [slot for slot in self.slots.values() if slot.state == state]
            metrics.engines_loaded.labels(tier).set(len(resident))
            metrics.engine_bytes.labels(tier).set(sum(slot.resident_bytes for slot in resident))
            for slot in self.slots.values():
                metrics.engine_resident.labels(slot.key, tier).set(1 if slot.state == state else 0)
        self.twins.update_gauges()

    def _slot(self, served_route: ServedRoute) -> EngineSlot:
        key = served_route.engine_key
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = EngineSlot(key, served_route.served, served_route.route)
        return slot

    # Public API ------------------------------------------------------------------------

    def check(self, served_route: ServedRoute) -> None:
        """Raise EngineUnavailable at once when the key failed and its retry is not due."""
        slot = self.slots.get(served_route.engine_key)
        if slot is not None and slot.state == State.FAILED:
            wait = slot.retry_at - time.monotonic()
            if wait > 0:
                raise EngineUnavailable(slot.key, slot.error or "load failed", wait)

    async def acquire(self, served_route: ServedRoute) -> EngineSlot:
        """The loaded engine of the route, with its reference count raised (call release)."""
        slot = self._slot(served_route)
        slot.waiters += 1
        try:
            while True:
                if slot.state == State.LOADED:
                    if slot.draining:  # wait until it is evicted (then reload) or spared
                        await self._wait_change(0.5)
                        continue
                    slot.refcount += 1
                    self._touch(slot)
                    return slot
                if slot.state == State.LOADING:
                    assert slot.load_future is not None
                    await asyncio.shield(slot.load_future)  # raises EngineUnavailable on failure
                    continue
                if slot.state == State.FAILED:
                    wait = slot.retry_at - time.monotonic()
                    if wait > 0:
                        raise EngineUnavailable(slot.key, slot.error or "load failed", wait)
                # UNLOADED, HOST, or FAILED with its retry due: this caller loads it.
                fut = asyncio.get_running_loop().create_future()
                fut.add_done_callback(lambda f: f.cancelled() or f.exception())
                slot.load_future = fut
                prior = slot.state
                slot.state = State.LOADING
                task = asyncio.create_task(self._load(slot, prior, fut))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            slot.waiters -= 1
            self._notify()

    async def retire(self, served_route: ServedRoute) -> None:
        """Evict the route's engine once no batch uses it; it takes no new batches meanwhile
        (a batch that waits for it loads it again after). The cluster's multiplexer evicting
        a key (``server.cluster``)."""
        slot = self.slots.get(served_route.engine_key)
        if slot is None:
            return
        try:
            while True:
                if slot.state == State.LOADING and slot.load_future is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(slot.load_future)
                    continue
                if slot.state == State.HOST:
                    self._drop(slot)
                    self.update_gauges()
                if slot.state != State.LOADED:
                    return
                if not slot.busy:
                    self._evict(slot)
                    return
                slot.draining = True
                await self._wait_change(0.5)
        finally:
            if slot.draining:
                slot.draining = False
                self._notify()

    def release(self, slot: EngineSlot) -> None:
        slot.refcount -= 1
        self.releases += 1
        self._touch(slot)
        self._notify()

    @staticmethod
    def _touch(slot: EngineSlot) -> None:
        slot.last_used = time.monotonic()
        slot.last_used_wall = time.time()

    def changed(self) -> None:
        """Gauges and waiters told of a change (a bulk twin opened or dropped)."""
        self.update_gauges()
        self._notify()

    def _notify(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    async def _wait_change(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def close(self) -> None:
        await self.twins.close()
        for slot in self.slots.values():
            slot.translator = None
            if slot.state in (State.LOADED, State.HOST):
                slot.state = State.UNLOADED
        self.update_gauges()
        if self._own_executor:
            self.executor.shutdown(wait=False, cancel_futures=True)

    def failed_engines(self) -> dict[str, str | None]:
        """Key -> error of every engine whose load failed (retried after its backoff)."""
        return {slot.key: slot.error for slot in self.slots.values() if slot.state == State.FAILED}

    def engine_infos(self, bundles: list[ServedBundle]) -> list[EngineInfo]:
        """Every engine key of ``bundles``, in their order, with its state (``unloaded`` for
        a key never asked for): the engines of ``GET /v1/models``."""
        now = time.monotonic()
        return [
            engine_info(served, key, self.slots.get(key), self.device, now)
            for served in bundles
            for key in served.engine_keys
        ]

    # Loading ---------------------------------------------------------------------------

    def _estimate(self, slot: EngineSlot) -> int:
        if slot.nbytes:
            return slot.nbytes
        same = [x.nbytes for x in self.slots.values() if x.served is slot.served and x.nbytes]
        return max(same, default=0)

    async def _load(self, slot: EngineSlot, prior: State, fut: asyncio.Future[None]) -> None:
        t0 = time.perf_counter()
        estimate = self._estimate(slot)
        try:
            translator, nbytes = await self._load_within_budget(slot, prior, estimate)
        except BudgetExhausted as exc:
            self._load_postponed(slot, prior, fut, exc)
            return
        except Exception as exc:
            self._load_failed(slot, fut, exc)
            return
        self._load_done(slot, fut, translator, nbytes, time.perf_counter() - t0)

    async def _load_within_budget(
        self, slot: EngineSlot, prior: State, estimate: int
    ) -> tuple[Engine, int]:
        """Room for the estimate (reserved while loading), the load, then room for the
        engine's actual size when it came out larger."""
        if prior == State.HOST:
            # Leaves the host tier while it moves back (counted as a reservation).
            slot.state = State.LOADING
            estimate = slot.nbytes
        await self._make_room(estimate, slot)
        self.reserved += estimate
        try:
            translator, nbytes = await self._assemble_or_restore(slot, prior)
            nbytes = int(nbytes)
            if nbytes > self.device_budget:
                raise MemoryError(
                    f"engine needs {nbytes} bytes but the device budget is "
                    f"{self.device_budget} bytes (LSMT_DEVICE_BUDGET_BYTES)"
                )
        except Exception:
            self.reserved -= estimate
            raise
        self.reserved -= estimate
        if nbytes > estimate:
            await self._make_room(nbytes, slot)
        return translator, nbytes

    async def _assemble_or_restore(self, slot: EngineSlot, prior: State) -> tuple[Engine, int]:
        """(translator, nbytes): moved back from the host tier, or built by the loader."""
        loop = asyncio.get_running_loop()
        if prior == State.HOST and slot.translator is not None:
            await loop.run_in_executor(self.executor, slot.translator.load_model)
            return slot.translator, slot.nbytes
        return await loop.run_in_executor(
            self.executor, self.loader, slot.served.bundle, slot.route, self.settings
        )

    def _load_postponed(
        self, slot: EngineSlot, prior: State, fut: asyncio.Future[None], exc: BudgetExhausted
    ) -> None:
        # Transient: the engine goes back to where it was; no failure, no backoff.
        if prior != State.HOST:
            slot.translator = None
        slot.state = (
            State.HOST if prior == State.HOST and slot.translator is not None else State.UNLOADED
        )
        self.update_gauges()
        self._notify()
        fut.set_exception(EngineUnavailable(slot.key, str(exc), 1.0))

    def _load_failed(self, slot: EngineSlot, fut: asyncio.Future[None], exc: Exception) -> None:
        slot.translator = None
        slot.nbytes = 0
        slot.state = State.FAILED
        slot.failures += 1
        slot.consecutive_failures += 1
        delay = min(
            self.settings.load_retry_initial_s * 2 ** (slot.consecutive_failures - 1),
            self.settings.load_retry_max_s,
        )
        slot.retry_at = time.monotonic() + delay
        full = _reason(exc)
        # Clients see the reason without the server's directories.
        slot.error = full.replace(f"{slot.served.path}/", "").replace(str(slot.served.path), "")
        self.metrics.engine_load_failures.labels(slot.key).inc()
        log.error("engine %s failed to load (retry in %.1fs): %s", slot.key, delay, full)
        self.update_gauges()
        self._notify()
        fut.set_exception(EngineUnavailable(slot.key, slot.error, delay))

    def _load_done(
        self,
        slot: EngineSlot,
        fut: asyncio.Future[None],
        translator: Engine,
        nbytes: int,
        dt: float,
    ) -> None:
        slot.translator = translator
        slot.nbytes = nbytes
        slot.state = State.LOADED
        slot.error = None
        slot.consecutive_failures = 0
        slot.loads += 1
        slot.load_seconds = dt
        slot.last_used = time.monotonic()
        slot.last_used_wall = time.time()
        self.load_count += 1
        self.metrics.engine_loads.labels(slot.key).inc()
        self.metrics.engine_load_seconds.labels(slot.key).observe(dt)
        self.update_gauges()
        log.info("engine %s loaded: %d bytes in %.3fs", slot.key, nbytes, dt)
        self._notify()
        fut.set_result(None)

    async def _make_room(self, need: int, loading: EngineSlot) -> None:
        """Evict idle LRU engines until ``need`` more bytes fit in the device budget. When
        only busy engines could make room, mark the LRU one draining and wait for it."""
        # Runs on the event loop: every check-and-evict step is atomic; only the waits yield.
        need = min(need, self.device_budget)
        deadline = time.monotonic() + self.settings.request_timeout_s
        drained: list[EngineSlot] = []
        try:
            while self.device_bytes + self.reserved + need > self.device_budget:
                loaded = [
                    x for x in self.slots.values() if x.state == State.LOADED and x is not loading
                ]
                idle = [x for x in loaded if not x.busy]
                if self.twins.drop_idle():  # a bulk twin goes before any engine
                    continue
                if idle:
                    self._evict(min(idle, key=lambda x: (not x.draining, x.last_used)))
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BudgetExhausted(
                        f"device budget of {self.device_budget} bytes is held by engines in "
                        f"use; {need} more bytes needed"
                    )
                self.twins.drain_busy()
                if loaded and not any(x.draining for x in loaded):
                    victim = min(loaded, key=lambda x: x.last_used)
                    victim.draining = True
                    drained.append(victim)
                await self._wait_change(min(remaining, 0.5))
        finally:
            for x in drained:  # spared (or already evicted): take batches again
                if x.draining:
                    x.draining = False
                    self._notify()

    def _evict(self, slot: EngineSlot) -> None:
        t0 = time.perf_counter()
        try:
            self._move_out(slot)
        finally:
            self.metrics.engine_eviction_seconds.labels("device").observe(time.perf_counter() - t0)

    def _move_out(self, slot: EngineSlot) -> None:
        self.metrics.engine_evictions.labels("device").inc()
        translator = slot.translator
        if translator is not None:  # else nothing is resident: the slot is only dropped
            if not wait_until_idle(translator):
                self.metrics.engine_evicted_busy.inc()
                log.warning("engine %s still runs a batch as it is evicted", slot.key)
            if self._to_host(slot, translator):
                return
        self._drop(slot)
        self.update_gauges()
        self._notify()

    def _to_host(self, slot: EngineSlot, translator: Engine) -> bool:
        """CUDA with room in the host tier: park the engine there (dropping the host tier's
        LRU engines past its budget); whether it moved."""
        if not (self.device == "cuda" and self.host_budget > 0 and slot.nbytes <= self.host_budget):
            return False
        try:
            translator.unload_model(to_cpu=True)
        except Exception as exc:
            log.warning("unload_model(to_cpu=True) failed for %s: %s", slot.key, exc)
        if translator.model_is_loaded:
            log.info("engine %s still loaded after unload_model(to_cpu=True); dropping", slot.key)
            return False
        slot.state = State.HOST
        slot.draining = False
        log.info("engine %s moved to host memory", slot.key)
        while self.host_bytes > self.host_budget:
            hosted = [x for x in self.slots.values() if x.state == State.HOST]
            t_host = time.perf_counter()
            self._drop(min(hosted, key=lambda x: x.last_used))
            self.metrics.engine_evictions.labels("host").inc()
            self.metrics.engine_eviction_seconds.labels("host").observe(
                time.perf_counter() - t_host
            )
        self.update_gauges()
        return True

    def _drop(self, slot: EngineSlot) -> None:
        self.twins.drop(slot)
        translator = slot.translator
        slot.translator = None
        slot.state = State.UNLOADED
        slot.draining = False
        if translator is not None:
            with contextlib.suppress(Exception):
                translator.unload_model()
        log.info("engine %s evicted", slot.key)


def _reason(exc: BaseException) -> str:
    msg = str(exc).strip() or type(exc).__name__
    name = type(exc).__name__
    return msg if name in msg else f"{name}: {msg}"
