"""Subtitles: .srt and WebVTT .vtt. Each cue is one text (its lines joined); its number,
timing line and settings, the file's header, notes and styles are kept as they were; the
translation is re-flowed into lines of at most ``LINE_WIDTH`` characters where it can be
(balanced, broken at spaces outside tags), as subtitles are written. Cue text with tags
(``<i>``, ``<b>``, ``<v Speaker>``) is read as HTML, its tags kept around their words
(``server.markup``). A WebVTT file's header states the target in a ``Language:`` line (the one
there replaced, or one added after the others); SubRip has no header."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ..markup import HtmlDocument
from .languages import Languages, bcp47
from .model import Document, DocumentError, decode_utf8, joined

LINE_WIDTH = 42  # the usual subtitle line (Netflix, BBC: 37-42 characters)
MAX_LINES = 3
LANGUAGE_LINE = re.compile(r"^Language[ \t]*:", re.IGNORECASE)
TIMING = re.compile(r"^\s*(\d+:)?\d{1,2}:\d{2}[,.]\d{3}\s+-->\s+(\d+:)?\d{1,2}:\d{2}[,.]\d{3}")


def srt_document(data: bytes) -> Document:
    return subtitle_document(decode_utf8(data, "SubRip (.srt)"), "SubRip (.srt)", escaped=False)


def vtt_document(data: bytes) -> Document:
    text = decode_utf8(data, "WebVTT (.vtt)")
    if not text.lstrip("\ufeff").startswith("WEBVTT"):
        raise DocumentError("not a WebVTT file (it must start with WEBVTT)")
    return subtitle_document(text, "WebVTT (.vtt)", escaped=True, header=True)


def subtitle_document(text: str, kind: str, escaped: bool, header: bool = False) -> Document:
    """``escaped``: cue text is HTML-escaped (WebVTT writes ``&amp;``; SubRip writes ``&``);
    ``header``: the first block is the file's header (WebVTT), which states the language."""
    newline = "\r\n" if "\r\n" in text else "\n"
    blocks = re.split(r"(\r?\n[ \t]*\r?\n(?:[ \t]*\r?\n)*)", text)
    parts: list[tuple[list[str], Callable[[list[str]], bytes]]] = []
    cues: dict[int, list[str]] = {}  # a cue's block -> its kept lines (number, timing)
    for i in range(0, len(blocks), 2):
        lines = blocks[i].rstrip("\r\n").split(newline)
        timing = next((k for k, line in enumerate(lines) if TIMING.match(line)), None)
        if timing is None:
            continue  # a header, note, style or stray text: kept as it is
        cue = [line.strip() for line in lines[timing + 1 :] if line.strip()]
        if not cue:
            continue
        joined_cue = " ".join(cue)
        if "<" in joined_cue or escaped:
            document = HtmlDocument(joined_cue)
            parts.append((document.texts, document.rebuild))
        else:
            parts.append(([joined_cue], lambda ts: ts[0].encode("utf-8")))
        cues[i] = lines[: timing + 1]
    if not cues:
        raise DocumentError(f"not a {kind} file (no cue with a timing line)")
    texts, shares = joined([part_texts for part_texts, _ in parts])

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        out = list(blocks)
        if header and languages is not None and 0 not in cues:
            out[0] = with_language_line(out[0], newline, bcp47(languages.target))
        for i, (_, write), share in zip(cues, parts, shares(translations), strict=True):
            end = out[i][len(out[i].rstrip("\r\n")) :]  # the file's last line break
            out[i] = newline.join(cues[i] + reflow(write(share).decode("utf-8"))) + end
        return "".join(out).encode("utf-8")

    return Document(texts, rebuild)


def with_language_line(header: str, newline: str, target: str) -> str:
    """A WebVTT header (its ``WEBVTT`` line and metadata lines) stating ``target``."""
    lines = header.split(newline)
    line = f"Language: {target}"
    found = [k for k, text in enumerate(lines) if LANGUAGE_LINE.match(text)]
    for k in reversed(found[1:]):  # one is enough
        del lines[k]
    if found:
        lines[found[0]] = line
    else:
        lines.append(line)
    return newline.join(lines)


def reflow(text: str) -> list[str]:
    """``text`` in as few balanced lines of at most ``LINE_WIDTH`` as it takes (at most
    ``MAX_LINES``, and never fewer than one), broken at spaces outside tags."""
    visible = len(re.sub(r"<[^>]*>", "", text))
    count = min(MAX_LINES, max(1, math.ceil(visible / LINE_WIDTH)))
    spaces = [m.start() for m in re.finditer(" ", text) if _outside_tags(text, m.start())]
    lines, at = [], 0
    for k in range(1, count):
        goal = at + (len(text) - at) / (count - k + 1)
        candidates = [s for s in spaces if s > at]
        if not candidates:
            break
        cut = min(candidates, key=lambda s: abs(s - goal))
        lines.append(text[at:cut])
        at = cut + 1
    lines.append(text[at:])
    return lines


def _outside_tags(text: str, at: int) -> bool:
    return text.rfind("<", 0, at) <= text.rfind(">", 0, at)
