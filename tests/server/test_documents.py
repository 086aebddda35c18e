"""Word documents written again with their word-level formatting kept (``server.documents``):
a bold word, a hyperlink, stay on the words of the translation that render them. The
translations are a phrase table, so that the placement is exercised on purpose; the file
tests (test_server_files.py) translate through a real engine."""

from __future__ import annotations

import io
import shutil
import subprocess
import zipfile
from xml.etree import ElementTree as ET

import polib
import pytest

from server.documents import DocumentError, Languages, open_document
from server.documents.office import docx_document
from server.markup import tokenize

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


A = "http://schemas.openxmlformats.org/drawingml/2006/main"
P = "http://schemas.openxmlformats.org/presentationml/2006/main"


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


def test_a_word_documents_headers_and_footnotes_are_translated_too():
    paragraph = "<w:p><w:r><w:t>Save</w:t></w:r></w:p>"
    body = f'<w:document xmlns:w="{W}"><w:body>{paragraph}</w:body></w:document>'
    header = f'<w:hdr xmlns:w="{W}"><w:p><w:r><w:t>A note.</w:t></w:r></w:p></w:hdr>'
    data = package({"word/document.xml": body, "word/header1.xml": header})
    document = open_document("a.docx", data)
    assert document.texts == ["Save", "A note."]
    out = zipfile.ZipFile(io.BytesIO(document.rebuild(["Enregistrer", "Une note."])))
    assert b"Une note." in out.read("word/header1.xml")


def epub(chapter: str, metadata: str = "<metadata/>") -> bytes:
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
        f'{metadata}<manifest><item id="c1" href="text/ch%201.xhtml" '
        'media-type="application/xhtml+xml"/>'
        '<item id="css" href="style.css" media-type="text/css"/>'
        '</manifest><spine><itemref idref="c1"/></spine></package>'
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


def test_a_book_translates_its_chapters_as_html_and_stays_an_epub():
    chapter = (
        '<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Save</title></head>'
        "<body><p>Click <b>Save</b> to keep your changes.</p></body></html>"
    )
    document = open_document("book.epub", epub(chapter))
    assert document.texts == ["Save", "Click Save to keep your changes.", "Save"]
    assert document.charged == len("Save") + len("Click Save to keep your changes.")
    out = zipfile.ZipFile(io.BytesIO(document.rebuild([TABLE[t] for t in document.texts])))
    first = out.infolist()[0]
    assert first.filename == "mimetype" and first.compress_type == zipfile.ZIP_STORED
    text = out.read("OEBPS/text/ch 1.xhtml").decode()
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>')
    assert "<p>Pour garder vos modifications, cliquez sur <b>Enregistrer</b>.</p>" in text
    assert out.read("OEBPS/style.css") == b"p { margin: 0 }"


SRT = (
    "1\r\n00:00:01,000 --> 00:00:03,500\r\nClick Save\r\nto keep your changes.\r\n\r\n"
    "2\r\n00:00:04,000 --> 00:00:05,000\r\n<i>Save</i>\r\n"
)


def test_subtitles_keep_their_cues_and_timings_and_reflow_lines():
    document = open_document("film.srt", SRT.encode())
    assert document.texts == ["Click Save to keep your changes.", "Save"]
    long = "Pour garder toutes vos modifications, cliquez tout de suite sur Enregistrer."
    out = document.rebuild([long, "Enregistrer"]).decode()
    assert out == (
        "1\r\n00:00:01,000 --> 00:00:03,500\r\n"
        "Pour garder toutes vos modifications,\r\ncliquez tout de suite sur Enregistrer.\r\n\r\n"
        "2\r\n00:00:04,000 --> 00:00:05,000\r\n<i>Enregistrer</i>\r\n"
    )
    vtt = "WEBVTT\n\nNOTE kept\n\ncue-1\n00:01.000 --> 00:02.000 align:start\nTom &amp; Jerry\n"
    document = open_document("film.vtt", vtt.encode())
    assert document.texts == ["Tom & Jerry"]
    assert document.rebuild(["Tom & Jerry !"]).decode() == vtt.replace("Jerry\n", "Jerry !\n")


