"""General-domain text committed in this repository (``lsmt_text/data/general/``, written by
``scripts/extract_general_sources.py`` from public repositories; licences and attribution in
that folder's README): everyday sentences (Tatoeba), health and news (TICO-19), news and
Wikipedia (the UD PUD treebanks), questions about Wikipedia paragraphs (XQuAD), and a
lexicon: words and short phrases from Wiktionary's translation tables, its entries for the
most frequent English words a source of their own (``wiktionary-common``).

Keys join the languages as the other sources do. The multi-parallel sources key a segment by
the unit's own id (a TICO-19 ``tuid``, a PUD ``sent_id``, an XQuAD question id), so every
two languages pair up. Tatoeba and the lexicon come as pair files: a key names its file and
line (``en-fr:41``), so only the file's two languages share it.

A document is what the split holds out whole: a run of 20 consecutive TICO-19 units of one
source document, a PUD document, an XQuAD paragraph; for Tatoeba the English side (else the
first side) of the pair, normalised, so a sentence and its other translations in that file go
to the same split. The corpus build then removes from dev and train every pair that shares a
normalised segment with a held-out one, across files and sources. The lexicon is train only:
a word alone says little about how a sentence is translated, so it is not scored.
"""

from __future__ import annotations

import hashlib
import lzma
from collections.abc import Iterator
from pathlib import Path

from lsmt_text.data import clean

from .base import Segment, Segments, Source

GENERAL_DIR = Path(__file__).resolve().parents[1] / "general"
TICO_UNITS_PER_DOC = 20


def _rows(path: Path) -> Iterator[list[str]]:
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n").split("\t")


def read_pair_files(
    roots: list[Path], lang: str, english: frozenset[str] | None = None
) -> Segments:
    """The pairs of each ``<a>-<b>.tsv.xz`` holding ``lang``; with ``english``, only those
    whose English side, lowercased, is one of those words."""
    out: Segments = {}
    for root in roots:
        for path in sorted(root.glob("*.tsv.xz")):
            pair = path.name.removesuffix(".tsv.xz")
            a, b = pair.split("-")
            if lang not in (a, b):
                continue
            for i, (text_a, text_b) in enumerate(_rows(path)):
                pivot = text_b if b == "en" else text_a
                if english is not None and pivot.lower() not in english:
                    continue
                doc = hashlib.sha1(clean.normalize_key(pivot).encode()).hexdigest()[:12]
                out[f"{pair}:{i}"] = Segment(doc=doc, text=text_a if lang == a else text_b)
    return out


def read_tico19(roots: list[Path], lang: str) -> Segments:
    out: Segments = {}
    for root in roots:
        for tuid, document, text in _rows(root / f"{lang}.tsv.xz"):
            number = int(tuid.rpartition(":")[2])
            out[tuid] = Segment(doc=f"{document}#{number // TICO_UNITS_PER_DOC}", text=text)
    return out


def read_ud_pud(roots: list[Path], lang: str) -> Segments:
    # sent_id n01001011: n(ews) or w(ikipedia), original language 01, document 001, sentence
    return {
        sent_id: Segment(doc=sent_id[:6], text=text)
        for root in roots
        for sent_id, text in _rows(root / f"{lang}.tsv.xz")
    }


def read_xquad(roots: list[Path], lang: str) -> Segments:
    return {
        qid: Segment(doc=paragraph, text=question)
        for root in roots
        for qid, paragraph, question in _rows(root / f"{lang}.tsv.xz")
    }


def common_english_words() -> frozenset[str]:
    """The English words of ``wiktionary/common-en.txt`` (``scripts/common_english_words.py``:
    the 3,000 most frequent in everyday and news text, by wordfreq)."""
    path = GENERAL_DIR / "wiktionary" / "common-en.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def read_common_lexicon(roots: list[Path], lang: str) -> Segments:
    return read_pair_files(roots, lang, english=common_english_words())


def _languages(folder: str) -> tuple[str, ...]:
    names = [p.name.removesuffix(".tsv.xz") for p in (GENERAL_DIR / folder).glob("*.tsv.xz")]
    return tuple(sorted({lang for name in names for lang in name.split("-")}))


def _committed(folder: str, **kw) -> Source:
    return Source(
        packages=lambda lang: (),
        files=GENERAL_DIR / folder,
        languages=_languages(folder),
        **kw,
    )


TATOEBA = _committed(
    "tatoeba",
    name="tatoeba",
    licence="CC-BY-2.0-FR",
    description="Tatoeba sentence pairs (everyday sentences; the Tatoeba Challenge test sets "
    "v2021-08-07 in Helsinki-NLP/OPUS-MT-testsets)",
    read=read_pair_files,
)
TICO19 = _committed(
    "tico19",
    name="tico19",
    licence="CC0-1.0",
    description="TICO-19 translation memories (health, Wikipedia, Wikinews; tico-19/"
    "tico-19.github.io)",
    read=read_tico19,
)
UD_PUD = _committed(
    "ud_pud",
    name="ud-pud",
    licence="CC-BY-SA-3.0",
    description="Parallel Universal Dependencies treebanks (news and Wikipedia; "
    "UniversalDependencies/UD_<Language>-PUD)",
    read=read_ud_pud,
)
XQUAD = _committed(
    "xquad",
    name="xquad",
    licence="CC-BY-SA-4.0",
    description="XQuAD questions about Wikipedia paragraphs (deepmind/xquad)",
    read=read_xquad,
)
WIKTIONARY = _committed(
    "wiktionary",
    name="wiktionary",
    licence="CC-BY-SA-3.0",
    description="a lexicon from the English Wiktionary's translation tables: the main sense's "
    "first translation of each word or short phrase (open-dsl-dict/wiktionary-dict); train only",
    read=read_pair_files,
    split_of=lambda doc: "train",
)
# The lexicon's common words apart, so that a recipe can weigh them up (a CPU slice draws each
# entry of the whole lexicon about once in twenty-five slices; docs/training.md).
WIKTIONARY_COMMON = _committed(
    "wiktionary",
    name="wiktionary-common",
    licence="CC-BY-SA-3.0",
    description="the lexicon's entries for the 3,000 English words most frequent in everyday "
    "and news text (wordfreq's list, common-en.txt); train only",
    read=read_common_lexicon,
    split_of=lambda doc: "train",
)
# The lexicon last, so a pair it shares with a sentence source is counted as the sentence's;
# its common words before the rest, so that the rest's copy of them is the one dropped.
SOURCES = (TATOEBA, TICO19, UD_PUD, XQUAD, WIKTIONARY_COMMON, WIKTIONARY)
