"""LSMT translation server: FastAPI + CTranslate2, engines assembled lazily from bundles.

``python -m server [--host H] [--port P] [BUNDLE_DIR ...]``; app factory
``server.app:create_app(settings)``. See docs/server.md.
"""

from .settings import Settings

__all__ = ["Settings", "create_app"]


def create_app(*args, **kwargs):
    from .app import create_app as _create_app

    return _create_app(*args, **kwargs)
