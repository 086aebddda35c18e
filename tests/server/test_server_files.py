"""LibreTranslate's file translation (``POST /translate_file``, ``GET /download_file``): .txt,
.html and .docx translated whole with their layout kept, the file's name kept for download,
and clear 4xx answers for files, languages and keys that do not fit."""

from __future__ import annotations

import io
import shutil
import subprocess
import zipfile

import httpx
import pytest

from server.documents import FORMATS

pytestmark = pytest.mark.integration

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
DOCUMENT = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="{W}" xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"
 mc:Ignorable="w"><w:body>
<w:p><w:r><w:rPr><w:b/></w:rPr><w:t>Follow</w:t></w:r>
<w:r><w:t xml:space="preserve"> me.</w:t></w:r></w:p>
<w:p><w:r><w:t>   </w:t></w:r></w:p>
<w:p><w:r><w:t>And Jesus said unto them.</w:t></w:r></w:p>
</w:body></w:document>"""


def docx() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", DOCUMENT)
        z.writestr("word/styles.xml", "<styles/>")
    return out.getvalue()


@pytest.fixture(scope="module")
def srv(module_server):
    return module_server()


def translate_file(url: str, name: str, data: bytes, **form) -> httpx.Response:
    fields = {"source": "en", "target": "de", **form}
    return httpx.post(f"{url}/translate_file", data=fields, files={"file": (name, data)},
                      timeout=60)  # fmt: skip


def download(r: httpx.Response) -> httpx.Response:
    assert r.status_code == 200, r.text
    got = httpx.get(r.json()["translatedFileUrl"], timeout=30)
    assert got.status_code == 200
    return got


def test_a_text_file_keeps_its_paragraphs_and_name(srv):
    got = download(translate_file(srv.url, "notes.txt", b"Follow me.\n\nAnd Jesus said.\n"))
    text = got.content.decode()
    assert text.count("\n\n") == 1 and text.endswith("\n") and "Follow me." not in text
    assert 'filename="notes.txt"' in got.headers["content-disposition"]


def test_html_keeps_its_tags_and_declares_the_target_language(srv):
    page = (b"<html lang='en'><body><p class='x'>Follow me.</p><script>var a = 1;</script>"
            b"<p lang='fr'>Suivez-moi.</p></body></html>")  # fmt: skip
    text = download(translate_file(srv.url, "page.html", page)).content.decode()
    assert text.startswith("<html lang=\"de\"><body><p class='x'>"), text
    assert "<script>var a = 1;</script>" in text and "Follow me." not in text
    assert "<p lang='fr'>" in text  # another language's tag is its own


def test_a_word_document_keeps_its_parts_and_runs(srv):
    got = download(translate_file(srv.url, "letter.docx", docx()))
    with zipfile.ZipFile(io.BytesIO(got.content)) as z:
        assert z.namelist() == ["[Content_Types].xml", "word/document.xml", "word/styles.xml"]
        assert z.read("word/styles.xml") == b"<styles/>"
        xml = z.read("word/document.xml").decode()
    assert "<w:b" in xml and 'mc:Ignorable="w"' in xml  # formatting and prefixes kept
    assert "Follow" not in xml and " me." not in xml and "Jesus" not in xml
    assert "<w:t>   </w:t>" in xml  # a paragraph of spaces is left alone


def test_a_catalogue_auto_detected_names_its_target(srv):
    po = b'msgid ""\nmsgstr ""\n"Language: en\\n"\n\nmsgid "And Jesus said unto them."\nmsgstr ""\n'
    out = download(translate_file(srv.url, "app.po", po, source="auto", target="fr")).content
    assert b'"Language: fr\\n"' in out, out.decode()


def test_subtitles_and_a_catalogue_come_back_whole(srv, tmp_path):
    if shutil.which("msgfmt") is None:
        pytest.skip("gettext's msgfmt is needed (make install-gettext)")
    srt = b"1\n00:00:01,000 --> 00:00:03,000\nFollow me,\nand I will make you fishers.\n"
    text = download(translate_file(srv.url, "film.srt", srt)).content.decode()
    assert text.startswith("1\n00:00:01,000 --> 00:00:03,000\n") and "Follow me" not in text
    po = (
        b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
        b'"Plural-Forms: nplurals=2; plural=(n != 1);\\n"\n\n'
        b'#, c-format\nmsgid "Follow me, %s."\nmsgstr ""\n'
    )
    out = download(translate_file(srv.url, "app.po", po)).content
    (tmp_path / "app.po").write_bytes(out)
    check = subprocess.run(["msgfmt", "--check", "-o", "/dev/null", "app.po"], cwd=tmp_path,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, (check.stderr, out.decode())
    assert b"#, fuzzy, c-format" in out and out.count(b"%s") == 2


def test_files_that_do_not_fit_are_refused_clearly(srv, module_server):
    r = translate_file(srv.url, "slides.odt", b"PK")
    assert r.status_code == 400 and r.json()["details"]["allowed"] == list(FORMATS)
    r = translate_file(srv.url, "slides.pptx", b"PK")
    assert r.status_code == 400 and "not a PowerPoint presentation" in r.json()["error"]
    r = translate_file(srv.url, "broken.docx", b"not a zip")
    assert r.status_code == 400 and "not a Word document" in r.json()["error"]
    r = translate_file(srv.url, "notes.txt", "caf\xe9".encode("latin-1"))
    assert r.status_code == 400 and "UTF-8" in r.json()["error"]
    r = translate_file(srv.url, "notes.txt", b"Hi.", target="xx")
    assert r.status_code == 400
    r = httpx.post(f"{srv.url}/translate_file", data={"source": "en", "target": "de"}, timeout=10)
    assert r.status_code == 400 and r.json()["details"]["parameter"] == "file"
    assert httpx.get(f"{srv.url}/download_file/../../etc/passwd", timeout=10).status_code == 404
    assert httpx.get(f"{srv.url}/download_file/{'0' * 32}.txt", timeout=10).status_code == 404
    keyed = module_server(api_keys=["k"])
    assert translate_file(keyed.url, "notes.txt", b"Hi.").status_code == 401
    assert translate_file(keyed.url, "notes.txt", b"Hi.", api_key="k").status_code == 200


def test_terms_are_json_of_strings_or_a_400(srv):
    kept = translate_file(srv.url, "notes.txt", b"Jesus said.", glossary='{"Jesus": "Jesus"}')
    assert kept.status_code == 200, kept.text
    for field, value in [("glossary", '{"Hi": 1}'), ("glossary", '["Hi"]'),
                         ("do_not_translate", "[1]"), ("do_not_translate", "[")]:  # fmt: skip
        r = translate_file(srv.url, "notes.txt", b"Hi.", **{field: value})
        assert r.status_code == 400, (field, value, r.text)
        assert r.json()["details"]["parameter"] == field and "must be JSON" in r.json()["error"]
