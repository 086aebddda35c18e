"""Per-target-language vocabularies (Shallow paper, Berard et al. 2021, section on filtering).

A language keeps the pieces seen at least ``min_count`` times on its training side, the
``max_size`` most frequent of them, plus what it can never do without: the special and tag
symbols, the single-character piece of every character its text contains (counted inside
all its pieces, not only where the character was a piece of its own, so any word stays
spellable once longer pieces are filtered out), and the byte-fallback pieces ``<0x00>`` ..
``<0xFF>`` (any other character is spelled in bytes, so every text stays encodable).
"""

from __future__ import annotations

from .tags import SPECIAL_PIECES

WORD_BOUNDARY = "▁"


def _is_character(piece: str) -> bool:
    return len(piece.removeprefix(WORD_BOUNDARY)) <= 1


def is_byte_piece(piece: str) -> bool:
    """``<0x00>`` .. ``<0xFF>``: SentencePiece's byte-fallback pieces."""
    return len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")


def character_counts(frequencies: dict[str, int]) -> dict[str, int]:
    """Occurrences of each character in the text, from the counts of the pieces spelling it."""
    chars: dict[str, int] = {}
    for piece, count in frequencies.items():
        if count <= 0 or is_byte_piece(piece) or piece in SPECIAL_PIECES:
            continue
        for ch in piece:
            chars[ch] = chars.get(ch, 0) + count
    return chars


def select_target_vocab(
    frequencies: dict[str, int],
    pieces: list[str],
    min_count: int,
    max_size: int,
    keep: tuple[str, ...] = (),
) -> list[int]:
    """Sorted ids of the pieces one target language keeps.

    ``frequencies`` maps piece -> count on the language's training side; ``pieces`` is the
    tokenizer's vocabulary in id order; ``keep`` lists further pieces always kept (tags).
    The result is the ``max_size`` most frequent pieces seen >= ``min_count`` times (byte
    pieces are not ranked: they are always kept) plus the always-kept pieces, as in the paper
    (N = 8k gave vocabularies of 8,405 on average). Its size is thus between ``max_size`` and
    ``max_size`` + the always-kept ones: for a language written with thousands of characters
    (zh, ja) a total cap would leave no room for any longer piece.
    """
    index = {p: i for i, p in enumerate(pieces)}
    always = {index[p] for p in (*SPECIAL_PIECES, *keep) if p in index}
    always |= {
        index[p] for p, c in frequencies.items() if c > 0 and p in index and _is_character(p)
    }
    always |= {index[ch] for ch in character_counts(frequencies) if ch in index}
    always |= {i for p, i in index.items() if is_byte_piece(p)}
    ranked = sorted(
        (
            (c, p)
            for p, c in frequencies.items()
            if c >= min_count and p in index and not is_byte_piece(p)
        ),
        key=lambda cp: (-cp[0], cp[1]),
    )
    return sorted(always | {index[p] for _, p in ranked[:max_size]})
