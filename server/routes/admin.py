"""``POST /v1/admin/reload``: re-read the served bundles, so that languages added to a
bundle are served without a restart (``server.reload``); ``/v1/admin/glossaries/{name}``:
the glossaries an API key keeps per language pair (``server.keys``, as ``python -m server
keys glossary`` does). Behind the admin keys (``LSMT_ADMIN_KEYS``), never the translation
keys; answered 404 while none is configured."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from lsmt_core.routes import parse_route

from ..auth import check_key, key_from_request
from ..cache_fill import start_cache_fill
from ..dependencies import StateDep, state_of
from ..errors import ApiError
from ..keys import KeyStore
from ..reload import reload_bundles
from ..schemas import ADMIN_ERRORS, GlossariesResponse, GlossaryRequest, ReloadResponse
from ..state import AppState
from ..validation import parse_terms

router = APIRouter(tags=["admin"])


async def require_admin_key(request: Request) -> None:
    keys = state_of(request).settings.admin_keys
    if not keys:
        raise ApiError(
            404, "admin_off", "Administration endpoints are off: set LSMT_ADMIN_KEYS to use them."
        )
    check_key(keys, key_from_request(request))


@router.post(
    "/v1/admin/reload",
    dependencies=[Depends(require_admin_key)],
    responses={
        200: {"model": ReloadResponse, "description": "Every bundle reloaded or unchanged."},
        409: {"model": ReloadResponse, "description": "A bundle was refused (still served)."},
        **ADMIN_ERRORS,
    },
)
async def reload(state: StateDep) -> JSONResponse:
    """Re-open every bundle directory and serve what changed (a bundle that is incomplete or
    damaged is refused whole: the version being served stays). The body is a ReloadResponse;
    answered as a JSONResponse for its status code."""
    outcomes = await reload_bundles(state)
    if any(o.status not in ("unchanged", "refused") for o in outcomes):
        start_cache_fill(state)  # the engines of what changed, before they are asked for
    refused = any(o.status == "refused" for o in outcomes)
    body = ReloadResponse(bundles=outcomes)
    return JSONResponse(body.model_dump(), status_code=409 if refused else 200)


def _keys(state: AppState) -> KeyStore:
    if state.keys is None or state.settings.keys_db is None:
        raise ApiError(
            409, "no_keys_database", "Glossaries live in the keys database: set LSMT_KEYS_DB."
        )
    return state.keys


def _pair(pair: str) -> tuple[str, str]:
    try:
        return parse_route(pair)
    except ValueError as exc:
        raise ApiError(400, "invalid_field", f"{exc}.", parameter="pair") from None


async def _glossaries(state: AppState, name: str) -> GlossariesResponse:
    found = await asyncio.to_thread(_keys(state).glossaries, name)
    if found is None:
        raise ApiError(404, "unknown_key", f"No API key named {name!r}.")
    return GlossariesResponse(name=name, glossaries=found)


@router.get(
    "/v1/admin/glossaries/{name}",
    dependencies=[Depends(require_admin_key)],
    responses=ADMIN_ERRORS,
)
async def get_glossaries(name: str, state: StateDep) -> GlossariesResponse:
    """Every glossary the API key ``name`` keeps, by pair."""
    return await _glossaries(state, name)


@router.put(
    "/v1/admin/glossaries/{name}/{pair}",
    dependencies=[Depends(require_admin_key)],
    responses=ADMIN_ERRORS,
)
async def put_glossary(
    name: str, pair: str, body: GlossaryRequest, state: StateDep
) -> GlossariesResponse:
    """Replace the key's glossary for ``pair`` (``source-target``): its requests with that
    pair keep these terms, under those a request gives itself."""
    source, target = _pair(pair)
    terms = parse_terms(body.glossary, body.do_not_translate).required
    if not await asyncio.to_thread(_keys(state).set_glossary, name, source, target, terms):
        raise ApiError(404, "unknown_key", f"No API key named {name!r}.")
    return await _glossaries(state, name)


@router.delete(
    "/v1/admin/glossaries/{name}/{pair}",
    dependencies=[Depends(require_admin_key)],
    responses=ADMIN_ERRORS,
)
async def delete_glossary(name: str, pair: str, state: StateDep) -> GlossariesResponse:
    """Remove the key's glossary for ``pair``."""
    source, target = _pair(pair)
    if not await asyncio.to_thread(_keys(state).set_glossary, name, source, target, {}):
        raise ApiError(404, "unknown_key", f"No API key named {name!r}.")
    return await _glossaries(state, name)
