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
async def languages(svc: ServiceDep) -> LanguagesResponse:
    return LanguagesResponse(
        languages=[
            LanguageInfo(
                code=c,
                name=language_name(c),
                targets=svc.targets_for(c),
                pivots=svc.pivot_targets(c),
            )
            for c in svc.languages
        ],
        routes=[route_key(r) for r in svc.routes],
        served_by={route_key(r): svc.bundle_for(r, None).name for r in svc.routes},
        models={
            b.name: ModelSource(kind=b.kind, provenance=b.bundle.provenance) for b in svc.bundles
        },
        auto_detect=[c for c in svc.languages if c in svc.detector.known],
    )


@router.get("/v1/models", response_model=ModelsResponse)
async def models(st: StateDep, registry: RegistryDep) -> ModelsResponse:
    """The bundles, and the engines of this process with its budgets; on the cluster, every
    translator replica's engines (each holds its own under these budgets)."""
    settings = st.settings
    if st.engines_view is not None:
        view = await st.engines_view()
    else:
        view = EnginesView.of(registry, st.bundles)
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
            for b in st.bundles
        ],
        disabled=st.disabled_models,
        engines=view.engines,
    )
