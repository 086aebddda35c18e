"""Parallel text beyond the Bible: software text from Debian packages and general-domain text
committed in this repository (:mod:`.general`); one module per kind, one registry here.

Each source reads the unpacked package(s) of one language and returns that language's
segments keyed so that the same key means the same content in every language (a help page's
paragraph id, a UI string's context and English original, a block's position in a page).
:mod:`lsmt_text.data.modern` joins the languages on those keys, cleans, filters and splits them.
"""

from __future__ import annotations

from . import debian_handbook, general, gnome_docs, libreoffice, wesnoth
from .base import Segment, Segments, Source

__all__ = ["SOURCES", "Segment", "Segments", "Source"]


def _registry() -> dict[str, Source]:
    sources = (
        libreoffice.HELP,
        libreoffice.UI,
        gnome_docs.SOURCE,
        debian_handbook.SOURCE,
        wesnoth.SOURCE,
        *general.SOURCES,
    )
    return {s.name: s for s in sources}


SOURCES: dict[str, Source] = _registry()
