"""How the server opens a route's engine: ``default_loader``, the registry's loader, and
``bulk_twin_loader``, its bulk twin's (server/bulk_twin.py).

An LSMT bundle's route comes from the on-disk engine cache when it holds it, else it is
assembled, built and stored there; a ready model (an Argos package) opens from its folder.
Either engine is a CTranslate2 translator or a hybrid engine, opened with the settings'
device, compute type and threads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from lsmt_bundle.contracts import Engine
from lsmt_bundle.packages import ModelPackage, ServedModel
from lsmt_core.routes import Route

from .express import start_niced
from .settings import Settings

if TYPE_CHECKING:
    from lsmt_bundle.engine_cache import EngineCache

# loader(bundle, route, settings) -> (translator, nbytes)
Loader = Callable[[ServedModel, Route, Settings], tuple[Engine, int]]


class EngineOptions(TypedDict):
    """What a route's engine is opened with (``lsmt_bundle.engines.open_engine``'s options)."""

    device: str
    device_index: int
    compute_type: str
    inter_threads: int
    intra_threads: int


def default_loader(bundle: ServedModel, route: Route, settings: Settings) -> tuple[Engine, int]:
    """The route's engine (a CTranslate2 translator, or a hybrid engine for an LSTM-decoder
    bundle): from the engine cache when it holds it, else assembled (numpy), built, and
    stored in the cache for the next cold start; a ready model's (an Argos package's) is
    opened from its folder. One translator with a worker per batch slot, the express lane's
    included (``settings.engine_workers``)."""
    return open_route(bundle, route, settings, settings.engine_workers)


def bulk_twin_loader(bundle: ServedModel, route: Route, settings: Settings) -> tuple[Engine, int]:
    """The route's bulk twin (server/bulk_twin.py): the same engine with a worker per bulk
    slot, opened (and assembled, without a cache hit) on a thread ``settings.bulk_nice``
    nicer, so that every CTranslate2 thread it starts runs niced (server/express.py)."""
    workers = settings.resolved_inter_threads
    niced = start_niced(settings.bulk_nice, lambda: open_route(bundle, route, settings, workers))
    return niced.result()


def open_route(
    bundle: ServedModel, route: Route, settings: Settings, workers: int
) -> tuple[Engine, int]:
    """The route's engine with ``workers`` CTranslate2 workers (``default_loader``)."""
    from lsmt_bundle.ct2 import saved_quantization
    from lsmt_bundle.engine_cache import load_route_engine
    from lsmt_bundle.engines import open_engine

    options: EngineOptions = {
        "device": settings.resolved_device,
        "device_index": settings.device_index,
        "compute_type": settings.resolved_compute_type,
        "inter_threads": workers,
        "intra_threads": settings.resolved_intra_threads,
    }
    if isinstance(bundle, ModelPackage):
        engine, nbytes = bundle.open_engine(open_engine, **options)
    else:
        quantization = saved_quantization(settings.resolved_compute_type)
        cache = engine_cache(settings)
        engine, nbytes = load_route_engine(cache, bundle, route, quantization, **options)
    return engine, nbytes


@functools.cache
def _engine_cache(root: Path, max_bytes: int) -> EngineCache:
    from lsmt_bundle.engine_cache import EngineCache

    return EngineCache(root, max_bytes)


def engine_cache(settings: Settings) -> EngineCache | None:
    """The engine cache of ``settings`` (one per directory and bound), or None."""
    if settings.engine_cache_dir is None:
        return None
    return _engine_cache(settings.engine_cache_dir, settings.engine_cache_bytes)
