"""Office Open XML documents: .docx (the body, headers, footers, footnotes and endnotes) and
.pptx (slides and speaker notes), each paragraph one text.

A paragraph made only of formatted text (runs of text; in Word also hyperlinks, bookmarks and
proofing marks) is written again stretch by stretch: each stretch of another formatting than
the paragraph's own (bold, italic, a hyperlink, a style) is placed on the words of the
translation that render it, as HTML's inline elements are (``server.markup.place``). Runs that
differ only in language tags or proofing state are one stretch. Any other paragraph (tabs,
breaks, fields, images, tracked changes) gets the translation in its first text, with that
text's formatting. A text box's paragraphs are texts of their own.

The translation declares its language (``server.documents.languages``): a Word ``w:lang`` (in
the parts translated and in styles.xml, whose ``docDefaults`` declares the document's) and
settings.xml's ``w:themeFontLang``, or a DrawingML ``lang``/``altLang`` (slides, notes, slide
masters and layouts) that named the source names the target, as ``fr-FR``: Word's proofing
languages are locales, and it writes and expects that form. presentation.xml's default text
style declares the presentation's language. Parts that hold no text translated are written
again only where a tag changed.

Where the direction turns (``Languages.turns``: English into Arabic, Arabic into English), each
translated paragraph states the target's explicitly, whatever its style says: Word's
paragraph ``w:bidi`` and run ``w:rtl`` (on, or ``w:val="0"``), placed in the schema's order;
DrawingML's paragraph ``rtl="1"`` or ``"0"``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from xml.etree import ElementTree as ET

from ..markup import Span, place
from .languages import Languages, regional, retagged
from .model import Document, DocumentError
from .packages import open_package, parse_xml, read_member, rewrite_package, xml_bytes

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
P = "http://schemas.openxmlformats.org/presentationml/2006/main"
# Word's language per class of script, and what follows ``w:lang`` in a run's properties
WORD_LANGUAGES = {"western": f"{{{W}}}val", "asian": f"{{{W}}}eastAsia", "complex": f"{{{W}}}bidi"}
AFTER_LANG = {f"{{{W}}}{n}" for n in ("eastAsianLayout", "specVanish", "oMath", "rPrChange")}
# What follows ``w:bidi`` in a paragraph's properties and ``w:rtl`` in a run's (Word refuses
# properties out of the schema's order)
AFTER_BIDI = {f"{{{W}}}{n}" for n in (
    "adjustRightInd", "snapToGrid", "spacing", "ind", "contextualSpacing", "mirrorIndents",
    "suppressOverlap", "jc", "textDirection", "textAlignment", "textboxTightWrap", "outlineLvl",
    "divId", "cnfStyle", "rPr", "sectPr", "pPrChange")}  # fmt: skip
AFTER_RTL = {f"{{{W}}}{n}" for n in ("cs", "em", "lang")} | AFTER_LANG


@dataclass(frozen=True)
class Dialect:
    """How one Office format writes paragraphs, runs and their formatting."""

    ns: str
    paragraph_parts: frozenset[str]  # what a paragraph of formatted text alone holds
    run_parts: frozenset[str]  # what a run of text holds
    link: str | None  # the element that holds a hyperlink's runs (Word), if any
    marks: frozenset[str]  # paragraph children dropped when it is written again (proofing)
    not_formatting: frozenset[str]  # run properties (children or attributes) no reader sees
    declaring: re.Pattern[str]  # parts with no text translated that declare languages
    declare: Callable[[ET.Element, Languages], None]  # a part's language tags -> the target
    direct: Callable[[ET.Element, bool], None]  # a paragraph written right to left, or not

    def tag(self, name: str) -> str:
        return f"{{{self.ns}}}{name}"


def word_languages(root: ET.Element, languages: Languages) -> None:
    """Each ``w:lang`` and ``w:themeFontLang`` retagged (``languages.retagged``); the
    ``w:lang`` of styles.xml's ``docDefaults`` declares the document's language, and is added
    where it is missing; settings.xml's ``w:themeFontLang`` declares it too."""
    defaults = root.find(f"{{{W}}}docDefaults/{{{W}}}rPrDefault/{{{W}}}rPr")
    declared = None if defaults is None else defaults.find(f"{{{W}}}lang")
    if defaults is not None and declared is None:
        declared = ET.Element(f"{{{W}}}lang")
        insert_in_order(defaults, declared, AFTER_LANG)
    theme = root.find(f"{{{W}}}themeFontLang") if root.tag == f"{{{W}}}settings" else None
    for lang in [*root.iter(f"{{{W}}}lang"), *([theme] if theme is not None else [])]:
        tags = {
            script: lang.get(name, "") for script, name in WORD_LANGUAGES.items() if lang.get(name)
        }
        declares = lang is declared or lang is theme
        for script, tag in retagged(tags, languages, regional, declares).items():
            lang.set(WORD_LANGUAGES[script], tag)


