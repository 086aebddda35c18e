"""How the server opens a route's engine: ``default_loader``, the registry's loader.

An LSMT bundle's route comes from the on-disk engine cache when it holds it, else it is
assembled, built and stored there; a ready model (an Argos package) opens from its folder.
Either engine is a CTranslate2 translator, a hybrid engine, or the express pair of one
(``server.express``), opened with the settings' device, compute type and threads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from lsmt_bundle.packages import ModelPackage, ServedModel
from lsmt_core.routes import Route

from .express import RouteEngine, open_lanes
from .settings import Settings

if TYPE_CHECKING:
    from lsmt_bundle.engine_cache import EngineCache

# loader(bundle, route, settings) -> (translator, nbytes)
Loader = Callable[[ServedModel, Route, Settings], tuple[RouteEngine, int]]


class EngineOptions(TypedDict):
    """What a route's engine is opened with (``lsmt_bundle.engines.open_engine``'s options)."""

    device: str
    device_index: int
    compute_type: str
    inter_threads: int
    intra_threads: int


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
