"""Documents for the document tests (``server.documents``), written by hand to exercise one
thing each: packages, Word bodies, slides, books and OpenDocument texts; the phrase table the
tests translate with (so that placement is exercised on purpose), and the namespaces."""

from __future__ import annotations

import io
import shutil
import zipfile
from xml.etree import ElementTree as ET

import pytest

from server.documents import Languages

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
P = "http://schemas.openxmlformats.org/presentationml/2006/main"
T = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
XLINK = "http://www.w3.org/1999/xlink"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
DC = "http://purl.org/dc/elements/1.1/"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
# The translation declares the language it is in, where the format has a language tag: the
# document's own declaration always, another tag where it named the source.
FRENCH = Languages("en", "fr")


def docx(body: str) -> bytes:
    xml = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        f'<w:document xmlns:w="{W}" xmlns:r="{R}"><w:body>{body}</w:body></w:document>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("word/document.xml", xml)
    return out.getvalue()


def paragraphs(data: bytes) -> list[ET.Element]:
    root = ET.fromstring(zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml"))
    return list(root.iter(f"{{{W}}}p"))


def runs(paragraph: ET.Element) -> list[tuple[str, str]]:
    """(how a stretch is shown, its text) in order: "b" bold, "link" in a hyperlink."""
    out = []
    for child in paragraph:
        link = child.tag == f"{{{W}}}hyperlink"
        for run in child.iter(f"{{{W}}}r"):
            kind = "link" if link else "b" if run.find(f"{{{W}}}rPr/{{{W}}}b") is not None else ""
            out.append((kind, "".join(t.text or "" for t in run.iter(f"{{{W}}}t"))))
    return out


SENTENCE = (
    '<w:p><w:pPr><w:jc w:val="left"/></w:pPr>'
    '<w:r><w:t xml:space="preserve">Click </w:t></w:r><w:proofErr w:type="spellStart"/>'
    '<w:r><w:rPr><w:b/><w:lang w:val="en-GB"/></w:rPr><w:t>Sa</w:t></w:r>'
    '<w:r><w:rPr><w:b/></w:rPr><w:t>ve</w:t></w:r><w:proofErr w:type="spellEnd"/>'
    '<w:r><w:t xml:space="preserve"> to keep </w:t></w:r>'
    '<w:hyperlink r:id="rId5"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr>'
    "<w:t>your changes</w:t></w:r></w:hyperlink><w:r><w:t>.</w:t></w:r></w:p>"
)


TABLE = {
    "Click Save to keep your changes.": "Pour garder vos modifications, cliquez sur Enregistrer.",
    "Save": "Enregistrer",
    "your changes": "vos modifications",
}


def package(members: dict[str, str | bytes], stored: tuple[str, ...] = ()) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in members.items():
            z.writestr(name, content, zipfile.ZIP_STORED if name in stored else None)
    return out.getvalue()


def slide(text_xml: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><p:sld xmlns:a="{A}" xmlns:p="{P}"><p:cSld>'
        f"<p:spTree><p:sp><p:txBody>{text_xml}</p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
    )


def epub(chapter: str, metadata: str = "<metadata/>", spine: str = "<spine>") -> bytes:
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        f'{metadata}<manifest><item id="c1" href="text/ch%201.xhtml" '
        'media-type="application/xhtml+xml"/>'
        '<item id="css" href="style.css" media-type="text/css"/>'
        f'</manifest>{spine}<itemref idref="c1"/></spine></package>'
    )
    container = (
        '<?xml version="1.0"?><container version="1.0" '
        'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    return package(
        {
            "mimetype": "application/epub+zip",
            "META-INF/container.xml": container,
            "OEBPS/content.opf": opf,
            "OEBPS/text/ch 1.xhtml": chapter,
            "OEBPS/style.css": "p { margin: 0 }",
        },
        stored=("mimetype",),
    )


def gettext_tools() -> None:
    """Skip (with the reason) where gettext's tools are missing: `make test` installs them."""
    if not all(shutil.which(tool) for tool in ("xgettext", "msginit", "msgfmt")):
        pytest.skip("gettext's xgettext, msginit and msgfmt are needed (make install-gettext)")


def odt(body: str, head: str = "", parts: dict[str, str] | None = None) -> bytes:
    """``head``: what content.xml holds before its body (automatic styles); ``parts``: others
    than content.xml and a styles.xml without styles."""
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content xmlns:office="{OFFICE}" '
        f'xmlns:text="{T}" xmlns:xlink="{XLINK}" xmlns:style="{STYLE}" xmlns:fo="{FO}">{head}'
        f"<office:body><office:text>{body}</office:text></office:body></office:document-content>"
    )
    return package(
        {
            "mimetype": "application/vnd.oasis.opendocument.text",
            "content.xml": content,
            "styles.xml": "<styles/>",
            **(parts or {}),
        },
        stored=("mimetype",),
    )


def local_attributes(root: ET.Element, tag: str) -> list[dict[str, str]]:
    return [{k.split("}")[-1]: v for k, v in e.attrib.items()} for e in root.iter(tag)]