def word_direction(paragraph: ET.Element, rtl: bool) -> None:
    """The paragraph's ``w:bidi`` and its runs' ``w:rtl`` stating ``rtl``."""
    set_flag(child_at_start(paragraph, f"{{{W}}}pPr"), f"{{{W}}}bidi", rtl, AFTER_BIDI)
    for run in paragraph.iter(f"{{{W}}}r"):
        set_flag(child_at_start(run, f"{{{W}}}rPr"), f"{{{W}}}rtl", rtl, AFTER_RTL)


def set_flag(props: ET.Element, tag: str, on: bool, after: set[str]) -> None:
    """A Word on/off property (``<w:bidi/>``: on; ``w:val="0"``: off) set, placed before the
    properties the schema puts ``after`` it where it is added."""
    flag = props.find(tag)
    if flag is None:
        flag = ET.Element(tag)
        insert_in_order(props, flag, after)
    flag.attrib.pop(f"{{{W}}}val", None)
    if not on:
        flag.set(f"{{{W}}}val", "0")


def insert_in_order(parent: ET.Element, child: ET.Element, after: set[str]) -> None:
    """``child`` inserted before the first of ``parent``'s children the schema puts after it."""
    later = [k for k, element in enumerate(parent) if element.tag in after]
    parent.insert(later[0] if later else len(parent), child)


def child_at_start(parent: ET.Element, tag: str) -> ET.Element:
    """``parent``'s ``tag`` child, added as its first where it has none (paragraph and run
    properties come first)."""
    found = parent.find(tag)
    if found is None:
        found = ET.Element(tag)
        parent.insert(0, found)
    return found


def drawing_languages(root: ET.Element, languages: Languages) -> None:
    """Each DrawingML ``lang`` and ``altLang`` (of runs, paragraph ends and defaults) that
    names the source, retagged; presentation.xml's default text style (``a:defPPr``) declares
    the presentation's language."""
    target = regional(languages.target)
    for props in root.iter():
        if props.tag.startswith(f"{{{A}}}"):
            for name in ("lang", "altLang"):
                if languages.names_source(props.get(name)):
                    props.set(name, target)
    declared = root.find(f"{{{P}}}defaultTextStyle/{{{A}}}defPPr/{{{A}}}defRPr")
    if declared is not None:
        declared.set("lang", target)


def drawing_direction(paragraph: ET.Element, rtl: bool) -> None:
    child_at_start(paragraph, f"{{{A}}}pPr").set("rtl", "1" if rtl else "0")


WORD = Dialect(
    ns=W,
    paragraph_parts=frozenset(
        {"pPr", "r", "hyperlink", "bookmarkStart", "bookmarkEnd", "proofErr"}
    ),
    run_parts=frozenset({"rPr", "t", "lastRenderedPageBreak"}),
    link="hyperlink",
    marks=frozenset({"proofErr"}),
    not_formatting=frozenset({"lang", "noProof", "rtl", "cs"}),
    declaring=re.compile(r"word/(styles|settings)\.xml"),
    declare=word_languages,
    direct=word_direction,
)
DRAWING = Dialect(  # PowerPoint's text: DrawingML
    ns=A,
    paragraph_parts=frozenset({"pPr", "r", "endParaRPr"}),
    run_parts=frozenset({"rPr", "t"}),
    link=None,  # a DrawingML link is a run property (hlinkClick)
    marks=frozenset(),
    not_formatting=frozenset({"lang", "altLang", "dirty", "err", "noProof", "smtClean"}),
    declaring=re.compile(
        r"ppt/(presentation|slideMasters/slideMaster\d+|slideLayouts/slideLayout\d+"
        r"|notesMasters/notesMaster\d+)\.xml"
    ),
    declare=drawing_languages,
    direct=drawing_direction,
)
WORD_PARTS = re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml")
SLIDE_PARTS = re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml")


