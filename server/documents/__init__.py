"""Documents translated whole: the texts of a file taken out in order, and the file written
again with their translations in place (``POST /translate_file``; the HTML rules are also those
of ``/translate`` and ``/v1/translate`` with ``format=html``). One module per kind of file:

- ``plain``: .txt (each paragraph between blank lines is one text) and .html (each block one
  text, its inline elements kept around their words: ``server.markup``);
- ``markdown``: .md (each paragraph, heading, list item and table cell one text, its inline
  markup placed, code and structure kept);
- ``office``: .docx and .pptx (each paragraph one text, stretches of other formatting placed
  on their words), with the paragraphs of every part that holds text;
- ``opendocument``: .odt and .odp (each paragraph and heading one text, spans and links
  placed on their words);
- ``epub``: every XHTML content document of the book, as HTML;
- ``subtitles``: .srt and .vtt (one cue one text, timings kept, lines re-flowed);
- ``gettext``: .po (every empty msgstr filled and marked fuzzy, plural forms, placeholders
  kept exactly).

Written with ``Languages``, the translation declares its target language wherever the format
has a language tag (``languages``: HTML's ``lang``, a book's or OpenDocument's
``dc:language``, Word's, PowerPoint's and OpenDocument's style languages, a catalogue's
``Language`` and plural rule, a WebVTT header's ``Language:``), and the target's direction
where it turns (``Languages.turns``: English into Arabic; HTML's ``dir``, a book's page
progression, Word's, PowerPoint's and OpenDocument's paragraph direction).

A package (zip) is opened within bounds (``packages``): too many members or too many bytes
unpacked, or an XML part that declares entities, is refused as a ``DocumentError``.
"""

from __future__ import annotations

from collections.abc import Callable

from .languages import Languages
from .model import Document, DocumentError

FORMATS = (".txt", ".html", ".md", ".docx", ".pptx", ".odt", ".odp", ".epub", ".srt", ".vtt",
           ".po")  # fmt: skip


def open_document(filename: str, data: bytes) -> Document:
    suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    readers: dict[str, Callable[[bytes], Document]] = _readers()
    if suffix not in readers:
        raise DocumentError(
            f"{filename}: files of this kind are not translated ({', '.join(FORMATS)})"
        )
    return readers[suffix](data)


def _readers() -> dict[str, Callable[[bytes], Document]]:
    from . import epub, gettext, markdown, office, opendocument, plain, subtitles

    return {
        ".txt": plain.text_file,
        ".html": plain.html_file,
        ".md": markdown.markdown_document,
        ".docx": office.docx_document,
        ".pptx": office.pptx_document,
        ".odt": opendocument.odt_document,
        ".odp": opendocument.odp_document,
        ".epub": epub.epub_document,
        ".srt": subtitles.srt_document,
        ".vtt": subtitles.vtt_document,
        ".po": gettext.po_document,
    }


__all__ = ["FORMATS", "Document", "DocumentError", "Languages", "open_document"]
