"""LSMT translation server: FastAPI + CTranslate2, engines assembled lazily from bundles.

``python -m server [--host H] [--port P] [BUNDLE_DIR ...]``; app factory
``server.app:create_app(settings)``. See docs/server.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["Settings", "create_app"]


def create_app(*args: Any, **kwargs: Any) -> FastAPI:
    """``server.app.create_app``, imported on first use (``import server`` stays light)."""
    from .app import create_app as _create_app

    return _create_app(*args, **kwargs)
