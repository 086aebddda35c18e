"""Text handling around the model: sentence splitting, rejoining, language identification.

Splitting (``split_text``): the text is cut into lines first (line breaks are kept exactly,
blank or whitespace-only lines stay as they are and are not translated); each non-blank line
is stripped of its surrounding whitespace (kept for the rejoin) and cut into sentences by
``simple_split``: a sentence ends after ``. ! ?`` (and ``…``) followed by whitespace, or after
the full-width CJK terminators ``。！？．｡`` with or without whitespace, closing
quotes/brackets included. pysbd (``clean=False``) decides instead, for the languages it
knows, where the simple rule could be wrong (``needs_pysbd``): an end that may be an
abbreviation's period, an ellipsis, a quotation, a next word in lower case. pysbd holds the
interpreter about a millisecond a line, most of it compiling regular expressions for the
words of that line, which under a web page's traffic was 30 % of the server's time with
the GIL (loadtests.profile_server). A line longer than ``PYSBD_CHUNK_CHARS`` is cut at
``simple_split`` sentence ends into pieces of about that size before pysbd sees it (pysbd's
cost grows faster than linearly).

Rejoining (``join_line``): the translated sentences of a line are joined with one space, or
with nothing when the target language writes without spaces (zh, ja, th, lo, km, my).
"""

from __future__ import annotations

import functools
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


# The languages whose lines with only plain sentence ends (``needs_pysbd``) were checked
# against pysbd on real text: the default corpus's test and dev lines and NTREX-128, single
# and two at a time (tests/server/test_server_text.py). Elsewhere pysbd sees every line the
# simple rule cuts.
PLAIN_ENDS_CHECKED = frozenset({"ar", "de", "en", "es", "fr", "it", "ru"})
# Where pysbd cuts a line of the language besides its sentence ends (Arabic: at its comma,
# semicolon and colon).
_PYSBD_OTHER_CUTS = {"ar": "،؛:"}
# A quotation: double quotes and guillemets, or a single quote not inside a word (an
# apostrophe is). pysbd keeps a quoted speech's sentences together.
_QUOTE_RE = re.compile(r"[\"“”«»„]|(?<!\w)['‘’]|['‘’](?!\w)")


@functools.cache
def _abbreviations(lang: str) -> frozenset[str]:
    """pysbd's abbreviations of ``lang``, lower case, without their final period."""
    return frozenset(a.lower() for a in _PYSBD_LANGS[lang].Abbreviation.ABBREVIATIONS)


def needs_pysbd(line: str, lang: str) -> bool:
    """Whether pysbd could cut ``line`` otherwise than ``simple_split`` does: true unless
    every sentence end inside it is plain: one ``.``, ``!`` or ``?`` after a word of four
    letters or more (not a title such as "Dr.") that is not one of pysbd's abbreviations of
    ``lang``, then one space and a letter not in lower case, in a line without quotations.
    Where it is false, pysbd cuts the line the same in 99.6-99.8 % of the default corpus's
    test and dev lines (Arabic 98.3 %; NTREX-128 99.1-100 %), and where not, pysbd is the
    one that cuts a file name (``*.dbf``, ``.uno:About``) or joins two sentences
    (docs/server.md, tests/server/test_server_text.py)."""
    if lang not in PLAIN_ENDS_CHECKED or _QUOTE_RE.search(line):
        return True
    if any(c in line for c in _PYSBD_OTHER_CUTS.get(lang, "")):
        return True
    abbreviations = _abbreviations(lang)
    for end in _END_RE.finditer(line):
        if end.end() == len(line):
            break
        after = line[end.end() : end.end() + 2]
        if end.group() not in (".", "!", "?") or len(after) < 2 or after[0] != " ":
            return True
        if not after[1].isalpha() or after[1].islower():
            return True
        before = line[: end.start()].rsplit(None, 1)
        word = before[-1] if before else ""
        if len(word) < 4 or not word.isalpha() or word.lower() in abbreviations:
            return True
    return False


def split_sentences(line: str, lang: str | None) -> list[str]:
    """Sentences of one non-blank line, stripped, in order."""
    simple = simple_split(line)
    if len(simple) <= 1:
        # One sentence by the simple rule: pysbd would only split trailing punctuation off it
        # (a closing quote, "...": all 70 differences in the 14,388 test and dev lines of the
        # default corpus) and costs about 1 ms a line on the event loop, which delays the
        # batch of a burst of requests (loadtests.bench, item 4).
        return simple or [line.strip()]
    if pysbd is not None and lang is not None and lang in _PYSBD_LANGS and needs_pysbd(line, lang):
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
