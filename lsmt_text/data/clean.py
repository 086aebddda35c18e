"""Cleaning rules for Bible verses: one function per rule, every application counted.

Three kinds of rules, applied in this order (see docs/data.md for the full list and examples):

1. *raw-text drop rules* on the text as stored in ``bible.db`` (placeholders, borrowed text);
2. *text rules* that rewrite a verse (strip markers and notes, normalise Unicode and spaces);
   the counter records how many verses each rule changed;
3. *drop rules* on the cleaned text (empty, wrong script, too long) and *cross-language drop
   rules* that look at all editions of one verse together (merged verses, copied text,
   length-ratio outliers).

All rules are pure functions of their inputs, so cleaning is deterministic.
"""

from __future__ import annotations

import functools
import re
import statistics
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lsmt_core.text import INVISIBLE_RE, collapse_whitespace

# --------------------------------------------------------------------------------------------
# Counters


class RuleCounts:
    """``counts[rule][key] -> int`` where key is a language (or ``lang@edition`` for extras)."""

    def __init__(self, rules: tuple[str, ...] = (), keys: tuple[str, ...] = ()) -> None:
        self._counts: dict[str, dict[str, int]] = {r: dict.fromkeys(keys, 0) for r in rules}

    def add(self, rule: str, key: str, n: int = 1) -> None:
        per = self._counts.setdefault(rule, {})
        per[key] = per.get(key, 0) + n

    def get(self, rule: str, key: str) -> int:
        return self._counts.get(rule, {}).get(key, 0)

    def to_dict(self) -> dict[str, dict[str, int]]:
        """Rules in processing order, keys sorted."""
        return {r: dict(sorted(per.items())) for r, per in self._counts.items()}


@dataclass(frozen=True)
class VerseContext:
    lang: str
    edition: str  # bbName
    book: int


# --------------------------------------------------------------------------------------------
# 1. Raw-text drop rules (look at the stored text before any rewriting)

# Verses that stand for "this verse is merged into the previous one" in some editions:
# Bengali C.L. "-" (800x), New Turkish Bible "(aynı)" = "(same)" (893x), Almeida
# "Verszeile ohne Text" (32x), New Japanese Bible "［前節に合節］" = "merged with previous verse",
# Korean "(앞절과 동일)" = "(same as the previous verse)", "상동" / "12절과 상동" = "ditto".
# The *previous* verse then holds the text of several verses (measured: 2-3x the usual length).
_MERGE_PLACEHOLDERS = (
    r"-|\(aynı\)|Verszeile ohne Text|［前節に合節］|\(앞절과 동일\)|(?:\d+절과 )?상동"
)
MERGE_PLACEHOLDER_RE = re.compile(rf"^(?:{_MERGE_PLACEHOLDERS})$")

# Verses that stand for an omitted verse (textual variants missing in that edition):
# WEB "dummy verses inserted by amos", BBE "[]" and "...", "***", Japanese "［本節欠如］"
# (= "verse missing"), Korean "(없음)" (= "none"), anything without a letter or digit, and the
# merge placeholders above.
PLACEHOLDER_RE = re.compile(
    rf"^(?:[\W_]*|(?i:dummy verses? inserted.*)|［[^］]*節[^］]*］|\(없음\)|{_MERGE_PLACEHOLDERS})$"
)

# Text supplied from the King James Version where an edition lacks a verse, e.g. Elberfelder
# "(MISSING) [KJV: ...] From Schlachter: ...", Korean "(Missing KJV: ... >> ...)",
# Japanese/Russian "(ADDED FROM KJV: ... > ...)": half English, half machine-made.
BORROWED_RE = re.compile(r"\((?:MISSING\)|Missing KJV|ADDED FROM KJV)")


def is_merge_placeholder(raw: str) -> bool:
    return bool(MERGE_PLACEHOLDER_RE.match(raw.strip()))


def is_placeholder(raw: str) -> bool:
    return bool(PLACEHOLDER_RE.match(raw.strip()))


def is_borrowed(raw: str) -> bool:
    return bool(BORROWED_RE.search(raw))


# --------------------------------------------------------------------------------------------
# 2. Text rules (each returns the rewritten text)


def rule_unicode_nfc(text: str, ctx: VerseContext) -> str:
    """Unicode canonical composition (NFC)."""
    return unicodedata.normalize("NFC", text)


def rule_invisible_chars(text: str, ctx: VerseContext) -> str:
    """Remove bidi marks, zero-width spaces, BOMs, soft hyphens and control characters."""
    return INVISIBLE_RE.sub("", text)


def rule_quotes_and_escapes(text: str, ctx: VerseContext) -> str:
    """WEB writes apostrophes as backticks (don`t); ULB Tagalog has backslash-escaped quotes."""
    return text.replace("`", "'").replace('\\"', '"').replace("\\'", "'").replace("\\", "")


