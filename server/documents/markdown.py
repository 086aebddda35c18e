"""Markdown (.md): each paragraph, heading, list item, quote line and table cell is one text,
its inline markup (``*em*``, ``**strong**``, ``~~strike~~``, ``[links](url)``) kept around the
words it covered and its ``code spans``, images, autolinks and inline HTML kept as they are
(read into ``server.markup``'s tokens and placed as HTML's inline elements are). Structure is
kept byte for byte: front matter, fenced and indented code blocks, heading and list markers,
quote markers, table pipes and rules, blank lines; an HTML block is read as HTML. A
paragraph's lines become one line (Markdown renders them as one).
"""

from __future__ import annotations

import re

from ..markup import HtmlDocument, Token, tokenize
from .languages import Languages, html_language
from .model import Document, decode_utf8

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
LEADER = re.compile(
    r"^(?: {0,3}#{1,6}(?:[ \t]+|$)"  # a heading
    r"|[ \t]*(?:>[ \t]?)+"  # quote markers
    r"|[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?"  # a list item (a task)
    r")+"
)
RULE = re.compile(r"^ {0,3}(?:(?:[-*_][ \t]*){3,}|=+[ \t]*)$")  # a rule or setext underline
TABLE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
HTML_BLOCK = re.compile(r"^ {0,3}</?[A-Za-z][\w-]*[\s/>]|^ {0,3}<!--")
EMPHASIS = ("**", "__", "~~", "*", "_")
TAG_OF = {"**": "strong", "__": "strong", "~~": "s", "*": "em", "_": "em"}


def markdown_document(data: bytes) -> Document:
    text = decode_utf8(data, "Markdown")
    document = HtmlDocument(text, tokens=markdown_tokens(text), escape=markdown_text)

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        return document.rebuild(translations, html_language(languages))  # its inline HTML's

    return Document(document.texts, rebuild, document.characters)


def markdown_text(text: str) -> str:
    """Translated text as Markdown text: what would read as markup is escaped (``_``
    inside a word is not markup)."""
    return re.sub(r"([\\`*\[\]]|(?<!\w)_|_(?!\w))", r"\\\1", text)


def markdown_tokens(text: str) -> list[Token]:
    """The document as ``server.markup`` tokens: structure as ``other`` (kept, and ending a
    text), inline markup as inline elements, whose ``raw`` texts joined are the document."""
    tokens: list[Token] = []
    lines = text.splitlines(keepends=True)
    i = 0
    if lines and lines[0].rstrip() == "---":  # front matter
        end = next((k for k in range(1, len(lines)) if lines[k].rstrip() in ("---", "...")), None)
        if end is not None:
            tokens.append(Token("other", "".join(lines[: end + 1])))
            i = end + 1
    previous_blank = True
    while i < len(lines):
        line = lines[i]
        body = line.rstrip("\r\n")
        fence = FENCE.match(line)
        if fence:  # a fenced code block, to its closing fence (or the end)
            mark = fence.group(1)
            closing = (k for k in range(i + 1, len(lines)) if lines[k].lstrip(" ").startswith(mark))
            end = next(closing, len(lines) - 1)
            tokens.append(Token("other", "".join(lines[i : end + 1])))
            i, previous_blank = end + 1, False
            continue
        if not body.strip() or RULE.match(body) or (TABLE_RULE.match(body) and "-" in body):
            tokens.append(Token("other", line))
        elif previous_blank and (body.startswith("    ") or body.startswith("\t")):
            end = i
            while end + 1 < len(lines) and (lines[end + 1].startswith(("    ", "\t"))
                                           or not lines[end + 1].strip()):  # fmt: skip
                end += 1
            tokens.append(Token("other", "".join(lines[i : end + 1])))
            i = end + 1
            continue
        elif HTML_BLOCK.match(body):
            tokens += tokenize(line)
        elif "|" in body.strip("|") and body.strip().startswith("|"):
            tokens += _table_row(line)
        else:
            leader = LEADER.match(body)
            start = leader.end() if leader else 0
            if start:
                tokens.append(Token("other", body[:start]))
            tokens += inline_tokens(body[start:])
            # a paragraph's line break is a space inside its text; any other line's ends it
            newline = line[len(body) :]
            continues = (
                not leader
                and i + 1 < len(lines)
                and lines[i + 1].strip()
                and not LEADER.match(lines[i + 1])
                and not FENCE.match(lines[i + 1])
                and not RULE.match(lines[i + 1].rstrip("\r\n"))
            )
            tokens.append(
                Token("text", newline, text=" ") if continues else Token("other", newline)
            )
        previous_blank = not body.strip()
        i += 1
    return [t for t in tokens if t.raw or t.kind in ("start", "end")]


