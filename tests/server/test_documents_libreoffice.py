"""Office files made by the real tool (issue 48 §2): LibreOffice headless writes an .odt and a
.docx from an HTML page and a .pptx from a flat presentation; each is translated through
``POST /translate_file`` on a real server, and LibreOffice opens the translation again (a file
it cannot load gives no output) and must show the server's translation of every paragraph.
Skipped with the reason where LibreOffice is missing (``make install-libreoffice``)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

import httpx
import pytest

from tests.server.document_files import FO, STYLE, T, W

pytestmark = pytest.mark.integration

PARAGRAPHS = [
    "And God said, Let there be light: and there was light.",
    "Follow me, and I will make you fishers of men.",
]
PAGE = f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Genesis</title>
</head><body><p>{PARAGRAPHS[0]}</p><p>{PARAGRAPHS[1].replace("me", "<b>me</b>", 1)}</p>
</body></html>"""
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
SVG = "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
A = "http://schemas.openxmlformats.org/drawingml/2006/main"
SLIDE = (
    '<draw:page draw:name="{name}"><draw:frame svg:x="2cm" svg:y="2cm" svg:width="20cm" '
    'svg:height="3cm"><draw:text-box><text:p>{text}</text:p></draw:text-box></draw:frame>'
    "</draw:page>"
)
PRESENTATION = (
    f'<?xml version="1.0" encoding="UTF-8"?><office:document xmlns:office="{OFFICE}" '
    f'xmlns:draw="{DRAW}" xmlns:text="{T}" xmlns:svg="{SVG}" office:version="1.3" '
    'office:mimetype="application/vnd.oasis.opendocument.presentation"><office:body>'
    "<office:presentation>"
    + "".join(SLIDE.format(name=f"s{k}", text=text) for k, text in enumerate(PARAGRAPHS))
    + "</office:presentation></office:body></office:document>"
)


class LibreOffice:
    """``soffice --headless`` with a profile of its own, converting files in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.profile = folder, (folder / "profile").as_uri()

    def convert(self, to: str, *names: str) -> list[Path]:
        """Each file converted (``to``: an extension, with ``:filter`` if need be); the
        paths of the files written, every one of which must exist."""
        out = self.folder / "out"
        command = ["soffice", f"-env:UserInstallation={self.profile}", "--headless",
                   "--convert-to", to, "--outdir", str(out), *names]  # fmt: skip
        done = subprocess.run(command, cwd=self.folder, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        written = [out / f"{Path(n).stem}.{to.split(':')[0]}" for n in names]
        missing = [p.name for p in written if not p.is_file()]
        assert done.returncode == 0 and not missing, (missing, done.stdout, done.stderr)
        return written


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[LibreOffice, dict[str, bytes]]:
    """The .odt, .docx and .pptx LibreOffice wrote, by extension."""
    if shutil.which("soffice") is None:
        pytest.skip("LibreOffice's soffice is needed (make install-libreoffice)")
    folder = tmp_path_factory.mktemp("libreoffice")
    (folder / "page.html").write_text(PAGE)
    (folder / "talk.fodp").write_text(PRESENTATION)
    office = LibreOffice(folder)
    files = [
        *office.convert("odt", "page.html"),
        *office.convert("docx:MS Word 2007 XML", "page.html"),
        *office.convert("pptx", "talk.fodp"),
    ]
    return office, {p.suffix: p.read_bytes() for p in files}


@pytest.fixture(scope="module")
def srv(module_server):
    return module_server()


def translated(srv, office: LibreOffice, name: str, data: bytes) -> str:
    """The file translated from English into German, saved in LibreOffice's folder."""
    r = httpx.post(f"{srv.url}/translate_file", data={"source": "en", "target": "de"},
                   files={"file": (name, data)}, timeout=120)  # fmt: skip
    assert r.status_code == 200, r.text
    got = httpx.get(r.json()["translatedFileUrl"], timeout=30)
    assert got.status_code == 200
    (office.folder / name).write_bytes(got.content)
    return name


def expected(srv) -> list[str]:
    """The server's translation of each paragraph, as ``/translate`` gives it."""
    body = {"q": PARAGRAPHS, "source": "en", "target": "de"}
    out = httpx.post(f"{srv.url}/translate", json=body, timeout=60).json()["translatedText"]
    assert all(t.strip() for t in out) and out != PARAGRAPHS
    return [" ".join(t.split()) for t in out]


def test_text_documents_written_by_libreoffice_open_again_translated(srv, made):
    office, files = made
    names = [translated(srv, office, f"letter{ext}", files[ext]) for ext in (".odt", ".docx")]
    texts = office.convert("txt:Text (encoded):UTF8", *names)  # LibreOffice opens them again
    for name, text in zip(names, texts, strict=True):
        shown = [
            " ".join(line.split()) for line in text.read_text(encoding="utf-8-sig").splitlines()
        ]
        assert [line for line in shown if line] == expected(srv), name
    with zipfile.ZipFile(office.folder / "letter.docx") as docx:
        defaults = ET.fromstring(docx.read("word/styles.xml")).find(f"{{{W}}}docDefaults")
    assert defaults is not None
    langs = [e.get(f"{{{W}}}val") for e in defaults.iter(f"{{{W}}}lang")]
    assert langs == ["de-DE"]  # the default language LibreOffice wrote, now the target
    with zipfile.ZipFile(office.folder / "letter.odt") as odt:
        styles = ET.fromstring(odt.read("styles.xml"))
    properties = styles.iter(f"{{{STYLE}}}text-properties")
    languages = {e.get(f"{{{FO}}}language") for e in properties} - {None}
    assert languages == {"de"}


def test_a_presentation_written_by_libreoffice_opens_again_translated(srv, made):
    office, files = made
    name = translated(srv, office, "talk.pptx", files[".pptx"])
    (reopened,) = office.convert("odp", name)  # LibreOffice opens it again
    content = ET.fromstring(zipfile.ZipFile(io.BytesIO(reopened.read_bytes())).read("content.xml"))
    shown = [" ".join("".join(p.itertext()).split()) for p in content.iter(f"{{{T}}}p")]
    assert [line for line in shown if line] == expected(srv)
    with zipfile.ZipFile(office.folder / name) as pptx:
        masters = [
            n for n in pptx.namelist() if re.fullmatch(r"ppt/slide(Master|Layout)s/\w+\.xml", n)
        ]
        langs = {e.get("lang") for n in masters for e in ET.fromstring(pptx.read(n)).iter()}
    assert langs - {None} <= {"de-DE"}  # masters and layouts name no English any more
