"""Text handling around the model: sentence splitting, rejoining, language identification.

Splitting (``split_text``): the text is cut into lines first (line breaks are kept exactly,
blank or whitespace-only lines stay as they are and are not translated); each non-blank line
is stripped of its surrounding whitespace (kept for the rejoin) and cut into sentences by
pysbd (``clean=False``) for the languages pysbd knows when ``simple_split`` finds more than
one sentence in it (pysbd costs about a millisecond a line), otherwise by ``simple_split``: a
sentence ends after ``. ! ?`` (and ``…``) followed by whitespace, or after the full-width
CJK terminators ``。！？．｡`` with or without whitespace, closing quotes/brackets included.
A line longer than ``PYSBD_CHUNK_CHARS`` is cut at ``simple_split`` sentence ends into pieces
of about that size before pysbd sees it (pysbd's cost grows faster than linearly).

Rejoining (``join_line``): the translated sentences of a line are joined with one space, or
with nothing when the target language writes without spaces (zh, ja, th, lo, km, my).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

try:  # pysbd is in the serve extra; the simple splitter works without it.
    import pysbd
    from pysbd.languages import LANGUAGE_CODES as _PYSBD_LANGS
except ImportError:  # pragma: no cover
    pysbd = None
    _PYSBD_LANGS = {}

NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "km", "my"})

_CLOSERS = "\"'”’»)]}」』）》〉"
_END_RE = re.compile(
    rf"[.!?…]+[{re.escape(_CLOSERS)}]*(?=\s|$)|[。！？．｡]+[{re.escape(_CLOSERS)}]*"
)


def simple_split(line: str) -> list[str]:
    """Split one line into sentences at terminal punctuation (see module doc)."""
    out: list[str] = []
    start = 0
    for m in _END_RE.finditer(line):
        seg = line[start : m.end()].strip()
        if seg:
            out.append(seg)
        start = m.end()
    rest = line[start:].strip()
    if rest:
        out.append(rest)
    return out


# pysbd keeps per-call state on its segmenter: one per thread and language, so requests
# prepared in different threads never wait for each other.
_segmenters = threading.local()

# pysbd's cost grows faster than linearly with the length of what it segments (1,250 short
# sentences in one line: 0.28 s, 300: 0.014 s), so a long line is cut at simple sentence ends
# into pieces of about this many characters first.
PYSBD_CHUNK_CHARS = 1000


def _segmenter(lang: str) -> Any:  # a pysbd.Segmenter (pysbd has no types)
    cache = _segmenters.__dict__
    if lang not in cache:
        cache[lang] = pysbd.Segmenter(language=lang, clean=False)
    return cache[lang]


def _chunks(line: str, size: int) -> list[str]:
    """``line`` cut between simple sentences into runs of at most ``size`` characters (a
    longer single sentence stays whole)."""
    chunks: list[str] = []
    for sent in simple_split(line):
        if chunks and len(chunks[-1]) + 1 + len(sent) <= size:
            chunks[-1] += " " + sent
        else:
            chunks.append(sent)
    return chunks


def split_sentences(line: str, lang: str | None) -> list[str]:
    """Sentences of one non-blank line, stripped, in order."""
    simple = simple_split(line)
    if len(simple) <= 1:
        # One sentence by the simple rule: pysbd would only split trailing punctuation off it
        # (a closing quote, "...": all 70 differences in the 14,388 test and dev lines of the
        # default corpus) and costs about 1 ms a line on the event loop, which delays the
        # batch of a burst of requests (loadtests.bench, item 4).
        return simple or [line.strip()]
    if pysbd is not None and lang is not None and lang in _PYSBD_LANGS:
        try:
            pieces = [line] if len(line) <= PYSBD_CHUNK_CHARS else _chunks(line, PYSBD_CHUNK_CHARS)
            seg = _segmenter(lang)
            out = [p.strip() for piece in pieces for p in seg.segment(piece) if p.strip()]
            if out:
                return out
        except Exception:  # pysbd fails on rare inputs: fall back, never fail the request
            pass
    return simple


@dataclass
class Line:
    """One line of an input text: either blank (kept verbatim) or a run of sentences."""

    raw: str  # without the line break
    newline: str  # the line break that ended it ("" for the last line)
    lead: str = ""
    trail: str = ""
    sentences: list[str] | None = None  # None: blank line, not translated


def split_text(text: str, lang: str | None) -> list[Line]:
    lines: list[Line] = []
    for chunk in text.splitlines(keepends=True):
        body = chunk.rstrip("\r\n")
        nl = chunk[len(body) :]
        if not body.strip():
            lines.append(Line(raw=body, newline=nl))
            continue
        stripped = body.strip()
        lead = body[: len(body) - len(body.lstrip())]
        trail = body[len(body.rstrip()) :]
        lines.append(
            Line(
                raw=body,
                newline=nl,
                lead=lead,
                trail=trail,
                sentences=split_sentences(stripped, lang),
            )
        )
    return lines


def sentences_of(lines: list[Line]) -> list[str]:
    return [s for ln in lines if ln.sentences for s in ln.sentences]


def join_text(lines: list[Line], translated: list[str], target: str) -> str:
    """Put translated sentences back in place of the originals (see module doc)."""
    sep = "" if target in NO_SPACE_LANGUAGES else " "
    out: list[str] = []
    i = 0
    for ln in lines:
        if ln.sentences is None:
            out.append(ln.raw + ln.newline)
            continue
        n = len(ln.sentences)
        joined = sep.join(t.strip() for t in translated[i : i + n])
        i += n
        out.append(ln.lead + joined + ln.trail + ln.newline)
    return "".join(out)
