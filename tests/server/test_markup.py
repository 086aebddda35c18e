"""Inline markup kept inside sentences (``server.markup``): what is read as one text, where
each element goes in a translation, and what is written back byte for byte. The translations
here are functions of the texts (upper-casing, a phrase table, reversed words), so that each
placement rule is exercised on purpose; the server tests translate through a real engine."""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import pytest

from server.documents.plain import html_document
from server.markup import HtmlDocument


def translate(doc: str, fn=str.upper) -> tuple[HtmlDocument, str]:
    document = HtmlDocument(doc)
    return document, document.rebuild([fn(t) for t in document.texts]).decode()


class Tags(HTMLParser):
    """The start and end tags of a document, in order, for well-formedness checks."""

    def __init__(self, doc: str) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self.feed(doc)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.events.append(("start", tag))

    def handle_endtag(self, tag):
        self.events.append(("end", tag))


def balanced(doc: str) -> bool:
    stack = []
    for kind, tag in Tags(doc).events:
        if kind == "start" and tag not in ("br", "img", "input", "wbr", "meta", "link", "hr"):
            stack.append(tag)
        elif kind == "end" and (not stack or stack.pop() != tag):
            return False
    return not stack


def test_a_sentence_with_inline_elements_is_one_text():
    document, out = translate("<p>Click <b>Save</b> to keep your <i>changes</i>.</p>")
    assert document.texts[0] == "Click Save to keep your changes."
    assert out == "<p>CLICK <b>SAVE</b> TO KEEP YOUR <i>CHANGES</i>.</p>"
    # the elements' texts are translated alone to place them, and not charged for
    assert document.texts[1:] == ["Save", "changes"] or document.texts[1:] == ["changes", "Save"]
    assert html_document("<p>Click <b>Save</b> now.</p>").charged == len("Click Save now.")


def test_an_element_follows_its_words_when_the_translation_reorders_them():
    table = {
        "Click Save to keep your changes.": (
            "Pour garder vos modifications, cliquez sur Enregistrer."
        ),
        "Save": "Enregistrer",
        "changes": "modifications",
    }
    document, out = translate(
        "<p>Click <b>Save</b> to keep your <i>changes</i>.</p>", lambda t: table[t]
    )
    assert out == ("<p>Pour garder vos <i>modifications</i>, cliquez sur <b>Enregistrer</b>.</p>")
    assert document.methods == {"translated": 2}


def test_names_numbers_and_code_are_found_as_they_were_written():
    table = {
        "Ask Maria about the 3 files in make check.": (
            "Pregunta a Maria por los 3 ficheros de make check."
        ),
        "Maria": "María",  # translated alone it would not be found: its source form is
        "3": "tres",
    }
    _, out = translate(
        "<p>Ask <a href='/m'>Maria</a> about the <b>3</b> files in <code>make check</code>.</p>",
        lambda t: table[t],
    )
    assert out == (
        "<p>Pregunta a <a href='/m'>Maria</a> por los <b>3</b> ficheros de "
        "<code>make check</code>.</p>"
    )


def test_a_translation_that_differs_is_matched_by_its_closest_words():
    table = {
        "Open the settings window now.": "Ouvrez maintenant la fenêtre des réglages.",
        "settings window": "fenêtre de réglages",  # close to, not in, the sentence's words
    }
    document, out = translate("<p>Open the <em>settings window</em> now.</p>", lambda t: table[t])
    assert out == "<p>Ouvrez maintenant la <em>fenêtre des réglages</em>.</p>"
    assert document.methods == {"fuzzy": 1}


def test_without_a_match_an_element_keeps_its_share_of_the_sentence():
    table = {"one two three four": "uno dos tres cuatro", "three": "zzz"}
    document, out = translate("<p>one two <b>three</b> four</p>", lambda t: table[t])
    assert out == "<p>uno dos <b>tres</b> cuatro</p>"
    assert document.methods == {"position": 1}


def test_nested_elements_stay_nested_and_siblings_apart():
    doc = "<p><a href='#'>The <b>big</b> dog</a> and the <b>small</b> cat.</p>"
    _, out = translate(doc, lambda t: " ".join(reversed(t.split())))
    assert balanced(out)
    assert re.search(r"<a href='#'>[^<]*<b>big</b>[^<]*</a>", out), out
    assert out.count("<b>small</b>") == 1


