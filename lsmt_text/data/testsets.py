"""Named test sets for evaluation: the corpus's own splits, one source's held-out slice, and
NTREX-128 (news, committed under ``lsmt_text/data/ntrex128`` with its licence).

=================  =====================================================================
name               pairs
=================  =====================================================================
``test``, ``dev``  the corpus split, every source
``acts``           the Bible's held-out test book (Acts) of the corpus
``<source>-test``  the test documents of one package source (``libreoffice-help-test``)
``<source>-dev``   its dev documents
``ntrex``          NTREX-128: 1,997 news sentences, translated from English by people into
                   every other language (x->y for any two of its languages, by line)
``common-words``   a probe, not a held-out test: the lexicon's entries for the 3,000 most
                   frequent English words (the source ``wiktionary-common``, which trains on
                   them), English to each language and back, in a fixed shuffled order;
                   whether the model has learned the words a newcomer types first
=================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import sha1
from pathlib import Path

from lsmt_core.languages import SPLITS
from lsmt_core.routes import Route
from lsmt_text.data.formats import (
    CorpusFormatError,
    directions,
    load_direction,
    read_lines,
    source_of,
)

NTREX_DIR = Path(__file__).parent / "ntrex128"
# our language code -> NTREX-128 file
NTREX_FILES = {
    "ar": "newstest2019-ref.arb.txt",
    "de": "newstest2019-ref.deu.txt",
    "en": "newstest2019-src.eng.txt",
    "es": "newstest2019-ref.spa.txt",
    "fr": "newstest2019-ref.fra.txt",
    "it": "newstest2019-ref.ita.txt",
    "pt": "newstest2019-ref.por.txt",
    "ru": "newstest2019-ref.rus.txt",
}
NTREX_LICENCE = "CC-BY-SA-4.0"

Pairs = dict[Route, list[tuple[str, str]]]  # route -> (source, target) sentences


def ntrex_lines(lang: str) -> list[str]:
    if lang not in NTREX_FILES:
        raise CorpusFormatError(
            f"NTREX-128 is committed for {', '.join(sorted(NTREX_FILES))}, not {lang!r}"
        )
    # the files have Windows line ends
    return [line.rstrip("\r") for line in read_lines(NTREX_DIR / NTREX_FILES[lang])]


def ntrex_pairs(wanted: Iterable[Route]) -> Pairs:
    """NTREX sentence pairs for the wanted directions whose two languages it has."""
    out: Pairs = {}
    for src, tgt in wanted:
        if src in NTREX_FILES and tgt in NTREX_FILES:
            out[(src, tgt)] = list(zip(ntrex_lines(src), ntrex_lines(tgt), strict=True))
    return out


def common_word_pairs(wanted: Iterable[Route] | None = None) -> Pairs:
    """The common-word probe for the wanted directions (default: all) between English and a
    language of the lexicon."""
    from lsmt_text.data.sources import SOURCES

    source = SOURCES["wiktionary-common"]
    languages = [lang for lang in source.languages if lang != "en"]
    if wanted is None:
        wanted = [r for lang in languages for r in (("en", lang), (lang, "en"))]
    wanted = [(s, t) for s, t in wanted if "en" in (s, t) and ({s, t} - {"en"}) <= set(languages)]
    texts = {lang: source.read([source.files], lang) for lang in {x for r in wanted for x in r}}
    out: Pairs = {}
    for src, tgt in wanted:
        # shuffled by a hash of the entry, so that the first N are a sample of every rank
        keys = sorted(
            texts[src].keys() & texts[tgt].keys(), key=lambda k: sha1(k.encode()).digest()
        )
        out[(src, tgt)] = [(texts[src][k].text, texts[tgt][k].text) for k in keys]
    return out


def corpus_pairs(data_dir: Path | str, split: str, source: str | None = None) -> Pairs:
    """Pairs of a corpus split, all of them or those of one source."""
    out: Pairs = {}
    for src, tgt in directions(data_dir, split):
        pairs, ids = load_direction(data_dir, split, src, tgt, with_ids=True)  # type: ignore[misc]
        if source is not None:
            pairs = [p for p, i in zip(pairs, ids, strict=True) if source_of(i) == source]
        if pairs:
            out[(src, tgt)] = pairs
    return out


def known_testsets(data_dir: Path | str | None = None) -> list[str]:
    """The names :func:`load_testset` accepts (with a corpus: the slices its sources hold out;
    a source that holds none out, such as the train-only lexicon, has none)."""
    names = ["acts", "ntrex", "common-words", *SPLITS]
    if data_dir is not None:
        from lsmt_text.data.formats import read_stats

        stats = read_stats(data_dir)
        by_split = stats.get("pairs_by_source", {})
        names += [
            f"{s}-{split}"
            for s in stats.get("sources", {})
            if s != "bible"
            for split in ("dev", "test")
            if any(by.get(s) for by in by_split.get(split, {}).values())
        ]
    return names


def load_testset(
    name: str, data_dir: Path | str | None, wanted: Iterable[tuple[str, str]] | None = None
) -> Pairs:
    """The pairs of test set ``name`` (see the module doc), limited to ``wanted`` directions
    when given (with NTREX, ``wanted`` picks which of its directions to build)."""
    if name == "ntrex":
        if wanted is None:
            wanted = [(a, b) for a in NTREX_FILES for b in NTREX_FILES if a != b]
        return ntrex_pairs(wanted)
    if name == "common-words":
        return common_word_pairs(wanted)
    if data_dir is None:
        raise CorpusFormatError(f"test set {name!r} comes from a corpus: give its directory")
    if name in SPLITS:
        pairs = corpus_pairs(data_dir, name)
    elif name == "acts":
        pairs = corpus_pairs(data_dir, "test", "bible")
    elif name.endswith(("-test", "-dev")):
        source, _, split = name.rpartition("-")
        pairs = corpus_pairs(data_dir, split, source)
    else:
        pairs = {}
    if not pairs:
        raise CorpusFormatError(
            f"test set {name!r} has no pairs in {data_dir}; known: "
            f"{', '.join(known_testsets(data_dir))}"
        )
    if wanted is not None:
        keep = set(wanted)
        pairs = {d: p for d, p in pairs.items() if d in keep}
    return pairs
