"""FastAPI dependencies of the endpoints: the app's state and its translation service.

The API key check is ``server.auth.require_api_key``; endpoints take these as parameters
(``state: StateDep``, ``service: ServiceDep``). None of them reads anything FastAPI would
document as a parameter, so the OpenAPI document is the endpoints' own.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .service import TranslationService
from .state import AppState


def get_state(request: Request) -> AppState:
    return request.app.state.lsmt


def get_service(request: Request) -> TranslationService:
    service = get_state(request).service
    assert service is not None, "the service exists once the app has started"
    return service


StateDep = Annotated[AppState, Depends(get_state)]
ServiceDep = Annotated[TranslationService, Depends(get_service)]
