"""EPUB books: every XHTML content document the package lists (chapters, the navigation
document) translated as HTML (``server.markup``: blocks as texts, inline elements kept around
their words); every other member (images, styles, fonts, the package document) copied as it
was, ``mimetype`` first and stored as the format requires."""

from __future__ import annotations

import posixpath
import zipfile
from urllib.parse import unquote

from ..markup import HtmlDocument
from .model import Document, DocumentError, decode_utf8, joined
from .packages import open_package, parse_xml, read_member, rewrite_package

KIND = "EPUB book"
CONTAINER = "META-INF/container.xml"
CONTENT_TYPES = {"application/xhtml+xml", "text/html"}


def epub_document(data: bytes) -> Document:
    package = open_package(data, KIND)
    names = content_documents(package)
    if not names:
        raise DocumentError(f"not an {KIND} (no XHTML content documents inside)")
    documents = {n: HtmlDocument(decode_utf8(read_member(package, n, KIND), n)) for n in names}
    texts, rebuild_parts = joined([(d.texts, d.rebuild) for d in documents.values()])

    def rebuild(translations: list[str]) -> bytes:
        return rewrite_package(
            package, dict(zip(documents, rebuild_parts(translations), strict=True))
        )

    return Document(texts, rebuild, sum(d.characters for d in documents.values()))


def content_documents(package: zipfile.ZipFile) -> list[str]:
    """The XHTML members the package document's manifest lists, in its order; without a
    readable container (a damaged book), every .xhtml/.html member."""
    members = set(package.namelist())
    if CONTAINER in members:
        container, _ = parse_xml(read_member(package, CONTAINER, KIND), CONTAINER, KIND)
        rootfile = next((e for e in container.iter() if e.tag.endswith("rootfile")), None)
        opf_path = rootfile.get("full-path") if rootfile is not None else None
        if opf_path in members:
            opf, _ = parse_xml(read_member(package, opf_path, KIND), opf_path, KIND)
            base = posixpath.dirname(opf_path)
            listed = [
                posixpath.normpath(posixpath.join(base, unquote(item.get("href", ""))))
                for item in opf.iter()
                if item.tag.endswith("}item") and item.get("media-type") in CONTENT_TYPES
            ]
            return [n for n in dict.fromkeys(listed) if n in members]
    return sorted(n for n in members if n.lower().endswith((".xhtml", ".html", ".htm")))
