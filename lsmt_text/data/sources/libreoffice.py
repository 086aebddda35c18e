"""LibreOffice's help pages and user-interface strings (Debian ``libreoffice-help-<lang>`` and
``libreoffice-l10n-<lang>``, MPL-2.0).

Help: every language has the same HTML pages under ``usr/share/libreoffice/help/<dir>/text``
with the same element ids (``par_id...``, ``hd_id...``): key = page path + id. Inline markup is
flattened; the hidden macOS alternatives (``class="MAC"``) are dropped, the default (Windows
and Linux) wording kept.

UI: gettext catalogs ``usr/lib/libreoffice/program/resource/<dir>/LC_MESSAGES/*.mo``; key =
catalog + context + English original (the msgid, which is also the English text). Mnemonic
markers (``~``, ``_``) are removed; ``%PRODUCTNAME`` becomes LibreOffice on both sides.
"""

from __future__ import annotations

import re
from pathlib import Path

from .base import Segment, Segments, Source, locales
from .catalogs import catalog_segments

# our code -> the locale directory / package suffix
HELP_LOCALES = locales("de es fr it ja ko pt ru", en="en-US", zh="zh-CN")
UI_LOCALES = {lang: loc for lang, loc in HELP_LOCALES.items() if lang != "en"} | {"ar": "ar"}
# English UI strings are the catalogs' msgids: read from these languages' packages.
UI_ENGLISH_FROM = ("ar", "es", "fr", "it", "ru")

_ID = re.compile(r"^(par_id|hd_id)")
_SPACE = re.compile(r"\s+")
_MNEMONIC = re.compile(r"[~_](?=\w)")


def _flatten(element) -> str:
    for hidden in element.xpath('.//*[contains(concat(" ", @class, " "), " MAC ")]'):
        hidden.drop_tree()
    return _SPACE.sub(" ", element.text_content()).strip()


def read_help(roots: list[Path], lang: str) -> Segments:
    import lxml.html

    out: Segments = {}
    for root in roots:
        base = root / "usr/share/libreoffice/help" / HELP_LOCALES[lang]
        for page in sorted(base.glob("text/**/*.html")):
            rel = page.relative_to(base).as_posix()
            tree = lxml.html.parse(str(page))
            seen: set[str] = set()
            for el in tree.xpath('//*[@id="DisplayArea"]//*[@id]'):
                eid = el.get("id")
                if not _ID.match(eid) or eid in seen:
                    continue
                seen.add(eid)
                text = _flatten(el)
                if text:
                    out[f"{rel}#{eid}"] = Segment(doc=rel, text=text)
    return out


def _ui_text(text: str) -> str:
    text = text.replace("%PRODUCTNAME", "LibreOffice")
    return _SPACE.sub(" ", _MNEMONIC.sub("", text)).strip()


def _catalogs(root: Path, lang: str) -> list[Path]:
    base = root / "usr/lib/libreoffice/program/resource" / UI_LOCALES[lang] / "LC_MESSAGES"
    return sorted(base.glob("*.mo"))


def read_ui(roots: list[Path], lang: str) -> Segments:
    # English is the msgids of every listed language's catalogs (a string untranslated in
    # one language may be translated in another)
    codes = UI_ENGLISH_FROM if lang == "en" else (lang,) * len(roots)
    catalogs = [mo for root, code in zip(roots, codes, strict=True) for mo in _catalogs(root, code)]
    return catalog_segments(
        catalogs,
        english=lang == "en",
        text_of=_ui_text,
        doc_of=lambda catalog, context: f"{catalog}/{context.split('|', 1)[0]}",
    )


HELP = Source(
    name="libreoffice-help",
    licence="MPL-2.0",
    description="LibreOffice help pages (Debian libreoffice-help-*), aligned by page and "
    "paragraph id",
    packages=lambda lang: (f"libreoffice-help-{HELP_LOCALES[lang].lower()}",),
    languages=tuple(sorted(HELP_LOCALES)),
    read=read_help,
)

UI = Source(
    name="libreoffice-ui",
    licence="MPL-2.0",
    description="LibreOffice user-interface strings (Debian libreoffice-l10n-*), aligned by "
    "catalog, context and English original",
    packages=lambda lang: tuple(
        f"libreoffice-l10n-{UI_LOCALES[code].lower()}"
        for code in (UI_ENGLISH_FROM if lang == "en" else (lang,))
    ),
    languages=tuple(sorted({"en", *UI_LOCALES})),
    read=read_ui,
)