def gettext_tools() -> None:
    """Skip (with the reason) where gettext's tools are missing: `make test` installs them."""
    if not all(shutil.which(tool) for tool in ("xgettext", "msginit", "msgfmt")):
        pytest.skip("gettext's xgettext, msginit and msgfmt are needed (make install-gettext)")


def test_gettext_catalogues_made_by_xgettext_pass_msgfmt(tmp_path):
    gettext_tools()
    source = tmp_path / "app.c"
    source.write_text(
        '#include <libintl.h>\n#define _(s) gettext(s)\n'
        'void f(int n, char *name) {\n'
        '  printf(_("Hello %s, you have %d new messages."), name, n);\n'
        '  printf(ngettext("%d file", "%d files", n), n);\n'
        '  printf(_("Save"));\n}\n'
    )  # fmt: skip
    pot = tmp_path / "app.pot"
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, cwd=tmp_path)  # noqa: E731
    run("xgettext", "--keyword=_", "--keyword=ngettext:1,2", "-o", str(pot), str(source))
    run("msginit", "--no-translator", "--locale=ru_RU.UTF-8", "-i", str(pot), "-o", "ru.po")
    po = (tmp_path / "ru.po").read_bytes()
    po = po.replace(b'msgid "Save"\nmsgstr ""', b'msgid "Save"\nmsgstr "Sohranit"')
    document = open_document("ru.po", po)
    assert document.texts == ["Hello %s, you have %d new messages.", "%d file", "%d files"]
    # the model drops one placeholder, swaps the order of two, and invents one
    out = document.rebuild(
        ["Bonjour, vous avez %d nouveaux messages %s.", "%s fichier", "fichiers %d"]
    )
    (tmp_path / "out.po").write_bytes(out)
    run("msgfmt", "--check", "-o", "/dev/null", "out.po")
    catalogue = out.decode()
    assert 'msgstr "Bonjour, vous avez %s nouveaux messages %d."' in catalogue
    assert 'msgstr[0] "%d fichier"' in catalogue and 'msgstr[2] "fichiers %d"' in catalogue
    assert catalogue.count("#, fuzzy, c-format") == 2
    assert 'msgstr "Sohranit"' in catalogue  # a translation already there is kept


def test_a_po_file_is_read_from_its_bytes_never_from_a_path_it_names():
    with pytest.raises(DocumentError):
        open_document("x.po", b"/etc/passwd")


def test_packages_that_would_explode_are_refused(monkeypatch):
    from server.documents import packages

    monkeypatch.setattr(packages, "MAX_UNPACKED_BYTES", 1000)
    big = package({"word/document.xml": "<w:document/>" + " " * 2000})
    with pytest.raises(DocumentError, match="unpacks to more than"):
        open_document("a.docx", big)
    monkeypatch.setattr(packages, "MAX_MEMBERS", 2)
    with pytest.raises(DocumentError, match="more than 2 parts"):
        open_document("a.docx", package({f"p{i}": "" for i in range(3)}))
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;">]>'
        f'<w:document xmlns:w="{W}"><w:body><w:p><w:r><w:t>&b;</w:t></w:r></w:p></w:body>'
        "</w:document>"
    )
    with pytest.raises(DocumentError, match="declares a DOCTYPE"):
        open_document("a.docx", package({"word/document.xml": bomb}))
    for name, data, message in (
        ("a.docx", package({"word/other.xml": "<x/>"}), "no word/document.xml"),
        ("a.epub", package({"mimetype": "application/epub+zip"}), "no XHTML"),
        ("a.srt", b"no cues here", "no cue with a timing line"),
        ("a.vtt", b"00:01.000 --> 00:02.000\nx", "must start with WEBVTT"),
        ("a.pptx", b"not a zip", "not a PowerPoint presentation"),
    ):
        with pytest.raises(DocumentError, match=message):
            open_document(name, data)


T = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
XLINK = "http://www.w3.org/1999/xlink"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"


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