def test_everything_but_the_text_is_written_back_byte_for_byte():
    doc = (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset='utf-8'>"
        "<title>A page</title><style>p { color: red }</style>"
        "<script>if (a < b) { document.write('<b>x</b>') }</script></head>\n"
        '<body class="main">\n  <!-- a comment with <p>tags</p> -->\n'
        "  <h1 id=top>Welcome home</h1>\n"
        "  <ul>\n    <li>First &amp; best</li>\n"
        '    <li><a href="/b?x=1&amp;y=2">Second</a> item</li>\n  </ul>\n'
        '  <pre>  keep\n   this  </pre><p translate="no">Brand Name</p>'
        "<p class='x notranslate'>Other Name</p><p>Line one<br/>Line two</p>\n"
        "</body></html>\n"
    )
    _, same = translate(doc, lambda t: t)
    assert same == doc
    _, out = translate(doc)
    for kept in ("<script>if (a < b) { document.write('<b>x</b>') }</script>",
                 "<style>p { color: red }</style>", "<!-- a comment with <p>tags</p> -->",
                 "<pre>  keep\n   this  </pre>", '<p translate="no">Brand Name</p>',
                 "<p class='x notranslate'>Other Name</p>", "<h1 id=top>",
                 '<a href="/b?x=1&amp;y=2">'):  # fmt: skip
        assert kept in out, kept
    assert "<title>A PAGE</title>" in out and "<li>FIRST &amp; BEST</li>" in out
    assert "<p>LINE ONE<br/>LINE TWO</p>" in out


def test_attributes_that_people_read_are_translated_and_escaped():
    doc = (
        '<p><img src="cat.png" alt="A cat"> <input placeholder=\'Your name\' value="Bob">'
        '<a href="/x" title=Help aria-label="Go home">Go</a></p>'
    )
    _, out = translate(doc, lambda t: f'"{t}" & co')
    assert 'alt="&quot;A cat&quot; &amp; co"' in out
    assert 'placeholder="&quot;Your name&quot; &amp; co"' in out and 'value="Bob"' in out
    assert 'title="&quot;Help&quot; &amp; co"' in out and 'href="/x"' in out
    assert 'aria-label="&quot;Go home&quot; &amp; co"' in out
    # an attribute's name written inside another attribute's value is not that attribute
    _, out = translate("<p><a href=\"/q?x= title=y\" title='Help'>Go</a></p>")
    assert '<a href="/q?x= title=y" title="HELP">GO</a>' in out


def test_a_block_of_symbols_or_code_alone_is_not_sent():
    document, out = translate("<p>&nbsp;</p><p>—</p><p><code>x = 1</code></p><p>Hi</p>")
    assert document.texts == ["Hi"]
    assert out == "<p>&nbsp;</p><p>—</p><p><code>x = 1</code></p><p>HI</p>"


def test_broken_markup_is_written_back_where_it_was():
    for doc in (
        "<p>Broken <b>bold <i>x</b> y</i> z</p>",
        "<p>Unclosed <b>bold text</p><p>next</p>",
        "a < b and <b>c</b> </> & d",
        "</i>stray end<b>",
    ):
        _, out = translate(doc)
        assert Tags(out).events == Tags(doc).events, (doc, out)


def test_the_translations_must_match_the_texts():
    document = HtmlDocument("<p>Hello <b>you</b></p>")
    with pytest.raises(ValueError, match="1 translations for 2 texts"):
        document.rebuild(["x"])


WORDS = ("the", "cat", "sat", "on", "a", "mat", "near", "big", "red", "doors", "while", "3",
         "dogs", "ran", "home")  # fmt: skip
INLINE = ("b", "i", "em", "a", "span", "code")


def random_block(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        if depth < 2 and rng.random() < 0.4:
            tag = rng.choice(INLINE)
            parts.append(f"<{tag}>{random_block(rng, depth + 1)}</{tag}>")
        elif rng.random() < 0.1:
            parts.append("<img src=x.png alt='a picture'>")
        else:
            parts.append(" ".join(rng.sample(WORDS, rng.randint(1, 4))))
    return " ".join(parts)


@pytest.mark.parametrize("seed", range(40))
def test_any_translation_gives_well_formed_html_with_every_element(seed):
    rng = random.Random(seed)
    doc = "".join(f"<p>{random_block(rng)}</p>\n" for _ in range(3))
    fns = [
        lambda t: " ".join(reversed(t.split())),
        lambda t: " ".join(w.upper() for w in t.split() if len(w) > 2),
        lambda t: "",
        lambda t: t + " " + t,
    ]
    _, out = translate(doc, rng.choice(fns))
    assert balanced(out), (doc, out)
    assert sorted(Tags(out).events) == sorted(Tags(doc).events), (doc, out)
    for code in re.findall(r"<code>.*?</code>", doc):
        if "<" not in code[6:-7]:
            assert code in out


def test_markup_nested_too_deep_is_refused_not_recursed_into():
    from server.failures import InvalidRequest

    with pytest.raises(InvalidRequest, match="more than 64 deep"):
        HtmlDocument("<p>" + "<span>" * 65 + "x" + "</span>" * 65 + "</p>")
    deep = HtmlDocument("<p>" + "<span>" * 64 + "x y" + "</span>" * 64 + "</p>")
    out = deep.rebuild([t.upper() for t in deep.texts]).decode()
    assert out == "<p>" + "<span>" * 64 + "X Y" + "</span>" * 64 + "</p>"
    # thousands of tags that never close are read in one pass, and written back
    doc = "<p>" + "<b>x " * 5000 + "</p>"
    document = HtmlDocument(doc)
    assert document.rebuild(document.texts).decode() == doc
