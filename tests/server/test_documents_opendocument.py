"""OpenDocument texts and presentations (``server.documents.opendocument``): spans and links
placed on their words, and the language declared in styles and metadata."""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree as ET

from server.documents import Languages, open_document
from tests.server.document_files import (
    DC,
    FO,
    OFFICE,
    STYLE,
    TABLE,
    XLINK,
    T,
    local_attributes,
    odt,
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


def test_an_opendocument_turns_right_to_left_with_its_target():
    automatic = (
        '<office:automatic-styles><style:style style:name="P1" style:family="paragraph">'
        '<style:text-properties fo:language="en"/></style:style>'
        '<style:style style:name="T1" style:family="text"><style:text-properties/></style:style>'
        "</office:automatic-styles>"
    )
    styles = (
        f'<office:document-styles xmlns:office="{OFFICE}" xmlns:style="{STYLE}" '
        f'xmlns:fo="{FO}"><office:styles><style:default-style style:family="paragraph">'
        '<style:paragraph-properties style:writing-mode="page"/></style:default-style>'
        '<style:style style:name="Standard" style:family="paragraph"/>'
        '<style:default-style style:family="graphic"><style:graphic-properties/>'
        "<style:text-properties/></style:default-style></office:styles></office:document-styles>"
    )
    data = odt('<text:p text:style-name="P1">Save</text:p>', automatic, {"styles.xml": styles})

    def modes(languages: Languages) -> list[tuple[str, str, str | None]]:
        out = zipfile.ZipFile(io.BytesIO(open_document("a.odt", data).rebuild(["x"], languages)))
        found = []
        for part in ("content.xml", "styles.xml"):
            for style in ET.fromstring(out.read(part)).iter():
                if style.tag in (f"{{{STYLE}}}style", f"{{{STYLE}}}default-style"):
                    props = [c.tag.split("}")[1] for c in style]
                    mode = style.find(f"{{{STYLE}}}paragraph-properties")
                    mode = None if mode is None else mode.get(f"{{{STYLE}}}writing-mode")
                    found.append((style.get(f"{{{STYLE}}}name", "default"), ",".join(props), mode))
        return found

    assert modes(Languages("en", "ar")) == [
        ("P1", "paragraph-properties,text-properties", "rl-tb"),  # added before its text's
        ("T1", "text-properties", None),  # a text style lays out no paragraph
        ("default", "paragraph-properties", "rl-tb"),  # "page" was the source's direction
        ("Standard", "paragraph-properties", "rl-tb"),
        ("default", "graphic-properties,paragraph-properties,text-properties", "rl-tb"),
    ]
    assert {mode for *_, mode in modes(Languages("ar", "en"))} == {"lr-tb", None}
    assert [mode for *_, mode in modes(Languages("en", "fr"))] == [None, None, "page", None, None]
