"""What every kind of document is read into: its texts, and how to write the file again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class DocumentError(ValueError):
    """A file that cannot be read as its extension says (or is refused: too large unpacked)."""


@dataclass
class Document:
    """The texts to translate, in order, and how to write the file with their translations.

    ``characters``: what the caller is charged for (None: the texts' length); a document may
    also translate texts only to place others (an inline element's words), at no charge."""

    texts: list[str]
    rebuild: Callable[[list[str]], bytes]
    characters: int | None = None

    @property
    def charged(self) -> int:
        return sum(map(len, self.texts)) if self.characters is None else self.characters


def decode_utf8(data: bytes, kind: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError(f"the {kind} file is not UTF-8 text") from None


def joined(
    parts: list[tuple[list[str], Callable[[list[str]], bytes]]],
) -> tuple[list[str], Callable[[list[str]], list[bytes]]]:
    """Several parts' texts as one list, and a function that gives each part's rebuild its
    share of the translations."""
    texts = [t for part_texts, _ in parts for t in part_texts]

    def rebuild(translations: list[str]) -> list[bytes]:
        if len(translations) != len(texts):
            raise ValueError(f"{len(translations)} translations for {len(texts)} texts")
        out, at = [], 0
        for part_texts, part_rebuild in parts:
            out.append(part_rebuild(translations[at : at + len(part_texts)]))
            at += len(part_texts)
        return out

    return texts, rebuild
