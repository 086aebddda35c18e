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

All registry state is touched only from the event loop; the blocking work (assembling,
loading, restoring from host) runs in a thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from lsmt_bundle.packages import ModelPackage, ServedModel
from lsmt_core.routes import Route, route_key

from .bundles import ServedBundle, ServedRoute
from .express import RouteEngine, open_lanes
from .metrics import Metrics
from .schemas import EngineInfo
from .settings import Settings

if TYPE_CHECKING:
    from lsmt_bundle.engine_cache import EngineCache

log = logging.getLogger("server.engines")

# loader(bundle, route, settings) -> (translator, nbytes)
Loader = Callable[[ServedModel, Route, Settings], tuple[RouteEngine, int]]

# How long eviction waits for an engine's runtime to count its last batch done (module doc):
# the count lags by a thread switch, so this is only reached by a batch that really runs on.
SETTLE_S = 0.5


class EngineOptions(TypedDict):
    """What a route's engine is opened with (``lsmt_bundle.engines.open_engine``'s options)."""

    device: str
    device_index: int
    compute_type: str
    inter_threads: int
    intra_threads: int


def wait_until_idle(translator: RouteEngine, timeout: float = SETTLE_S) -> bool:
    """Whether the engine's runtime counts no batch in flight (``num_active_batches``),
    waiting up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while translator.num_active_batches:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


def default_loader(
    bundle: ServedModel, route: Route, settings: Settings
) -> tuple[RouteEngine, int]:
    """The route's engine (a CTranslate2 translator, or a hybrid engine for an LSTM-decoder
    bundle): from the engine cache when it holds it, else assembled (numpy), built, and
    stored in the cache for the next cold start; a ready model's (an Argos package's) is
    opened from its folder. With ``settings.express_engine_apart`` it is a ``LaneEngines``
    pair of the same files: the bulk slots' (niced) and the express lane's."""
    from lsmt_bundle.ct2 import saved_quantization
    from lsmt_bundle.engine_cache import load_route_engine
    from lsmt_bundle.engines import open_engine

    opener = open_lanes(settings.bulk_nice) if settings.express_engine_apart else open_engine
    options: EngineOptions = {
        "device": settings.resolved_device,
        "device_index": settings.device_index,
        "compute_type": settings.resolved_compute_type,
        "inter_threads": settings.engine_workers,
        "intra_threads": settings.resolved_intra_threads,
    }
    if isinstance(bundle, ModelPackage):
        return bundle.open_engine(opener, **options)
    quantization = saved_quantization(settings.resolved_compute_type)
    cache = engine_cache(settings)
    return load_route_engine(cache, bundle, route, quantization, opener=opener, **options)


@functools.cache
def _engine_cache(root: Path, max_bytes: int) -> EngineCache:
    from lsmt_bundle.engine_cache import EngineCache

    return EngineCache(root, max_bytes)


def engine_cache(settings: Settings) -> EngineCache | None:
    """The engine cache of ``settings`` (one per directory and bound), or None."""
    if settings.engine_cache_dir is None:
        return None
    return _engine_cache(settings.engine_cache_dir, settings.engine_cache_bytes)


class State(StrEnum):
    UNLOADED = "unloaded"  # on disk only (never loaded, or evicted)
    LOADING = "loading"
    LOADED = "loaded"  # on the device tier, ready
    HOST = "host"  # CUDA: parked in host memory
    FAILED = "failed"


class EngineUnavailable(Exception):
    def __init__(self, key: str, reason: str, retry_after: float) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason
        self.retry_after = retry_after


@dataclass
class EngineSlot:
    """An engine key's place in the registry: its state, the engine while resident
    (``lsmt_bundle.contracts.Engine``, or the express pair), and what its loads and batches
    did."""

    key: str
    served: ServedBundle
    route: Route  # the route used to assemble it
    state: State = State.UNLOADED
    translator: RouteEngine | None = None
    nbytes: int = 0
    last_used: float = 0.0  # monotonic, for LRU
    last_used_wall: float | None = None
    load_seconds: float | None = None
    loads: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    error: str | None = None
    retry_at: float = 0.0
    refcount: int = 0  # batches in flight
    waiters: int = 0  # batches waiting to acquire it (protects a fresh load)
    draining: bool = False  # a load waits for its memory: no new batches
    load_future: asyncio.Future[None] | None = field(default=None, repr=False)

    @property
    def busy(self) -> bool:
        return self.refcount > 0 or (self.waiters > 0 and not self.draining)

    def resident(self) -> RouteEngine:
        """The engine of a slot ``acquire`` returned: loaded until it is released."""
        if self.translator is None:
            raise RuntimeError(f"engine {self.key} is not loaded")
        return self.translator


class BudgetExhausted(Exception):
    """No room on the device in time: transient, not a failure of the key."""


class EngineRegistry:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        loader: Loader | None = None,
        load_executor: ThreadPoolExecutor | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.loader = loader or default_loader
        self.device = settings.resolved_device
        self.device_budget = settings.resolved_device_budget
        self.host_budget = settings.host_budget_bytes
        metrics.engine_budget_bytes.labels("device").set(self.device_budget)
        metrics.engine_budget_bytes.labels("host").set(self.host_budget)
        self._executor = load_executor or ThreadPoolExecutor(
            settings.load_workers, thread_name_prefix="lsmt-load"
        )
        self._own_executor = load_executor is None
        self.engines: dict[str, EngineSlot] = {}
        self._reserved = 0  # bytes promised to loads in progress
        self._changed = asyncio.Event()  # replaced and set on every state change
        self.load_count = 0  # total successful loads, all keys (tests)
        self._tasks: set[asyncio.Task[None]] = set()

    # Accounting ------------------------------------------------------------------------

    def tier_bytes(self, state: State) -> int:
        return sum(e.nbytes for e in self.engines.values() if e.state == state)

    @property
    def device_bytes(self) -> int:
        return self.tier_bytes(State.LOADED)

    @property
    def host_bytes(self) -> int:
        return self.tier_bytes(State.HOST)

    def update_gauges(self) -> None:
        m = self.metrics
        m.engines_failed.set(sum(e.state == State.FAILED for e in self.engines.values()))
        for tier, state in (("device", State.LOADED), ("host", State.HOST)):
            es = [e for e in self.engines.values() if e.state == state]
            m.engines_loaded.labels(tier).set(len(es))
            m.engine_bytes.labels(tier).set(sum(e.nbytes for e in es))
            for e in self.engines.values():
                m.engine_resident.labels(e.key, tier).set(1 if e.state == state else 0)

    def _engine(self, served_route: ServedRoute) -> EngineSlot:
        key = served_route.engine_key
        e = self.engines.get(key)
        if e is None:
            e = self.engines[key] = EngineSlot(key, served_route.served, served_route.route)
        return e

    # Public API ------------------------------------------------------------------------

    def check(self, served_route: ServedRoute) -> None:
        """Raise EngineUnavailable at once when the key failed and its retry is not due."""
        e = self.engines.get(served_route.engine_key)
        if e is not None and e.state == State.FAILED:
            wait = e.retry_at - time.monotonic()
            if wait > 0:
                raise EngineUnavailable(e.key, e.error or "load failed", wait)

    async def acquire(self, served_route: ServedRoute) -> EngineSlot:
        """The loaded engine of the route, with its reference count raised (call release)."""
        e = self._engine(served_route)
        e.waiters += 1
        try:
            while True:
                if e.state == State.LOADED:
                    if e.draining:  # wait until it is evicted (then reload) or spared
                        await self._wait_change(0.5)
                        continue
                    e.refcount += 1
                    self._touch(e)
                    return e
                if e.state == State.LOADING:
                    assert e.load_future is not None
                    await asyncio.shield(e.load_future)  # raises EngineUnavailable on failure
                    continue
                if e.state == State.FAILED:
                    wait = e.retry_at - time.monotonic()
                    if wait > 0:
                        raise EngineUnavailable(e.key, e.error or "load failed", wait)
                # UNLOADED, HOST, or FAILED with its retry due: this caller loads it.
                fut = asyncio.get_running_loop().create_future()
                fut.add_done_callback(lambda f: f.cancelled() or f.exception())
                e.load_future = fut
                prior = e.state
                e.state = State.LOADING
                task = asyncio.create_task(self._load(e, prior, fut))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            e.waiters -= 1
            self._notify()

    async def retire(self, served_route: ServedRoute) -> None:
        """Evict the route's engine once no batch uses it; it takes no new batches meanwhile
        (a batch that waits for it loads it again after). The cluster's multiplexer evicting
        a key (``server.cluster``)."""
        e = self.engines.get(served_route.engine_key)
        if e is None:
            return
        try:
            while True:
                if e.state == State.LOADING and e.load_future is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(e.load_future)
                    continue
                if e.state == State.HOST:
                    self._drop(e)
                    self.update_gauges()
                if e.state != State.LOADED:
                    return
                if not e.busy:
                    self._evict(e)
                    return
                e.draining = True
                await self._wait_change(0.5)
        finally:
            if e.draining:
                e.draining = False
                self._notify()

    def release(self, e: EngineSlot) -> None:
        e.refcount -= 1
        self._touch(e)
        self._notify()

    @staticmethod
    def _touch(e: EngineSlot) -> None:
        e.last_used = time.monotonic()
        e.last_used_wall = time.time()

    def _notify(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    async def _wait_change(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def close(self) -> None:
        for e in self.engines.values():
            e.translator = None
            if e.state in (State.LOADED, State.HOST):
                e.state = State.UNLOADED
        self.update_gauges()
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def failed_engines(self) -> dict[str, str | None]:
        """Key -> error of every engine whose load failed (retried after its backoff)."""
        return {e.key: e.error for e in self.engines.values() if e.state == State.FAILED}

    def engine_infos(self, bundles: list[ServedBundle]) -> list[EngineInfo]:
        """Every engine key of ``bundles``, in their order, with its state (``unloaded`` for
        a key never asked for): the engines of ``GET /v1/models``."""
        now = time.monotonic()
        return [
            self._info(served, key, self.engines.get(key), now)
            for served in bundles
            for key in served.engine_keys
        ]

    def _info(self, served: ServedBundle, key: str, e: EngineSlot | None, now: float) -> EngineInfo:
        routes = [route_key(r) for r in served.routes_of_key(key)]
        if e is None:
            return EngineInfo.unloaded(key, served.name, routes)
        failed = e.state == State.FAILED
        resident = e.state in (State.LOADED, State.HOST)
        return EngineInfo(
            key=key,
            bundle=served.name,
            routes=routes,
            state=e.state.value,
            device=self.device if e.state == State.LOADED else ("cpu" if resident else None),
            bytes=e.nbytes if resident else 0,
            last_used=_iso(e.last_used_wall),
            load_seconds=e.load_seconds,
            loads=e.loads,
            failures=e.failures,
            in_flight_batches=e.refcount,
            error=e.error if failed else None,
            retry_in_s=round(max(0.0, e.retry_at - now), 3) if failed else None,
        )

    # Loading ---------------------------------------------------------------------------

    def _estimate(self, e: EngineSlot) -> int:
        if e.nbytes:
            return e.nbytes
        same = [x.nbytes for x in self.engines.values() if x.served is e.served and x.nbytes]
        return max(same, default=0)

    async def _load(self, e: EngineSlot, prior: State, fut: asyncio.Future[None]) -> None:
        t0 = time.perf_counter()
        estimate = self._estimate(e)
        try:
            translator, nbytes = await self._load_within_budget(e, prior, estimate)
        except BudgetExhausted as exc:
            self._load_postponed(e, prior, fut, exc)
            return
        except Exception as exc:
            self._load_failed(e, fut, exc)
            return
        self._load_done(e, fut, translator, nbytes, time.perf_counter() - t0)

    async def _load_within_budget(
        self, e: EngineSlot, prior: State, estimate: int
    ) -> tuple[RouteEngine, int]:
        """Room for the estimate (reserved while loading), the load, then room for the
        engine's actual size when it came out larger."""
        if prior == State.HOST:
            # Leaves the host tier while it moves back (counted as a reservation).
            e.state = State.LOADING
            estimate = e.nbytes
        await self._make_room(estimate, e)
        self._reserved += estimate
        try:
            translator, nbytes = await self._assemble_or_restore(e, prior)
            nbytes = int(nbytes)
            if nbytes > self.device_budget:
                raise MemoryError(
                    f"engine needs {nbytes} bytes but the device budget is "
                    f"{self.device_budget} bytes (LSMT_DEVICE_BUDGET_BYTES)"
                )
        except Exception:
            self._reserved -= estimate
            raise
        self._reserved -= estimate
        if nbytes > estimate:
            await self._make_room(nbytes, e)
        return translator, nbytes

    async def _assemble_or_restore(self, e: EngineSlot, prior: State) -> tuple[RouteEngine, int]:
        """(translator, nbytes): moved back from the host tier, or built by the loader."""
        loop = asyncio.get_running_loop()
        if prior == State.HOST and e.translator is not None:
            await loop.run_in_executor(self._executor, e.translator.load_model)
            return e.translator, e.nbytes
        return await loop.run_in_executor(
            self._executor, self.loader, e.served.bundle, e.route, self.settings
        )

    def _load_postponed(
        self, e: EngineSlot, prior: State, fut: asyncio.Future[None], exc: BudgetExhausted
    ) -> None:
        # Transient: the engine goes back to where it was; no failure, no backoff.
        if prior != State.HOST:
            e.translator = None
        e.state = State.HOST if prior == State.HOST and e.translator is not None else State.UNLOADED
        self.update_gauges()
        self._notify()
        fut.set_exception(EngineUnavailable(e.key, str(exc), 1.0))

    def _load_failed(self, e: EngineSlot, fut: asyncio.Future[None], exc: Exception) -> None:
        e.translator = None
        e.nbytes = 0
        e.state = State.FAILED
        e.failures += 1
        e.consecutive_failures += 1
        delay = min(
            self.settings.load_retry_initial_s * 2 ** (e.consecutive_failures - 1),
            self.settings.load_retry_max_s,
        )
        e.retry_at = time.monotonic() + delay
        full = _reason(exc)
        # Clients see the reason without the server's directories.
        e.error = full.replace(f"{e.served.path}/", "").replace(str(e.served.path), "")
        self.metrics.engine_load_failures.labels(e.key).inc()
        log.error("engine %s failed to load (retry in %.1fs): %s", e.key, delay, full)
        self.update_gauges()
        self._notify()
        fut.set_exception(EngineUnavailable(e.key, e.error, delay))

    def _load_done(
        self,
        e: EngineSlot,
        fut: asyncio.Future[None],
        translator: RouteEngine,
        nbytes: int,
        dt: float,
    ) -> None:
        e.translator = translator
        e.nbytes = nbytes
        e.state = State.LOADED
        e.error = None
        e.consecutive_failures = 0
        e.loads += 1
        e.load_seconds = dt
        e.last_used = time.monotonic()
        e.last_used_wall = time.time()
        self.load_count += 1
        self.metrics.engine_loads.labels(e.key).inc()
        self.metrics.engine_load_seconds.labels(e.key).observe(dt)
        self.update_gauges()
        log.info("engine %s loaded: %d bytes in %.3fs", e.key, nbytes, dt)
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
            while self.device_bytes + self._reserved + need > self.device_budget:
                loaded = [
                    x for x in self.engines.values() if x.state == State.LOADED and x is not loading
                ]
                idle = [x for x in loaded if not x.busy]
                if idle:
                    self._evict(min(idle, key=lambda x: (not x.draining, x.last_used)))
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise BudgetExhausted(
                        f"device budget of {self.device_budget} bytes is held by engines in "
                        f"use; {need} more bytes needed"
                    )
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

    def _evict(self, e: EngineSlot) -> None:
        t0 = time.perf_counter()
        try:
            self._move_out(e)
        finally:
            self.metrics.engine_eviction_seconds.labels("device").observe(time.perf_counter() - t0)

    def _move_out(self, e: EngineSlot) -> None:
        self.metrics.engine_evictions.labels("device").inc()
        translator = e.translator
        if translator is not None:  # else nothing is resident: the slot is only dropped
            if not wait_until_idle(translator):
                self.metrics.engine_evicted_busy.inc()
                log.warning("engine %s still runs a batch as it is evicted", e.key)
            if self._to_host(e, translator):
                return
        self._drop(e)
        self.update_gauges()
        self._notify()

    def _to_host(self, e: EngineSlot, translator: RouteEngine) -> bool:
        """CUDA with room in the host tier: park the engine there (dropping the host tier's
        LRU engines past its budget); whether it moved."""
        if not (self.device == "cuda" and self.host_budget > 0 and e.nbytes <= self.host_budget):
            return False
        try:
            translator.unload_model(to_cpu=True)
        except Exception as exc:
            log.warning("unload_model(to_cpu=True) failed for %s: %s", e.key, exc)
        if translator.model_is_loaded:
            log.info("engine %s still loaded after unload_model(to_cpu=True); dropping", e.key)
            return False
        e.state = State.HOST
        e.draining = False
        log.info("engine %s moved to host memory", e.key)
        while self.host_bytes > self.host_budget:
            hosted = [x for x in self.engines.values() if x.state == State.HOST]
            t_host = time.perf_counter()
            self._drop(min(hosted, key=lambda x: x.last_used))
            self.metrics.engine_evictions.labels("host").inc()
            self.metrics.engine_eviction_seconds.labels("host").observe(
                time.perf_counter() - t_host
            )
        self.update_gauges()
        return True

    def _drop(self, e: EngineSlot) -> None:
        t = e.translator
        e.translator = None
        e.state = State.UNLOADED
        e.draining = False
        if t is not None:
            with contextlib.suppress(Exception):
                t.unload_model()
        log.info("engine %s evicted", e.key)


def _reason(exc: BaseException) -> str:
    msg = str(exc).strip() or type(exc).__name__
    name = type(exc).__name__
    return msg if name in msg else f"{name}: {msg}"


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
