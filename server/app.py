"""FastAPI application factory: ``create_app(settings)``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .auth import check_key, key_from_request
from .bundles import ServedBundle, language_name, load_served_bundle
from .engines import EngineRegistry, Loader, State
from .errors import (
    ApiError,
    BodyReadTimeout,
    body_timeout,
    error_content,
    install_error_handlers,
    internal_error,
    shutting_down,
    too_large_body,
)
from .failures import ServiceError
from .libretranslate import router as lt_router
from .metrics import Metrics
from .openapi import install_openapi
from .schemas import (
    ERROR_RESPONSES,
    DetectedLanguage,
    HealthResponse,
    LanguagesResponse,
    ModelsResponse,
    ReadinessResponse,
    TranslateRequest,
    TranslateResponse,
    Translation,
)
from .schemas import Alternative as AltModel
from .service import TranslationService
from .settings import Settings
from .web import router as web_router

log = logging.getLogger("server")

WARMUP_TEXT = "Hello."
_STATIC_ENDPOINTS = frozenset({"/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"})
_RID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# nginx's status for "client closed the connection before the answer": only in metrics/logs.
CLIENT_CLOSED_REQUEST = 499


@dataclass
class AppState:
    settings: Settings
    metrics: Metrics
    bundles: list[ServedBundle] = field(default_factory=list)
    bundle_errors: dict[str, str] = field(default_factory=dict)
    registry: EngineRegistry | None = None
    service: TranslationService | None = None
    executor: ThreadPoolExecutor | None = None
    warmup_routes: list[tuple[ServedBundle, tuple[str, str]]] = field(default_factory=list)
    warmup_done: bool = False
    warmup_errors: dict[str, str] = field(default_factory=dict)
    warmup_task: asyncio.Task | None = None
    started_at: float = field(default_factory=time.time)
    http_in_flight: int = 0  # requests inside the app (the batchers' early-dispatch hint)


def _open_bundles(st: AppState, bundles: list[Any] | None) -> None:
    if bundles is not None:  # injected (tests)
        st.bundles = [b if isinstance(b, ServedBundle) else ServedBundle(b) for b in bundles]
    for path in st.settings.bundle_dirs if bundles is None else []:
        try:
            st.bundles.append(load_served_bundle(path))
        except Exception as exc:
            st.bundle_errors[str(path)] = f"{type(exc).__name__}: {exc}"
            log.error("bundle %s is invalid: %s", path, exc)
    for b in st.bundles:
        for key in b.engine_keys:
            st.metrics.init_engine(key)
    for name, problems in damaged_files(st).items():
        log.error("bundle %s has damaged module files: %s", name, problems)


def damaged_files(st: AppState) -> dict[str, dict[str, str]]:
    """Bundle name -> {file: problem} for files missing or not of their recorded size: a
    damaged module fails only its routes, and readiness says so from the start (a stat per
    file, so /readyz checks it on every call)."""
    out = {}
    for b in st.bundles:
        problems = b.bundle.check_sizes() if hasattr(b.bundle, "check_sizes") else {}
        if problems:
            out[b.name] = problems
    return out


def _warmup_plan(st: AppState) -> list[tuple[ServedBundle, tuple[str, str]]]:
    wanted = st.settings.warmup_routes
    plan = []
    if wanted is None:
        for b in st.bundles:
            if b.routes:
                plan.append((b, b.routes[0]))
        return plan
    if [w.lower() for w in wanted] == ["all"]:
        return [(b, r) for b in st.bundles for r in b.routes]
    for w in wanted:
        src, _, tgt = w.partition("-")
        for b in st.bundles:
            if (src, tgt) in b.route_set:
                plan.append((b, (src, tgt)))
                break
        else:
            st.warmup_errors[w] = "no bundle serves this route"
    return plan


async def _warm_up(st: AppState) -> None:
    svc = st.service
    assert svc is not None
    await asyncio.to_thread(lambda: svc.detector)  # load the language-ID model off the loop
    opts = svc.validate_options(1, 0, 16)
    for b, (src, tgt) in st.warmup_routes:
        name = f"{src}-{tgt}"
        try:
            await svc.translate([WARMUP_TEXT], src, tgt, opts, model=b.name)
            log.info("warm-up %s (%s) done", name, b.name)
        except ServiceError as exc:
            st.warmup_errors[name] = exc.message
            log.error("warm-up %s failed: %s", name, exc.message)
        except Exception as exc:
            st.warmup_errors[name] = f"{type(exc).__name__}: {exc}"
            log.exception("warm-up %s failed", name)
    st.warmup_done = True


def _with_body_timeout(receive, timeout_s: float):
    """``receive`` that waits at most ``timeout_s`` for each part of the request body, so a
    client dripping its body cannot hold a connection for ever; once the body is complete
    it waits as long as needed (disconnect detection)."""
    done = False

    async def timed():
        nonlocal done
        if done:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), timeout_s)
        except TimeoutError:
            raise BodyReadTimeout from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            done = True
        return message

    return timed


class _DisconnectWatch:
    """Once the request body has been read, watches the connection for the client going
    away and then cancels the request's task: a disconnected client's queued work is dropped
    (uvicorn does not cancel a request whose client has left)."""

    def __init__(self, receive, task: asyncio.Task) -> None:
        self._receive = receive
        self._task = task
        self._watcher: asyncio.Task | None = None
        self.client_gone = False
        self.response_done = False

    async def receive(self):
        """The ``receive`` the app sees."""
        if self._watcher is not None:  # body read: the watcher owns the connection now
            await asyncio.shield(self._watcher)
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request" and not message.get("more_body", False):
            self._watcher = asyncio.create_task(self._watch())
        return message

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        if not self.response_done:  # uvicorn also says disconnect once the response is sent
            self.client_gone = True
            self._task.cancel()

    def stop(self) -> None:
        if self._watcher is not None and not self._watcher.done():
            self._watcher.cancel()


class RequestContextMiddleware:
    """Request id, size limits, body read timeout, dropping the work of clients that went
    away, the JSON 503 when shutdown cuts a request short, metrics, and a last-resort 500
    without internals."""

    def __init__(self, app, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        st = self.state
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rid = headers.get("x-request-id", "")
        if not _RID_OK.match(rid):
            rid = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        path = scope.get("path", "")
        t0 = time.perf_counter()
        status_holder = {"status": 500, "started": False}
        st.metrics.in_flight.inc()
        st.http_in_flight += 1

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                status_holder["started"] = True
                hdrs = list(message.get("headers", []))
                if not any(k.lower() == b"x-request-id" for k, _ in hdrs):
                    hdrs.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": hdrs}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                watch.response_done = True
            await send(message)

        receive = _with_body_timeout(receive, st.settings.body_read_timeout_s)
        header_bytes = sum(len(k) + len(v) + 4 for k, v in scope["headers"])
        watch = _DisconnectWatch(receive, asyncio.current_task())
        try:
            if header_bytes > st.settings.max_header_bytes:
                # h11 refuses larger headers only while they are incomplete; whatever arrived
                # in one read is bounded here, with a JSON answer.
                limit = st.settings.max_header_bytes
                await _send_error(
                    send_wrapper,
                    path,
                    ApiError(
                        431,
                        "headers_too_large",
                        f"The request headers take {header_bytes} bytes; at most {limit} are "
                        "allowed.",
                        limit=limit,
                    ),
                    rid,
                )
                return
            limit = st.settings.max_request_bytes
            clen = headers.get("content-length")
            too_big = False
            if clen is not None:
                try:
                    too_big = int(clen) > limit
                except ValueError:
                    too_big = False
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                body, too_big = await _read_limited(receive, limit)
                if not too_big:
                    watch = _DisconnectWatch(_replay(body, receive), asyncio.current_task())
            if too_big:
                await _send_error(send_wrapper, path, too_large_body(limit), rid)
            else:
                await self.app(scope, watch.receive, send_wrapper)
        except asyncio.CancelledError:
            if watch.client_gone:
                status_holder["status"] = CLIENT_CLOSED_REQUEST
                log.info("client went away; request dropped request_id=%s path=%s", rid, path)
            elif not status_holder["started"]:
                # uvicorn cancels the requests still running when the graceful-shutdown time
                # is over: they get the documented JSON 503, not a plain-text 500.
                await _send_error(send_wrapper, path, shutting_down(), rid)
            # The cancellation was for this request alone: the task ends normally.
        except BodyReadTimeout:  # a stalled chunked body, read here before the app sees it
            if not status_holder["started"]:
                await _send_error(send_wrapper, path, body_timeout(st.settings), rid)
        except Exception:
            log.exception("unhandled error request_id=%s path=%s", rid, path)
            if not status_holder["started"]:
                await _send_error(send_wrapper, path, internal_error(rid), rid)
        finally:
            watch.stop()
            st.metrics.in_flight.dec()
            st.http_in_flight -= 1
            route = scope.get("route")
            endpoint = getattr(route, "path", None)
            if endpoint is None:
                endpoint = path if path in _STATIC_ENDPOINTS else "unmatched"
            status = str(status_holder["status"])
            dt = time.perf_counter() - t0
            st.metrics.requests.labels(endpoint, status).inc()
            st.metrics.request_latency.labels(endpoint, status).observe(dt)


async def _read_limited(receive, limit: int) -> tuple[bytes, bool]:
    chunks, size = [], 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
        if not msg.get("more_body", False):
            break
    return b"".join(chunks), False


def _replay(body: bytes, receive):
    """``receive`` that gives the already-read ``body`` first, then the connection's own
    messages (the client going away)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_error(send, path: str, err: ApiError, rid: str) -> None:
    """An error answered from the middleware (outside FastAPI's handlers), same JSON body."""
    body = json.dumps(error_content(path, err, rid)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": err.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *((k.lower().encode(), v.encode()) for k, v in err.headers.items()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def create_app(
    settings: Settings | None = None,
    *,
    loader: Loader | None = None,
    bundles: list[Any] | None = None,
) -> FastAPI:
    """Build the app. ``loader`` replaces the engine loader and ``bundles`` the bundle
    directories (already opened bundles); both exist for tests and embedding."""
    settings = settings or Settings()
    st = AppState(settings=settings, metrics=Metrics())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        _open_bundles(st, bundles)
        st.executor = ThreadPoolExecutor(32, thread_name_prefix="lsmt-translate")
        st.registry = EngineRegistry(settings, st.metrics, loader)
        st.service = TranslationService(
            settings,
            st.metrics,
            st.bundles,
            st.registry,
            st.executor,
            requests_in_flight=lambda: st.http_in_flight,
        )
        st.warmup_routes = _warmup_plan(st)
        st.warmup_task = asyncio.create_task(_warm_up(st))
        log.info(
            "serving %d bundle(s) on %s (%s, inter %d, intra %d, budget %d bytes)",
            len(st.bundles),
            settings.resolved_device,
            settings.resolved_compute_type,
            settings.resolved_inter_threads,
            settings.resolved_intra_threads,
            settings.resolved_device_budget,
        )
        try:
            yield
        finally:
            if st.warmup_task and not st.warmup_task.done():
                st.warmup_task.cancel()
                with contextlib.suppress(BaseException):
                    await st.warmup_task
            await st.service.close()
            await st.registry.close()
            st.executor.shutdown(wait=True, cancel_futures=True)

    app = FastAPI(
        title="LSMT translation server",
        version="0.1.0",
        description="Multilingual translation with language-specific modules assembled into "
        "CTranslate2 engines on demand. See docs/server.md.",
        lifespan=lifespan,
    )
    app.state.lsmt = st
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware, state=st)

    @app.post(
        "/v1/translate",
        response_model=TranslateResponse,
        responses=ERROR_RESPONSES,
        tags=["translation"],
        summary="Translate one text or a list of texts",
    )
    async def translate(req: TranslateRequest, request: Request) -> TranslateResponse:
        check_key(settings.api_keys, key_from_request(request))
        svc = st.service
        texts = [req.text] if isinstance(req.text, str) else list(req.text)
        opts = svc.validate_options(req.beam_size, req.num_alternatives, req.max_length)
        results = await svc.translate(texts, req.source, req.target, opts, req.model)
        models = sorted({r.engine.split(":", 1)[0] for r in results if r.engine})
        return TranslateResponse(
            translations=[
                Translation(
                    text=r.text,
                    source=r.source,
                    detected=DetectedLanguage(language=r.source, confidence=r.detected_confidence)
                    if r.detected_confidence is not None
                    else None,
                    score=r.score,
                    alternatives=[AltModel(text=a.text, score=a.score) for a in r.alternatives],
                    engine=r.engine,
                )
                for r in results
            ],
            target=req.target,
            model=",".join(models) or None,
            request_id=request.state.request_id,
        )

    @app.get("/v1/languages", response_model=LanguagesResponse, tags=["catalogue"])
    async def languages() -> LanguagesResponse:
        svc = st.service
        return LanguagesResponse(
            languages=[
                {"code": c, "name": language_name(c), "targets": svc.targets_for(c)}
                for c in svc.languages
            ],
            routes=[f"{s}-{t}" for s, t in svc.routes],
            auto_detect=[c for c in svc.languages if c in svc.detector.known],
        )

    @app.get("/v1/models", tags=["catalogue"], responses={200: {"model": ModelsResponse}})
    async def models() -> dict[str, Any]:
        reg = st.registry
        snap = {e["key"]: e for e in reg.snapshot()}
        engines = []
        for b in st.bundles:
            for key in b.engine_keys:
                engines.append(
                    snap.get(key)
                    or {
                        "key": key,
                        "bundle": b.name,
                        "routes": [f"{s}-{t}" for s, t in b.routes_of_key(key)],
                        "state": State.UNLOADED.value,
                        "device": None,
                        "bytes": 0,
                        "last_used": None,
                        "load_seconds": None,
                        "loads": 0,
                        "failures": 0,
                        "in_flight_batches": 0,
                        "error": None,
                        "retry_in_s": None,
                    }
                )
        return {
            "device": settings.resolved_device,
            "compute_type": settings.resolved_compute_type,
            "budgets": {
                "device_bytes": reg.device_budget,
                "host_bytes": reg.host_budget if reg.device == "cuda" else 0,
            },
            "used": {"device_bytes": reg.device_bytes, "host_bytes": reg.host_bytes},
            "bundles": [
                {
                    "name": b.name,  # not its filesystem path: that is the operator's business
                    "languages": b.languages,
                    "routes": [f"{s}-{t}" for s, t in b.routes],
                    "engine_keys": b.engine_keys,
                    "max_source_positions": b.max_source_positions,
                }
                for b in st.bundles
            ],
            "engines": engines,
        }

    @app.get("/healthz", tags=["operations"], response_model=HealthResponse)
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "uptime_s": round(time.time() - st.started_at, 3)}

    @app.get(
        "/readyz",
        tags=["operations"],
        responses={
            200: {"model": ReadinessResponse, "description": "Ready (status ready/degraded)."},
            503: {"model": ReadinessResponse, "description": "Not ready yet, or broken."},
        },
    )
    async def readyz():
        failed = {e.key: e.error for e in st.registry.engines.values() if e.state == State.FAILED}
        problems = []
        if st.bundle_errors:
            problems.append("invalid bundle(s)")
        if not st.bundles:
            problems.append("no bundle loaded")
        if not st.warmup_done:
            problems.append("warm-up not finished")
        if st.warmup_errors:
            problems.append("warm-up failed")
        ready = not problems
        damaged = damaged_files(st)
        healthy = not failed and not damaged
        status = "ready" if ready and healthy else ("degraded" if ready else "not_ready")
        body = {
            "status": status,
            "ready": ready,
            "problems": problems,
            "bundles": {
                **{b.name: "ok" for b in st.bundles},
                **{p: f"invalid: {m}" for p, m in st.bundle_errors.items()},
            },
            "warmup": {
                "done": st.warmup_done,
                "routes": [f"{s}-{t}" for _, (s, t) in st.warmup_routes],
                "errors": st.warmup_errors,
            },
            "failed_engines": failed,
            "damaged_files": damaged,
        }
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        responses={
            200: {
                "description": "Prometheus text exposition format.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    )
    async def metrics() -> Response:
        st.registry._update_gauges()
        return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(lt_router)
    if settings.web_page:
        app.include_router(web_router)
    install_openapi(app, settings)
    return app
