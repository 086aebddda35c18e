"""Client-facing errors: one JSON shape for every failure.

``{"error": {"code": "...", "message": "...", "allowed": [...] | {...}, ...},
   "request_id": "..."}``

``code`` is stable and machine-readable; ``message`` says what was wrong and what is allowed.
The LibreTranslate-compatible endpoints answer ``{"error": "<message>", "details": {...}}``
instead, because LibreTranslate clients read ``error`` as a string.

This module is where failures become HTTP: ``SERVICE_STATUS`` maps the translation service's
failure kinds (``server.failures``) to status codes, ``ApiError`` is an HTTP-level failure (API
key, body parsing, limits, unknown path), and ``install_error_handlers`` answers all of them,
FastAPI's own errors and unexpected exceptions with the body above.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic_core import ErrorDetails
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import failures
from .schemas import JSONObject
from .settings import Settings

log = logging.getLogger("server")

LIBRETRANSLATE_PATHS = (
    "/translate",
    "/languages",
    "/detect",
    "/suggest",
    "/frontend/settings",
    "/translate_file",
)


class ApiError(Exception):
    """An error answered to the client with ``status`` and a JSON body."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: object,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.extra = extra

    def body(self) -> JSONObject:
        return {"code": self.code, "message": self.message, **self.extra}


def bad_request(code: str, message: str, **extra: object) -> ApiError:
    return ApiError(400, code, message, headers=None, **extra)


# The service's failure kinds as HTTP: their status; ``retry_after`` becomes ``Retry-After``.
SERVICE_STATUS: dict[type[failures.ServiceError], int] = {
    failures.InvalidRequest: 400,
    failures.TooLarge: 413,
    failures.Busy: 429,
    failures.Unavailable: 503,
    failures.TimedOut: 504,
}


def api_error(exc: failures.ServiceError) -> ApiError:
    """The HTTP answer to a failure of the service: same code, message and details."""
    status = next(SERVICE_STATUS[k] for k in type(exc).__mro__ if k in SERVICE_STATUS)
    headers = {} if exc.retry_after is None else {"Retry-After": str(exc.retry_after)}
    return ApiError(status, exc.code, exc.message, headers=headers, **exc.extra)


def request_id_of(request: Request) -> str:
    return getattr(request.state, "request_id", None) or request.headers.get("x-request-id", "")


def error_content(path: str, err: ApiError, rid: str) -> JSONObject:
    """The JSON body of an error: the /v1 shape, or LibreTranslate's on its paths."""
    if path in LIBRETRANSLATE_PATHS:
        content: JSONObject = {"error": err.message, "details": err.body()}
    else:
        content = {"error": err.body()}
    if rid:
        content["request_id"] = rid
    return content


def error_response(request: Request, err: ApiError) -> JSONResponse:
    """The error as JSON; its X-Request-ID header is written by the request middleware, as
    on every response."""
    rid = request_id_of(request)
    content = error_content(request.url.path, err, rid)
    return JSONResponse(content, status_code=err.status, headers=dict(err.headers))


def _loc(err: ErrorDetails) -> str:
    parts = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
    return ".".join(parts) or "body"


def validation_to_api_error(exc: RequestValidationError, request: Request) -> ApiError:
    errors = exc.errors()
    for e in errors:
        if e.get("type") == "json_invalid":
            ctx = e.get("ctx") or {}
            return bad_request(
                "malformed_json",
                f"The request body is not valid JSON ({ctx.get('error', 'parse error')}). "
                "Send a JSON object with Content-Type: application/json.",
            )
    if any(tuple(e.get("loc", ())) == ("body",) for e in errors):
        ctype = request.headers.get("content-type", "")
        return bad_request(
            "malformed_json",
            "The request body must be a JSON object sent with Content-Type: application/json"
            f" (got Content-Type {ctype or 'none'!r}).",
        )
    details = []
    for e in errors:
        item = {"field": _loc(e), "problem": e.get("msg", "invalid")}
        if e.get("type") == "missing":
            item["problem"] = "field required"
        details.append(item)
    summary = "; ".join(f"{d['field']}: {d['problem']}" for d in details[:5])
    return ApiError(
        422, "invalid_request", f"The request does not match the schema: {summary}", fields=details
    )


