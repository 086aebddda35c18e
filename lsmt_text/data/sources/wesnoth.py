"""The Battle for Wesnoth's texts (Debian ``wesnoth-1.16-*``, GPL-2.0-or-later): unit
descriptions, help, tutorial and the story dialogue of the official campaigns, translated by
its community; the only narrative, everyday-register text found in a package.

gettext catalogs ``usr/share/games/wesnoth/1.16/locale/<dir>/LC_MESSAGES/<domain>.mo``, one
domain per campaign (``wesnoth-httt``) or part of the game (``wesnoth-units``), keyed like
LibreOffice's UI strings (:mod:`.catalogs`). A domain is a document: two whole campaigns are
held out, one for test and one for dev, rather than a share by hash (there are only a few
dozen domains). Pango markup is removed, ``context^`` prefixes of msgids dropped, and the
random-name generator tables and variable templates (``$x|.name|``) skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from .base import Segments, Source, locales
from .catalogs import catalog_segments

VERSION = "1.16"
CAMPAIGNS = (
    "did", "dm", "dw", "ei", "httt", "l", "low", "nr", "sof", "sota", "sotbe", "thot", "trow",
    "tsg", "ttb", "utbs",
)  # fmt: skip
PACKAGES = tuple(f"wesnoth-{VERSION}-{p}" for p in ("data", *CAMPAIGNS))
HELD_OUT = {"wesnoth-tsg": "test", "wesnoth-ttb": "dev"}  # The South Guard; A Tale of Two Brothers
LOCALES = locales("ar de es fr it ja ko pt ru", zh="zh_CN")
# English is the msgids of these languages' catalogs
ENGLISH_FROM = ("de", "es", "fr", "it", "ru")
_MARKUP = re.compile(r"</?[a-z]+(?:\s[^<>]*)?>")
_CONTEXT = re.compile(r"^[\w ]+\^")
_SPACE = re.compile(r"\s+")


def _text(raw: str) -> str:
    if "|" in raw:
        return ""  # a name generator's table or a WML variable template, not language
    text = _MARKUP.sub("", _CONTEXT.sub("", raw))
    return _SPACE.sub(" ", text).strip()


def _catalogs(root: Path, locale: str) -> list[Path]:
    base = root / "usr/share/games/wesnoth" / VERSION / "locale" / locale / "LC_MESSAGES"
    return sorted(base.glob("*.mo"))


def read(roots: list[Path], lang: str) -> Segments:
    locales = [LOCALES[c] for c in ENGLISH_FROM] if lang == "en" else [LOCALES[lang]]
    return catalog_segments(
        [mo for root in roots for loc in locales for mo in _catalogs(root, loc)],
        english=lang == "en",
        text_of=_text,
        doc_of=lambda catalog, context: catalog,
    )


def split_of(doc: str) -> str:
    return HELD_OUT.get(doc, "train")


SOURCE = Source(
    name="wesnoth",
    licence="GPL-2.0-or-later",
    description="The Battle for Wesnoth's unit descriptions, help and campaign dialogue "
    "(Debian wesnoth-1.16-*), aligned by catalog, context and English original",
    packages=lambda lang: PACKAGES,
    languages=tuple(sorted({"en", *LOCALES})),
    read=read,
    split_of=split_of,
)
