"""GNOME's user and administrator help (Debian ``gnome-user-docs``, CC-BY-SA-3.0).

Mallard pages ``usr/share/help/<dir>/<guide>/<page>.page``, the same pages in every language:
the paragraphs, titles and descriptions of a page, in document order and outside credits,
licences and revision notes, align by position (key = page + position). A page whose block
count differs from the English one is skipped by the join (its keys do not all match).
"""

from __future__ import annotations

import re
from pathlib import Path

from .base import Segments, Source, aligned_by_position, locales

LOCALES = locales("de es fr it pt ru", en="C")
_NS = "{http://projectmallard.org/1.0/}"
_BLOCKS = {"p", "title", "desc"}
_SKIP = {"credit", "license", "revision", "comment"}
_SPACE = re.compile(r"\s+")


def _blocks(path: Path) -> list[str]:
    import lxml.etree

    out = []
    for el in lxml.etree.parse(str(path)).iter():
        if not isinstance(el.tag, str) or el.tag.removeprefix(_NS) not in _BLOCKS:
            continue
        if any(
            isinstance(a.tag, str) and a.tag.split("}")[-1] in _SKIP for a in el.iterancestors()
        ):
            continue
        out.append(_SPACE.sub(" ", "".join(el.itertext())).strip())
    return out


def read(roots: list[Path], lang: str) -> Segments:
    out: Segments = {}
    for root in roots:
        base = root / "usr/share/help" / LOCALES[lang]
        pages = sorted(base.glob("*/*.page"))
        for page in pages:
            doc = page.relative_to(base).as_posix()
            out |= aligned_by_position(doc, _blocks(page))
    return out


SOURCE = Source(
    name="gnome-docs",
    licence="CC-BY-SA-3.0",
    description="GNOME user and system administrator help (Debian gnome-user-docs), blocks "
    "aligned by position in the same page",
    packages=lambda lang: ("gnome-user-docs",),
    languages=tuple(sorted(LOCALES)),
    read=read,
)
