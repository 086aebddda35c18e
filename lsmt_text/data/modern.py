"""Parallel text from the sources beyond the Bible (:mod:`lsmt_text.data.sources`: Debian
packages and the committed general-domain text): join the languages of a source on their
keys, clean, filter, split long paragraphs into sentence pairs, and assign whole documents to
dev and test.

Filters, each counted per source and direction in ``stats.json`` (``modern.filtered``):

- ``identical``: both sides the same once normalised (untranslated text);
- ``no_letters``: no letter or digit on a side (only punctuation or symbols);
- ``too_long``: a side longer than ``max_chars`` after sentence splitting;
- ``length_ratio``: one side more than ``max_length_ratio`` times longer than the other
  (sides of at least 20 characters);
- ``placeholders``: the sides carry different placeholders (``%1``, ``$name$``, ``%NAME``);
- ``wrong_language``: language identification (py3langid over the build's languages) gives
  another language for a side of at least ``langid_min_chars`` characters;
- ``in_ntrex``: a side is, once normalised, a sentence of NTREX-128 in its language (the news
  test set must stay unseen);
- ``duplicate``: the same pair already taken (from this or an earlier source).

A document goes to test or dev by a hash of its name (``test_per_mille``, ``dev_per_mille``),
so it is held out in every direction and in every rebuild.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

from lsmt_core.routes import route_key
from lsmt_text.data import clean
from lsmt_text.data.packages import deb_version, unpacked
from lsmt_text.data.sources import SOURCES, Segments, Source
from lsmt_text.paths import REPO_ROOT

FILTERS = (
    "identical",
    "no_letters",
    "too_long",
    "length_ratio",
    "placeholders",
    "wrong_language",
    "in_ntrex",
    "duplicate",
)
_PLACEHOLDER = re.compile(r"%\d+|%[A-Z][A-Z_]+%?|\$[A-Za-z_]\w*(?:\.\w+)*\$?|\{\w*\}|%[sd]")
_ID_SAFE = re.compile(r"^[\w./#:+-]{1,160}$")
_SPACE = re.compile(r"\s+")
# sides longer than this are split into sentences when both split into the same number
SPLIT_ABOVE_CHARS = 200


@dataclass
class ModernConfig:
    sources: tuple[str, ...]
    languages: tuple[str, ...]
    max_chars: int = 600
    max_length_ratio: float = 3.0
    langid_min_chars: int = 40
    test_per_mille: int = 30
    dev_per_mille: int = 20
    cache: Path | None = None

    def __post_init__(self) -> None:
        unknown = [s for s in self.sources if s not in SOURCES]
        if unknown:
            raise ValueError(
                f"unknown source(s) {', '.join(unknown)}; known: bible, {', '.join(SOURCES)}"
            )


@dataclass
class ModernPairs:
    """``pairs[split][(src, tgt)]`` = [(src text, tgt text, id)], plus what the build did."""

    pairs: dict[str, dict[tuple[str, str], list[tuple[str, str, str]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    filtered: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    sources: dict[str, dict] = field(default_factory=dict)


def normalize(text: str) -> str:
    """NFC, no invisible characters, single spaces."""
    text = unicodedata.normalize("NFC", text).replace("\u00ad", "").replace("\u200b", "")
    return _SPACE.sub(" ", text).strip()


def split_of(source: str, doc: str, cfg: ModernConfig) -> str:
    """test, dev or train for a whole document, stable across builds and directions: the
    source's own choice where it names its held-out documents, else by a hash."""
    if SOURCES[source].split_of is not None:
        return SOURCES[source].split_of(doc)
    h = int.from_bytes(hashlib.sha1(f"{source}:{doc}".encode()).digest()[:4], "big") % 1000
    if h < cfg.test_per_mille:
        return "test"
    if h < cfg.test_per_mille + cfg.dev_per_mille:
        return "dev"
    return "train"


def segment_id(source: str, key: str, doc: str) -> str:
    """A one-line id: the key itself where it is short and plain, else the document + a hash."""
    if _ID_SAFE.match(key):
        return f"{source}:{key}"
    return f"{source}:{doc}#{hashlib.sha1(key.encode()).hexdigest()[:16]}"


@lru_cache(maxsize=16)
def _segmenter(lang: str):
    import pysbd

    try:
        return pysbd.Segmenter(language=lang, clean=False)
    except ValueError:  # a language pysbd does not know: English rules
        return pysbd.Segmenter(language="en", clean=False)


@cache
def _sentences(lang: str, text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in _segmenter(lang).segment(text) if s.strip())


