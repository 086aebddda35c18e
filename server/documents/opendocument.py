"""OpenDocument text and presentations (.odt, .odp): each paragraph or heading of
``content.xml`` (body, lists, tables, frames, slides, notes) is one text.

A paragraph of styled text alone (text, ``text:span``, ``text:a``, ``text:s`` spaces,
bookmarks, soft page breaks) is written again piece by piece: each span or link is placed on
the words of the translation that render it, as HTML's inline elements are
(``server.markup.place``). Any other paragraph (tabs, line breaks, notes, frames, fields)
gets the translation in its first text, its elements kept where they were. A footnote's or a
frame's paragraphs are texts of their own.

The translation declares its language (``server.documents.languages``): each language and
country of a style's text properties (western ``fo:``, ``-asian``, ``-complex``) in
``content.xml`` and ``styles.xml`` that named the source names the target (a default style
declares the document's), and so does ``meta.xml``'s ``dc:language``. Where the direction
turns (``Languages.turns``), every paragraph style (default, common and automatic; those of
presentation objects and shapes too) states the target's writing mode, ``rl-tb`` or ``lr-tb``,
whatever it inherited.
"""

from __future__ import annotations

import copy
from xml.etree import ElementTree as ET

from ..markup import Span, place
from .languages import Languages, regional, retagged, split_region, with_dc_language
from .model import Document, DocumentError, decode_utf8
from .packages import open_package, parse_xml, read_member, rewrite_package, xml_bytes

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
CONTENT, STYLES, META = "content.xml", "styles.xml", "meta.xml"
# a style's language and country per class of script
LANGUAGES = {
    "western": (f"{{{FO}}}language", f"{{{FO}}}country"),
    "asian": (f"{{{STYLE}}}language-asian", f"{{{STYLE}}}country-asian"),
    "complex": (f"{{{STYLE}}}language-complex", f"{{{STYLE}}}country-complex"),
}
# the families of styles whose paragraph properties lay out text (paragraphs; presentation
# objects' and shapes' text), and what a style's paragraph properties come before
TEXT_FAMILIES = {"paragraph", "presentation", "graphic"}
PARAGRAPH_PROPERTIES = f"{{{STYLE}}}paragraph-properties"
AFTER_PARAGRAPH = {f"{{{STYLE}}}text-properties", f"{{{STYLE}}}table-cell-properties"}
PARAGRAPHS = {f"{{{TEXT}}}p", f"{{{TEXT}}}h"}
STYLED = {f"{{{TEXT}}}span", f"{{{TEXT}}}a"}  # placed on their words
SPACE = f"{{{TEXT}}}s"  # ``text:c`` spaces
MARKS = {f"{{{TEXT}}}{n}" for n in ("bookmark", "bookmark-start", "bookmark-end",
                                    "soft-page-break")}  # fmt: skip


def odt_document(data: bytes) -> Document:
    return opendocument(data, "OpenDocument text")


def odp_document(data: bytes) -> Document:
    return opendocument(data, "OpenDocument presentation")


def opendocument(data: bytes, kind: str) -> Document:
    package = open_package(data, kind)
    if CONTENT not in package.namelist():
        raise DocumentError(f"not an {kind} (no {CONTENT} inside)")
    root, namespaces = parse_xml(read_member(package, CONTENT, kind), CONTENT, kind)
    texts: list[str] = []
    paragraphs = [OdfParagraph(p, texts) for p in root.iter() if p.tag in PARAGRAPHS]
    paragraphs = [p for p in paragraphs if p.slot >= 0]
    characters = sum(len(texts[p.slot]) for p in paragraphs)
    members = package.namelist()
    styles = (
        parse_xml(read_member(package, STYLES, kind), STYLES, kind) if STYLES in members else None
    )
    meta = decode_utf8(read_member(package, META, kind), META) if META in members else None

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        if len(translations) != len(texts):
            raise ValueError(f"{len(translations)} translations for {len(texts)} texts")
        for paragraph in paragraphs:
            paragraph.write(translations)
        replaced = {}
        if languages is not None:
            for part in [root] + ([styles[0]] if styles is not None else []):
                style_languages(part, languages)
                if languages.turns:
                    writing_mode(part, "rl-tb" if languages.direction == "rtl" else "lr-tb")
            if styles is not None:
                replaced[STYLES] = xml_bytes(*styles)
            if meta is not None:
                replaced[META] = with_dc_language(meta, languages, regional).encode("utf-8")
        replaced[CONTENT] = xml_bytes(root, namespaces)
        return rewrite_package(package, replaced)

    return Document(texts, rebuild, characters)


