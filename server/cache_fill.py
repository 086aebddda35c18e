"""The engine cache filled in the background, so that a route's first request loads a built
engine instead of assembling one (issue 49: a cold route's first request).

With an engine cache (``LSMT_ENGINE_CACHE_DIR``) and ``engine_cache_fill`` on, after the
warm-up (and again after a reload) every engine of the served bundles that the cache lacks is
built and stored (``lsmt_bundle.engine_cache.fill_entry``: what ``python -m model_export
build-engines --cache`` does offline), one at a time on one thread at the lowest CPU priority,
so that requests come first. Nothing is loaded: the registry loads a route's engine when the
route is asked for, as before, from the cache. Each engine's outcome is counted in
``lsmt_engine_cache_fills_total`` (built, present, failed). A cache that cannot take an
engine (disk full, read-only) ends the fill with a warning, counted as the cache's error;
reaching the cache's bound (``engine_cache_bytes``), where the next engine would evict one
already there, ends it too (so a bundle larger than the cache does not churn it); a bundle
without recorded file digests is not cacheable and is passed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from lsmt_bundle.bundle import Bundle
from lsmt_core.routes import Route, route_key

from .engine_loader import engine_cache
from .express import PER_THREAD_NICE, lower_this_thread
from .state import AppState

if TYPE_CHECKING:
    from lsmt_bundle.engine_cache import EngineCache

log = logging.getLogger("server")


def start_cache_fill(state: AppState) -> None:
    """Start a fill pass in the background; one still running is cancelled first (a pass
    covers every served bundle: what that one built is found there)."""
    if engine_cache(state.settings) is None or not state.settings.engine_cache_fill:
        return
    previous = state.cache_fill_task
    if previous is not None:
        previous.cancel()
    state.cache_fill_task = asyncio.create_task(_after(previous, state))


async def stop_cache_fill(state: AppState) -> None:
    task = state.cache_fill_task
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def _after(previous: asyncio.Task[None] | None, state: AppState) -> None:
    for task in (previous, state.warmup_task):  # its end; and the warm-up's loads come first
        if task is not None:
            await asyncio.wait({task})
    await fill_engine_cache(state)


def _fill(
    cache: EngineCache, bundle: Bundle, route: Route, quantization: str | None
) -> tuple[bool, int]:
    """The route's engine into the cache (in the fill's thread): whether it was there, and
    its entry's bytes."""
    from lsmt_bundle.engine_cache import fill_entry
    from lsmt_bundle.engines import return_freed_memory

    entry, present = fill_entry(cache, bundle, route, quantization)
    if not present:
        return_freed_memory()  # what the assembly freed, back to the system
    return present, sum(f.stat().st_size for f in entry.iterdir() if f.is_file())


def _cache_keys(bundle: Bundle, routes: list[Route], quantization: str | None) -> list[str | None]:
    """Each route's engine-cache key (None: the bundle records no digests)."""
    from lsmt_bundle.engine_cache import engine_key

    return [engine_key(bundle, route, quantization) for route in routes]


def _bytes(cache: EngineCache) -> int:
    try:
        return cache.size()
    except OSError:  # an unusable cache directory: the build that follows says so
        return 0


def _lowest_priority() -> None:
    if PER_THREAD_NICE:
        lower_this_thread(19)


async def fill_engine_cache(state: AppState) -> dict[str, int]:
    """One pass over the served bundles' engines; the count of each outcome."""
    from lsmt_bundle.ct2 import saved_quantization

    cache = engine_cache(state.settings)
    quantization = saved_quantization(state.settings.resolved_compute_type)
    counts = dict.fromkeys(("built", "present", "failed"), 0)
    if cache is None:  # no cache configured: nothing to fill
        return counts
    entry_bytes = 0  # the last entry's: the next one's size, near enough
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    pool = ThreadPoolExecutor(1, "lsmt-cache-fill", initializer=_lowest_priority)
    try:
        used = await loop.run_in_executor(pool, _bytes, cache)  # then counted as it builds
        for served in list(state.bundles):
            bundle = served.bundle
            if not isinstance(bundle, Bundle):  # a ready model is its own engine: no build
                continue
            seen: set[str] = set()  # routes that share an engine share its entry
            keys = await loop.run_in_executor(
                pool, _cache_keys, bundle, served.routes, quantization
            )
            for route, key in zip(served.routes, keys, strict=True):
                if key is None:  # no digests recorded: nothing of this bundle is cacheable
                    log.info("engine cache fill passes over bundle %s (no digests)", served.name)
                    break
                if key in seen:
                    continue
                seen.add(key)
                if used + entry_bytes > cache.max_bytes and not (cache.root / key).is_dir():
                    # the next one would evict an entry: the fill would churn its own work
                    log.info("engine cache fill stopped at the cache's bound (%d bytes)",
                             cache.max_bytes)  # fmt: skip
                    return counts
                try:
                    present, entry_bytes = await loop.run_in_executor(
                        pool, _fill, cache, bundle, route, quantization
                    )
                except OSError as exc:
                    cache.skipped(exc)  # warned and counted there
                    log.warning("engine cache fill stopped: %s", exc)
                    return counts
                except Exception:
                    log.exception(
                        "engine cache fill: %s (%s) failed", route_key(route), served.name
                    )
                    outcome = "failed"
                else:
                    outcome = "present" if present else "built"
                    used += 0 if present else entry_bytes
                counts[outcome] += 1
                state.metrics.engine_cache_fills.labels(outcome).inc()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    log.info(
        "engine cache filled in %.1f s: %d built, %d there already, %d failed",
        time.perf_counter() - started,
        counts["built"],
        counts["present"],
        counts["failed"],
    )
    return counts
