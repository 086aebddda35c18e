"""Reserved symbols and how a source sentence is tagged: the special pieces and their ids,
language and quality tags. One definition for the tokenizer, training, export and serving."""

from __future__ import annotations

from enum import StrEnum

# Every vocabulary starts with these four pieces, in this order (SentencePiece is trained so).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_PIECES = (PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE)
QUALITY_TAGS: tuple[str, ...] = ("<HQ>", "<LQ>")


class TagScheme(StrEnum):
    """Where language tags go on the source side.

    - ``target_prefix``: ``<2tgt> x1 .. xn </s>`` (the Shallow paper's finding: a target tag
      on the source side is enough).
    - ``lsl``: ``<HQ> x1 .. xn <2src> <2tgt> </s>`` (the LSL paper: corpus-quality tag first,
      source and target language tags at the end).
    """

    TARGET_PREFIX = "target_prefix"
    LSL = "lsl"


def lang_tag(lang: str) -> str:
    """The reserved single-piece symbol naming a language: ``"fr"`` -> ``"<2fr>"``."""
    if not (2 <= len(lang) <= 3 and lang.isascii() and lang.isalpha() and lang.islower()):
        raise ValueError(f"invalid language code {lang!r}")
    return f"<2{lang}>"


def tag_source(
    scheme: TagScheme, pieces: list[str], src: str, tgt: str, quality: str = "<HQ>"
) -> list[str]:
    """Source pieces as the model sees them, tags and end-of-sentence included."""
    if scheme == TagScheme.TARGET_PREFIX:
        return [lang_tag(tgt), *pieces, EOS_PIECE]
    if scheme == TagScheme.LSL:
        if quality not in QUALITY_TAGS:
            raise ValueError(f"quality tag {quality!r} not in {QUALITY_TAGS}")
        return [quality, *pieces, lang_tag(src), lang_tag(tgt), EOS_PIECE]
    raise ValueError(f"unknown tag scheme {scheme!r}")
