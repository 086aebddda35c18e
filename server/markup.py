"""HTML translated with its inline markup kept inside sentences (issue 48).

A block of HTML (a paragraph, a list item, a cell: whatever lies between block-level tags) is
one unit: its text, inline elements included (``<b>``, ``<a href>``, ``<code>``...), is
translated as one text, and each inline element is put back around the words of the
translation that render the words it covered. "Click <b>Save</b> to keep your changes." is one
sentence to the model, not three fragments.

Reading: the standard library's ``html.parser``, an HTML tokenizer that tolerates broken markup
(no dependency, and unlike a tree builder it reports where each construct starts, so whatever is
not translated is written back byte for byte). ``script``, ``style``, ``pre``, ``code`` and
anything marked ``translate="no"`` (or class ``notranslate``) are kept as they are; ``alt``,
``title``, ``placeholder`` and ``aria-label`` are translated.

Placing an inline element (``place``), in order of trust:

1. its own text found in the translation (names, numbers and code, which the model copies);
2. its text translated alone, found in the translation: exactly, then as the window of words
   closest to it in character n-grams;
3. where its words were in the source, carried over proportionally and snapped to words.

A nested element is placed inside its parent's words and siblings never overlap, so the output
is always well formed. The way each element was placed is counted (``Placement.method``): the
tag-placement study (``scripts/markup_study.py``) measures how often each is right.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

from .failures import InvalidRequest

# Inline elements: they stay inside the sentence they belong to. Every other tag, a comment
# or a declaration ends a unit. <br> ends one too: it separates lines, which read as separate
# sentences (an address, a poem, a list written with breaks).
INLINE = frozenset(
    {
        "a",
        "abbr",
        "acronym",
        "b",
        "bdi",
        "bdo",
        "big",
        "cite",
        "code",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "img",
        "input",
        "ins",
        "kbd",
        "label",
        "mark",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
        "var",
        "wbr",
    }
)
VOID = frozenset(
    {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    }
)
# Elements whose content is kept as it is (inline ones stay in their sentence, untranslated).
KEPT = frozenset({"script", "style", "pre", "code", "textarea"})
ATTRIBUTES = ("alt", "title", "placeholder", "aria-label")
TAG_NAME = re.compile(r"<[^\s/>]+")
ATTRIBUTE = re.compile(r"""\s*([^\s"'>/=]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
HTML_SPACE = re.compile(r"[ \t\n\r\f]+")
WORD = re.compile(r"\w+(?:['’\-]\w+)*")
# A translated element found by character n-grams must be at least this close (an F-score of
# 1- to 3-grams): below it the proportional position is the better guess.
FUZZY_MIN = 0.5
FUZZY_REACH = 24  # words either side of where the element's words were expected
MAX_DEPTH = 64  # inline elements inside one another: deeper is refused (400), not recursed into


@dataclass
class Token:
    """One construct of the document: ``raw`` is its exact source text."""

    kind: str  # "start", "end", "startend", "text" or "other" (comment, declaration, ...)
    raw: str
    tag: str = ""
    attrs: list[tuple[str, str | None]] = field(default_factory=list)
    text: str = ""  # a text's characters, references resolved


def tokenize(doc: str) -> list[Token]:
    """The document as tokens whose ``raw`` texts, joined, are the document exactly."""
    reader = _Reader(doc)
    reader.feed(doc)
    reader.close()
    marks = reader.marks
    if not marks or marks[0][0] > 0:
        marks.insert(0, (0, Token("other", "")))
    tokens: list[Token] = []
    for i, (offset, token) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(doc)
        token.raw = doc[offset:end]
        if token.kind == "text" and html.unescape(token.raw) != token.text:
            # a construct the parser skipped without an event (``</>``) follows the text
            cut = next(
                (k for k in range(len(token.raw)) if html.unescape(token.raw[:k]) == token.text
                 and token.raw[k] == "<"),
                None,
            )  # fmt: skip
            if cut is None:
                token.kind = "other"
            else:
                tokens.append(Token("text", token.raw[:cut], text=token.text))
                token = Token("other", token.raw[cut:])
        if token.kind == "text" and tokens and tokens[-1].kind == "text":
            tokens[-1].raw += token.raw  # a "<" that opened no tag is text too
            tokens[-1].text += token.text
        else:
            tokens.append(token)
    return tokens


class _Reader(HTMLParser):
    def __init__(self, doc: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", doc)]
        self.marks: list[tuple[int, Token]] = []

    def _mark(self, token: Token) -> None:
        line, column = self.getpos()  # where the construct being reported starts
        self.marks.append((self.line_starts[line - 1] + column, token))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(Token("start", "", tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._mark(Token("startend", "", tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        self._mark(Token("end", "", tag))

    def handle_data(self, data: str) -> None:
        if self.cdata_elem:  # a script's or style's content: never text to translate
            self._mark(Token("other", ""))
        else:
            self._mark(Token("text", "", text=data))

    def handle_comment(self, data: str) -> None:
        self._mark(Token("other", ""))

    def handle_decl(self, decl: str) -> None:
        self._mark(Token("other", ""))

    def handle_pi(self, data: str) -> None:
        self._mark(Token("other", ""))

    def unknown_decl(self, data: str) -> None:
        self._mark(Token("other", ""))


def is_kept(token: Token) -> bool:
    """An element whose content is not translated."""
    attrs = dict(token.attrs)
    classes = (attrs.get("class") or "").split()
    return token.tag in KEPT or attrs.get("translate") == "no" or "notranslate" in classes


@dataclass
class Span:
    """An inline element within a unit (an HTML element; in a Word document, a stretch of
    differently formatted text): it covered ``plain[start:end]`` of the source."""

    open: Token | None  # an HTML element's tags (None for a Word document's stretch)
    close: Token | None
    start: int = 0
    end: int = 0
    void: bool = False  # an element without content (<img>): placed between words
    # spaces around it in the source (an element with no words of its own keeps them)
    space_before: bool = False
    space_after: bool = False
    inner: str | None = None  # a kept element's content, written back as it was
    kept_text: str = ""  # and its text, which the sentence reads
    children: list[Span] = field(default_factory=list)
    text_slot: int | None = None  # its text translated alone, in the document's texts
    attr_slots: dict[str, int] = field(default_factory=dict)


@dataclass
class Placement:
    """Where a span went in the translation, and how it was found."""

    start: int
    end: int
    method: str  # "whole", "source", "translated", "fuzzy", "position" or "empty"


@dataclass
class Unit:
    """A block's text with its inline elements, translated as one text."""

    lead: str  # whitespace kept before and after the translation
    trail: str
    plain: str
    spans: list[Span]
    slot: int  # the unit's translation, in the document's texts


# The attribute values a start tag of translated text is written with, besides its translated
# ones (a translated document's language: ``server.documents.languages``); a value for an
# attribute the tag lacks adds it.
Attributes = Callable[[Token], dict[str, str]]


def html_text(text: str) -> str:
    """Translated text as HTML text."""
    return html.escape(text, quote=False)


class HtmlDocument:
    """An HTML document's texts, in order (units, the texts of their inline elements,
    attributes), and the document written again with their translations in place.

    ``characters`` counts what a caller is charged for: the units and attributes, not the
    elements' texts translated a second time to place them.

    Another markup read into the same tokens (Markdown: ``server.documents.markdown``) gives
    them as ``tokens``, with how its translated text is written (``escape``)."""

    def __init__(
        self,
        doc: str,
        tokens: list[Token] | None = None,
        escape: Callable[[str], str] = html_text,
    ) -> None:
        self.texts: list[str] = []
        self.characters = 0
        self.pieces: list[str | Unit | tuple[Token, dict[str, int]]] = []
        self.methods: Counter[str] = Counter()
        self.escape = escape
        tokens = tokenize(doc) if tokens is None else tokens
        unit: list[Token | Span] = []
        ends = _matching_ends(tokens)
        i = 0
        while i < len(tokens):
            token = tokens[i]
            inline = token.tag in INLINE
            if token.kind == "text" or (inline and token.kind == "end"):
                unit.append(token)
            elif inline and token.kind in ("start", "startend"):
                end = ends.get(i)
                if token.kind == "start" and token.tag not in VOID and end is None:
                    unit.append(token)  # unclosed: paired (or not) when the unit ends
                elif token.kind == "start" and token.tag not in VOID and is_kept(token):
                    assert end is not None
                    inside = tokens[i + 1 : end]
                    unit.append(Span(
                        token, tokens[end], inner="".join(t.raw for t in inside),
                        kept_text="".join(t.text for t in inside if t.kind == "text"),
                    ))  # fmt: skip
                    i = end
                else:
                    unit.append(token)
            else:
                self._end_unit(unit)
                unit = []
                if token.kind == "start" and token.tag not in VOID and is_kept(token):
                    end = ends.get(i)
                    last = len(tokens) - 1 if end is None else end
                    self.pieces.append("".join(t.raw for t in tokens[i : last + 1]))
                    i = last
                else:
                    self._add_tag(token)
            i += 1
        self._end_unit(unit)

    def _add_tag(self, token: Token) -> None:
        slots = self._attribute_slots(token)
        start = token.kind in ("start", "startend")
        self.pieces.append((token, slots) if slots or start else token.raw)

    def _attribute_slots(self, token: Token) -> dict[str, int]:
        slots = {}
        for name, value in token.attrs:
            if name in ATTRIBUTES and value and value.strip() and name not in slots:
                slots[name] = self._text(value.strip(), charged=True)
        return slots

    def _text(self, text: str, charged: bool) -> int:
        self.texts.append(text)
        self.characters += len(text) if charged else 0
        return len(self.texts) - 1

    def _end_unit(self, items: list[Token | Span]) -> None:
        for part in _paired_parts(items):
            if isinstance(part, Token):
                self._add_tag(part)
            else:
                self._add_unit(part)

    def _add_unit(self, items: list[Token | Span]) -> None:
        plain, spans = _plain_text(items)
        if not _translatable(plain, spans):  # written back as it was, attributes translated
            for item in items:
                if isinstance(item, Token) and item.kind in ("start", "startend"):
                    self._add_tag(item)
                else:
                    self.pieces.append(_raw(item))
            return
        first, last = items[0], items[-1]
        lead = (
            _leading_space(first.raw) if isinstance(first, Token) and first.kind == "text" else ""
        )
        trail = _trailing_space(last.raw) if isinstance(last, Token) and last.kind == "text" else ""
        unit = Unit(lead, trail, plain, spans, self._text(plain, charged=True))
        for span in _walk(spans):
            text = plain[span.start : span.end]
            whole = span.start == 0 and span.end == len(plain)
            if span.inner is None and text and not whole:
                span.text_slot = self._text(text, charged=False)
            span.attr_slots = self._attribute_slots(span.open) if span.open else {}
        self.pieces.append(unit)

    def rebuild(self, translations: list[str], attributes: Attributes | None = None) -> bytes:
        """The document with the translations in place; ``attributes``: more values for the
        start tags of translated text (not of kept elements)."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        self.methods.clear()
        out = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(piece)
            elif isinstance(piece, Unit):
                out.append(self._render_unit(piece, translations, attributes))
            else:
                token, slots = piece
                out.append(_with_attributes(token, slots, translations, attributes))
        return "".join(out).encode("utf-8")

    def _render_unit(
        self, unit: Unit, translations: list[str], attributes: Attributes | None
    ) -> str:
        target = translations[unit.slot].strip()
        placed = place(unit.plain, unit.spans, target, translations)
        self.methods.update(p.method for p in placed.values())

        def render(lo: int, hi: int, spans: list[Span]) -> str:
            out, at = [], lo
            for span in sorted(spans, key=lambda s: (placed[id(s)].start, placed[id(s)].end)):
                where = placed[id(span)]
                out.append(self.escape(target[at : where.start]))
                empty = where.start == where.end
                if empty and span.space_before and where.start > 0:
                    out.append("" if target[where.start - 1].isspace() else " ")
                if span.open is not None:
                    more = attributes if span.inner is None else None  # kept: as it was
                    out.append(_with_attributes(span.open, span.attr_slots, translations, more))
                if span.inner is not None:
                    out.append(span.inner)
                elif span.close is not None:
                    out.append(render(where.start, where.end, span.children))
                if span.close is not None:
                    out.append(span.close.raw)
                if empty and span.space_after and where.end < len(target):
                    out.append("" if target[where.end].isspace() else " ")
                at = where.end
            out.append(self.escape(target[at:hi]))
            return "".join(out)

        return unit.lead + render(0, len(target), unit.spans) + unit.trail


def place(
    plain: str, spans: list[Span], target: str, translations: list[str]
) -> dict[int, Placement]:
    """Where each span (by ``id``) covers ``target``, the translation of ``plain``: spans
    nest in their parents' placements and siblings do not overlap."""
    placer = _Placer(plain, target, translations)
    placer.place_level(spans, _Region(0, len(target), 0, len(plain)))
    return placer.placed


@dataclass
class _Region:
    """Where siblings are placed: ``target[lo:hi]``, the translation of
    ``plain[src_lo:src_hi]``, with the ranges already ``taken`` by placed siblings."""

    lo: int
    hi: int
    src_lo: int
    src_hi: int
    taken: list[tuple[int, int]] = field(default_factory=list)

    def carry(self, offset: int) -> float:
        """A source offset carried to the same share of the target's region."""
        size = self.src_hi - self.src_lo
        share = (offset - self.src_lo) / size if size > 0 else 0.0
        return self.lo + min(max(share, 0.0), 1.0) * (self.hi - self.lo)

    def free(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` overlaps no taken range (an empty range takes nothing,
        and is free unless strictly inside a taken one)."""
        return all(a == b or end <= a or start >= b for a, b in self.taken)


@dataclass
class _Placer:
    plain: str
    target: str
    translations: list[str]
    placed: dict[int, Placement] = field(default_factory=dict)

    def place_level(self, spans: list[Span], region: _Region) -> None:
        # the longest first: a short element is easier to fit around a long one than the reverse
        for span in sorted(spans, key=lambda s: s.start - s.end):
            where = self.find(span, region)
            self.placed[id(span)] = where
            region.taken.append((where.start, where.end))
            if span.inner is None and span.children:
                inside = _Region(where.start, where.end, span.start, span.end)
                self.place_level(span.children, inside)

    def find(self, span: Span, region: _Region) -> Placement:
        target, lo, hi = self.target, region.lo, region.hi
        expected = region.carry(span.start)
        text = self.plain[span.start : span.end].strip()
        words = [m.span() for m in WORD.finditer(target, lo, hi)]
        if span.void or not text:  # a void or empty element: at a word's edge
            edges = [w[0] for w in words] + [w[1] for w in words[-1:]] or [lo]
            at = _out_of(_nearest(edges, expected), region.taken)
            return Placement(at, at, "empty")
        if span.start <= region.src_lo and span.end >= region.src_hi:  # all of its parent
            start, end = _strip_range(target, lo, hi)
            if region.free(start, end):
                return Placement(start, end, "whole")
        candidates = [(text, "source")]
        if span.text_slot is not None:
            alone = self.translations[span.text_slot].strip().rstrip(".。!?！？")
            if alone:
                candidates.append((alone, "translated"))
        for needle, method in candidates:
            found = _occurrences(target, needle, region)
            if found:
                start, end = min(found, key=lambda f: abs(f[0] - expected))
                return Placement(start, end, method)
        best: tuple[float, float, int, int] | None = None
        near = _nearest_index([w[0] for w in words], expected) if words else 0
        for needle, _ in candidates:
            n = max(1, len(WORD.findall(needle)))
            for size in range(max(1, n - 1), n + 2):
                # windows near where its words were: a bound on the work a block can ask for
                first = max(0, near - FUZZY_REACH)
                for k in range(first, min(len(words) - size + 1, near + FUZZY_REACH)):
                    start, end = words[k][0], words[k + size - 1][1]
                    if region.free(start, end):
                        key = (
                            _ngram_f(needle, target[start:end]),
                            -abs(start - expected),
                            start,
                            end,
                        )
                        best = key if best is None or key > best else best
        if best is not None and best[0] >= FUZZY_MIN:
            return Placement(best[2], best[3], "fuzzy")
        if not words:
            return Placement(lo, lo, "position")
        # the words nearest to where its edges were, carried over
        start = _nearest([w[0] for w in words], expected)
        end = _nearest([w[1] for w in words if w[1] > start], region.carry(span.end))
        start = _out_of(start, region.taken)
        end = min([end] + [a for a, b in region.taken if a != b and start <= a < end])
        return Placement(start, max(start, end), "position")


def _occurrences(target: str, needle: str, region: _Region) -> list[tuple[int, int]]:
    """Where ``needle`` is in the region's target, on word boundaries and outside the ranges
    taken: the matches of its case if any, else those of any case."""
    left = r"(?<!\w)" if needle[:1].isalnum() or needle[:1] == "_" else ""
    right = r"(?!\w)" if needle[-1:].isalnum() or needle[-1:] == "_" else ""
    pattern = re.compile(left + re.escape(needle) + right, re.IGNORECASE)
    matches = [m for m in pattern.finditer(target, region.lo, region.hi) if region.free(*m.span())]
    return [m.span() for m in ([m for m in matches if m.group() == needle] or matches)]


def _ngram_f(a: str, b: str) -> float:
    """Character 1- to 3-gram F-score of two texts, case-insensitive: chrF's idea, small."""
    scores = []
    for n in (1, 2, 3):
        x, y = _ngrams(a.lower(), n), _ngrams(b.lower(), n)
        if not x or not y:
            continue
        common = sum((x & y).values())
        p, r = common / sum(y.values()), common / sum(x.values())
        scores.append(0.0 if common == 0 else 2 * p * r / (p + r))
    return sum(scores) / len(scores) if scores else 0.0


def _ngrams(text: str, n: int) -> Counter[str]:
    text = HTML_SPACE.sub(" ", text)
    return Counter(text[i : i + n] for i in range(len(text) - n + 1))


def _nearest(points: list[int], at: float) -> int:
    return min(points, key=lambda p: abs(p - at))


def _nearest_index(points: list[int], at: float) -> int:
    return min(range(len(points)), key=lambda k: abs(points[k] - at))


def _out_of(at: int, taken: list[tuple[int, int]]) -> int:
    """``at``, moved out of any taken range it falls inside (a void element between words)."""
    for a, b in taken:
        if a < at < b:
            return b
    return at


def _strip_range(target: str, lo: int, hi: int) -> tuple[int, int]:
    while lo < hi and target[lo].isspace():
        lo += 1
    while hi > lo and target[hi - 1].isspace():
        hi -= 1
    return lo, hi


def _matching_ends(tokens: list[Token]) -> dict[int, int]:
    """For each start tag that an end tag closes, the end tag's index (an end closes the
    latest open start of its name), in one pass."""
    open_starts: dict[str, list[int]] = {}
    ends = {}
    for j, t in enumerate(tokens):
        if t.kind == "start":
            open_starts.setdefault(t.tag, []).append(j)
        elif t.kind == "end" and open_starts.get(t.tag):
            ends[open_starts[t.tag].pop()] = j
    return ends


def _paired_parts(items: list[Token | Span]) -> Iterator[Token | list[Token | Span]]:
    """A unit's items cut at inline tags that do not pair up (``<b>`` never closed,
    ``</i>`` never opened, crossed ``<b><i></b></i>``): those are written back where they
    were, as block tags are, and the parts between are units."""
    stack: list[int] = []
    unpaired: set[int] = set()
    for k, item in enumerate(items):
        if not isinstance(item, Token) or item.kind == "text" or item.kind == "startend":
            continue
        if item.kind == "start" and item.tag not in VOID:
            stack.append(k)
        elif item.kind == "end":
            if stack and _tag_of(items[stack[-1]]) == item.tag:
                stack.pop()
            else:
                unpaired.add(k)
        elif item.kind == "start":  # a void element written as a start tag: nothing to pair
            continue
    unpaired.update(stack)
    if not unpaired:
        if items:
            yield items
        return
    part: list[Token | Span] = []
    for k, item in enumerate(items):
        if k in unpaired:
            yield from _paired_parts(part)
            part = []
            assert isinstance(item, Token)
            yield item
        else:
            part.append(item)
    yield from _paired_parts(part)


def _tag_of(item: Token | Span) -> str:
    token = item if isinstance(item, Token) else item.open
    return token.tag if token else ""


def _raw(item: Token | Span) -> str:
    if isinstance(item, Token):
        return item.raw
    tags = [t.raw if t else "" for t in (item.open, item.close)]
    return tags[0] + (item.inner or "") + tags[1]


def _plain_text(items: list[Token | Span]) -> tuple[str, list[Span]]:
    """The unit's text with HTML's white space collapsed (leading and trailing space
    dropped), and its inline elements as spans of that text, nested."""
    chars: list[str] = []
    top: list[Span] = []
    stack: list[Span] = []
    waiting: list[Span] = []  # spans that learn from the next character whether a space follows

    def add(text: str) -> None:
        collapsed = HTML_SPACE.sub(" ", text)
        if not collapsed:
            return
        for span in waiting:
            span.space_after = collapsed[0] == " "
        waiting.clear()
        if collapsed[0] == " " and (not chars or chars[-1] == " "):
            collapsed = collapsed[1:]  # no space at the start, nor two in a row
        chars.extend(collapsed)

    def attach(span: Span) -> None:
        span.space_before = bool(chars) and chars[-1] == " "
        waiting.append(span)
        (stack[-1].children if stack else top).append(span)

    for item in items:
        if isinstance(item, Span):  # a kept element: its text is part of the sentence
            item.start = len(chars)
            attach(item)
            add(item.kept_text)
            item.end = len(chars)
        elif item.kind == "text":
            add(item.text)
        elif item.kind == "end":
            span = stack.pop()
            span.close, span.end = item, len(chars)
        elif item.kind == "startend" or item.tag in VOID:
            attach(Span(item, None, len(chars), len(chars), void=True))
        else:
            if len(stack) >= MAX_DEPTH:
                raise InvalidRequest(
                    "invalid_html", f"The HTML nests inline elements more than {MAX_DEPTH} deep."
                )
            span = Span(item, None, len(chars))
            attach(span)
            stack.append(span)
    while chars and chars[-1] == " ":
        chars.pop()
    size = len(chars)
    for span in _walk(top):  # an element's own leading and trailing spaces are not its words
        span.end = min(span.end, size)
        span.start = min(span.start, span.end)
        while span.start < span.end and chars[span.start] == " ":
            span.start += 1
        while span.end > span.start and chars[span.end - 1] == " ":
            span.end -= 1
    return "".join(chars), top


def _walk(spans: list[Span]) -> Iterator[Span]:
    """Every span, parents before their children."""
    for span in spans:
        yield span
        yield from _walk(span.children)


def _translatable(plain: str, spans: list[Span]) -> bool:
    """Whether a letter or digit lies outside the kept elements (a unit of punctuation or
    symbols alone, or of code alone, is written back as it is)."""
    outside = list(plain)
    for span in _walk(spans):
        if span.inner is not None:
            outside[span.start : span.end] = " " * (span.end - span.start)
    return any(c.isalnum() for c in outside)


def _with_attributes(
    token: Token, slots: dict[str, int], translations: list[str], attributes: Attributes | None
) -> str:
    """A start tag's source text with the values of its translated attributes, and those
    ``attributes`` gives, replaced (read attribute by attribute, so that a name inside another
    attribute's value is not one); one it gives that the tag lacks is added at its end."""
    raw = token.raw
    given = attributes(token) if attributes is not None else {}
    values = {name: translations[slot] for name, slot in slots.items()} | given
    head = TAG_NAME.match(raw)
    if not values or head is None:
        return raw
    at = head.end()
    out = [raw[:at]]
    while found := ATTRIBUTE.match(raw, at):
        name, value = found.group(1).lower(), found.group(2)
        if name in values:
            quoted = '"' + html.escape(values.pop(name), quote=True) + '"'
            if value is None:  # ``<html lang>``: a value given
                out.append(found.group() + "=" + quoted)
            else:
                out.append(raw[at : found.start(2)] + quoted)
            at = found.end(2) if value is not None else found.end()
        out.append(raw[at : found.end()])
        at = found.end()
    out += [
        f' {name}="{html.escape(values[name], quote=True)}"' for name in given if name in values
    ]
    return "".join(out) + raw[at:]


def _leading_space(text: str) -> str:
    return text[: len(text) - len(text.lstrip(" \t\n\r\f"))]


def _trailing_space(text: str) -> str:
    return text[len(text.rstrip(" \t\n\r\f")) :]
