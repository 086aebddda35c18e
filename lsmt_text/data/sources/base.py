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
    # None: by a hash of the document (lsmt_text.data.modern.split_of)
    split_of: Callable[[str], str] | None = None
    # a folder committed in this repository that holds the source instead of Debian packages
    # (``packages`` is then empty); it is the one root ``read`` gets
    files: Path | None = None


def locales(same: str, **other: str) -> dict[str, str]:
    """Our language code -> a package's name for it: each code of ``same`` (space-separated)
    is its own name; ``other`` gives the rest (``zh="zh-CN"``)."""
    return {lang: lang for lang in same.split()} | other


def aligned_by_position(doc: str, blocks: list[str]) -> Segments:
    """A document's blocks keyed by position, for sources whose translations keep the
    original's blocks in order; the block count is in the key, so documents of different
    shapes never align. Empty blocks are dropped."""
    return {
        f"{doc}#{i}/{len(blocks)}": Segment(doc=doc, text=text)
        for i, text in enumerate(blocks)
        if text
    }