def docx_document(data: bytes) -> Document:
    return office_document(data, "Word document", WORD_PARTS, "word/document.xml", WORD)


def pptx_document(data: bytes) -> Document:
    return office_document(data, "PowerPoint presentation", SLIDE_PARTS, None, DRAWING)


def office_document(
    data: bytes, kind: str, parts: re.Pattern[str], required: str | None, dialect: Dialect
) -> Document:
    package = open_package(data, kind)
    names = sorted((n for n in package.namelist() if parts.fullmatch(n)), key=_natural)
    if (required and required not in names) or not names:
        raise DocumentError(f"not a {kind} (no {required or parts.pattern} inside)")
    texts: list[str] = []
    read = []
    for name in names:
        root, namespaces = parse_xml(read_member(package, name, kind), name, kind)
        paragraphs = [Paragraph(p, texts, dialect) for p in root.iter(dialect.tag("p"))]
        read.append((name, root, namespaces, [p for p in paragraphs if p.slot >= 0]))
    characters = sum(len(texts[p.slot]) for *_, ps in read for p in ps)
    declaring = [  # no text, only languages: rewritten for those alone
        (name, *parse_xml(read_member(package, name, kind), name, kind))
        for name in package.namelist()
        if dialect.declaring.fullmatch(name)
    ]

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        if len(translations) != len(texts):
            raise ValueError(f"{len(translations)} translations for {len(texts)} texts")
        replaced = {}
        for name, root, namespaces, paragraphs in read:
            for paragraph in paragraphs:
                paragraph.write(translations)
                if languages is not None and languages.turns:
                    dialect.direct(paragraph.paragraph, languages.direction == "rtl")
            if languages is not None:
                dialect.declare(root, languages)
            replaced[name] = xml_bytes(root, namespaces)
        for name, root, namespaces in declaring:
            before = xml_bytes(root, namespaces)
            if languages is not None:
                dialect.declare(root, languages)
            if (after := xml_bytes(root, namespaces)) != before:  # else kept byte for byte
                replaced[name] = after
        return rewrite_package(package, replaced)

    return Document(texts, rebuild, characters)


@dataclass
class Stretch:
    """Consecutive runs of one formatting, in the paragraph or in one hyperlink."""

    key: str
    link: ET.Element | None
    run: ET.Element  # its first run: what the runs written for it are copied from
    text: str