def style_languages(root: ET.Element, languages: Languages) -> None:
    """Each style's languages retagged (``languages.retagged``); a default style's declare
    the document's. A country goes with its language: the target's region, or none."""
    defaults = {
        id(props)
        for default in root.iter(f"{{{STYLE}}}default-style")
        for props in default.iter(f"{{{STYLE}}}text-properties")
    }
    for props in root.iter(f"{{{STYLE}}}text-properties"):
        tags = {
            script: "-".join(filter(None, (props.get(language), props.get(country))))
            for script, (language, country) in LANGUAGES.items()
            if props.get(language)
        }
        for script, tag in retagged(tags, languages, regional, id(props) in defaults).items():
            (language, country), (subtag, region) = LANGUAGES[script], split_region(tag)
            props.set(language, subtag)
            if region is None:
                props.attrib.pop(country, None)
            else:
                props.set(country, region)


def writing_mode(root: ET.Element, mode: str) -> None:
    """Every style of a family that lays out text writing in ``mode``: its paragraph
    properties' ``style:writing-mode``, the properties added where it has none."""
    family = f"{{{STYLE}}}family"
    styles = [
        style
        for tag in (f"{{{STYLE}}}style", f"{{{STYLE}}}default-style")
        for style in root.iter(tag)
        if style.get(family) in TEXT_FAMILIES
    ]
    for style in styles:
        props = style.find(PARAGRAPH_PROPERTIES)
        if props is None:
            props = ET.Element(PARAGRAPH_PROPERTIES)
            later = [k for k, child in enumerate(style) if child.tag in AFTER_PARAGRAPH]
            style.insert(later[0] if later else len(style), props)
        props.set(f"{{{STYLE}}}writing-mode", mode)


class OdfParagraph:
    """A paragraph: its own text (not its notes' or frames'), one of the document's texts
    (``slot`` -1: nothing to translate), with its spans and links placed on the translation."""

    def __init__(self, paragraph: ET.Element, texts: list[str]) -> None:
        self.paragraph = paragraph
        self.simple = all(_simple(child, top=True) for child in paragraph)
        self.text = _text_of(paragraph)
        self.slot = -1
        self.spans: list[tuple[Span, ET.Element]] = []
        if not self.text.strip():
            return
        self.slot = len(texts)
        texts.append(self.text)
        if not self.simple:
            return
        at = len(paragraph.text or "")
        for child in paragraph:
            inner = _text_of(child)
            if child.tag in STYLED and inner.strip():
                span = Span(None, None, at, at + len(inner))
                span.text_slot = len(texts)
                texts.append(inner.strip())
                self.spans.append((span, child))
            at += len(inner) + len(child.tail or "")

    def write(self, translations: list[str]) -> None:
        target = translations[self.slot]
        if not self.simple:
            self._first_text(target)
            return
        placed = place(self.text, [s for s, _ in self.spans], target, translations)
        kept = [c for c in self.paragraph if c.tag in MARKS]
        for child in list(self.paragraph):
            self.paragraph.remove(child)
        self.paragraph.text = None
        for mark in kept:  # bookmarks first: they mark the paragraph, not words
            mark.tail = None
        self.paragraph.extend(kept)
        at = 0
        for span, element in sorted(self.spans, key=lambda x: placed[id(x[0])].start):
            where = placed[id(span)]
            self._append_text(target[at : where.start])
            piece = copy.deepcopy(element)
            for part in list(piece):
                piece.remove(part)
            piece.text, piece.tail = target[where.start : where.end], None
            self.paragraph.append(piece)
            at = where.end
        self._append_text(target[at:])

    def _append_text(self, text: str) -> None:
        children = list(self.paragraph)
        if children:
            children[-1].tail = (children[-1].tail or "") + text
        else:
            self.paragraph.text = (self.paragraph.text or "") + text

    def _first_text(self, target: str) -> None:
        """The translation in the paragraph's first own text, its other own texts emptied."""
        slots = _own_text_slots(self.paragraph)
        first = True
        for element, attr in slots:
            value = getattr(element, attr)
            if value and value.strip() and first:
                setattr(element, attr, target)
                first = False
            elif value:
                setattr(element, attr, "")


def _simple(element: ET.Element, top: bool) -> bool:
    if element.tag == SPACE or element.tag in MARKS:
        return True
    return top and element.tag in STYLED and all(c.tag == SPACE for c in element)


def _text_of(element: ET.Element) -> str:
    """An element's own text, ``text:s`` as spaces, not crossing into notes or frames."""
    if element.tag == SPACE:
        return " " * int(element.get(f"{{{TEXT}}}c", "1"))
    out = [element.text or ""]
    for child in element:
        if child.tag in STYLED or child.tag == SPACE:
            out.append(_text_of(child))
        out.append(child.tail or "")
    return "".join(out)


def _own_text_slots(element: ET.Element) -> list[tuple[ET.Element, str]]:
    """Where the paragraph's own text lives: (element, "text" or "tail"), in order."""
    slots = [(element, "text")]
    for child in element:
        if child.tag in STYLED:
            slots += _own_text_slots(child)
        slots.append((child, "tail"))
    return slots
