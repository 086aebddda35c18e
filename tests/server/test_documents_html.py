"""HTML pages and EPUB books (``server.documents.plain``, ``server.documents.epub``): a
book's chapters translated as HTML, the package kept as an EPUB, and the target language
declared in pages, chapters and the package document."""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree as ET

from server.documents import Languages, open_document
from server.markup import tokenize
from tests.server.document_files import DC, FRENCH, TABLE, XML_LANG, epub


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


def start_tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    return [(t.tag, dict(t.attrs)) for t in tokenize(html) if t.kind == "start"]


def test_a_page_turns_right_to_left_with_its_target():
    page = (
        '<html lang="en"><body><p dir="ltr">Save</p><p lang="en" dir="ltr">Save</p>'
        '<p lang="de" dir="ltr">Zeitgeist</p><p dir="auto">Save</p></body></html>'
    )
    document = open_document("page.html", page.encode())
    out = document.rebuild(["حفظ", "حفظ", "Zeitgeist", "حفظ"], Languages("en", "ar")).decode()
    assert start_tags(out) == [
        ("html", {"lang": "ar", "dir": "rtl"}),  # added
        ("body", {}),
        ("p", {"dir": "rtl"}),  # the source's direction: the target's
        ("p", {"lang": "ar", "dir": "rtl"}),
        ("p", {"lang": "de", "dir": "ltr"}),  # another language keeps its own
        ("p", {"dir": "auto"}),
    ]
    back = open_document("page.html", out.encode())
    out = back.rebuild(["Save", "Save", "Zeitgeist", "Save"], Languages("ar", "en")).decode()
    assert [attrs.get("dir") for _, attrs in start_tags(out)] == [
        "ltr", None, "ltr", "ltr", "ltr", "auto"
    ]  # fmt: skip
    french = open_document("page.html", page.encode()).rebuild(["x"] * 4, FRENCH).decode()
    assert "rtl" not in french and '<html lang="fr">' in french  # nothing turns


def test_a_book_turns_its_page_progression_with_its_target():
    chapter = (
        '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml">'
        "<head><title>Save</title></head><body><p>Save</p></body></html>"
    )
    book = epub(chapter)
    out = zipfile.ZipFile(
        io.BytesIO(open_document("b.epub", book).rebuild(["x"] * 2, Languages("en", "ar")))
    )
    opf = out.read("OEBPS/content.opf").decode()
    assert '<spine page-progression-direction="rtl">' in opf
    assert start_tags(out.read("OEBPS/text/ch 1.xhtml").decode())[0][1]["dir"] == "rtl"
    stated = epub(chapter, spine="<spine page-progression-direction='rtl' toc='ncx'>")
    out = zipfile.ZipFile(
        io.BytesIO(open_document("b.epub", stated).rebuild(["x"] * 2, Languages("ar", "en")))
    )
    assert (
        "<spine page-progression-direction='ltr' toc='ncx'>"
        in out.read("OEBPS/content.opf").decode()
    )
    out = zipfile.ZipFile(io.BytesIO(open_document("b.epub", book).rebuild(["x"] * 2, FRENCH)))
    assert "page-progression-direction" not in out.read("OEBPS/content.opf").decode()
