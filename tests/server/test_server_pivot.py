"""Pivoting: a pair no bundle translates directly goes through a pivot language (English
first), on real engines of the tiny bundle with its de<->fr routes taken out of the manifest.
The pivoted translation is exactly the two direct translations one after the other."""

from __future__ import annotations

import pytest

from tests.server.conftest import GERMAN

pytestmark = pytest.mark.integration

ENGLISH = "And God said, Let there be light: and there was light."


@pytest.fixture(scope="module")
def without_de_fr(bundle_without_de_fr):
    return bundle_without_de_fr


@pytest.fixture(scope="module")
def server(module_server, without_de_fr):
    srv = module_server(bundle_dirs=[without_de_fr])
    srv.wait_ready()
    return srv


def _translate(client, text, source, target, **kw):
    r = client.post("/v1/translate", json={"text": text, "source": source, "target": target, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_pair_without_a_route_goes_through_english(server):
    with server.client() as c:
        first = _translate(c, GERMAN, "de", "en")["translations"][0]
        second = _translate(c, first["text"], "en", "fr")["translations"][0]
        assert first["pivot"] is None and second["pivot"] is None
        body = _translate(c, GERMAN, "de", "fr")
    t = body["translations"][0]
    assert t["pivot"] == "en"
    assert t["text"] == second["text"]  # exactly the two legs, one after the other
    assert t["engine"] == second["engine"]  # the leg into the target
    assert t["source"] == "de"
    assert body["model"] == "tiny"


def test_the_catalogue_lists_targets_reached_by_pivot(server):
    with server.client() as c:
        v1 = c.get("/v1/languages").json()
        lt = c.get("/languages").json()
    de = next(lang for lang in v1["languages"] if lang["code"] == "de")
    assert de["targets"] == ["en", "fr"] and de["pivots"] == {"fr": "en"}
    en = next(lang for lang in v1["languages"] if lang["code"] == "en")
    assert en["pivots"] == {}
    assert "de-fr" not in v1["routes"]  # routes stay the direct ones
    assert next(lang for lang in lt if lang["code"] == "fr")["targets"] == ["de", "en"]


def test_libretranslate_shape_is_unchanged(server):
    with server.client() as c:
        v1 = _translate(c, GERMAN, "de", "fr")["translations"][0]
        r = c.post("/translate", json={"q": GERMAN, "source": "de", "target": "fr"})
    assert r.status_code == 200, r.text
    assert r.json() == {"translatedText": v1["text"]}


def test_auto_source_pivots_only_the_texts_that_need_it(server):
    before = _pivoted(server)
    with server.client() as c:
        body = _translate(c, [GERMAN, ENGLISH], "auto", "fr")
    german, english = body["translations"]
    assert german["source"] == "de" and german["detected"]["language"] == "de"
    assert german["pivot"] == "en"
    assert english["source"] == "en" and english["pivot"] is None
    assert _pivoted(server) == before + 2  # the German text's two sentences


def test_html_goes_through_the_pivot_too(server):
    with server.client() as c:
        plain = _translate(c, GERMAN, "de", "fr")["translations"][0]
        html = _translate(c, f"<p>{GERMAN}</p>", "de", "fr", format="html")["translations"][0]
    assert html["pivot"] == "en"
    assert html["text"] == f"<p>{plain['text']}</p>"


def test_without_pivoting_the_pair_is_refused(module_server, without_de_fr):
    srv = module_server(bundle_dirs=[without_de_fr], pivot=False)
    with srv.client() as c:
        r = c.post("/v1/translate", json={"text": GERMAN, "source": "de", "target": "fr"})
        languages = c.get("/v1/languages").json()
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unsupported_route"
    de = next(lang for lang in languages["languages"] if lang["code"] == "de")
    assert de["targets"] == ["en"] and de["pivots"] == {}


def _pivoted(server) -> float:
    text = server.client().get("/metrics").text
    line = next(
        x for x in text.splitlines() if x.startswith('lsmt_pivoted_sentences_total{pivot="en"}')
    )
    return float(line.rsplit(" ", 1)[1])
