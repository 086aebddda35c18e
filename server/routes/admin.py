"""``POST /v1/admin/reload``: re-read the served bundles, so that languages added to a
bundle are served without a restart (``server.reload``). Behind the admin keys
(``LSMT_ADMIN_KEYS``), never the translation keys; answered 404 while none is configured."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from ..auth import check_key, key_from_request
from ..cache_fill import start_cache_fill
from ..dependencies import StateDep, get_state
from ..errors import ApiError
from ..reload import reload_bundles
from ..schemas import ADMIN_ERRORS, ReloadResponse

router = APIRouter(tags=["admin"])


def require_admin_key(request: Request) -> None:
    keys = get_state(request).settings.admin_keys
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
async def reload(st: StateDep) -> JSONResponse:
    """Re-open every bundle directory and serve what changed (a bundle that is incomplete or
    damaged is refused whole: the version being served stays). The body is a ReloadResponse;
    answered as a JSONResponse for its status code."""
    outcomes = await reload_bundles(st)
    if any(o.status not in ("unchanged", "refused") for o in outcomes):
        start_cache_fill(st)  # the engines of what changed, before they are asked for
    refused = any(o.status == "refused" for o in outcomes)
    body = ReloadResponse(bundles=outcomes)
    return JSONResponse(body.model_dump(), status_code=409 if refused else 200)
