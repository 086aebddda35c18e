"""Checks on every translated sentence: degenerate repetition, a length far from the
source's, output in another language than the target.

A flagged sentence is decoded once more with ``RETRY`` settings (``server.output_retry``); the
flags that remain are reported per text in ``Translation.warnings``. The limits were chosen on
NTREX-128 references and held-out outputs (``scripts/output_check_study.py``, table in
docs/server.md): on references, which are right by definition, they fire for well under 1% of
sentences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from lsmt_core.langid import LanguageDetector

Flag = Literal["repetition", "length_ratio", "off_target", "uncertain_language"]
# Order in which warnings are listed (uncertain_language comes from detection, not from here).
FLAGS: tuple[Flag, ...] = ("repetition", "length_ratio", "off_target", "uncertain_language")

MAX_REPEAT_N = 32  # longest n-gram (in pieces, a clause) whose repetition is looked for
# Output pieces per source piece (language tags not counted), from sources of this many
# pieces on: the shared SentencePiece vocabulary keeps the ratio of two languages near 1.
MIN_RATIO, MAX_RATIO = 0.3, 3.0
RATIO_MIN_SOURCE_PIECES = 6
# Language identification of a sentence this short is too unreliable to call it off target.
OFF_TARGET_MIN_CHARS = 30
OFF_TARGET_AT = 0.7


@dataclass(frozen=True)
class RetrySettings:
    """The one retry of a flagged sentence: a wider beam that may not repeat itself."""

    min_beam_size: int = 4
    repetition_penalty: float = 1.2
    no_repeat_ngram_size: int = 3


RETRY = RetrySettings()


def _has_letter(pieces: Sequence[str]) -> bool:
    """A letter in one of ``pieces``; a byte piece (``<0x30>``, SentencePiece's fallback for
    characters outside its vocabulary) counts by its byte when that is ASCII."""
    for piece in pieces:
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            byte = int(piece[3:5], 16)
            if byte >= 0x80 or chr(byte).isalpha():  # a non-ASCII byte may be part of a letter
                return True
        elif any(c.isalpha() for c in piece):
            return True
    return False


def strongest_repeat(tokens: Sequence[str], max_n: int = MAX_REPEAT_N) -> tuple[int, int]:
    """(copies, tokens covered) of the run of consecutive copies of one n-gram (n <= max_n)
    with the most copies, then the most tokens; (1, 0) when nothing repeats. Case is ignored
    ("No, no, no"). Only n-grams with a letter count: "300,000" and "..." repeat pieces
    legitimately."""
    tokens = [t.lower() for t in tokens]
    best = (1, 0)
    size = len(tokens)
    for n in range(1, min(max_n, size // 2) + 1):
        i = 0
        while i + 2 * n <= size:
            copies = 1
            while tokens[i + copies * n : i + (copies + 1) * n] == tokens[i : i + n]:
                copies += 1
            if copies > 1 and _has_letter(tokens[i : i + n]):
                best = max(best, (copies, copies * n))
                i += (copies - 1) * n  # the run's last copy may start another run
            else:
                i += 1
    return best


def is_repetition(source: Sequence[str], output: Sequence[str]) -> bool:
    """Output that repeats itself more than the source does: three or more copies of a phrase
    of four pieces or more in all ("DCCC" is an acronym), or two copies covering half of an
    output of at least four pieces."""
    copies, covered = strongest_repeat(output)
    if copies <= strongest_repeat(source)[0] or covered < 4:
        return False
    return copies >= 3 or covered >= len(output) / 2


def is_length_off(source: Sequence[str], output: Sequence[str]) -> bool:
    if len(source) < RATIO_MIN_SOURCE_PIECES:
        return False
    ratio = len(output) / len(source)
    return not MIN_RATIO <= ratio <= MAX_RATIO


def is_off_target(text: str, target: str, detector: LanguageDetector) -> bool:
    """A sentence long enough to judge that the identifier, over every language it knows,
    puts in another language with near certainty. Only for targets the identifier knows."""
    if len(text) < OFF_TARGET_MIN_CHARS or target not in detector.known:
        return False
    language, p = detector.rank(text)[0]
    return language != target and p >= OFF_TARGET_AT


def sentence_flags(
    source: Sequence[str],
    output: Sequence[str],
    text: str,
    target: str,
    detector: LanguageDetector,
) -> set[Flag]:
    """The flags of one translated sentence: ``source`` and ``output`` are SentencePiece pieces
    without language tags, ``text`` the detokenized output."""
    flags: set[Flag] = set()
    if is_repetition(source, output):
        flags.add("repetition")
    if is_length_off(source, output):
        flags.add("length_ratio")
    if is_off_target(text, target, detector):
        flags.add("off_target")
    return flags


def ordered(flags: set[Flag]) -> list[Flag]:
    return [f for f in FLAGS if f in flags]
