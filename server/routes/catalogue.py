"""``GET /v1/languages`` (languages, routes, auto-detection) and ``GET /v1/models`` (device,
memory budgets, bundles, and every engine with its state)."""

from __future__ import annotations

from fastapi import APIRouter

from lsmt_core.routes import route_key

from ..bundles import language_name
from ..dependencies import RegistryDep, ServiceDep, StateDep
from ..schemas import BundleInfo, LanguageInfo, LanguagesResponse, ModelSource, ModelsResponse
from ..state import EnginesView

router = APIRouter(tags=["catalogue"])


@router.get("/v1/languages", response_model=LanguagesResponse)
async def languages(service: ServiceDep) -> LanguagesResponse:
    catalogue, known = service.catalogue, service.detection.detector.known
    return LanguagesResponse(
        languages=[
            LanguageInfo(
                code=c,
                name=language_name(c),
                targets=catalogue.targets_for(c),
                pivots=catalogue.pivot_targets(c),
            )
            for c in catalogue.languages
        ],
        routes=[route_key(r) for r in catalogue.routes],
        served_by={route_key(r): catalogue.bundle_for(r, None).name for r in catalogue.routes},
        models={
            b.name: ModelSource(kind=b.kind, provenance=b.bundle.provenance)
            for b in catalogue.bundles
        },
        auto_detect=[c for c in catalogue.languages if c in known],
    )


@router.get("/v1/models", response_model=ModelsResponse)
async def models(state: StateDep, registry: RegistryDep) -> ModelsResponse:
    """The bundles, and the engines of this process with its budgets; on the cluster, every
    translator replica's engines (each holds its own under these budgets)."""
    settings = state.settings
    if state.engines_view is not None:
        view = await state.engines_view()
    else:
        view = EnginesView.of(registry, state.bundles)
    cuda = settings.resolved_device == "cuda"
    return ModelsResponse(
        device=settings.resolved_device,
        compute_type=settings.resolved_compute_type,
        budgets={
            "device_bytes": settings.resolved_device_budget,
            "host_bytes": settings.host_budget_bytes if cuda else 0,
        },
        used={"device_bytes": view.device_bytes, "host_bytes": view.host_bytes},
        bundles=[
            BundleInfo(
                name=b.name,  # not its filesystem path: that is the operator's business
                kind=b.kind,
                provenance=b.bundle.provenance,
                languages=b.languages,
                routes=[route_key(r) for r in b.routes],
                engine_keys=b.engine_keys,
                max_source_positions=b.max_source_positions,
            )
            for b in state.bundles
        ],
        disabled=state.disabled_models,
        engines=view.engines,
    )
