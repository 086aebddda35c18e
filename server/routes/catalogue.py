"""``GET /v1/languages`` (languages, routes, auto-detection) and ``GET /v1/models`` (device,
memory budgets, bundles, and every engine with its state)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from lsmt_core.routes import route_key

from ..bundles import ServedBundle, language_name
from ..dependencies import ServiceDep, StateDep
from ..engines import State
from ..schemas import LanguagesResponse, ModelsResponse

router = APIRouter(tags=["catalogue"])


@router.get("/v1/languages", response_model=LanguagesResponse)
async def languages(svc: ServiceDep) -> LanguagesResponse:
    return LanguagesResponse(
        languages=[
            {"code": c, "name": language_name(c), "targets": svc.targets_for(c)}
            for c in svc.languages
        ],
        routes=[route_key(r) for r in svc.routes],
        auto_detect=[c for c in svc.languages if c in svc.detector.known],
    )


@router.get("/v1/models", responses={200: {"model": ModelsResponse}})
async def models(st: StateDep) -> dict[str, Any]:
    reg = st.registry
    snap = {e["key"]: e for e in reg.snapshot()}
    engines = [snap.get(key) or _unloaded(b, key) for b in st.bundles for key in b.engine_keys]
    settings = st.settings
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
                "routes": [route_key(r) for r in b.routes],
                "engine_keys": b.engine_keys,
                "max_source_positions": b.max_source_positions,
            }
            for b in st.bundles
        ],
        "engines": engines,
    }


def _unloaded(b: ServedBundle, key: str) -> dict[str, Any]:
    """An engine the registry has not seen yet (never asked for)."""
    return {
        "key": key,
        "bundle": b.name,
        "routes": [route_key(r) for r in b.routes_of_key(key)],
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
