"""Documents translated whole: the texts of a .txt, .html or .docx file taken out in order, and
the file written again with their translations in place (``POST /translate_file``; the HTML
rules are also those of ``/translate`` with ``format=html``).

- .txt: UTF-8; each paragraph (text between blank lines) is one text; the blank lines stay.
- .html: each block (a paragraph, a heading, a list item, a cell) is one text, its inline
  elements (``<b>``, ``<a>``, ``<code>``...) kept around the words they covered
  (``server.markup``); ``<script>``, ``<style>``, ``<pre>``, ``<code>`` and ``translate="no"``
  are kept as they are, and so is everything else that is not text.
- .docx: each paragraph of ``word/document.xml`` with text is one text (``WordParagraph``); in
  a paragraph of formatted text alone, each stretch of other formatting (bold, a hyperlink) is
  placed on the words of the translation that render it, as HTML's inline elements are;
  another paragraph (tabs, fields, images) gets the translation in its first text; every other
  part of the package is copied unchanged.
"""

from __future__ import annotations

import copy
import io
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from xml.etree import ElementTree as ET

from .markup import HtmlDocument, Span, place

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
    texts: list[str] = []
    paragraphs = [p for p in (WordParagraph(p, texts) for p in root.iter(W + "p")) if p.slot >= 0]
    characters = sum(len(texts[p.slot]) for p in paragraphs)

    def rebuild(translations: list[str]) -> bytes:
        for paragraph in paragraphs:
            paragraph.write(translations)
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

    return Document(texts, rebuild, characters)


W = f"{{{WORD}}}"
# A paragraph is written again stretch by stretch (each formatting kept on the words it
# covered) when it holds only formatted text: runs of text, hyperlinks, bookmarks, proofing
# marks. Any other (tabs, breaks, fields, images, tracked changes) is written the simple way:
# the translation in its first text, with that text's formatting.
PARAGRAPH_PARTS = {W + n for n in ("pPr", "r", "hyperlink", "bookmarkStart", "bookmarkEnd",
                                   "proofErr")}  # fmt: skip
RUN_PARTS = {W + n for n in ("rPr", "t", "lastRenderedPageBreak")}
# Run properties that are not formatting a reader sees: a stretch does not end at them.
NOT_FORMATTING = {W + n for n in ("lang", "noProof", "rtl", "cs")}


@dataclass
class Stretch:
    """Consecutive runs of one formatting, in the paragraph or in one hyperlink."""

    key: str
    link: ET.Element | None
    run: ET.Element  # its first run: what the runs written for it are copied from
    text: str


class WordParagraph:
    """A paragraph of ``word/document.xml``: its text, one of the document's ``texts``
    (``slot`` -1: nothing to translate), with its differently formatted stretches as spans
    placed on the translation as HTML's inline elements are (``server.markup.place``)."""

    def __init__(self, paragraph: ET.Element, texts: list[str]) -> None:
        self.paragraph, self.texts_at = paragraph, texts
        self.own = [t for t in paragraph.iter(W + "t") if _owner(paragraph, t)]
        self.text = "".join(t.text or "" for t in self.own)
        self.slot = -1
        self.stretches = self._stretches()
        self.spans: list[tuple[Span, Stretch]] = []
        if not self.text.strip():
            return
        self.slot = len(texts)
        texts.append(self.text)
        if not self.stretches:
            return
        chars: dict[str, int] = {}
        for st in self.stretches:
            chars[st.key] = chars.get(st.key, 0) + len(st.text)
        base = max(chars, key=lambda k: chars[k])  # the paragraph's own formatting
        self.base = next(st for st in self.stretches if st.key == base)
        at = 0
        for st in self.stretches:
            if st.key != base and st.text.strip():
                span = Span(None, None, at, at + len(st.text))
                span.text_slot = len(texts)
                texts.append(st.text.strip())
                self.spans.append((span, st))
            at += len(st.text)

    def _stretches(self) -> list[Stretch]:
        """The paragraph's stretches, or none when it is not only formatted text."""
        stretches: list[Stretch] = []
        for child in self.paragraph:
            if child.tag not in PARAGRAPH_PARTS:
                return []
            links = [child] if child.tag == W + "hyperlink" else []
            runs = list(child) if links else [child] if child.tag == W + "r" else []
            for run in runs:
                if run.tag == W + "proofErr":
                    continue
                if run.tag != W + "r" or any(part.tag not in RUN_PARTS for part in run):
                    return []
                text = "".join(t.text or "" for t in run.iter(W + "t"))
                key = _formatting(run) + (f"@{id(child)}" if links else "")
                if stretches and stretches[-1].key == key:
                    stretches[-1].text += text
                elif text:
                    stretches.append(Stretch(key, links[0] if links else None, run, text))
        return stretches

    def write(self, translations: list[str]) -> None:
        if self.slot < 0:
            return
        target = translations[self.slot]
        if not self.spans:  # one formatting (or not only text): all in the first text
            self.own[0].text = target
            self.own[0].set(XML_SPACE, "preserve")
            for t in self.own[1:]:
                t.text = ""
            return
        placed = place(self.text, [s for s, _ in self.spans], target, translations)
        pieces: list[tuple[Stretch, str]] = []
        at = 0
        for span, st in sorted(self.spans, key=lambda x: placed[id(x[0])].start):
            where = placed[id(span)]
            pieces += [(self.base, target[at : where.start]), (st, target[where.start : where.end])]
            at = where.end
        pieces.append((self.base, target[at:]))
        self._replace_runs(pieces)

    def _replace_runs(self, pieces: list[tuple[Stretch, str]]) -> None:
        children = list(self.paragraph)
        text_parts = {W + "r", W + "hyperlink", W + "proofErr"}
        first = next(k for k, c in enumerate(children) if c.tag in text_parts)
        for child in children:
            if child.tag in text_parts:
                self.paragraph.remove(child)
        written: list[ET.Element] = []
        links_used: set[int] = set()
        for st, text in pieces:
            if not text:
                continue
            run = copy.deepcopy(st.run)
            for part in list(run):
                if part.tag != W + "rPr":
                    run.remove(part)
            t = ET.SubElement(run, W + "t")
            t.text = text
            t.set(XML_SPACE, "preserve")
            if st.link is None:
                written.append(run)
                continue
            # a hyperlink's first stretch goes in it; another (it held two formattings) in a copy
            link = copy.deepcopy(st.link) if id(st.link) in links_used else st.link
            links_used.add(id(st.link))
            for part in list(link):
                link.remove(part)
            link.append(run)
            written.append(link)
        for k, element in enumerate(written):
            self.paragraph.insert(first + k, element)


def _owner(paragraph: ET.Element, t: ET.Element) -> bool:
    """Whether ``t`` is the paragraph's own text, not that of a paragraph nested in it (a
    text box)."""
    return not any(t in set(p.iter()) for p in paragraph.iter(W + "p") if p is not paragraph)


def _formatting(run: ET.Element) -> str:
    props = run.find(W + "rPr")
    if props is None:
        return ""
    kept = copy.deepcopy(props)
    for part in list(kept):
        if part.tag in NOT_FORMATTING:
            kept.remove(part)
    return ET.tostring(kept, encoding="unicode")
