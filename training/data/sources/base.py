"""What a package source is: its segments and its description (the registry is in
``__init__``)."""

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
    # a folder committed in this repository that holds the source instead of Debian packages
    # (``packages`` is then empty); it is the one root ``read`` gets
    files: Path | None = None
