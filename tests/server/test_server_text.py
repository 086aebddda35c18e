"""Sentence splitting, rejoining and language identification (no server needed)."""

from __future__ import annotations

import pytest

from lsmt_core.langid import LanguageDetector
from server.text import join_text, sentences_of, simple_split, split_text


def test_simple_split_latin_and_cjk():
    assert simple_split("Hello there. How are you?  Fine!") == [
        "Hello there.",
        "How are you?",
        "Fine!",
    ]
    assert simple_split('He said "stop." Then he left') == ['He said "stop."', "Then he left"]
    assert simple_split("你好。我很好！你呢？好的") == ["你好。", "我很好！", "你呢？", "好的"]
    assert simple_split("「はい。」そうです") == ["「はい。」", "そうです"]
    assert simple_split("3.5 kg is fine") == ["3.5 kg is fine"]


@pytest.mark.parametrize(
    ("lang", "text", "n"),
    [
        ("en", "Mr. Smith went home. He slept.", 2),
        ("de", "Das ist z.B. gut. Und das auch.", 2),
        ("zh", "你好。我很好！", 2),
        ("ja", "こんにちは。元気ですか？", 2),
        ("sw", "Habari. Nzuri sana!", 2),
    ],  # sw: not in pysbd -> simple splitter
)
def test_split_sentences_per_language(lang, text, n):
    lines = split_text(text, lang)
    assert len(sentences_of(lines)) == n


def test_split_and_join_keep_line_structure():
    text = "  First one. Second one.\n\n\r\nThird line\n   \nLast."
    lines = split_text(text, "en")
    assert sentences_of(lines) == ["First one.", "Second one.", "Third line", "Last."]
    out = join_text(lines, ["A.", "B.", "C", "D."], "de")
    assert out == "  A. B.\n\n\r\nC\n   \nD."


def test_join_without_spaces_for_cjk_targets():
    lines = split_text("One. Two.", "en")
    assert join_text(lines, ["一。", "二。"], "zh") == "一。二。"
    assert join_text(lines, ["Un.", "Deux."], "fr") == "Un. Deux."


def test_detector_restricted_to_candidates():
    d = LanguageDetector()
    text = "Der Hund läuft schnell über die Straße und die Kinder spielen im Garten."
    assert d.detect(text, {"de", "en", "fr"})[0] == "de"
    # Restricted: German is not a candidate, so one of the candidates wins.
    assert d.detect(text, {"en", "fr"})[0] in {"en", "fr"}
    assert d.detect("anything", {"fr"}) == ("fr", 1.0)
    with pytest.raises(ValueError):
        d.detect("x", {"not-a-language"})
