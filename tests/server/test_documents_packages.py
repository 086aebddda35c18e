"""Files refused before anything is translated (``server.documents.packages``): zip bombs,
XML entity tricks, and files that are not what their extension says."""

from __future__ import annotations

import pytest

from server.documents import DocumentError, open_document
from tests.server.document_files import W, package


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
