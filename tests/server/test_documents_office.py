"""Word documents and PowerPoint presentations written again with their word-level formatting
kept (``server.documents.office``): a bold word, a hyperlink, stay on the words of the
translation that render them, and the translation declares its language. The translations are
a phrase table, so that the placement is exercised on purpose; the file tests
(test_server_files.py) translate through a real engine."""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree as ET

from server.documents import open_document
from server.documents.office import docx_document
from tests.server.document_files import (
    FRENCH,
    SENTENCE,
    TABLE,
    A,
    W,
    docx,
    local_attributes,
    package,
    paragraphs,
    runs,
    slide,
)


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


def test_a_word_documents_headers_and_footnotes_are_translated_too():
    paragraph = "<w:p><w:r><w:t>Save</w:t></w:r></w:p>"
    body = f'<w:document xmlns:w="{W}"><w:body>{paragraph}</w:body></w:document>'
    header = f'<w:hdr xmlns:w="{W}"><w:p><w:r><w:t>A note.</w:t></w:r></w:p></w:hdr>'
    data = package({"word/document.xml": body, "word/header1.xml": header})
    document = open_document("a.docx", data)
    assert document.texts == ["Save", "A note."]
    out = zipfile.ZipFile(io.BytesIO(document.rebuild(["Enregistrer", "Une note."])))
    assert b"Une note." in out.read("word/header1.xml")


def test_a_presentation_keeps_its_slides_order_and_formatting():
    bold = '<a:r><a:rPr lang="en-US" b="1"/><a:t>Save</a:t></a:r>'
    members = {
        "[Content_Types].xml": "<Types/>",
        "ppt/slides/slide10.xml": slide("<a:p><a:r><a:t>Tenth slide.</a:t></a:r></a:p>"),
        "ppt/slides/slide2.xml": slide(
            '<a:p><a:r><a:rPr lang="en-US"/><a:t>Click </a:t></a:r>' + bold
            + '<a:r><a:rPr lang="en-GB" dirty="0"/><a:t> to keep your changes.</a:t></a:r>'
            '<a:endParaRPr lang="en-US"/></a:p>'
        ),
        "ppt/notesSlides/notesSlide2.xml": slide("<a:p><a:r><a:t>A note.</a:t></a:r></a:p>"),
        "ppt/media/image1.png": b"\x89PNG not really",
    }  # fmt: skip
    document = open_document("talk.pptx", package(members))
    assert document.texts == [
        "A note.", "Click Save to keep your changes.", "Save", "Tenth slide."
    ]  # fmt: skip
    table = {**TABLE, "A note.": "Une note.", "Tenth slide.": "Dixième diapositive."}
    out = zipfile.ZipFile(io.BytesIO(document.rebuild([table[t] for t in document.texts])))
    assert (
        out.namelist() == list(members)
        and out.read("ppt/media/image1.png") == b"\x89PNG not really"
    )
    root = ET.fromstring(out.read("ppt/slides/slide2.xml"))
    p = next(root.iter(f"{{{A}}}p"))
    texts = [
        (r.find(f"{{{A}}}rPr").get("b"), r.find(f"{{{A}}}t").text) for r in p.iter(f"{{{A}}}r")
    ]
    assert texts == [(None, "Pour garder vos modifications, cliquez sur "), ("1", "Enregistrer"),
                     (None, ".")]  # fmt: skip
    assert list(p)[-1].tag == f"{{{A}}}endParaRPr"  # the paragraph's end mark stays last
    assert b"Dixi\xc3\xa8me diapositive." in out.read("ppt/slides/slide10.xml")


def test_a_word_document_declares_the_target_in_its_runs_and_default_style():
    body = (
        '<w:p><w:r><w:rPr><w:lang w:val="en-US" w:eastAsia="zh-CN"/></w:rPr><w:t>Save</w:t>'
        '</w:r></w:p><w:p><w:r><w:rPr><w:lang w:val="de-DE"/></w:rPr><w:t>Zeitgeist</w:t></w:r>'
        "</w:p>"
    )
    w14 = "http://schemas.microsoft.com/office/word/2010/wordml"
    mc = "http://schemas.openxmlformats.org/markup-compatibility/2006"
    styles = (
        f'<w:styles xmlns:w="{W}" xmlns:mc="{mc}" xmlns:w14="{w14}" mc:Ignorable="w14">'
        '<w:docDefaults><w:rPrDefault><w:rPr><w:sz w:val="22"/><w:eastAsianLayout/></w:rPr>'
        '</w:rPrDefault></w:docDefaults><w:style w:styleId="Quote"><w:rPr>'
        '<w:lang w:val="en-GB"/></w:rPr></w:style></w:styles>'
    )
    document_xml = f'<w:document xmlns:w="{W}"><w:body>{body}</w:body></w:document>'
    data = package({"word/document.xml": document_xml, "word/styles.xml": styles})
    copied = zipfile.ZipFile(io.BytesIO(open_document("a.docx", data).rebuild(["x", "y"])))
    assert copied.read("word/styles.xml") == styles.encode()  # without languages: as it was
    document = open_document("a.docx", data)
    out = zipfile.ZipFile(io.BytesIO(document.rebuild(["Enregistrer", "Zeitgeist"], FRENCH)))
    runs = ET.fromstring(out.read("word/document.xml"))
    assert local_attributes(runs, f"{{{W}}}lang") == [
        {"val": "fr-FR", "eastAsia": "zh-CN"},  # Chinese text would still be checked as such
        {"val": "de-DE"},
    ]
    written = out.read("word/styles.xml")
    assert b'xmlns:w14="' in written  # mc:Ignorable's prefix stays declared
    defaults = ET.fromstring(written).find(f"{{{W}}}docDefaults/{{{W}}}rPrDefault/{{{W}}}rPr")
    assert [e.tag.split("}")[1] for e in defaults] == ["sz", "lang", "eastAsianLayout"]
    assert local_attributes(ET.fromstring(written), f"{{{W}}}lang") == [
        {"val": "fr-FR"},  # the document's default, added
        {"val": "fr-FR"},  # the Quote style's, which was en-GB
    ]


def test_a_presentation_declares_the_target_on_its_runs():
    text = (
        '<a:p><a:r><a:rPr lang="en-US" altLang="en-GB"/><a:t>Save</a:t></a:r>'
        '<a:r><a:rPr lang="de-DE"/><a:t> Zeitgeist</a:t></a:r><a:endParaRPr lang="en-US"/></a:p>'
    )
    document = open_document("talk.pptx", package({"ppt/slides/slide1.xml": slide(text)}))
    out = zipfile.ZipFile(io.BytesIO(document.rebuild(["Enregistrer Zeitgeist"], FRENCH)))
    root = ET.fromstring(out.read("ppt/slides/slide1.xml"))
    assert [(e.tag.split("}")[1], e.get("lang"), e.get("altLang")) for e in root.iter()
            if e.get("lang")] == [
        ("rPr", "fr-FR", "fr-FR"), ("rPr", "de-DE", None), ("endParaRPr", "fr-FR", None)
    ]  # fmt: skip
