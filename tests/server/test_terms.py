"""A request's glossary and do_not_translate terms (``server.terms``): which terms are found,
where their words are in a translation, and what is written there. The translator here is a
phrase table, so that each rule is exercised on purpose; test_server_compat.py sends terms
through a real server."""

from __future__ import annotations

import asyncio

import pytest

from server.failures import InvalidRequest
from server.results import Alternative, TextResult
from server.terms import find_terms, translate_with_terms
from server.validation import Terms, parse_terms

TABLE = {
    "Click Save to keep your changes.": "Cliquez sur Enregistrer pour garder vos modifications.",
    "Save": "Enregistrer",
    "Ask Maria about LSMT.": "Demandez à Marie à propos de Lsmt.",
    "Maria": "Marie",
    "LSMT": "Lsmt",
    "save the file": "enregistrez le fichier",
    "save": "enregistrez",
    "save it, then save it all": "enregistrez-le, puis enregistrez tout",
}


class Translator:
    """A phrase table as the service's translate: records each call's texts and source."""

    def __init__(self, detected: str = "en") -> None:
        self.calls: list[tuple[list[str], str]] = []
        self.detected = detected

    async def __call__(self, texts: list[str], source: str) -> list[TextResult]:
        self.calls.append((texts, source))
        lang = self.detected if source == "auto" else source
        return [
            TextResult(TABLE[t], lang, engine="tiny", alternatives=[Alternative(TABLE[t], -1.0)])
            for t in texts
        ]


def run(texts: list[str], terms: Terms, source: str = "en", translator=None) -> list[str]:
    translator = translator or Translator()
    results = asyncio.run(translate_with_terms(translator, texts, source, terms))
    for r in results:  # an alternative keeps the terms as the translation does
        assert all(a.text == r.text for a in r.alternatives)
    return [r.text for r in results]


def test_a_glossary_term_replaces_the_words_that_render_it():
    terms = parse_terms({"save": "Sauvegarder"}, None)
    assert run(["Click Save to keep your changes."], terms) == [
        "Cliquez sur Sauvegarder pour garder vos modifications."
    ]


def test_terms_kept_as_written_and_capitalised_where_the_words_were():
    terms = parse_terms({"save": "sauvegardez"}, ["Maria", "LSMT"])
    assert run(["Ask Maria about LSMT.", "save the file"], terms) == [
        "Demandez à Maria à propos de LSMT.",
        "sauvegardez le fichier",
    ]
    assert run(["Click Save to keep your changes."], terms) == [
        "Cliquez sur Sauvegardez pour garder vos modifications."
    ]


def test_terms_translated_alone_go_with_the_texts_or_after_detection():
    terms = parse_terms(None, ["Maria"])
    given = Translator()
    run(["Ask Maria about LSMT."], terms, "en", given)
    assert given.calls == [(["Ask Maria about LSMT.", "Maria"], "en")]
    detected = Translator(detected="en")
    run(["Ask Maria about LSMT."], terms, "auto", detected)
    assert detected.calls == [(["Ask Maria about LSMT."], "auto"), (["Maria"], "en")]
    repeated = Translator()  # a term found twice is translated alone once
    out = run(["save it, then save it all"], parse_terms({"save": "sauvez"}, None), "en", repeated)
    assert repeated.calls == [(["save it, then save it all", "save"], "en")]
    assert out == ["sauvez-le, puis sauvez tout"]
    plain = Translator()
    assert run(["Save"], Terms(), "en", plain) == ["Enregistrer"]
    assert plain.calls == [(["Save"], "en")]  # no terms: one call, nothing added


def test_terms_are_found_whole_the_longest_first():
    terms = parse_terms({"save": "a", "save the file": "b"}, ["file"])
    uses = find_terms("Save the file, then save the filesystem.", terms)
    assert [(u.span.start, u.span.end, u.wanted) for u in uses] == [(0, 13, "b"), (20, 24, "a")]


@pytest.mark.parametrize(
    "glossary, keep, message",
    [
        ({"": "x"}, None, "1 to 200 characters"),
        ({"cat": " "}, None, "1 to 200 characters"),
        (None, ["x" * 201], "1 to 200 characters"),
        ({f"t{i}": "x" for i in range(201)}, None, "At most 200"),
        ({"Cat": "chat"}, ["cat"], "two renderings"),
    ],
)
def test_terms_that_cannot_be_kept_are_refused_clearly(glossary, keep, message):
    with pytest.raises(InvalidRequest, match=message) as raised:
        parse_terms(glossary, keep)
    assert raised.value.code == "invalid_field"
