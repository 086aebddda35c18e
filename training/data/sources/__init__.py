"""Modern parallel text from Debian packages: one module per source, one registry here.

Each source reads the unpacked package(s) of one language and returns that language's
segments keyed so that the same key means the same content in every language (a help page's
paragraph id, a UI string's context and English original, a block's position in a page).
:mod:`training.data.modern` joins the languages on those keys, cleans, filters and splits them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Segment:
    """One aligned unit of text of one language; ``doc`` is the unit held out by the split (a
    page, a dialog), so that dev and test never share a document with train."""

    doc: str
    text: str


Segments = dict[str, Segment]  # key -> segment


@dataclass(frozen=True)
class Source:
    name: str
    licence: str
    description: str
    # our language code -> the Debian package(s) that hold it
    packages: Callable[[str], tuple[str, ...]]
    languages: tuple[str, ...]
    # (unpacked roots of the language's packages, language) -> its segments
    read: Callable[[list[Path], str], Segments]
    # document -> train, dev or test, for sources of a few large documents held out by name;
    # None: by a hash of the document (training.data.modern.split_of)
    split_of: Callable[[str], str] | None = None


def _registry() -> dict[str, Source]:
    from . import debian_handbook, gnome_docs, libreoffice, wesnoth

    sources = (
        libreoffice.HELP,
        libreoffice.UI,
        gnome_docs.SOURCE,
        debian_handbook.SOURCE,
        wesnoth.SOURCE,
    )
    return {s.name: s for s in sources}


SOURCES: dict[str, Source] = _registry()
