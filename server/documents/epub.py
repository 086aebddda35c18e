"""EPUB books: every XHTML content document the package lists (chapters, the navigation
document) translated as HTML (``server.markup``: blocks as texts, inline elements kept around
their words); the package document's ``dc:language`` set to the target, and its spine's
``page-progression-direction`` to the target's direction where the target is written right to
left or the spine states one; every other member (images, styles, fonts) copied as it was,
``mimetype`` first and stored as the format requires."""

from __future__ import annotations

import posixpath
import re
import zipfile
from urllib.parse import unquote

from ..markup import HtmlDocument
from .languages import Languages, bcp47, html_language, with_dc_language
from .model import Document, DocumentError, decode_utf8, joined
from .packages import open_package, parse_xml, read_member, rewrite_package

KIND = "EPUB book"
CONTAINER = "META-INF/container.xml"
CONTENT_TYPES = {"application/xhtml+xml", "text/html"}
SPINE = re.compile(r"<(?:[\w.-]+:)?spine\b[^>]*>")
PROGRESSION = re.compile(r"""(\spage-progression-direction\s*=\s*)(["'])[^"']*\2""")


def epub_document(data: bytes) -> Document:
    package = open_package(data, KIND)
    opf_path = package_document(package)
    names = content_documents(package, opf_path)
    if not names:
        raise DocumentError(f"not an {KIND} (no XHTML content documents inside)")
    documents = {n: HtmlDocument(decode_utf8(read_member(package, n, KIND), n)) for n in names}
    opf = _utf8(read_member(package, opf_path, KIND)) if opf_path is not None else None
    texts, shares = joined([d.texts for d in documents.values()])

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        attributes = html_language(languages)
        parts = zip(documents.items(), shares(translations), strict=True)
        written = {name: d.rebuild(share, attributes) for (name, d), share in parts}
        if opf_path is not None and opf is not None and languages is not None:
            package_xml = with_dc_language(opf, languages, bcp47)
            written[opf_path] = with_progression(package_xml, languages).encode("utf-8")
        return rewrite_package(package, written)

    return Document(texts, rebuild, sum(d.characters for d in documents.values()))


def with_progression(opf: str, languages: Languages) -> str:
    """The package document with its spine's ``page-progression-direction`` the target's,
    where the target is written right to left or the spine states one (edited as text, as
    ``dc:language`` is)."""
    progression = languages.direction

    def spine(found: re.Match[str]) -> str:
        tag = found.group()
        if PROGRESSION.search(tag):
            return PROGRESSION.sub(
                lambda m: f"{m.group(1)}{m.group(2)}{progression}{m.group(2)}", tag
            )
        if progression != "rtl":
            return tag
        end = len(tag) - (2 if tag.endswith("/>") else 1)
        return f'{tag[:end]} page-progression-direction="{progression}"{tag[end:]}'

    return SPINE.sub(spine, opf, count=1)


def package_document(package: zipfile.ZipFile) -> str | None:
    """Where the container says the package document is; None in a damaged book."""
    members = set(package.namelist())
    if CONTAINER not in members:
        return None
    container, _ = parse_xml(read_member(package, CONTAINER, KIND), CONTAINER, KIND)
    rootfile = next((e for e in container.iter() if e.tag.endswith("rootfile")), None)
    opf_path = rootfile.get("full-path") if rootfile is not None else None
    return opf_path if opf_path in members else None


def content_documents(package: zipfile.ZipFile, opf_path: str | None) -> list[str]:
    """The XHTML members the package document's manifest lists, in its order; without a
    package document (a damaged book), every .xhtml/.html member."""
    members = set(package.namelist())
    if opf_path is None:
        return sorted(n for n in members if n.lower().endswith((".xhtml", ".html", ".htm")))
    opf, _ = parse_xml(read_member(package, opf_path, KIND), opf_path, KIND)
    base = posixpath.dirname(opf_path)
    listed = [
        posixpath.normpath(posixpath.join(base, unquote(item.get("href", ""))))
        for item in opf.iter()
        if item.tag.endswith("}item") and item.get("media-type") in CONTENT_TYPES
    ]
    return [n for n in dict.fromkeys(listed) if n in members]


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # UTF-16, which a package document may be: copied as it was
        return None
