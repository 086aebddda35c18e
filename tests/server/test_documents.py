"""Word documents written again with their word-level formatting kept (``server.documents``):
a bold word, a hyperlink, stay on the words of the translation that render them. The
translations are a phrase table, so that the placement is exercised on purpose; the file
tests (test_server_files.py) translate through a real engine."""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree as ET

from server.documents import docx_document

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


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


def test_a_bold_word_and_a_link_follow_their_words():
    document = docx_document(docx(SENTENCE))
    # a run split by a spelling mark or a language tag is still one bold stretch
    assert document.texts == ["Click Save to keep your changes.", "Save", "your changes"]
    assert document.charged == len("Click Save to keep your changes.")
    (p,) = paragraphs(document.rebuild([TABLE[t] for t in document.texts]))
    assert runs(p) == [
        ("", "Pour garder "),
        ("link", "vos modifications"),
        ("", ", cliquez sur "),
        ("b", "Enregistrer"),
        ("", "."),
    ]
    xml = ET.tostring(p, encoding="unicode")
    assert 'r:id="rId5"' in xml or "rId5" in xml  # the link keeps its target
    assert "proofErr" not in xml and "jc" in xml  # spelling marks go, paragraph style stays


def test_a_paragraph_of_one_formatting_is_one_run_and_others_keep_their_parts():
    body = (
        "<w:p><w:r><w:rPr><w:i/></w:rPr><w:t>Follow</w:t></w:r>"
        '<w:r><w:rPr><w:i/></w:rPr><w:t xml:space="preserve"> me.</w:t></w:r></w:p>'
        "<w:p><w:r><w:t>Tab</w:t></w:r><w:r><w:tab/><w:t>stop</w:t></w:r></w:p>"
        "<w:p><w:r><w:t>   </w:t></w:r></w:p>"
    )
    document = docx_document(docx(body))
    assert document.texts == ["Follow me.", "Tabstop"]
    first, second, spaces = paragraphs(document.rebuild(["Folge mir.", "Tabulator"]))
    assert [text for _, text in runs(first)] == ["Folge mir.", ""]
    assert ET.tostring(first, encoding="unicode").count("<w:i />") == 2  # runs kept as they were
    assert [text for _, text in runs(second)] == ["Tabulator", ""]
    assert "<w:tab />" in ET.tostring(second, encoding="unicode")
    assert runs(spaces) == [("", "   ")]


def test_a_text_box_inside_a_paragraph_is_its_own_text():
    body = (
        "<w:p><w:r><w:t>Outer text.</w:t></w:r><w:r><w:pict><w:txbxContent>"
        "<w:p><w:r><w:t>Inner box.</w:t></w:r></w:p>"
        "</w:txbxContent></w:pict></w:r></w:p>"
    )
    document = docx_document(docx(body))
    assert document.texts == ["Outer text.", "Inner box."]
    outer, inner = paragraphs(document.rebuild(["Texte extérieur.", "Boîte."]))
    assert [t.text for t in inner.iter(f"{{{W}}}t")] == ["Boîte."]
    assert [t.text for t in outer.iter(f"{{{W}}}t")] == ["Texte extérieur.", "Boîte."]
