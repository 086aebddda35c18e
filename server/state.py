"""The app's state (``app.state.lsmt``, given to endpoints by ``server.dependencies``) and
what fills it at startup: the bundles opened, the warm-up planned and run; and the damaged
module files readiness reports."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from lsmt_core.routes import parse_route, route_key

from .bundles import ServedBundle, ServedRoute, open_bundle_dirs
from .engine_loader import engine_cache
from .engine_registry import EngineRegistry
from .failures import ServiceError
from .keys import KeyStore, anonymous_limits
from .metrics import Metrics
from .schemas import EngineInfo
from .service import TranslationService
from .settings import Settings

log = logging.getLogger("server")

WARMUP_TEXT = "Hello."


@dataclass(frozen=True)
class EnginesView:
    """The engines ``GET /v1/models`` lists, and the bytes they hold."""

    engines: list[EngineInfo]
    device_bytes: int
    host_bytes: int

    @classmethod
    def of(cls, registry: EngineRegistry | None, bundles: list[ServedBundle]) -> EnginesView:
        """This process's engines (none without a registry: a cluster ingress)."""
        if registry is None:
            return cls([], 0, 0)
        return cls(registry.engine_infos(bundles), registry.device_bytes, registry.host_bytes)


@dataclass
class AppState:
    settings: Settings
    metrics: Metrics
    bundles: list[ServedBundle] = field(default_factory=list)
    bundle_errors: dict[str, str] = field(default_factory=dict)
    # ready models (Argos packages, CTranslate2 folders) that could not be opened: the name
    # of their file or folder -> reason. Only their routes are missing: the server is ready
    # (status "degraded").
    disabled_models: dict[str, str] = field(default_factory=dict)
    registry: EngineRegistry | None = None
    service: TranslationService | None = None
    executor: ThreadPoolExecutor | None = None
    warmup_routes: list[ServedRoute] = field(default_factory=list)
    warmup_done: bool = False
    warmup_errors: dict[str, str] = field(default_factory=dict)
    warmup_task: asyncio.Task[None] | None = None
    cache_fill_task: asyncio.Task[None] | None = None  # server.cache_fill
    idle_trim_task: asyncio.Task[None] | None = None  # server.idle_trim
    started_at: float = field(default_factory=time.time)
    http_in_flight: int = 0  # requests inside the app (the batchers' early-dispatch hint)
    reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one reload at a time
    keys: KeyStore | None = None  # keys with limits and usage counters (server.keys)
    files_dir: Path | None = None  # translated files kept for download (routes.files)
    # The /metrics body when it is not this process's registry alone: the cluster ingress's
    # view over every replica (server.cluster_metrics).
    metrics_view: Callable[[], Awaitable[bytes]] | None = None
    # The engines of /v1/models when they are not this process's: the cluster ingress's view
    # over every translator replica (server.cluster_metrics).
    engines_view: Callable[[], Awaitable[EnginesView]] | None = None
    # False where a proxy in front writes X-Request-ID on every response (the cluster: Ray
    # Serve's, from the request's own header, which the request id is read from here too)
    request_id_header: bool = True


def load_bundles(state: AppState, bundles: list[ServedBundle] | None) -> None:
    """The injected ``bundles`` (opened already: ``python -m server``, tests, embedding),
    else the configured directories; a bundle that cannot be opened is recorded for
    readiness, not fatal."""
    if bundles is not None:
        state.bundles = list(bundles)
    else:

        def record(path: Path, exc: Exception) -> None:
            state.bundle_errors[str(path)] = f"{type(exc).__name__}: {exc}"
            log.error("bundle %s is invalid: %s", path, exc)

        def disable(path: Path, exc: Exception) -> None:
            state.disabled_models[path.name] = str(exc)
            log.error("model %s is not served: %s", path, exc)

        state.bundles.extend(open_bundle_dirs(state.settings.bundle_dirs, record, disable))
    for b in state.bundles:
        for key in b.engine_keys:
            state.metrics.init_engine(key)
    for name, problems in damaged_files(state).items():
        log.error("bundle %s has damaged module files: %s", name, problems)


