"""Word documents and PowerPoint presentations written again with their word-level formatting
kept (``server.documents.office``): a bold word, a hyperlink, stay on the words of the
translation that render them, and the translation declares its language. The translations are
a phrase table, so that the placement is exercised on purpose; the file tests
(test_server_files.py) translate through a real engine."""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree as ET

from server.documents import Languages, open_document
from server.documents.office import docx_document
from tests.server.document_files import (
    FRENCH,
    SENTENCE,
    TABLE,
    A,
    P,
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


def test_a_presentations_masters_layouts_and_defaults_declare_the_target():
    master_text = (
        '<p:txStyles><p:titleStyle><a:lvl1pPr><a:defRPr lang="en-US" sz="4400"/></a:lvl1pPr>'
        '</p:titleStyle><p:otherStyle><a:lvl1pPr><a:defRPr lang="de-DE"/></a:lvl1pPr>'
        "</p:otherStyle></p:txStyles>"
    )
    members = {
        "ppt/slides/slide1.xml": slide("<a:p><a:r><a:t>Save</a:t></a:r></a:p>"),
        "ppt/slideMasters/slideMaster1.xml": slide(
            '<a:p><a:endParaRPr lang="en-GB"/></a:p>'
        ).replace("</p:cSld>", "</p:cSld>" + master_text),
        "ppt/slideLayouts/slideLayout2.xml": slide('<a:p><a:endParaRPr lang="en-US"/></a:p>'),
        "ppt/presentation.xml": (
            f'<p:presentation xmlns:a="{A}" xmlns:p="{P}"><p:defaultTextStyle><a:defPPr>'
            '<a:defRPr lang="es-ES"/></a:defPPr></p:defaultTextStyle></p:presentation>'
        ),
        "ppt/theme/theme1.xml": f'<a:theme xmlns:a="{A}" lang="en-US"/>',
    }
    data = package(members)
    unchanged = zipfile.ZipFile(io.BytesIO(open_document("t.pptx", data).rebuild(["x"])))
    assert (
        unchanged.read("ppt/slideMasters/slideMaster1.xml")
        == members["ppt/slideMasters/slideMaster1.xml"].encode()
    )  # without languages: as it was
    out = zipfile.ZipFile(io.BytesIO(open_document("t.pptx", data).rebuild(["x"], FRENCH)))

    def langs(name: str) -> list[str | None]:
        return [e.get("lang") for e in ET.fromstring(out.read(name)).iter() if e.get("lang")]

    assert langs("ppt/slideMasters/slideMaster1.xml") == ["fr-FR", "fr-FR", "de-DE"]
    assert langs("ppt/slideLayouts/slideLayout2.xml") == ["fr-FR"]
    assert langs("ppt/presentation.xml") == ["fr-FR"]  # the default: whatever it named
    assert out.read("ppt/theme/theme1.xml") == members["ppt/theme/theme1.xml"].encode()


def test_word_settings_name_the_target_for_theme_fonts():
    settings = (
        f'<w:settings xmlns:w="{W}"><w:zoom w:percent="100"/>'
        '<w:themeFontLang w:val="en-US" w:eastAsia="zh-CN"/></w:settings>'
    )
    body = f'<w:document xmlns:w="{W}"><w:body><w:p><w:r><w:t>Save</w:t></w:r></w:p></w:body>'
    data = package({"word/document.xml": body + "</w:document>", "word/settings.xml": settings})
    out = zipfile.ZipFile(io.BytesIO(open_document("a.docx", data).rebuild(["حفظ"], ARABIC)))
    theme = ET.fromstring(out.read("word/settings.xml")).find(f"{{{W}}}themeFontLang")
    assert local_attributes(theme, theme.tag) == [
        {"val": "ar-SA", "eastAsia": "zh-CN", "bidi": "ar-SA"}  # the target's script, too
    ]


ARABIC = Languages("en", "ar")


def word_flags(paragraph: ET.Element) -> list[tuple[str, str | None]]:
    """Each direction flag of a paragraph and its runs, with its value (None: on)."""
    return [
        (e.tag.split("}")[1], e.get(f"{{{W}}}val"))
        for e in paragraph.iter()
        if e.tag in (f"{{{W}}}bidi", f"{{{W}}}rtl")
    ]


def test_a_word_document_turns_right_to_left_with_its_target():
    body = (
        '<w:p><w:pPr><w:pStyle w:val="Title"/><w:jc w:val="center"/></w:pPr>'
        '<w:r><w:rPr><w:b/><w:lang w:val="en-US"/></w:rPr><w:t>Save</w:t></w:r>'
        '<w:r><w:t xml:space="preserve"> now</w:t></w:r></w:p>'
    )
    data = docx(body)
    (p,) = paragraphs(docx_document(data).rebuild(["حفظ الآن", "حفظ"], ARABIC))
    pieces = [e.tag.split("}")[1] for e in p.find(f"{{{W}}}pPr")]
    assert pieces == ["pStyle", "bidi", "jc"]  # in the schema's order
    written = list(p.iter(f"{{{W}}}r"))
    assert len(written) == 2 and word_flags(p) == [("bidi", None)] + [("rtl", None)] * 2
    bold = next(r for r in written if r.find(f"{{{W}}}rPr/{{{W}}}b") is not None)
    assert [e.tag.split("}")[1] for e in bold.find(f"{{{W}}}rPr")] == [
        "b",
        "rtl",
        "lang",
    ]  # before the language, as the schema orders them
    # Arabic into English: turned back explicitly, whatever the styles say
    document = docx_document(paragraph_xml(p))
    (p,) = paragraphs(document.rebuild(["Save now", "Save"], Languages("ar", "en")))
    assert word_flags(p) == [("bidi", "0")] + [("rtl", "0")] * 2
    # French: the direction does not turn, nothing is added
    (p,) = paragraphs(
        docx_document(data).rebuild(["Enregistrer maintenant", "Enregistrer"], FRENCH)
    )
    assert word_flags(p) == []


def paragraph_xml(paragraph: ET.Element) -> bytes:
    ET.register_namespace("w", W)
    return docx(ET.tostring(paragraph, encoding="unicode").replace(f' xmlns:w="{W}"', ""))


def test_a_presentation_turns_right_to_left_with_its_target():
    text = (
        '<a:p><a:pPr algn="ctr"/><a:r><a:t>Save</a:t></a:r></a:p>'
        "<a:p><a:r><a:t>Now</a:t></a:r></a:p>"
    )
    data = package({"ppt/slides/slide1.xml": slide(text)})

    def directions(languages: Languages) -> list[tuple[str | None, str | None]]:
        out = zipfile.ZipFile(
            io.BytesIO(open_document("t.pptx", data).rebuild(["a", "b"], languages))
        )
        root = ET.fromstring(out.read("ppt/slides/slide1.xml"))
        first = [next(iter(p)) for p in root.iter(f"{{{A}}}p")]  # the properties come first
        return [(e.get("algn"), e.get("rtl")) for e in first if e.tag == f"{{{A}}}pPr"]

    assert directions(ARABIC) == [("ctr", "1"), (None, "1")]
    assert directions(Languages("ar", "fr")) == [("ctr", "0"), (None, "0")]
    assert directions(FRENCH) == [("ctr", None)]
