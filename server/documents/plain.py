"""Plain text and HTML files (and the HTML texts of ``format=html``)."""

from __future__ import annotations

import re

from ..markup import HtmlDocument
from .languages import Languages, html_language
from .model import Document, decode_utf8


def text_file(data: bytes) -> Document:
    return text_document(decode_utf8(data, "text"))


def html_file(data: bytes) -> Document:
    return html_document(decode_utf8(data, "HTML"))


def text_document(text: str) -> Document:
    """Each paragraph (text between blank lines) is one text; the blank lines stay."""
    parts = re.split(r"(\n[ \t]*\n\s*)", text)  # paragraphs and the blank lines between them
    slots = [i for i, p in enumerate(parts) if i % 2 == 0 and p.strip()]

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        out = list(parts)  # plain text names no language
        for i, translated in zip(slots, translations, strict=True):
            out[i] = translated
        return "".join(out).encode("utf-8")

    return Document([parts[i] for i in slots], rebuild)


def html_document(doc: str) -> Document:
    """Each block is one text, its inline elements kept around their words
    (``server.markup``); the translation declares its language (``html_language``)."""
    document = HtmlDocument(doc)

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        return document.rebuild(translations, html_language(languages))

    return Document(document.texts, rebuild, document.characters)
