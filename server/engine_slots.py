"""An engine key's place in the registry (``server.engine_registry``): its state, its engine
while resident, what its loads and batches did, and what ``GET /v1/models`` reports of it.
A slot is touched only from the event loop, by the registry.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import StrEnum

from lsmt_bundle.contracts import Engine, Resident
from lsmt_core.routes import Route, route_key

from .bundles import ServedBundle
from .schemas import EngineInfo

# How long eviction waits for an engine's runtime to count its last batch done (the doc of
# ``server.engine_registry``): the count lags by a thread switch, so this is only reached by a
# batch that really runs on.
SETTLE_S = 0.5


def wait_until_idle(translator: Resident, timeout: float = SETTLE_S) -> bool:
    """Whether the engine's runtime counts no batch in flight (``num_active_batches``),
    waiting up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while translator.num_active_batches:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)
    return True


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
    (``lsmt_bundle.contracts.Engine``) and its bulk twin, and what its loads and batches did."""

    key: str
    served: ServedBundle
    route: Route  # the route used to assemble it
    state: State = State.UNLOADED
    translator: Engine | None = None
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
    twin: BulkTwin = field(default_factory=lambda: BulkTwin())

    @property
    def resident_bytes(self) -> int:
        """The bytes the budget counts for it: its engine's and its bulk twin's."""
        return self.nbytes + self.twin.nbytes

    @property
    def busy(self) -> bool:
        return self.refcount > 0 or (self.waiters > 0 and not self.draining)

    def resident(self) -> Engine:
        """The engine of a slot ``acquire`` returned: loaded until it is released."""
        if self.translator is None:
            raise RuntimeError(f"engine {self.key} is not loaded")
        return self.translator


@dataclass
class BulkTwin:
    """A slot's bulk twin (server/bulk_twin.py): a second, niced translator of its engine for
    the documents' batches, open only while the route has documents and short requests."""

    engine: Engine | None = None
    nbytes: int = 0  # while open
    opening: bool = False
    draining: bool = False  # a load needs its bytes: no new batches
    batches: int = 0  # batches running on it
    documents: int = 0  # document batches running on the route, on either translator
    documents_ended: float = 0.0  # monotonic: when the last of them ended
    retry_at: float = 0.0  # monotonic: no open before (failed, or no room)
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)  # the grace's check


class BudgetExhausted(Exception):
    """No room on the device in time: transient, not a failure of the key."""


def engine_info(
    served: ServedBundle, key: str, slot: EngineSlot | None, device: str, now: float
) -> EngineInfo:
    """What ``GET /v1/models`` reports of one engine key of ``served`` (``slot`` None: never
    asked for); ``device``: the registry's device tier."""
    routes = [route_key(r) for r in served.routes_of_key(key)]
    if slot is None:
        return EngineInfo.unloaded(key, served.name, routes)
    failed = slot.state == State.FAILED
    resident = slot.state in (State.LOADED, State.HOST)
    return EngineInfo(
        key=key,
        bundle=served.name,
        routes=routes,
        state=slot.state.value,
        device=device if slot.state == State.LOADED else ("cpu" if resident else None),
        bytes=slot.resident_bytes if resident else 0,
        bulk_twin_bytes=slot.twin.nbytes,
        last_used=_iso(slot.last_used_wall),
        load_seconds=slot.load_seconds,
        loads=slot.loads,
        failures=slot.failures,
        in_flight_batches=slot.refcount,
        error=slot.error if failed else None,
        retry_in_s=round(max(0.0, slot.retry_at - now), 3) if failed else None,
    )


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
