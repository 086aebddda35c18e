"""Zip packages (.docx, .pptx, .epub) opened within bounds, their XML parts parsed safely, and
the package written again with some parts replaced and every other member copied as it was
(its name, order, date and compression: an EPUB's ``mimetype`` stays first and stored)."""

from __future__ import annotations

import io
import re
import zipfile
from html import escape
from xml.etree import ElementTree as ET

from .model import DocumentError

MAX_MEMBERS = 10_000
MAX_UNPACKED_BYTES = 64 * 1024 * 1024  # a 1 MiB upload that unpacks past this is a zip bomb
ROOT_TAG = re.compile(rb"<(?![?!])[^\s/>]+")  # after the XML declaration


def open_package(data: bytes, kind: str) -> zipfile.ZipFile:
    """The package, once its directory says it stays within bounds (the sizes it declares
    are checked again as each member is read: ``read_member``)."""
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise DocumentError(f"not a {kind} ({exc})") from None
    members = package.infolist()
    if len(members) > MAX_MEMBERS:
        raise DocumentError(f"the {kind} has more than {MAX_MEMBERS} parts")
    if sum(m.file_size for m in members) > MAX_UNPACKED_BYTES:
        raise DocumentError(f"the {kind} unpacks to more than {MAX_UNPACKED_BYTES // 2**20} MiB")
    return package


def read_member(package: zipfile.ZipFile, name: str, kind: str) -> bytes:
    """A member's bytes, reading no more than it declared (a forged size is refused)."""
    try:
        info = package.getinfo(name)
        with package.open(info) as f:
            data = f.read(info.file_size + 1)
    except (KeyError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise DocumentError(f"not a {kind} ({name}: {exc})") from None
    if len(data) > info.file_size:
        raise DocumentError(f"the {kind}'s part {name} is larger than it says")
    return data


def parse_xml(data: bytes, name: str, kind: str) -> tuple[ET.Element, list[tuple[str, str]]]:
    """An XML part and its namespace prefixes (kept when it is written again). A part that
    declares a DOCTYPE or entities is refused: office and book formats never need one, and
    entity expansion is how an XML bomb works."""
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise DocumentError(f"the {kind}'s part {name} declares a DOCTYPE: refused")
    try:
        namespaces = [ns for _, ns in ET.iterparse(io.BytesIO(data), events=("start-ns",))]
        return ET.fromstring(data), namespaces
    except ET.ParseError as exc:
        raise DocumentError(f"not a {kind} ({name}: {exc})") from None


def xml_bytes(root: ET.Element, namespaces: list[tuple[str, str]]) -> bytes:
    """The part written again with the document's own prefixes, all of them declared on its
    root: ElementTree writes only those its elements use, and a prefix that Office's
    ``mc:Ignorable`` names must stay declared (Word refuses the file otherwise)."""
    for prefix, uri in namespaces:
        ET.register_namespace(prefix, uri)
    written: bytes = ET.tostring(root, encoding="UTF-8", xml_declaration=True)
    declared = set(re.findall(rb'xmlns:([^=\s]+)="', written))
    missing = {p: uri for p, uri in namespaces if p and p.encode() not in declared}
    head = ROOT_TAG.search(written)
    if not missing or head is None:
        return written
    more = "".join(f' xmlns:{p}="{escape(uri, quote=True)}"' for p, uri in missing.items())
    return written[: head.end()] + more.encode("utf-8") + written[head.end() :]


def rewrite_package(package: zipfile.ZipFile, replaced: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as rebuilt:
        for item in package.infolist():
            content = replaced.get(item.filename)
            rebuilt.writestr(item, content if content is not None else package.read(item))
    return out.getvalue()
