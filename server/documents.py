"""Documents translated whole: the texts of a .txt, .html or .docx file taken out in order, and
the file written again with their translations in place (``POST /translate_file``; the HTML
rules are also those of ``/translate`` with ``format=html``).

- .txt: UTF-8; each paragraph (text between blank lines) is one text; the blank lines stay.
- .html: each block (a paragraph, a heading, a list item, a cell) is one text, its inline
  elements (``<b>``, ``<a>``, ``<code>``...) kept around the words they covered
  (``server.markup``); ``<script>``, ``<style>``, ``<pre>``, ``<code>`` and ``translate="no"``
  are kept as they are, and so is everything else that is not text.
- .docx: each paragraph of ``word/document.xml`` with text is one text; the translation goes
  into the paragraph's first text run (its formatting kept), the other runs are emptied (a
  translation does not keep the source's word-level formatting); every other part of the
  package is copied unchanged.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from xml.etree import ElementTree as ET

from .markup import HtmlDocument

FORMATS = (".txt", ".html", ".docx")
WORD = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
DOCUMENT_PART = "word/document.xml"


class DocumentError(ValueError):
    """A file that cannot be read as its extension says."""


@dataclass
class Document:
    """The texts to translate, in order, and how to write the file with their translations.

    ``characters``: what the caller is charged for (None: the texts' length); an HTML
    document also translates its inline elements' texts alone, to place them, at no charge."""

    texts: list[str]
    rebuild: Callable[[list[str]], bytes]
    characters: int | None = None

    @property
    def charged(self) -> int:
        return sum(map(len, self.texts)) if self.characters is None else self.characters


def open_document(filename: str, data: bytes) -> Document:
    suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    if suffix == ".docx":
        return docx_document(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError(f"{filename} is not UTF-8 text") from None
    if suffix == ".html":
        return html_document(text)
    if suffix == ".txt":
        return text_document(text)
    raise DocumentError(f"{filename}: files of this kind are not translated ({', '.join(FORMATS)})")


def text_document(text: str) -> Document:
    parts = re.split(r"(\n[ \t]*\n\s*)", text)  # paragraphs and the blank lines between them
    slots = [i for i, p in enumerate(parts) if i % 2 == 0 and p.strip()]

    def rebuild(translations: list[str]) -> bytes:
        out = list(parts)
        for i, translated in zip(slots, translations, strict=True):
            out[i] = translated
        return "".join(out).encode("utf-8")

    return Document([parts[i] for i in slots], rebuild)


def html_document(doc: str) -> Document:
    document = HtmlDocument(doc)
    return Document(document.texts, document.rebuild, document.characters)


def docx_document(data: bytes) -> Document:
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
        xml = package.read(DOCUMENT_PART)
        namespaces = [ns for _, ns in ET.iterparse(io.BytesIO(xml), events=("start-ns",))]
        root = ET.fromstring(xml)
    except (zipfile.BadZipFile, KeyError, ET.ParseError) as exc:
        raise DocumentError(f"not a Word document ({exc})") from None
    paragraphs = []
    for paragraph in root.iter(f"{{{WORD}}}p"):
        runs = list(paragraph.iter(f"{{{WORD}}}t"))
        if "".join(t.text or "" for t in runs).strip():
            paragraphs.append(runs)

    def rebuild(translations: list[str]) -> bytes:
        for runs, translated in zip(paragraphs, translations, strict=True):
            runs[0].text = translated
            runs[0].set(XML_SPACE, "preserve")
            for run in runs[1:]:
                run.text = ""
        for prefix, uri in namespaces:  # keep the document's prefixes (mc:Ignorable names them)
            ET.register_namespace(prefix, uri)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as rebuilt:
            for item in package.infolist():
                content = package.read(item.filename)
                if item.filename == DOCUMENT_PART:
                    content = ET.tostring(root, encoding="UTF-8", xml_declaration=True)
                rebuilt.writestr(item, content)
        return out.getvalue()

    return Document(["".join(t.text or "" for t in runs) for runs in paragraphs], rebuild)