def _table_row(line: str) -> list[Token]:
    tokens: list[Token] = []
    for part in re.split(r"((?<!\\)\|)", line):
        if part == "|" or not part.strip():
            tokens.append(Token("other", part))
        else:
            lead = part[: len(part) - len(part.lstrip())]
            trail = part[len(part.rstrip()) :]
            tokens += [Token("other", lead), *inline_tokens(part.strip()), Token("other", trail)]
    return tokens


MAX_DEPTH = 32  # markup inside markup deeper than this reads as text


def inline_tokens(text: str, depth: int = 0) -> list[Token]:
    """A line's inline content as tokens."""
    tokens: list[Token] = []
    i, plain = 0, 0

    def flush(upto: int) -> None:
        if upto > plain:
            raw = text[plain:upto]
            tokens.append(Token("text", raw, text=re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", raw)))

    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            i += 2
            continue
        if c == "`":  # a code span: kept as written
            run = len(text[i:]) - len(text[i:].lstrip("`"))
            end = text.find("`" * run, i + run)
            if end < 0:
                i += run
                continue
            flush(i)
            tokens += _kept(text[i : end + run], text[i + run : end].strip())
            i = plain = end + run
            continue
        if c == "<":  # an autolink or inline HTML: kept
            end = text.find(">", i)
            if end > i:
                flush(i)
                inside = text[i + 1 : end]
                tokens += _kept(text[i : end + 1], inside if "://" in inside else "")
                i = plain = end + 1
                continue
        if c == "!" and text.startswith("[", i + 1):  # an image: kept
            image_end = _link_end(text, i + 1)
            if image_end:
                flush(i)
                tokens += _kept(text[i:image_end])
                i = plain = image_end
                continue
        if depth >= MAX_DEPTH:
            i += 1
            continue
        if c == "[":
            close, link_end = _bracket_end(text, i), _link_end(text, i)
            if close and link_end:
                flush(i)
                tokens.append(Token("start", "[", "a"))
                tokens += inline_tokens(text[i + 1 : close], depth + 1)
                tokens.append(Token("end", text[close:link_end], "a"))
                i = plain = link_end
                continue
        mark = next((m for m in EMPHASIS if text.startswith(m, i)), None)
        if mark and _opens(text, i, mark):
            closing = _closing(text, i + len(mark), mark)
            if closing is not None:
                flush(i)
                tag = TAG_OF[mark]
                tokens.append(Token("start", mark, tag))
                tokens += inline_tokens(text[i + len(mark) : closing], depth + 1)
                tokens.append(Token("end", mark, tag))
                i = plain = closing + len(mark)
                continue
        i += 1
    flush(len(text))
    return tokens


def _kept(raw: str, visible: str = "") -> list[Token]:
    """Markup kept as written, inside its sentence (an element ``translate="no"``); the
    sentence reads its ``visible`` text (a code span's code)."""
    return [Token("start", "", "span", [("translate", "no")]),
            Token("text", raw, text=visible), Token("end", "", "span")]  # fmt: skip


def _bracket_end(text: str, i: int) -> int | None:
    depth = 0
    k = i
    while k < len(text):
        if text[k] == "\\":
            k += 2
            continue
        if text[k] == "[":
            depth += 1
        elif text[k] == "]":
            depth -= 1
            if depth == 0:
                return k
        k += 1
    return None


def _link_end(text: str, i: int) -> int | None:
    """Where ``[...](...)`` or ``[...][ref]`` starting at ``i`` ends (after it), if it is one."""
    close = _bracket_end(text, i)
    if close is None or close + 1 >= len(text):
        return None
    opener = text[close + 1]
    if opener == "[":
        end = text.find("]", close + 2)
        return end + 1 if end > 0 else None
    if opener != "(":
        return None
    depth = 0
    for k in range(close + 1, len(text)):
        depth += {"(": 1, ")": -1}.get(text[k], 0)
        if depth == 0:
            return k + 1
    return None


def _opens(text: str, i: int, mark: str) -> bool:
    after = text[i + len(mark) : i + len(mark) + 1]
    before = text[i - 1 : i] if i else ""
    if not after or after.isspace():
        return False
    return not (mark[0] == "_" and before.isalnum())  # snake_case is not emphasis


def _closing(text: str, start: int, mark: str) -> int | None:
    k = start
    while (k := text.find(mark, k)) >= 0:
        before = text[k - 1 : k]
        after = text[k + len(mark) : k + len(mark) + 1]
        single = len(mark) == 1 and (after == mark or before == mark)
        intraword = mark[0] == "_" and after.isalnum()
        if before and not before.isspace() and not single and k > start and not intraword:
            return k
        k += len(mark)
    return None