def sentence_pairs(src: str, tgt: str, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
    """The pair as sentence pairs when both sides are long and split into equally many
    sentences (pysbd), else the pair itself."""
    if len(src) <= SPLIT_ABOVE_CHARS and len(tgt) <= SPLIT_ABOVE_CHARS:
        return [(src, tgt)]
    a, b = _sentences(src_lang, src), _sentences(tgt_lang, tgt)
    if len(a) == len(b) > 1:
        return list(zip(a, b, strict=True))
    return [(src, tgt)]


class PairFilter:
    """The filters above, with counts; language identification verdicts are cached."""

    def __init__(self, cfg: ModernConfig, languages: Sequence[str]):
        from lsmt_core.langid import LanguageIdentifier

        self.cfg = cfg
        self.lid = LanguageIdentifier(languages)
        self._lang_of: dict[str, str | None] = {}
        self.ntrex = _ntrex_keys(tuple(languages))

    def _language(self, text: str) -> str | None:
        if text not in self._lang_of:
            self._lang_of[text] = self.lid.classify(text)
        return self._lang_of[text]

    def reject(self, src: str, tgt: str, src_lang: str, tgt_lang: str) -> str | None:
        """The name of the first filter the pair fails, or None."""
        if clean.normalize_key(src) == clean.normalize_key(tgt):
            return "identical"
        if not clean.has_content(src) or not clean.has_content(tgt):
            return "no_letters"
        if max(len(src), len(tgt)) > self.cfg.max_chars:
            return "too_long"
        short, long_ = sorted((len(src), len(tgt)))
        if short >= 20 and long_ > self.cfg.max_length_ratio * short:
            return "length_ratio"
        if sorted(_PLACEHOLDER.findall(src)) != sorted(_PLACEHOLDER.findall(tgt)):
            return "placeholders"
        for text, lang in ((src, src_lang), (tgt, tgt_lang)):
            judged = lang in self.lid.languages and len(text) >= self.cfg.langid_min_chars
            if judged and self._language(text) != lang:
                return "wrong_language"
        for text, lang in ((src, src_lang), (tgt, tgt_lang)):
            if clean.normalize_key(text) in self.ntrex.get(lang, ()):
                return "in_ntrex"
        return None


@cache
def _ntrex_keys(languages: tuple[str, ...]) -> dict[str, frozenset[str]]:
    from lsmt_text.data.testsets import NTREX_FILES, ntrex_lines

    return {
        lang: frozenset(clean.normalize_key(line) for line in ntrex_lines(lang))
        for lang in languages
        if lang in NTREX_FILES
    }


def read_source(
    source: Source, languages: Sequence[str], cache: Path | None
) -> dict[str, Segments]:
    """Every wanted language the source has: its segments (text normalised)."""
    out: dict[str, Segments] = {}
    for lang in languages:
        if lang not in source.languages:
            continue
        if source.files is not None:
            roots = [source.files]
        else:
            roots = [unpacked(pkg, cache) for pkg in source.packages(lang)]
        out[lang] = {
            k: type(seg)(seg.doc, normalize(seg.text))
            for k, seg in source.read(roots, lang).items()
        }
    return out


def _repository_path(folder: Path) -> str:
    """The folder relative to the repository (lsmt_text/data/general/tatoeba)."""
    return folder.resolve().relative_to(REPO_ROOT).as_posix()


def build_modern(
    cfg: ModernConfig,
    directions: Sequence[tuple[str, str]],
    progress=lambda it, desc: it,
) -> ModernPairs:
    """Pairs of every source for ``directions`` (only those both of whose languages the
    source has), split by document, filtered and deduplicated across sources."""
    out = ModernPairs()
    seen: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    pair_filter = PairFilter(cfg, cfg.languages)
    for name in cfg.sources:
        source = SOURCES[name]
        texts = read_source(source, cfg.languages, cfg.cache)
        packages = sorted({p for lang in texts for p in source.packages(lang)})
        out.sources[name] = {
            "licence": source.licence,
            "description": source.description,
            "packages": {p: deb_version(p, cfg.cache) for p in packages},
            **({"files": _repository_path(source.files)} if source.files is not None else {}),
            "languages": sorted(texts),
            "segments": {lang: len(segs) for lang, segs in sorted(texts.items())},
            "pairs": {},
        }
        counts: dict[str, Counter] = {}
        for src, tgt in progress([d for d in directions if set(d) <= set(texts)], name):
            direction = route_key((src, tgt))
            c = counts[direction] = Counter()
            a, b = texts[src], texts[tgt]
            for key in sorted(a.keys() & b.keys()):
                doc = a[key].doc
                split = split_of(name, doc, cfg)
                parts = sentence_pairs(a[key].text, b[key].text, src, tgt)
                for i, (s, t) in enumerate(parts):
                    why = pair_filter.reject(s, t, src, tgt)
                    if why is None and (s, t) in seen[(src, tgt)]:
                        why = "duplicate"
                    if why is not None:
                        c[why] += 1
                        continue
                    seen[(src, tgt)].add((s, t))
                    pid = segment_id(name, key, doc) + (f"~{i}" if len(parts) > 1 else "")
                    out.pairs[split][(src, tgt)].append((s, t, pid))
                    c[f"kept_{split}"] += 1
            out.sources[name]["pairs"][direction] = {
                s: c[f"kept_{s}"] for s in ("train", "dev", "test")
            }
        out.filtered[name] = {d: {f: c[f] for f in FILTERS} for d, c in sorted(counts.items())}
    return out
