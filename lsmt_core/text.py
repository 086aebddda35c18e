"""Text normalisation shared by corpus building, the tokenizer and the server: one rule for
text that is not from the cleaned corpus (user corpora, server input)."""

from __future__ import annotations

import re
import unicodedata

# Bidi marks/embeddings (Arabic edition has 3,328 verses with U+200E/U+200F), zero-width
# space, BOM, soft hyphen and C0/C1 controls other than whitespace. ZWJ/ZWNJ (U+200C/D) are
# kept: they are orthographic in Persian, Hindi and Bengali.
INVISIBLE_RE = re.compile(
    "[\u00ad\u200b\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff"
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)


# Characters of scripts written without spaces (Han, kana, CJK punctuation, full-width forms).
_CJK = "\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_SPACE_RE = re.compile(rf"(?<=[{_CJK}“”‘’])\s+|\s+(?=[{_CJK}“”‘’])")
_SPACE_RE = re.compile(r"\s+")
UNSPACED_LANGUAGES = frozenset({"zh", "ja"})


def collapse_whitespace(text: str, lang: str = "") -> str:
    """Runs of whitespace -> one space, ends stripped; for zh/ja no spaces next to CJK."""
    text = _SPACE_RE.sub(" ", text).strip()
    if lang in UNSPACED_LANGUAGES:
        text = _CJK_SPACE_RE.sub("", text)
    return text


def normalize_text(text: str, lang: str | None = None) -> str:
    """The Unicode/whitespace part of cleaning, for text that is not from ``bible.db`` (user
    corpora, server input): NFC, invisible characters removed, whitespace collapsed (and, for
    zh/ja, removed next to CJK characters)."""
    text = INVISIBLE_RE.sub("", unicodedata.normalize("NFC", text))
    return collapse_whitespace(text, lang or "")
