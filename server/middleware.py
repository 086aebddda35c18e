"""The ASGI middleware around the whole app: request id, header and body size limits, body
read timeout, dropping the work of clients that went away, the JSON 503 when shutdown cuts a
request short, request metrics, and a last-resort 500 without internals."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .decoders import SERVED_BY
from .errors import (
    ApiError,
    BodyReadTimeout,
    body_timeout,
    error_content,
    headers_too_large,
    internal_error,
    shutting_down,
    too_large_body,
)
from .state import AppState
from .timing import STAGE_SECONDS, server_timing

log = logging.getLogger("server")

_STATIC_ENDPOINTS = frozenset({"/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"})
_RID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# nginx's status for "client closed the connection before the answer": only in metrics/logs.
CLIENT_CLOSED_REQUEST = 499


def _with_body_timeout(receive: Receive, timeout_s: float) -> Receive:
    """``receive`` that waits at most ``timeout_s`` for each part of the request body, so a
    client dripping its body cannot hold a connection for ever; once the body is complete
    it waits as long as needed (disconnect detection)."""
    done = False

    async def timed() -> Message:
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

    def __init__(self, receive: Receive, task: asyncio.Task[None]) -> None:
        self._receive = receive
        self._task = task
        self._watcher: asyncio.Task[None] | None = None
        self.client_gone = False
        self.response_done = False

    async def receive(self) -> Message:
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


class _Exchange:
    """One HTTP request as the middleware sees it: its id and path, the watch on its
    connection, and the answer's side (``send`` adds the request id header, the one place
    that writes it, and notes the status for the metrics)."""

    def __init__(
        self, path: str, rid: str, send: Send, watch: _DisconnectWatch, rid_header: bool = True
    ) -> None:
        self.path = path
        self.rid = rid
        self.rid_header = rid_header  # write X-Request-ID (no proxy in front writes it)
        self._send = send
        self.watch = watch
        self.status = 500  # until the app starts a response
        self.started = False
        self.replicas: set[str] = set()  # cluster replicas that decoded for it (SERVED_BY)
        self.t0 = time.perf_counter()  # the request entered the server
        self.stage_seconds: dict[str, float] = {}  # server.timing's stages

    async def send(self, message: Message) -> None:
        """The ``send`` the app sees."""
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.started = True
            hdrs = list(message.get("headers", []))
            if self.rid_header:
                hdrs.append((b"x-request-id", self.rid.encode()))
            if self.replicas:
                hdrs.append((b"x-lsmt-replica", ",".join(sorted(self.replicas)).encode()))
            if self.stage_seconds:
                total = time.perf_counter() - self.t0
                hdrs.append((b"server-timing", server_timing(self.stage_seconds, total)))
            message = {**message, "headers": hdrs}
        elif message["type"] == "http.response.body" and not message.get("more_body"):
            self.watch.response_done = True
        await self._send(message)

    async def send_error(self, err: ApiError) -> None:
        await _send_error(self.send, self.path, err, self.rid)


class RequestContextMiddleware:
    """Request id, size limits, body read timeout, dropping the work of clients that went
    away, the JSON 503 when shutdown cuts a request short, metrics, and a last-resort 500
    without internals."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = self.state
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        rid = _request_id(headers)
        scope.setdefault("state", {})["request_id"] = rid
        state.metrics.in_flight.inc()
        state.http_in_flight += 1
        receive = _with_body_timeout(receive, state.settings.body_read_timeout_s)
        task = asyncio.current_task()
        assert task is not None  # ASGI apps run in a task
        watch = _DisconnectWatch(receive, task)
        ex = _Exchange(scope.get("path", ""), rid, send, watch, state.request_id_header)
        SERVED_BY.set(ex.replicas)
        STAGE_SECONDS.set(ex.stage_seconds)
        try:
            await self._run_within_limits(scope, headers, receive, task, ex)
        except asyncio.CancelledError:
            await _answer_cancelled(ex)
            # The cancellation was for this request alone: the task ends normally.
        except BodyReadTimeout:  # a stalled chunked body, read here before the app sees it
            if not ex.started:
                await ex.send_error(body_timeout(state.settings))
        except Exception:
            log.exception("unhandled error request_id=%s path=%s", rid, ex.path)
            if not ex.started:
                await ex.send_error(internal_error(rid))
        finally:
            ex.watch.stop()
            state.metrics.in_flight.dec()
            state.http_in_flight -= 1
            self._count_request(scope, ex)

    async def _run_within_limits(
        self,
        scope: Scope,
        headers: dict[str, str],
        receive: Receive,
        task: asyncio.Task[None],
        ex: _Exchange,
    ) -> None:
        """The app, unless the headers or the body are over their limits (a JSON error)."""
        settings = self.state.settings
        header_bytes = sum(len(k) + len(v) + 4 for k, v in scope["headers"])
        if header_bytes > settings.max_header_bytes:
            # h11 refuses larger headers only while they are incomplete; whatever arrived
            # in one read is bounded here, with a JSON answer.
            await ex.send_error(headers_too_large(header_bytes, settings.max_header_bytes))
            return
        limit = settings.max_request_bytes
        clen = headers.get("content-length")
        too_big = False
        if clen is not None:
            try:
                too_big = int(clen) > limit
            except ValueError:
                too_big = False
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body, too_big = await _read_limited(receive, limit)
            if not too_big:  # the body is read: the app gets it replayed
                ex.watch = _DisconnectWatch(_replay(body, receive), task)
        if too_big:
            await ex.send_error(too_large_body(limit))
        else:
            await self.app(scope, ex.watch.receive, ex.send)

    def _count_request(self, scope: Scope, ex: _Exchange) -> None:
        route = scope.get("route")
        endpoint = getattr(route, "path", None)
        if endpoint is None:
            endpoint = ex.path if ex.path in _STATIC_ENDPOINTS else "unmatched"
        status = str(ex.status)
        dt = time.perf_counter() - ex.t0
        self.state.metrics.requests.labels(endpoint, status).inc()
        self.state.metrics.request_latency.labels(endpoint, status).observe(dt)


def _request_id(headers: dict[str, str]) -> str:
    """The client's ``X-Request-ID`` when it is a short plain token, else a fresh one."""
    rid = headers.get("x-request-id", "")
    return rid if _RID_OK.match(rid) else uuid.uuid4().hex


async def _answer_cancelled(ex: _Exchange) -> None:
    if ex.watch.client_gone:
        ex.status = CLIENT_CLOSED_REQUEST
        log.info("client went away; request dropped request_id=%s path=%s", ex.rid, ex.path)
    elif not ex.started:
        # uvicorn cancels the requests still running when the graceful-shutdown time
        # is over: they get the documented JSON 503, not a plain-text 500.
        await ex.send_error(shutting_down())


async def _read_limited(receive: Receive, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
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


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that gives the already-read ``body`` first, then the connection's own
    messages (the client going away)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_error(send: Send, path: str, err: ApiError, rid: str) -> None:
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
