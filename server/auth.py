"""Who sent a request, and whether it may: API keys, anonymous use, and the limits of each.

A key is read from ``Authorization: Bearer <key>``, ``X-API-Key: <key>``, the ``api_key``
query parameter, or (LibreTranslate endpoints) the ``api_key`` body field. It is one of the
configured ``api_keys`` (compared in constant time; no limits) or a key of the keys database
(``keys_db``, ``server.keys``: found by its digest, with its own limits). Without a key a
request is anonymous, allowed when ``anonymous_access`` (by default: when no key is
configured), with the ``anonymous_*`` limits per client address.
Missing key: 401 ``missing_api_key``; wrong key: 403 ``invalid_api_key``; revoked: 403
``revoked_api_key``; over a limit: 429 ``rate_limited`` with ``Retry-After`` (:func:`admit`);
the keys database unreachable: 503 ``keys_database_unavailable`` with ``Retry-After``.
``require_caller`` is the dependency of ``/v1/translate`` (and the check the validation error
handler makes first); the LibreTranslate endpoints identify theirs in
``routes.libretranslate.authenticated_fields``, which also reads the body's ``api_key``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from .errors import ApiError
from .keys import KeyStore, KeyStoreUnavailable, Limits, anonymous_limits

if TYPE_CHECKING:
    from .state import AppState

log = logging.getLogger("lsmt.auth")


@dataclass(frozen=True)
class Caller:
    """Who sent a request: ``subject`` (``key:<id>`` for a database key, ``key:<digest>`` for
    a configured one, ``addr:<address>`` without a key; never the key itself) and the limits
    that apply to it. The subject is also who the batchers share the engines between."""

    subject: str
    limits: Limits


def key_from_request(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    # An empty bearer token is no key: fall through to the other ways of sending one.
    bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    return bearer or request.headers.get("x-api-key") or request.query_params.get("api_key") or None


def missing_key() -> ApiError:
    return ApiError(
        401,
        "missing_api_key",
        "An API key is required: send 'Authorization: Bearer <key>', 'X-API-Key: <key>' "
        "or the api_key field.",
        headers={"WWW-Authenticate": "Bearer"},
    )


def check_key(keys: list[str], given: str | None) -> None:
    if not keys:
        return
    if not given:
        raise missing_key()
    given_b = given.encode()
    ok = False
    for k in keys:  # compare against every key; no early exit
        ok |= hmac.compare_digest(given_b, k.encode())
    if not ok:
        raise invalid_key()


def invalid_key() -> ApiError:
    return ApiError(403, "invalid_api_key", "The API key is not valid.")


def keys_unavailable(exc: KeyStoreUnavailable) -> ApiError:
    """A request that cannot be checked against the keys database is refused, not let through."""
    log.error("%s", exc)
    return ApiError(
        503,
        "keys_database_unavailable",
        "The API keys database cannot be reached; try again shortly.",
        headers={"Retry-After": "5"},
    )


def identify(request: Request, given: str | None) -> Caller:
    """The caller of a request that sent key ``given`` (None: no key), or the 401/403."""
    state: AppState = request.app.state.lsmt
    settings = state.settings
    if given:
        store = keys_database(state)
        if store is not None:
            try:
                record = store.find(given)  # a read of the index: never waits for a writer
            except KeyStoreUnavailable as exc:
                raise keys_unavailable(exc) from exc
            if record is not None:
                if record.revoked:
                    raise ApiError(403, "revoked_api_key", "This API key has been revoked.")
                return Caller(f"key:{record.id}", record.limits)
        if settings.api_keys:
            check_key(settings.api_keys, given)  # 403 unless one of the configured keys
            return Caller("key:" + hashlib.sha256(given.encode()).hexdigest()[:16], Limits())
        if settings.keys_db is not None:
            raise invalid_key()
        # no key is configured: a key sent anyway changes nothing
    if not anonymous_allowed(state):
        raise missing_key()
    address = request.client.host if request.client else "unknown"
    return Caller(f"addr:{address}", anonymous_limits(settings))


def keys_database(state: AppState) -> KeyStore | None:
    """The database a key sent is looked up in; None where keys are ``api_keys`` only."""
    return state.keys if state.settings.keys_db is not None else None


def anonymous_allowed(state: AppState) -> bool:
    settings = state.settings
    if settings.anonymous_access is not None:
        return settings.anonymous_access
    return not settings.api_keys and settings.keys_db is None


async def caller_of(request: Request, given: str | None) -> Caller:
    """:func:`identify` from the event loop: in a worker thread when it reads the keys
    database (a read may wait for the network or a lock), inline otherwise, so that the
    common request pays no hop through another thread."""
    if given and keys_database(request.app.state.lsmt) is not None:
        return await asyncio.to_thread(identify, request, given)
    return identify(request, given)


async def require_caller(request: Request) -> Caller:
    """Dependency: the caller of the key sent in a header or the query. It takes nothing
    FastAPI would document as a parameter (the ways of sending a key are in the docs, not in
    the OpenAPI document)."""
    return await caller_of(request, key_from_request(request))


async def require_api_key(request: Request) -> None:
    """The key check alone (the validation error handler makes it before telling how a body
    failed to parse)."""
    await require_caller(request)


CallerDep = Annotated[Caller, Depends(require_caller)]


async def admit(state: AppState, caller: Caller, chars: int) -> None:
    """Count a translation request of ``chars`` characters against the caller's limits, or
    answer 429 naming the limit and when it resets (nothing is counted then)."""
    kind = "anonymous" if caller.subject.startswith("addr:") else "key"
    if caller.limits.any() and state.keys is not None:
        try:
            exceeded = await asyncio.to_thread(
                state.keys.consume, caller.subject, chars, caller.limits
            )
        except KeyStoreUnavailable as exc:
            raise keys_unavailable(exc) from exc
        if exceeded is not None:
            state.metrics.limit_rejections.labels(exceeded.limit).inc()
            retry = exceeded.retry_after_s()
            raise ApiError(
                429,
                "rate_limited",
                f"The {exceeded.limit.replace('_', ' ')} limit ({exceeded.allowed}) is reached; "
                f"it resets in {retry} s.",
                headers={"Retry-After": str(retry)},
                limit=exceeded.limit,
                allowed=exceeded.allowed,
                resets_at=datetime.fromtimestamp(exceeded.reset_at, UTC).isoformat(),
                retry_after_s=retry,
            )
    state.metrics.caller_requests.labels(kind).inc()
    state.metrics.caller_characters.labels(kind).inc(chars)