def readiness_problems(state: AppState) -> list[str]:
    """Why the server is not ready (empty when it is): /readyz answers 503 and ``lsmt_ready``
    is 0 while any holds."""
    problems = []
    if state.bundle_errors:
        problems.append("invalid bundle(s)")
    if not state.bundles:
        problems.append("no bundle loaded")
    if not state.warmup_done:
        problems.append("warm-up not finished")
    if state.warmup_errors:
        problems.append("warm-up failed")
    return problems


def damaged_files(state: AppState) -> dict[str, dict[str, str]]:
    """Bundle name -> {file: problem} for files missing or not of their recorded size: a
    damaged module fails only its routes, and readiness says so from the start (a stat per
    file, so /readyz checks it on every call)."""
    out = {}
    for b in state.bundles:
        problems = b.bundle.check_sizes()
        if problems:
            out[b.name] = problems
    return out


def warmup_plan(state: AppState) -> list[ServedRoute]:
    """The routes to warm up: ``warmup_routes`` (none: the first route of each LSMT bundle, or
    of the first ready model when only packages are served: a folder of fifty packages would
    otherwise load fifty engines before the server is ready; ``all``: every route); a wanted
    route no bundle serves is recorded as a warm-up error."""
    wanted = state.settings.warmup_routes
    if wanted is None:
        firsts = [b for b in state.bundles if b.kind == "lsmt"] or state.bundles[:1]
        return [b.served_route(b.routes[0]) for b in firsts if b.routes]
    plan = []
    if [w.lower() for w in wanted] == ["all"]:
        return [b.served_route(r) for b in state.bundles for r in b.routes]
    for name in wanted:
        try:
            route = parse_route(name)
        except ValueError as exc:  # a setting's own words: recorded like a route not served
            state.warmup_errors[name] = str(exc)
            continue
        served = next((b for b in state.bundles if route in b.route_set), None)
        if served is None:
            state.warmup_errors[name] = "no bundle serves this route"
        else:
            plan.append(served.served_route(route))
    return plan


async def warm_up(state: AppState) -> None:
    """Load the language-ID model and every planned route's engine, translating one short text
    on each engine (routes that share an engine share its warm-up and its error). Engines load
    ``load_workers`` at a time, beside the language-ID model: an eager start with a bundle's
    every route is as long as its engines' loads divided among the load threads."""
    service = state.service
    assert service is not None
    opts = service.validate_options(1, 0, 16)
    by_engine: dict[str, list[ServedRoute]] = {}
    for served_route in state.warmup_routes:
        by_engine.setdefault(served_route.engine_key, []).append(served_route)
    slots = asyncio.Semaphore(state.settings.load_workers)

    async def warm(sharing: list[ServedRoute]) -> None:
        """One text on the engine the routes of ``sharing`` share."""
        names = [route_key(s.route) for s in sharing]
        (src, tgt), model = sharing[0].route, sharing[0].served.name
        async with slots:
            try:
                await service.translate([WARMUP_TEXT], src, tgt, opts, model=model)
                log.info("warm-up %s (%s) done", ", ".join(names), model)
                return
            except ServiceError as exc:
                error = exc.message
                log.error("warm-up %s failed: %s", names[0], error)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.exception("warm-up %s failed", names[0])
        state.warmup_errors.update(dict.fromkeys(names, error))

    await asyncio.gather(
        # the language-ID model, off the loop
        asyncio.to_thread(lambda: service.detection.detector),
        *(warm(sharing) for sharing in by_engine.values()),
    )
    state.warmup_done = True


def count_engine_cache_errors(settings: Settings, metrics: Metrics) -> Callable[[], None]:
    """Count in ``metrics`` each engine the engine cache could not store (its directory full
    or read-only: the engine is served all the same); the function that stops counting (apps
    in one process share the cache of a directory)."""
    cache = engine_cache(settings)
    if cache is None:
        return lambda: None

    def count(reason: str) -> None:
        metrics.engine_cache_errors.labels(reason).inc()

    cache.error_listeners.append(count)
    return lambda: cache.error_listeners.remove(count)


def open_key_store(state: AppState) -> None:
    """The keys database when configured; an in-memory one when only anonymous limits are
    (their counters then last as long as the process)."""
    if state.settings.keys_db is not None:
        state.keys = KeyStore(state.settings.keys_db)
    elif anonymous_limits(state.settings).any():
        state.keys = KeyStore(":memory:")