def test_an_opendocument_keeps_its_spans_and_links_on_their_words():
    body = (
        '<text:h text:outline-level="1">A note.</text:h>'
        '<text:p text:style-name="P1"><text:bookmark text:name="b1"/>Click<text:s/>'
        '<text:span text:style-name="Bold">Save</text:span> to keep '
        '<text:a xlink:href="https://x.org">your changes</text:a>.</text:p>'
        "<text:p>Tab<text:tab/>stop<text:note><text:note-body><text:p>Save</text:p>"
        "</text:note-body></text:note></text:p>"
    )
    document = open_document("letter.odt", odt(body))
    assert document.texts == [
        "A note.", "Click Save to keep your changes.", "Save", "your changes", "Tabstop", "Save"
    ]  # fmt: skip
    table = {**TABLE, "A note.": "Une note.", "Tabstop": "Tabulation"}
    out = zipfile.ZipFile(io.BytesIO(document.rebuild([table[t] for t in document.texts])))
    assert out.infolist()[0].filename == "mimetype" and out.read("styles.xml") == b"<styles/>"
    root = ET.fromstring(out.read("content.xml"))
    heading, sentence, tabbed, note = root.iter(f"{{{T}}}h"), *root.iter(f"{{{T}}}p")
    assert next(heading).text == "Une note."
    pieces = [(c.tag.split("}")[1], c.text, c.tail) for c in sentence]
    assert pieces == [
        ("bookmark", None, "Pour garder "),
        ("a", "vos modifications", ", cliquez sur "),
        ("span", "Enregistrer", "."),
    ]
    assert sentence[2].get(f"{{{T}}}style-name") == "Bold"
    assert sentence[1].get(f"{{{XLINK}}}href") == "https://x.org"
    assert tabbed.text == "Tabulation" and tabbed.find(f"{{{T}}}tab") is not None
    assert note.text == "Enregistrer"  # a footnote is a text of its own


MARKDOWN = """---
title: A note.
---
# Save *now*

Click **Save** to keep
your changes, then run `make check` ([docs](https://x.org/a_(b))).

- [ ] A task with snake_case ![logo](l.png)
> A quote: 2 * 3.

| Save | 3 |
|------|---|

```sh
Save
```

    Save
"""


def test_markdown_keeps_its_structure_code_and_inline_markup():
    document = open_document("notes.md", MARKDOWN.encode())
    assert document.texts == [
        "Save now", "now",
        "Click Save to keep your changes, then run make check (docs).", "Save", "docs",
        "A task with snake_case", "A quote: 2 * 3.", "Save", "3",
    ]  # fmt: skip
    # what the model writes is Markdown text: markup characters in it are escaped
    out = document.rebuild([t.upper().replace("SAVE", "Save_it *") for t in document.texts])
    assert out.decode() == MARKDOWN.replace("# Save *now*", "# Save_it \\* *NOW*").replace(
        "Click **Save** to keep\nyour changes, then run `make check` ([docs](https://x.org/a_(b))).",
        "CLICK **Save_it \\*** TO KEEP YOUR CHANGES, THEN RUN `make check` "
        "([DOCS](https://x.org/a_(b))).",
    ).replace("A task with snake_case ![logo]", "A TASK WITH SNAKE_CASE ![logo]").replace(
        "A quote: 2 * 3.", "A QUOTE: 2 \\* 3."
    ).replace("| Save | 3 |", "| Save_it \\* | 3 |")
    assert open_document("notes.md", MARKDOWN.encode()).rebuild(document.texts).decode() == (
        MARKDOWN.replace("keep\nyour", "keep your").replace("2 * 3", "2 \\* 3")
    )


def test_markdown_nested_too_deep_reads_as_text():
    line = "[" * 2000 + "x" + "](u)" * 2000
    document = open_document("deep.md", (line + "\n").encode())
    assert len(document.texts) >= 1  # read, not a RecursionError


# The translation declares the language it is in, where the format has a language tag: the
# document's own declaration always, another tag where it named the source.
FRENCH = Languages("en", "fr")
DC = "http://purl.org/dc/elements/1.1/"
XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def test_an_html_page_declares_the_target_language():
    page = (
        '<!DOCTYPE html><html><head><meta http-equiv="content-language" content="en"></head>'
        '<body><p lang="en-GB">Click <b>Save</b> to keep <span lang="de">your changes</span>.'
        '</p><pre lang="en">Save</pre></body></html>'
    )
    document = open_document("page.html", page.encode())
    assert document.rebuild(document.texts).decode() == page  # without languages: as it was
    out = document.rebuild([TABLE[t] for t in document.texts], FRENCH).decode()
    tags = {t.tag: dict(t.attrs) for t in tokenize(out) if t.kind == "start"}
    assert tags["html"] == {"lang": "fr"}  # added: the root had none
    assert tags["meta"]["content"] == "fr" and tags["p"] == {"lang": "fr"}
    assert tags["span"] == {"lang": "de"}  # another language: left as it was
    assert tags["pre"] == {"lang": "en"}  # not translated: left as it was