# Alternative verse numbering printed inline: "(21:9) ...", "(22.48) ...", "(63-4) ...",
# "(1-:2)"; Louis Segond once leaves the parenthesis open: "(5:21 Lorsque ...".
_VERSE_NUMBER_RE = re.compile(
    r"[(（]\s*\d{1,3}\s*[:.\-]+\s*\d{1,3}[ab]?(?:\s*[-–]\s*\d{1,3}[ab]?)?\s*(?:[)）]|(?=\s\w))"
)


def rule_verse_numbers(text: str, ctx: VerseContext) -> str:
    """Strip inline alternative verse numbers such as ``(50:2)``, ``(22.48)``, ``(63-4)``."""
    return _VERSE_NUMBER_RE.sub(" ", text)


# Bracketed cross references: "[Exode 20:17]", "[Exode 12:46 ; Psaume 34:20]", "(यशा. 14:11)",
# "(III John 1:15)", "(मत्ती 19:4, मर. 10:6, ...)": a bracket that contains chapter:verse and,
# once the numbers are taken out, only a few short words (book names and abbreviations).
_BRACKET_CONTENT_RE = re.compile(r"[(\[（［]([^()\[\]（）［］]{1,400})[)\]）］]")
_CHAPTER_VERSE_RE = re.compile(r"\d\s*[:：]\s*\d")
_NUMBER_GROUP_RE = re.compile(r"\d+[a-z]?(?:\s*[:：.;,\-–]\s*\d+[a-z]?)*")


def _is_cross_reference(content: str) -> bool:
    if not _CHAPTER_VERSE_RE.search(content):
        return False
    groups = len(_NUMBER_GROUP_RE.findall(content))
    words = [w for w in re.split(r"[\s,;.]+", _NUMBER_GROUP_RE.sub(" ", content)) if w]
    return len(words) <= 3 * groups + 1 and all(len(w) <= 12 for w in words)


def rule_cross_references(text: str, ctx: VerseContext) -> str:
    """Strip bracketed cross references (``[Exode 20:17]``, ``(यशा. 14:11)``)."""
    if not any(c.isdigit() for c in text):
        return text
    return _BRACKET_CONTENT_RE.sub(
        lambda m: " " if _is_cross_reference(m.group(1)) else m.group(0), text
    )


# Translator/editorial notes that are not part of the verse, per edition.
_EDITORIAL_NOTES: dict[str, list[tuple[re.Pattern[str], str]]] = {
    # WEB: the heading of the next psalm is appended to the last verse of a psalm (and of Job):
    # "... And the peoples with equity. Psalm 99", "... full of days. BOOK I Psalm 1".
    "4": [(re.compile(r"\s+(?:BOOK [IVX]+\s+)?Psalm \d+\b.*$"), "")],
    # New Chinese Version: notes in full-width brackets about the original text, manuscripts,
    # alternative renderings: "（“同胞”原文作“人民的女子”）", "（本节在《马索拉抄本》为8:23）";
    # one note spans two verses: "（有些抄本有第43、" + "44节：“...”）".
    "c": [
        (
            re.compile(
                r"（[^（）]*(?:原文|抄本|或译|本节|本章|参照|按照|直译|意译|译本|希腊文|希伯来文|"
                r"亚兰文|即|指)[^（）]*）"
            ),
            "",
        ),
        (re.compile(r"（有些抄本[^）]*$"), ""),
        (re.compile(r"^\d+节[:：].*）$"), ""),
    ],
    # New Japanese Bible: "（V.50挿入）" = "verse 50 inserted here".
    "j": [(re.compile(r"（V\.\s*\d+[^）]*）"), "")],
    # Tagalog ULB: translators' notes "(In-update ni hlwd: was in 1:15)" and "//" separators.
    "g": [(re.compile(r"\(In-update ni [^)]*\)"), ""), (re.compile(r"\s//\s"), " ")],
    # Nuova Diodati: the vocative "O" typed as a zero: "0 Eterno DIO, ...".
    "1": [(re.compile(r"(?:^|(?<=[\s«»\"]))0 (?=\w)"), "O ")],
    # Russian Synodal: "... “Господь там”. стих24 гл 32" (verse/chapter note).
    "r": [(re.compile(r"\s*стих\s*\d+\s*гл\s*\d+\s*$"), "")],
    # Cornilescu: a verse number left at the start ("22. Dacă ...") and unbracketed references
    # at the end ("...; Ps. 144. 7.").
    "u": [
        (re.compile(r"^\d{1,3}\.\s+"), ""),
        (re.compile(r"\s+[A-Z][a-z]{0,5}\.\s*\d{1,3}\.\s*\d{1,3}\.?\s*$"), ""),
    ],
}


