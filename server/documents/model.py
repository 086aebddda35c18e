"""What every kind of document is read into: its texts, and how to write the file again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .languages import Languages


class DocumentError(ValueError):
    """A file that cannot be read as its extension says (or is refused: too large unpacked)."""


@dataclass
class Document:
    """The texts to translate, in order, and how to write the file with their translations.

    ``characters``: what the caller is charged for (None: the texts' length); a document may
    also translate texts only to place others (an inline element's words), at no charge."""

    texts: list[str]
    write: Callable[[list[str], Languages | None], bytes]
    characters: int | None = None

    @property
    def charged(self) -> int:
        return sum(map(len, self.texts)) if self.characters is None else self.characters

    def rebuild(self, translations: list[str], languages: Languages | None = None) -> bytes:
        """The file with ``translations`` in place of the texts, declaring the target language
        where its format has a language tag (``languages``); without ``languages``, its tags
        as they were."""
        return self.write(translations, languages)


def decode_utf8(data: bytes, kind: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError(f"the {kind} file is not UTF-8 text") from None


def joined(parts: list[list[str]]) -> tuple[list[str], Callable[[list[str]], list[list[str]]]]:
    """Several parts' texts as one list, and a function that cuts the translations of that
    list into each part's share."""
    texts = [t for part_texts in parts for t in part_texts]

    def shares(translations: list[str]) -> list[list[str]]:
        if len(translations) != len(texts):
            raise ValueError(f"{len(translations)} translations for {len(texts)} texts")
        out, at = [], 0
        for part_texts in parts:
            out.append(translations[at : at + len(part_texts)])
            at += len(part_texts)
        return out

    return texts, shares