def test_a_book_declares_the_target_in_its_package_and_its_chapters():
    chapter = (
        '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
        'lang="en" xml:lang="en"><head><title>Save</title></head><body><p>Save</p></body></html>'
    )
    metadata = (
        f'<metadata xmlns:dc="{DC}"><dc:title>Save</dc:title><dc:language>en-US</dc:language>'
        "</metadata>"
    )
    document = open_document("book.epub", epub(chapter, metadata))
    out = zipfile.ZipFile(io.BytesIO(document.rebuild(["Enregistrer"] * 2, FRENCH)))
    opf = ET.fromstring(out.read("OEBPS/content.opf"))
    assert [e.text for e in opf.iter(f"{{{DC}}}language")] == ["fr"]
    assert next(opf.iter(f"{{{DC}}}title")).text == "Save"  # the package is not translated
    root = ET.fromstring(out.read("OEBPS/text/ch 1.xhtml"))
    assert root.get("lang") == root.get(XML_LANG) == "fr"


def local_attributes(root: ET.Element, tag: str) -> list[dict[str, str]]:
    return [{k.split("}")[-1]: v for k, v in e.attrib.items()} for e in root.iter(tag)]


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


def test_an_opendocument_declares_the_target_in_its_styles_and_metadata():
    automatic = (
        '<office:automatic-styles><style:style style:name="T1"><style:text-properties '
        'fo:language="en" fo:country="GB"/></style:style><style:style style:name="T2">'
        '<style:text-properties fo:language="de" fo:country="DE"/></style:style>'
        "</office:automatic-styles>"
    )
    styles = (
        f'<office:document-styles xmlns:office="{OFFICE}" xmlns:style="{STYLE}" '
        f'xmlns:fo="{FO}"><office:styles><style:default-style style:family="paragraph">'
        '<style:text-properties fo:language="en" fo:country="US" style:language-asian="zh" '
        'style:country-asian="CN" style:language-complex="hi" style:country-complex="IN"/>'
        "</style:default-style></office:styles></office:document-styles>"
    )
    meta = (
        f'<office:document-meta xmlns:office="{OFFICE}" xmlns:dc="{DC}"><office:meta>'
        "<dc:language>en-US</dc:language></office:meta></office:document-meta>"
    )
    data = odt("<text:p>Save</text:p>", automatic, {"styles.xml": styles, "meta.xml": meta})
    document = open_document("letter.odt", data)
    # Japanese: the western language that was English, and the Asian one, name it
    out = zipfile.ZipFile(io.BytesIO(document.rebuild(["保存"], Languages("en", "ja"))))
    properties = f"{{{STYLE}}}text-properties"
    assert local_attributes(ET.fromstring(out.read("content.xml")), properties) == [
        {"language": "ja", "country": "JP", "language-asian": "ja", "country-asian": "JP"},
        {"language": "de", "country": "DE"},
    ]
    assert local_attributes(ET.fromstring(out.read("styles.xml")), properties) == [
        {"language": "ja", "country": "JP", "language-asian": "ja", "country-asian": "JP",
         "language-complex": "hi", "country-complex": "IN"},
    ]  # fmt: skip
    assert next(ET.fromstring(out.read("meta.xml")).iter(f"{{{DC}}}language")).text == "ja-JP"


def test_a_catalogue_names_the_target_in_its_header():
    po = (
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n"Language: ru\\n"\n\n'
        'msgid "Save"\nmsgstr ""\n'
    )
    document = open_document("app.po", po.encode())
    catalogue = polib.pofile(document.rebuild(["Salvar"], Languages("en", "pt-BR")).decode())
    assert catalogue.metadata["Language"] == "pt_BR"
    assert catalogue.find("Save").msgstr == "Salvar"
