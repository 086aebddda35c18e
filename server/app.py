"""FastAPI application factory: ``create_app(settings)``.

The app is its state (``server.state``), a lifespan that opens the bundles, starts the
registry and the service and runs the warm-up, the request middleware
(``server.middleware``), the error handlers (``server.errors``), the routers
(``server.routes``, ``server.web``) and the OpenAPI document (``server.openapi``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from .auth import require_api_key
from .bundles import ServedBundle
from .cache_fill import start_cache_fill, stop_cache_fill
from .decoders import Decoders, LocalDecoders
from .engine_loader import Loader
from .engine_registry import EngineRegistry
from .errors import install_error_handlers
from .idle_trim import trim_when_idle
from .metrics import Metrics
from .middleware import RequestContextMiddleware
from .openapi import install_openapi
from .routes import admin, catalogue, files, libretranslate, operations, translate
from .service import TranslationService
from .settings import Settings
from .state import (
    AppState,
    count_engine_cache_errors,
    load_bundles,
    open_key_store,
    readiness_problems,
    warm_up,
    warmup_plan,
)
from .web import router as web_router

log = logging.getLogger("server")


def _lifespan(
    state: AppState,
    bundles: list[ServedBundle] | None,
    loaders: tuple[Loader | None, Loader | None],
    make_decoders: Callable[[AppState], Decoders] | None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    settings = state.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        load_bundles(state, bundles)
        open_key_store(state)
        state.executor = ThreadPoolExecutor(32, thread_name_prefix="lsmt-translate")
        stop_counting_cache_errors = count_engine_cache_errors(settings, state.metrics)
        if make_decoders is None:
            loader, twin_loader = loaders
            state.registry = EngineRegistry(
                settings, state.metrics, loader, twin_loader=twin_loader
            )
            decoders: Decoders = LocalDecoders(
                state.registry,
                settings,
                state.metrics,
                state.executor,
                requests_in_flight=lambda: state.http_in_flight,
            )
            if settings.memory_trim_idle_s > 0:
                state.idle_trim_task = asyncio.create_task(
                    trim_when_idle(state.registry, settings.memory_trim_idle_s, state.metrics)
                )
        else:
            decoders = make_decoders(state)
        state.service = TranslationService(settings, state.metrics, state.bundles, decoders)
        state.warmup_routes = warmup_plan(state)
        state.warmup_task = asyncio.create_task(warm_up(state))
        start_cache_fill(state)
        log.info(
            "serving %d bundle(s) on %s (%s, inter %d, intra %d, budget %d bytes)",
            len(state.bundles),
            settings.resolved_device,
            settings.resolved_compute_type,
            settings.resolved_inter_threads,
            settings.resolved_intra_threads,
            settings.resolved_device_budget,
        )
        try:
            yield
        finally:
            if state.warmup_task and not state.warmup_task.done():
                state.warmup_task.cancel()
                with contextlib.suppress(BaseException):
                    await state.warmup_task
            await stop_cache_fill(state)
            if state.idle_trim_task is not None:
                state.idle_trim_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await state.idle_trim_task
            await state.service.close()
            if state.registry is not None:
                await state.registry.close()
            state.executor.shutdown(wait=True, cancel_futures=True)
            if state.keys is not None:
                state.keys.close()
            if state.files_dir is not None:
                shutil.rmtree(state.files_dir, ignore_errors=True)
            stop_counting_cache_errors()

    return lifespan


def create_app(
    settings: Settings | None = None,
    *,
    loader: Loader | None = None,
    twin_loader: Loader | None = None,
    bundles: list[ServedBundle] | None = None,
    decoders: Callable[[AppState], Decoders] | None = None,
) -> FastAPI:
    """Build the app. ``loader`` replaces the engine loader (and ``twin_loader`` the bulk
    twins', server/bulk_twin.py) and ``bundles`` the bundle directories (already opened
    bundles); they exist for tests and embedding. ``decoders``
    makes the engines the service decodes on, from the started state (the cluster's ingress:
    ``server.cluster``); without it the engines are this process's, in ``state.registry``."""
    settings = settings or Settings()
    state = AppState(settings=settings, metrics=Metrics())
    app = FastAPI(
        title="LSMT translation server",
        version="0.1.0",
        description="Multilingual translation with language-specific modules assembled into "
        "CTranslate2 engines on demand. See docs/server.md.",
        lifespan=_lifespan(state, bundles, (loader, twin_loader), decoders),
    )
    app.state.lsmt = state
    state.metrics.watch_readiness(lambda: not readiness_problems(state))
    install_error_handlers(app, authenticate=require_api_key)
    app.add_middleware(RequestContextMiddleware, state=state)
    for module in (translate, catalogue, operations, libretranslate, files, admin):
        app.include_router(module.router)
    if settings.web_page:
        app.include_router(web_router)
    install_openapi(app, settings)
    return app
