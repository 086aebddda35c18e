"""Per-target-language vocabularies (Shallow paper, Berard et al. 2021, section on filtering).

A language keeps the pieces seen at least ``min_count`` times on its training side, at most
``max_size`` of them by frequency, plus what it can never do without: the special and tag
symbols and every single-character piece it uses (so any word stays spellable).
"""

from __future__ import annotations

SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
WORD_BOUNDARY = "▁"


def _is_character(piece: str) -> bool:
    return len(piece.removeprefix(WORD_BOUNDARY)) <= 1


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
    """
    index = {p: i for i, p in enumerate(pieces)}
    always = {index[p] for p in (*SPECIAL_PIECES, *keep) if p in index}
    always |= {
        index[p] for p, c in frequencies.items() if c > 0 and p in index and _is_character(p)
    }
    ranked = sorted(
        ((c, p) for p, c in frequencies.items() if c >= min_count and p in index),
        key=lambda cp: (-cp[0], cp[1]),
    )
    chosen = set(always)
    for _, piece in ranked:
        if len(chosen) >= max(max_size, len(always)):
            break
        chosen.add(index[piece])
    return sorted(chosen)
