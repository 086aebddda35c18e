"""Documents of text with light markup: Markdown (``server.documents.markdown``: structure,
code and inline markup kept) and subtitles (``server.documents.subtitles``: cues and timings
kept, lines re-flowed)."""

from __future__ import annotations

from server.documents import Languages, open_document
from tests.server.document_files import FRENCH

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


def test_a_webvtt_header_states_the_target_language():
    cue = "\r\n\r\n00:01.000 --> 00:02.000\r\nSave\r\n"
    tagged = "WEBVTT - a film\r\nKind: captions\r\nLanguage: en-US\r\nlanguage: en" + cue
    document = open_document("film.vtt", tagged.encode())
    out = document.rebuild(["Enregistrer"], Languages("en", "fr-CA")).decode()
    assert out == "WEBVTT - a film\r\nKind: captions\r\nLanguage: fr-CA" + cue.replace(
        "Save", "Enregistrer"
    )  # replaced where it was (once), the other header lines kept
    untagged = "WEBVTT\n\nNOTE a note\n\n00:01.000 --> 00:02.000\nSave\n"
    out = open_document("film.vtt", untagged.encode()).rebuild(["حفظ"], Languages("en", "ar"))
    assert out.decode() == untagged.replace("WEBVTT\n", "WEBVTT\nLanguage: ar\n").replace(
        "Save", "حفظ"
    )
    srt = "1\n00:00:01,000 --> 00:00:02,000\nSave\n"  # SubRip has no header: nothing added
    assert open_document("a.srt", srt.encode()).rebuild(["x"], FRENCH).decode() == srt.replace(
        "Save", "x"
    )
