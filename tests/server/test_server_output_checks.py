"""Output checks: the rules of ``server.output_checks`` on real text, and the server's flag,
retry and ``warnings`` path end to end on the real tiny bundle. Degenerate output is crafted by
rewriting the real engine's hypotheses (the real model does not fail on demand)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from lsmt_core.langid import LanguageDetector
from server.output_checks import (
    RETRY,
    is_length_off,
    is_off_target,
    is_repetition,
    sentence_flags,
    strongest_repeat,
)
from server.settings import Settings
from server.timing import parse_server_timing

GUARDS = ("repetition_penalty", "no_repeat_ngram_size")
EN = "And Jesus said unto them, Follow me, and I will make you fishers of men."


def words(text: str) -> list[str]:
    """Pieces as SentencePiece cuts simple text: a word, its trailing punctuation apart."""
    out = []
    for w in text.split():
        core = w.rstrip(".,:;!?")
        out += ["▁" + core] if core else []
        out += list(w[len(core) :])
    return out


# The rules --------------------------------------------------------------------------------


def test_strongest_repeat_counts_consecutive_copies():
    assert strongest_repeat(words("a b c d")) == (1, 0)
    assert strongest_repeat(words("x a b a b a b y")) == (3, 6)
    assert strongest_repeat(words("Человек. Человек.")) == (2, 4)
    # Only n-grams with a letter: digit groups and ellipses repeat legitimately.
    assert strongest_repeat(["▁300", ",", "000", "000", "000"]) == (1, 0)
    assert strongest_repeat([".", ".", "."]) == (1, 0)
    assert strongest_repeat(["<0x30>"] * 3) == (1, 0)  # "000" as byte pieces
    assert strongest_repeat(["<0x61>"] * 3) == (3, 3)  # "aaa"


@pytest.mark.parametrize(
    "source, output, flagged",
    [
        # The issue's examples: a sentence said twice, a word said twice.
        ("Truth is praised", "Truth is blasphemed. Truth is blasphemed.", True),
        ("Man.", "Человек. Человек.", True),
        ("the the the the end", "le le le le fin", False),  # the source repeats as much
        ("go on", "weiter weiter weiter weiter gehen", True),  # four copies of one word
        ("the DCCC said", "the DCCC said", False),  # "C" three times: too short a run
        ("No, no, no, no!", "Нет, нет, нет, нет!", False),  # as in the source, case aside
        (EN, "Et Jésus leur dit: Suivez-moi, et je vous ferai pêcheurs d'hommes.", False),
        ("a b c d e f", "a b a b c d e f g h", False),  # two short copies in a long sentence
    ],
)  # fmt: skip
def test_repetition_is_judged_against_the_source(source, output, flagged):
    assert is_repetition(words(source), words(output)) is flagged


def test_length_ratio_bounds_apply_from_six_source_pieces():
    six = words("one two three four five six")
    assert not is_length_off(six, six)
    assert is_length_off(six, ["x"])  # 1/6 < 0.3
    assert is_length_off(six, ["x"] * 19)  # 19/6 > 3
    assert not is_length_off(six[:5], ["x"] * 40)  # too short a source to judge


def test_off_target_needs_a_long_sentence_in_another_language():
    d = LanguageDetector()
    german = "Und Jesus sprach zu ihnen: Folgt mir nach, ich will euch zu Menschenfischern machen."
    assert is_off_target(german, "fr", d)
    assert not is_off_target(german, "de", d)
    assert not is_off_target("Folgt mir nach.", "fr", d)  # too short to judge
    assert not is_off_target(german, "xx", d)  # a target the identifier does not know
    flags = sentence_flags(words(EN), words(german + " " + german), german, "fr", d)
    assert flags == {"off_target", "repetition"}


# The server -------------------------------------------------------------------------------


@dataclass
class Result:
    hypotheses: list[list[str]]
    scores: list[float]


class CraftedOutput:
    """The real translator; the first decoding's hypotheses are rewritten by ``craft``
    (pieces -> pieces). The retry (decoded with ``RETRY``'s settings) gets the real output,
    unless ``always``. Every decoding takes at least ``delay_s``. ``calls`` collects each
    decoding's options."""

    def __init__(self, inner, craft, always: bool, delay_s: float, calls: list[dict]) -> None:
        self.inner, self.craft, self.always, self.delay_s = inner, craft, always, delay_s
        self.calls = calls

    def translate_batch(self, sources, **kwargs):
        self.calls.append(kwargs)
        time.sleep(self.delay_s)
        results = self.inner.translate_batch(sources, **kwargs)
        retry = (kwargs.get("repetition_penalty"), kwargs.get("no_repeat_ngram_size")) == (
            RETRY.repetition_penalty,
            RETRY.no_repeat_ngram_size,
        )
        if retry and not self.always:
            return results
        return [Result([self.craft(h) for h in r.hypotheses], list(r.scores)) for r in results]


def crafted_loader(craft, always: bool = False, engines: list | None = None, delay_s: float = 0.0):
    from server.engine_loader import default_loader

    def load(bundle, route, settings):
        translator, nbytes = default_loader(bundle, route, settings)
        wrapped = CraftedOutput(translator, craft, always, delay_s, [])
        if engines is not None:
            engines.append(wrapped)
        return wrapped, nbytes

    return load


DECODE_S = 0.2  # how long each crafted decoding takes at least


def said_three_times(pieces: list[str]) -> list[str]:
    return pieces * 3


def opening_three_times(pieces: list[str]) -> list[str]:
    """Repetition alone: about as long as the source, so no length flag."""
    return pieces[:5] * 3


def metric(client, name: str, label: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f"{name}{{") and f'"{label}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{label}}} not exported")


@pytest.mark.integration
def test_a_repeating_output_is_decoded_again_and_the_retry_kept(make_server):
    engines: list[CraftedOutput] = []
    # The server's own decoding guards (the test factory turns them off for the tiny model).
    guards = {name: Settings.model_fields[name].default for name in GUARDS}
    assert guards == {"repetition_penalty": 1.1, "no_repeat_ngram_size": 4}
    loader = crafted_loader(said_three_times, engines=engines, delay_s=DECODE_S)
    srv = make_server(loader=loader, output_checks=True, **guards)
    with srv.client() as c:
        r = c.post("/v1/translate", json={"text": EN, "source": "en", "target": "fr"})
        assert r.status_code == 200, r.text
        t = r.json()["translations"][0]
        assert t["warnings"] == []  # the retry fixed it
        first, retry = engines[0].calls
        assert {name: first[name] for name in GUARDS} == guards
        assert retry["repetition_penalty"] == RETRY.repetition_penalty
        assert retry["no_repeat_ngram_size"] == RETRY.no_repeat_ngram_size
        # The retry's output is the real engine's: the text no longer repeats itself.
        assert strongest_repeat(words(t["text"]))[0] < 3
        assert metric(c, "lsmt_output_flags_total", "repetition") == 1
        assert metric(c, "lsmt_output_retries_total", "improved") == 1
        # Both checks (first decoding, retry) are one `check` stage of the request, and
        # both decodings count in its `decode` stage (the retry comes after the first).
        stages = parse_server_timing(r.headers["server-timing"])
        assert stages["check"] > 0
        assert metric(c, "lsmt_stage_duration_seconds_count", "check") == 1
        assert stages["decode"] >= 2 * DECODE_S


@pytest.mark.integration
def test_a_repetition_the_retry_cannot_fix_is_reported(make_server):
    srv = make_server(loader=crafted_loader(opening_three_times, always=True), output_checks=True)
    with srv.client() as c:
        r = c.post(
            "/v1/translate",
            json={"text": [EN, EN], "source": "en", "target": "fr", "num_alternatives": 1},
        )
        assert r.status_code == 200, r.text
        for t in r.json()["translations"]:
            assert t["warnings"] == ["repetition"]
            assert strongest_repeat(words(t["text"]))[0] >= 3
        assert metric(c, "lsmt_output_flags_total", "repetition") == 2
        assert metric(c, "lsmt_output_retries_total", "kept") == 2


@pytest.mark.integration
def test_a_copied_source_is_flagged_off_target(make_server):
    """The first decoding answers with the source itself (the classic off-target failure)."""
    src_pieces: dict[str, list[str]] = {}

    def copy_source(pieces: list[str]) -> list[str]:
        return src_pieces["en"]

    srv = make_server(loader=crafted_loader(copy_source, always=True), output_checks=True)
    served = srv.state.service.bundles[0]
    src_pieces["en"] = served.pieces(EN, "en")
    with srv.client() as c:
        t = c.post("/v1/translate", json={"text": EN, "source": "en", "target": "de"}).json()
        assert t["translations"][0]["text"] == EN
        assert t["translations"][0]["warnings"] == ["off_target"]


@pytest.mark.integration
def test_output_checks_can_be_turned_off(make_server):
    srv = make_server(loader=crafted_loader(said_three_times), output_checks=False)
    with srv.client() as c:
        r = c.post("/v1/translate", json={"text": EN, "source": "en", "target": "fr"})
        t = r.json()
        assert t["translations"][0]["warnings"] == []
        assert strongest_repeat(words(t["translations"][0]["text"]))[0] >= 3
        assert metric(c, "lsmt_output_retries_total", "improved") == 0
        assert "check" not in parse_server_timing(r.headers["server-timing"])
        assert metric(c, "lsmt_stage_duration_seconds_count", "check") == 0


@pytest.mark.integration
def test_a_large_request_is_checked_too(make_server, monkeypatch):
    """More sentences than INLINE_CHECK_SENTENCES: checked in a worker thread, off the event
    loop."""
    import asyncio

    import server.output_retry
    from server.output_retry import INLINE_CHECK_SENTENCES

    on_loop = []  # per checked sentence: whether an event loop runs in its thread

    def flags_on(*args):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return sentence_flags(*args)

    monkeypatch.setattr(server.output_retry, "sentence_flags", flags_on)
    srv = make_server(loader=crafted_loader(said_three_times), output_checks=True)
    sentences = INLINE_CHECK_SENTENCES + 6
    texts = [" ".join([EN] * (sentences // 2))] * 2  # one job of 70 sentences
    with srv.client() as c:
        r = c.post("/v1/translate", json={"text": texts, "source": "en", "target": "fr"})
        assert r.status_code == 200, r.text
        assert all(t["warnings"] == [] for t in r.json()["translations"])
        assert metric(c, "lsmt_output_retries_total", "improved") == sentences
    assert len(on_loop) == 2 * sentences and not any(on_loop)  # first check and the retry's