class Paragraph:
    """A paragraph: its text, one of the document's ``texts`` (``slot`` -1: nothing to
    translate), with its stretches of other formatting as spans placed on the translation."""

    def __init__(self, paragraph: ET.Element, texts: list[str], dialect: Dialect) -> None:
        self.paragraph, self.d = paragraph, dialect
        t_tag = dialect.tag("t")
        self.own = [t for t in paragraph.iter(t_tag) if _owner(paragraph, t, dialect)]
        self.text = "".join(t.text or "" for t in self.own)
        self.slot = -1
        self.spans: list[tuple[Span, Stretch]] = []
        self.base: Stretch | None = None  # the paragraph's own formatting, when it has spans
        if not self.text.strip():
            return
        self.slot = len(texts)
        texts.append(self.text)
        stretches = self._stretches()
        if not stretches:
            return
        chars: dict[str, int] = {}
        for stretch in stretches:
            chars[stretch.key] = chars.get(stretch.key, 0) + len(stretch.text)
        base = max(chars, key=lambda k: chars[k])  # the paragraph's own formatting
        self.base = next(stretch for stretch in stretches if stretch.key == base)
        at = 0
        for stretch in stretches:
            if stretch.key != base and stretch.text.strip():
                span = Span(None, None, at, at + len(stretch.text))
                span.text_slot = len(texts)
                texts.append(stretch.text.strip())
                self.spans.append((span, stretch))
            at += len(stretch.text)

    def _stretches(self) -> list[Stretch]:
        """The paragraph's stretches, or none when it is not only formatted text."""
        d, stretches = self.d, list[Stretch]()
        for child in self.paragraph:
            if (
                not child.tag.startswith(f"{{{d.ns}}}")
                or _local(child.tag) not in d.paragraph_parts
            ):
                return []
            link = child if d.link and child.tag == d.tag(d.link) else None
            runs = list(child) if link is not None else [child] if child.tag == d.tag("r") else []
            for run in runs:
                if _local(run.tag) in d.marks:
                    continue
                if run.tag != d.tag("r") or any(_local(p.tag) not in d.run_parts for p in run):
                    return []
                text = "".join(t.text or "" for t in run.iter(d.tag("t")))
                key = self._formatting(run) + (f"@{id(link)}" if link is not None else "")
                if stretches and stretches[-1].key == key:
                    stretches[-1].text += text
                elif text:
                    stretches.append(Stretch(key, link, run, text))
        return stretches

    def _formatting(self, run: ET.Element) -> str:
        props = run.find(self.d.tag("rPr"))
        if props is None:
            return ""
        kept = copy.deepcopy(props)
        for part in list(kept):
            if _local(part.tag) in self.d.not_formatting:
                kept.remove(part)
        for name in list(kept.attrib):
            if _local(name) in self.d.not_formatting:
                del kept.attrib[name]
        return ET.tostring(kept, encoding="unicode")

    def write(self, translations: list[str]) -> None:
        target = translations[self.slot]
        if not self.spans:  # one formatting (or not only text): all in the first text
            self._set_text(self.own[0], target)
            for t in self.own[1:]:
                t.text = ""
            return
        assert self.base is not None  # set with the spans
        base = self.base
        placed = place(self.text, [s for s, _ in self.spans], target, translations)
        pieces: list[tuple[Stretch, str]] = []
        at = 0
        for span, stretch in sorted(self.spans, key=lambda x: placed[id(x[0])].start):
            where = placed[id(span)]
            pieces += [(base, target[at : where.start]), (stretch, target[where.start : where.end])]
            at = where.end
        pieces.append((base, target[at:]))
        self._replace_runs(pieces)

    def _set_text(self, t: ET.Element, text: str) -> None:
        t.text = text
        if self.d is WORD:  # Word drops a text's edge spaces unless told to keep them
            t.set(XML_SPACE, "preserve")

    def _replace_runs(self, pieces: list[tuple[Stretch, str]]) -> None:
        d = self.d
        text_parts = {d.tag("r")} | {d.tag(m) for m in d.marks}
        if d.link:
            text_parts.add(d.tag(d.link))
        children = list(self.paragraph)
        first = next(k for k, c in enumerate(children) if c.tag in text_parts)
        for child in children:
            if child.tag in text_parts:
                self.paragraph.remove(child)
        written: list[ET.Element] = []
        links_used: set[int] = set()
        for stretch, text in pieces:
            if not text:
                continue
            run = copy.deepcopy(stretch.run)
            for part in list(run):
                if part.tag != d.tag("rPr"):
                    run.remove(part)
            self._set_text(ET.SubElement(run, d.tag("t")), text)
            if stretch.link is None:
                written.append(run)
                continue
            # a hyperlink's first stretch goes in it; another (it held two formattings) in a copy
            link = copy.deepcopy(stretch.link) if id(stretch.link) in links_used else stretch.link
            links_used.add(id(stretch.link))
            for part in list(link):
                link.remove(part)
            link.append(run)
            written.append(link)
        for k, element in enumerate(written):
            self.paragraph.insert(first + k, element)


def _owner(paragraph: ET.Element, t: ET.Element, dialect: Dialect) -> bool:
    """Whether ``t`` is the paragraph's own text, not that of a paragraph nested in it (a
    text box)."""
    nested = [p for p in paragraph.iter(dialect.tag("p")) if p is not paragraph]
    return not any(t in set(p.iter()) for p in nested)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _natural(name: str) -> list[int | str]:
    """slide2 before slide10."""
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name)]
