"""The translation web page at ``/``: plain HTML, CSS and a script, served from this package.

The page uses only the public API (``/v1/languages``, ``/v1/models``, ``/v1/translate``), so it
needs nothing else from the server. ``create_app`` includes ``router`` when ``web_page`` is on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

HERE = Path(__file__).parent

# Everything the page loads comes from this server: no inline code, no other origin.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidated on every load (ETag), so an upgraded server is never shown a stale script.
    "Cache-Control": "no-cache",
}

_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/web/style.css": ("style.css", "text/css; charset=utf-8"),
    "/web/app.js": ("app.js", "text/javascript; charset=utf-8"),
}

router = APIRouter(include_in_schema=False)


def _serve(name: str, media_type: str) -> Callable[[], Awaitable[FileResponse]]:
    async def serve() -> FileResponse:
        return FileResponse(HERE / name, media_type=media_type, headers=_HEADERS)

    return serve


for _path, (_name, _type) in _FILES.items():
    router.add_api_route(_path, _serve(_name, _type), methods=["GET", "HEAD"])
