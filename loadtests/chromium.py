"""How this project drives Chromium (Debian's, through Playwright): where the browser is and the
flags it is launched with, shared by the web page's test, the LibreTranslate front-end run and
the screenshot script."""

from __future__ import annotations

import os
import shutil

# Known to work on this project's machines: without the background-networking flags Chromium's
# own connections crowd out the page's (refused many at a time).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
]


def find_chromium() -> str | None:
    """``LSMT_TEST_CHROMIUM``, else Debian's ``chromium`` (or ``chromium-browser``) on PATH."""
    return os.environ.get("LSMT_TEST_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None
    )
