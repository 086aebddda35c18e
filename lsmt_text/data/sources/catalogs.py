"""gettext catalogs (``.mo``) as aligned segments: the key is the catalog, the context and the
English original (the msgid), which is also the English side, so every language that
translates a string aligns with English and with each other."""

from __future__ import annotations

import gettext
from collections.abc import Callable, Iterable
from pathlib import Path

from .base import Segment, Segments


def catalog_segments(
    catalogs: Iterable[Path],
    english: bool,
    text_of: Callable[[str], str],
    doc_of: Callable[[str, str], str],
) -> Segments:
    """Segments of ``catalogs`` (all of one language, or with ``english`` the msgids of any):
    ``text_of(raw)`` cleans a string ("" drops it), ``doc_of(catalog, context)`` names the
    document held out as a whole."""
    out: Segments = {}
    for mo in catalogs:
        with open(mo, "rb") as f:
            table = gettext.GNUTranslations(f)._catalog  # the parsed msgid -> msgstr table
        for key, translation in table.items():
            if not isinstance(key, str) or not key:
                continue  # plural forms and the header
            context, _, msgid = key.rpartition("\x04")
            text = text_of(msgid if english else translation)
            if text:
                out[f"{mo.stem}/{key}"] = Segment(doc=doc_of(mo.stem, context), text=text)
    return out
