"""LSMT translation server: FastAPI + CTranslate2, engines assembled lazily from bundles.

``python -m server [--host H] [--port P] [BUNDLE_DIR ...]``; app factory
``server.app:create_app(settings)``. See docs/server.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .bundles import ServedBundle
    from .decoders import Decoders
    from .engine_loader import Loader
    from .state import AppState

__all__ = ["Settings", "create_app"]


def create_app(
    settings: Settings | None = None,
    *,
    loader: Loader | None = None,
    bundles: list[ServedBundle] | None = None,
    decoders: Callable[[AppState], Decoders] | None = None,
) -> FastAPI:
    """``server.app.create_app``, imported on first use (``import server`` stays light)."""
    from .app import create_app as _create_app

    return _create_app(settings, loader=loader, bundles=bundles, decoders=decoders)
