"""``GET /healthz`` (liveness), ``/readyz`` (readiness: bundles, warm-up, failed engines,
damaged module files; 503 until ready) and ``/metrics`` (Prometheus). Never behind a key."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lsmt_core.routes import route_key

from ..dependencies import RegistryDep, StateDep
from ..schemas import HealthResponse, ReadinessResponse, WarmupState
from ..state import damaged_files, readiness_problems

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz(state: StateDep) -> HealthResponse:
    return HealthResponse(status="ok", uptime_s=round(time.time() - state.started_at, 3))


@router.get(
    "/readyz",
    responses={
        200: {"model": ReadinessResponse, "description": "Ready (status ready/degraded)."},
        503: {"model": ReadinessResponse, "description": "Not ready yet, or broken."},
    },
)
async def readyz(state: StateDep, registry: RegistryDep) -> JSONResponse:
    """The body is a ReadinessResponse; answered as a JSONResponse for its status code."""
    failed = registry.failed_engines() if registry is not None else {}
    problems = readiness_problems(state)
    ready = not problems
    damaged = damaged_files(state)
    healthy = not failed and not damaged and not state.disabled_models
    status = "ready" if ready and healthy else ("degraded" if ready else "not_ready")
    body = ReadinessResponse(
        status=status,
        ready=ready,
        problems=problems,
        bundles={
            **{b.name: "ok" for b in state.bundles},
            **{p: f"invalid: {m}" for p, m in state.bundle_errors.items()},
        },
        warmup=WarmupState(
            done=state.warmup_done,
            routes=[route_key(w.route) for w in state.warmup_routes],
            errors=state.warmup_errors,
        ),
        failed_engines=failed,
        damaged_files=damaged,
        disabled_models=state.disabled_models,
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def metrics(state: StateDep, registry: RegistryDep) -> Response:
    if state.metrics_view is not None:
        return Response(await state.metrics_view(), media_type=CONTENT_TYPE_LATEST)
    if registry is not None:
        registry.update_gauges()
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