class BodyReadTimeout(Exception):
    """The client stopped sending its request body (answered 408)."""


def too_large_body(limit: int) -> ApiError:
    return ApiError(
        413, "request_too_large", f"The request body exceeds {limit} bytes.", limit=limit
    )


def internal_error(rid: str) -> ApiError:
    return ApiError(
        500,
        "internal_error",
        f"An internal error occurred; it has been logged with request id {rid}.",
    )


def headers_too_large(size: int, limit: int) -> ApiError:
    return ApiError(
        431,
        "headers_too_large",
        f"The request headers take {size} bytes; at most {limit} are allowed.",
        limit=limit,
    )


def shutting_down() -> ApiError:
    return api_error(failures.shutting_down())


def body_timeout(settings: Settings) -> ApiError:
    limit = settings.body_read_timeout_s
    return ApiError(
        408,
        "body_timeout",
        f"The request body did not arrive: nothing for {limit:g} s.",
        headers={"Connection": "close"},
        limit_s=limit,
    )


# What FastAPI raises when a JSON body cannot be decoded at all (not UTF-8, nested too deeply):
# the client gets the documented malformed_json with the reason instead.
FASTAPI_BODY_ERROR = "There was an error parsing the body"


async def unreadable_body(request: Request) -> ApiError:
    ctype = request.headers.get("content-type", "")
    charset = next(
        (p.split("=", 1)[1].strip() for p in ctype.split(";")[1:] if "charset=" in p.lower()), ""
    )
    try:
        (await request.body()).decode("utf-8")
        reason = "it is nested too deeply or cannot be parsed"
    except UnicodeDecodeError as exc:
        reason = f"it is not UTF-8 (byte {exc.start})"
    if charset and charset.lower().replace("-", "") != "utf8":
        reason += f"; charset={charset} is not supported, only UTF-8"
    return bad_request(
        "malformed_json",
        f"The request body could not be read as JSON: {reason}. Send a UTF-8 JSON object "
        "with Content-Type: application/json.",
    )


def install_error_handlers(
    app: FastAPI, authenticate: Callable[[Request], Awaitable[None]]
) -> None:
    """Answer every failure with the JSON bodies above. ``authenticate`` is the API key check
    (``server.auth.require_api_key``), made before a body's validation errors are told."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(request, exc)

    @app.exception_handler(failures.ServiceError)
    async def _service_error(request: Request, exc: failures.ServiceError) -> JSONResponse:
        return error_response(request, api_error(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI parses the JSON body before it runs the endpoint's dependencies (the key
        # check among them): check the key here first, so an unauthenticated client learns
        # nothing about how its body was parsed.
        try:
            await authenticate(request)
        except ApiError as auth_error:
            return error_response(request, auth_error)
        return error_response(request, validation_to_api_error(exc, request))

    @app.exception_handler(BodyReadTimeout)
    async def _body_timeout(request: Request, exc: BodyReadTimeout) -> JSONResponse:
        return error_response(request, body_timeout(request.app.state.lsmt.settings))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == FASTAPI_BODY_ERROR:
            return error_response(request, await unreadable_body(request))
        if exc.status_code == 404:
            err = ApiError(404, "not_found", f"No endpoint at {request.url.path}. See /docs.")
        elif exc.status_code == 405:
            allow = {k.lower(): v for k, v in (exc.headers or {}).items()}.get("allow", "")
            err = ApiError(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed on {request.url.path}.",
                allowed=sorted(m.strip() for m in allow.split(",") if m.strip()),
            )
        else:
            err = ApiError(exc.status_code, "http_error", str(exc.detail))
        if exc.headers:
            err.headers.update(exc.headers)
        return error_response(request, err)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        rid = request_id_of(request)
        log.error("unexpected error request_id=%s path=%s", rid, request.url.path, exc_info=exc)
        return error_response(request, internal_error(rid))
