"""Optional API keys (off when ``api_keys`` is empty), compared in constant time.

A key is read from ``Authorization: Bearer <key>``, ``X-API-Key: <key>``, the ``api_key``
query parameter, or (LibreTranslate endpoints) the ``api_key`` body field.
Missing key: 401 ``missing_api_key``; wrong key: 403 ``invalid_api_key``.
``require_api_key`` is the dependency of ``/v1/translate`` (and the check the validation error
handler makes first); the LibreTranslate endpoints check theirs in
``routes.libretranslate.authenticated_fields``, which also reads the body's ``api_key``.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from .errors import ApiError


def key_from_request(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    # An empty bearer token is no key: fall through to the other ways of sending one.
    bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    return bearer or request.headers.get("x-api-key") or request.query_params.get("api_key") or None


def client_identity(request: Request, key: str | None = None) -> str:
    """Who sent a request, for sharing the engines fairly (``server.batching``): a digest of
    its API key (``key``, else the one in its headers or query), else its address. Never the
    key itself: identities may be logged or counted."""
    key = key or key_from_request(request)
    if key:
        return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
    return "addr:" + (request.client.host if request.client else "unknown")


def check_key(keys: list[str], given: str | None) -> None:
    if not keys:
        return
    if not given:
        raise ApiError(
            401,
            "missing_api_key",
            "An API key is required: send 'Authorization: Bearer <key>', 'X-API-Key: <key>' "
            "or the api_key field.",
            headers={"WWW-Authenticate": "Bearer"},
        )
    given_b = given.encode()
    ok = False
    for k in keys:  # compare against every key; no early exit
        ok |= hmac.compare_digest(given_b, k.encode())
    if not ok:
        raise ApiError(403, "invalid_api_key", "The API key is not valid.")


def require_api_key(request: Request) -> None:
    """Dependency: the key sent in a header or the query, when keys are configured. It takes
    nothing FastAPI would document as a parameter (the ways of sending a key are in the
    docs, not in the OpenAPI document)."""
    state = getattr(request.app.state, "lsmt", None)
    if state is not None:
        check_key(state.settings.api_keys, key_from_request(request))