def rule_editorial_notes(text: str, ctx: VerseContext) -> str:
    """Strip edition-specific editorial notes and typos (see ``_EDITORIAL_NOTES``)."""
    for pattern, repl in _EDITORIAL_NOTES.get(ctx.edition, ()):
        text = pattern.sub(repl, text)
    return text


_FOOTNOTE_RE = re.compile(r"[*#†‡]+")


def rule_footnote_markers(text: str, ctx: VerseContext) -> str:
    """Strip footnote markers: ``*`` (Hindi 2,913 verses), ``#Dieu`` (Darby), ``†``, ``‡``."""
    return _FOOTNOTE_RE.sub("", text)


_BRACKET_CHARS_RE = re.compile(r"[\[\]{}<>［］]")
_EMPTY_PARENS_RE = re.compile(r"[(（]\s*[)）]")


def rule_brackets(text: str, ctx: VerseContext) -> str:
    """Keep the content, drop the marks: ``[shekels]`` (supplied words), ``<Bwana>``, ``{x}``;
    remove left-over empty parentheses."""
    text = _BRACKET_CHARS_RE.sub("", text)
    prev = None
    while prev != text:
        prev, text = text, _EMPTY_PARENS_RE.sub(" ", text)
    return text


_RO_CLITIC_RE = re.compile(r"(\w)- (\w)")
_RO_CEDILLA = str.maketrans("şŞţŢ", "șȘțȚ")


def rule_orthography(text: str, ctx: VerseContext) -> str:
    """Edition-specific spelling fixes. Cornilescu (ro): "i- a" -> "i-a" (7,130 verses have a
    space after a clitic hyphen), cedilla ş/ţ -> comma-below ș/ț (modern standard)."""
    if ctx.lang == "ro":
        text = _RO_CLITIC_RE.sub(r"\1-\2", text).translate(_RO_CEDILLA)
    return text


_SPACE_IN_PARENS_RE = re.compile(r"(?<=[(（])\s+|\s+(?=[)）])")
_SPACE_BEFORE_PUNCT_RE = re.compile(r"\s+(?=[,.](?:\s|$))")


def rule_whitespace(text: str, ctx: VerseContext) -> str:
    """Collapse whitespace (tabs, newlines, runs) to one space and strip the ends; in Chinese and
    Japanese remove spaces next to CJK characters (the NCV puts one after every comma); remove
    spaces left inside parentheses and before , or . by the rules above."""
    text = collapse_whitespace(text, ctx.lang)
    text = _SPACE_IN_PARENS_RE.sub("", text)
    return _SPACE_BEFORE_PUNCT_RE.sub("", text)


TextRule = Callable[[str, VerseContext], str]

TEXT_RULES: tuple[tuple[str, TextRule], ...] = (
    ("unicode_nfc", rule_unicode_nfc),
    ("invisible_chars", rule_invisible_chars),
    ("quotes_and_escapes", rule_quotes_and_escapes),
    ("verse_numbers", rule_verse_numbers),
    ("cross_references", rule_cross_references),
    ("editorial_notes", rule_editorial_notes),
    ("footnote_markers", rule_footnote_markers),
    ("brackets", rule_brackets),
    ("orthography", rule_orthography),
    ("whitespace", rule_whitespace),
)


RAW_DROP_RULES = ("placeholder", "borrowed_text", "merged_verses")
DROP_RULES = ("empty", "wrong_script", "too_long")
CROSS_LANGUAGE_RULES = ("copied_text", "length_ratio")
ALL_RULES: tuple[str, ...] = (
    RAW_DROP_RULES + tuple(name for name, _ in TEXT_RULES) + DROP_RULES + CROSS_LANGUAGE_RULES
)


def clean_text(
    text: str, ctx: VerseContext, counts: RuleCounts | None = None, key: str = ""
) -> str:
    """Apply every text rule in order; count the verses each rule changed under ``key``."""
    for name, rule in TEXT_RULES:
        new = rule(text, ctx)
        if counts is not None and new != text:
            counts.add(name, key or ctx.lang)
        text = new
    return text


# --------------------------------------------------------------------------------------------
# 3. Drop rules on cleaned text

_LETTER_RE = re.compile(r"[^\W\d_]")
_LATIN_RE = re.compile(r"[A-Za-z\u00c0-\u024f\u1e00-\u1eff]")


def has_content(text: str) -> bool:
    return bool(re.search(r"[^\W_]", text))


def latin_fraction(text: str) -> float:
    """Share of Latin letters among all letters (0.0 for text without letters)."""
    latin = len(_LATIN_RE.findall(text))
    if latin == 0:
        return 0.0
    if text.isascii():
        return 1.0
    return latin / len(_LETTER_RE.findall(text))


