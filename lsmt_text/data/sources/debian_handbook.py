"""The Debian Administrator's Handbook (Debian ``debian-handbook``, GPL-2+ or CC-BY-SA-3.0).

HTML chapters ``usr/share/doc/debian-handbook/html/<locale>/<file>.html``, the same files in
every language: paragraphs (``div.para``) and headings in document order align by position
(key = file + position + block count). Untranslated paragraphs (English left in the
translation) are dropped later as identical pairs or by language identification.
"""

from __future__ import annotations

import re
from pathlib import Path

from .base import Segments, Source, aligned_by_position

LOCALES = {
    "ar": "ar-MA",
    "de": "de-DE",
    "en": "en-US",
    "es": "es-ES",
    "fr": "fr-FR",
    "it": "it-IT",
    "ja": "ja-JP",
    "ko": "ko-KR",
    "pt": "pt-BR",
    "ru": "ru-RU",
    "zh": "zh-CN",
}
_SPACE = re.compile(r"\s+")


def read(roots: list[Path], lang: str) -> Segments:
    import lxml.html

    out: Segments = {}
    for root in roots:
        base = root / "usr/share/doc/debian-handbook/html" / LOCALES[lang]
        for page in sorted(base.glob("*.html")):
            doc = page.name
            blocks = [
                _SPACE.sub(" ", el.text_content()).strip()
                for el in lxml.html.parse(str(page)).xpath(
                    '//div[@class="para"] | //h1 | //h2 | //h3 | //h4'
                )
            ]
            out |= aligned_by_position(doc, blocks)
    return out


SOURCE = Source(
    name="debian-handbook",
    licence="GPL-2.0-or-later OR CC-BY-SA-3.0",
    description="The Debian Administrator's Handbook (Debian debian-handbook), paragraphs "
    "aligned by position in the same chapter",
    packages=lambda lang: ("debian-handbook",),
    languages=tuple(sorted(LOCALES)),
    read=read,
)
