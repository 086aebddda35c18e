"""FastAPI dependencies of the endpoints: the app's state and its translation service.

The API key check is ``server.auth.require_api_key``; endpoints take these as parameters
(``state: StateDep``, ``service: ServiceDep``). None of them reads anything FastAPI would
document as a parameter, so the OpenAPI document is the endpoints' own.

They are ``async def`` because they only read attributes: FastAPI runs a plain ``def``
dependency in its thread pool, a hop through another thread for each request and each
dependency (9 % of the interpreter's time under page traffic, ``loadtests.profile_server``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .engine_registry import EngineRegistry
from .service import TranslationService
from .state import AppState


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.lsmt  # set by create_app
    return state


async def get_state(request: Request) -> AppState:
    return state_of(request)


async def get_registry(request: Request) -> EngineRegistry | None:
    """This process's engines; None on a cluster ingress, whose engines are the translator
    replicas' (``server.cluster``)."""
    return state_of(request).registry


async def get_service(request: Request) -> TranslationService:
    service = state_of(request).service
    assert service is not None, "the service exists once the app has started"
    return service


StateDep = Annotated[AppState, Depends(get_state)]
RegistryDep = Annotated[EngineRegistry | None, Depends(get_registry)]
ServiceDep = Annotated[TranslationService, Depends(get_service)]