def wrong_script(text: str, script: str, max_foreign: float = 0.5) -> bool:
    """True if a Latin-script language is mostly non-Latin letters or vice versa."""
    frac = latin_fraction(text)
    return frac < 1 - max_foreign if script == "Latin" else frac > max_foreign


def too_long(text: str, max_chars: int) -> bool:
    return len(text) > max_chars


_KEY_DROP_RE = re.compile(r"[\W_]+")


@functools.lru_cache(maxsize=1 << 20)
def normalize_key(text: str) -> str:
    """Key for duplicate/overlap checks: NFKC, case-folded, letters and digits only."""
    return _KEY_DROP_RE.sub("", unicodedata.normalize("NFKC", text).casefold())


# --------------------------------------------------------------------------------------------
# Cross-language drop rules (operate on {lang: {verse_id: text}})

VerseTable = Mapping[str, Mapping[tuple[int, int, int], str]]


def merged_neighbours(raw: Mapping[tuple[int, int, int], str]) -> set[tuple[int, int, int]]:
    """Verses that hold the text of following verses marked as merged (see MERGE_PLACEHOLDER_RE).

    For every run of merge placeholders, the verse just before the run (same chapter) is
    returned: it is 2-3x longer than its translations and would make a misaligned pair.
    """
    out: set[tuple[int, int, int]] = set()
    for vid, text in raw.items():
        if not is_merge_placeholder(text):
            continue
        b, c, v = vid
        prev = (b, c, v - 1)
        while prev in raw and is_merge_placeholder(raw[prev]):
            prev = (b, c, prev[2] - 1)
        if prev in raw:
            out.add(prev)
    return out


def copied_verses(
    texts: VerseTable, pivot: str, min_words: int = 6
) -> dict[str, set[tuple[int, int, int]]]:
    """Untranslated copies: verses whose text is identical (normalised) to another language's
    text of the same verse. The pivot language keeps its text; every other member of a group of
    identical texts is dropped. Texts of fewer than ``min_words`` words are ignored: lists of
    names ("Amam, Sema, Molada,") are legitimately identical in many languages."""
    by_verse: dict[tuple[int, int, int], dict[str, list[str]]] = defaultdict(dict)
    for lang, verses in texts.items():
        for vid, text in verses.items():
            if len(text.split()) >= min_words:
                by_verse[vid].setdefault(normalize_key(text), []).append(lang)
    out: dict[str, set[tuple[int, int, int]]] = defaultdict(set)
    for vid, groups in by_verse.items():
        for langs in groups.values():
            if len(langs) > 1:
                for lang in langs:
                    if lang != pivot:
                        out[lang].add(vid)
    return out


def length_factors(texts: VerseTable, pivot: str) -> dict[str, float]:
    """Per language, the median of len(text)/len(pivot text) over shared verses (chars).

    Characters per verse differ a lot between scripts (Chinese ~0.33 of English), so lengths
    are divided by this factor before they are compared."""
    factors: dict[str, float] = {}
    ref = texts.get(pivot, {})
    for lang, verses in texts.items():
        ratios = [len(t) / len(ref[v]) for v, t in verses.items() if ref.get(v)]
        factors[lang] = statistics.median(ratios) if ratios else 1.0
    if pivot in factors:
        factors[pivot] = 1.0
    return factors


def length_outliers(
    texts: VerseTable, factors: Mapping[str, float], max_ratio: float
) -> dict[str, set[tuple[int, int, int]]]:
    """Verses whose normalised length differs by more than ``max_ratio`` (either way) from the
    median normalised length of the same verse across languages.

    With 3+ languages this singles out the odd one (e.g. a verse that swallowed its neighbour);
    with 2 languages both sides of a bad pair are dropped."""
    per_verse: dict[tuple[int, int, int], dict[str, float]] = defaultdict(dict)
    for lang, verses in texts.items():
        f = factors.get(lang, 1.0) or 1.0
        for vid, text in verses.items():
            per_verse[vid][lang] = max(len(text), 1) / f
    out: dict[str, set[tuple[int, int, int]]] = defaultdict(set)
    for vid, lens in per_verse.items():
        if len(lens) < 2:
            continue
        med = statistics.median(lens.values())
        for lang, n in lens.items():
            r = n / med
            if r > max_ratio or r < 1 / max_ratio:
                out[lang].add(vid)
    return out


def length_outlier_vs_reference(
    text: str,
    lang: str,
    ref_lens: Mapping[str, float],
    factors: Mapping[str, float],
    max_ratio: float,
) -> bool:
    """Outlier test for an extra edition against the primary editions' lengths of the verse."""
    if not ref_lens:
        return False
    med = statistics.median(ref_lens.values())
    r = (max(len(text), 1) / (factors.get(lang, 1.0) or 1.0)) / med
    return r > max_ratio or r < 1 / max_ratio
