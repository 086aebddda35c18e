"""LibreTranslate compatibility (with the real libretranslatepy client), API keys, metrics."""

from __future__ import annotations

import html
import json
import re
import urllib.error

import httpx
import pytest
from libretranslatepy import LibreTranslateAPI
from prometheus_client.parser import text_string_to_metric_families

from server.documents import FORMATS

pytestmark = pytest.mark.integration

EN = "And Jesus said unto them, Follow me."
DE = "Und Jesus sprach zu ihnen: Folgt mir nach, und ich will euch zu Menschenfischern machen."


@pytest.fixture(scope="module")
def srv(module_server):
    return module_server()


@pytest.fixture(scope="module")
def keyed(module_server):
    return module_server(api_keys=["s3cret-key", "other-key"])


# LibreTranslate ---------------------------------------------------------------------------


def test_libretranslatepy_client_end_to_end(srv):
    lt = LibreTranslateAPI(srv.url)
    langs = lt.languages()
    assert [lang["code"] for lang in langs] == ["de", "en", "fr"]
    assert {"code": "en", "name": "English", "targets": ["de", "fr"]} in langs
    out = lt.translate(EN, "en", "de")
    assert isinstance(out, str) and out.strip() and out != EN
    # Same text as the native API.
    native = httpx.post(
        f"{srv.url}/v1/translate", json={"text": EN, "source": "en", "target": "de"}
    ).json()
    assert out == native["translations"][0]["text"]
    assert lt.translate(DE, "auto", "en").strip()
    detected = lt.detect(DE)
    assert detected[0]["language"] == "de" and 50 < detected[0]["confidence"] <= 100


def test_libretranslatepy_errors_are_http_errors(srv):
    lt = LibreTranslateAPI(srv.url)
    with pytest.raises(urllib.error.HTTPError) as info:
        lt.translate(EN, "en", "xx")
    assert info.value.code == 400
    body = info.value.read().decode()
    assert "Unknown target language 'xx'" in body


def test_lt_json_list_auto_alternatives(srv):
    r = httpx.post(
        f"{srv.url}/translate",
        json={"q": [DE, EN], "source": "auto", "target": "fr", "alternatives": 2, "format": "text"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["translatedText"]) == 2
    assert [d["language"] for d in body["detectedLanguage"]] == ["de", "en"]
    assert all(len(a) == 2 for a in body["alternatives"])


def test_lt_single_auto_has_detected_language(srv):
    body = httpx.post(
        f"{srv.url}/translate", json={"q": DE, "source": "auto", "target": "en"}
    ).json()
    assert body["detectedLanguage"]["language"] == "de"
    assert isinstance(body["translatedText"], str)


def test_lt_auto_refuses_a_language_nobody_serves(srv):
    r = httpx.post(
        f"{srv.url}/translate", json={"q": "駅はどこですか。コーヒーを飲みたいです。",
                                      "source": "auto", "target": "en"}
    )  # fmt: skip
    assert r.status_code == 400
    body = r.json()
    assert "Japanese" in body["error"] or "(ja," in body["error"]
    assert body["details"]["code"] == "unsupported_language"
    assert body["details"]["detected"]["language"] == "ja"


def test_lt_detect_reports_the_true_language_even_when_not_served(srv):
    r = httpx.post(f"{srv.url}/detect", json={"q": "駅はどこですか。コーヒーを飲みたいです。"})
    assert r.status_code == 200, r.text
    found = r.json()
    assert found[0]["language"] == "ja" and found[0]["confidence"] > 90
    assert len(found) == 3 and found[0]["confidence"] >= found[1]["confidence"]


def test_lt_html_keeps_markup(srv):
    doc = (
        '<p class="x">And Jesus said unto them, Follow me.</p>\n<b>Amen.</b><br/>'
        "<script>var a = 'Follow me.';</script>"
    )
    body = httpx.post(
        f"{srv.url}/translate", json={"q": doc, "source": "en", "target": "de", "format": "html"}
    ).json()
    out = body["translatedText"]
    assert out.startswith('<p class="x">') and "</p>\n<b>" in out and out.count("<br/>") == 1
    assert "<script>var a = 'Follow me.';</script>" in out
    inner = out[len('<p class="x">') : out.index("</p>")]
    assert inner.strip() and inner != "And Jesus said unto them, Follow me."


def test_lt_html_translates_a_sentence_with_inline_tags_as_one_sentence(srv):
    """An inline element does not cut its sentence: with the tags taken out, the HTML
    translation is the plain sentence's translation, and each element is in it once."""

    def lt(q: str, fmt: str) -> str:
        body = {"q": q, "source": "en", "target": "de", "format": fmt}
        r = httpx.post(f"{srv.url}/translate", json=body, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["translatedText"]

    plain = lt("And Jesus said unto them, Follow me, and I will make you fishers.", "text")
    doc = (
        '<p>And <a href="/j">Jesus</a> said unto them, <b>Follow me</b>, and I will make'
        " you <i>fishers</i>.</p>"
    )
    out = lt(doc, "html")
    assert out.startswith("<p>") and out.endswith("</p>"), out
    for tag in ('<a href="/j">', "</a>", "<b>", "</b>", "<i>", "</i>"):
        assert out.count(tag) == 1, (tag, out)
    assert re.sub(r"<[^>]+>", "", out) == html.escape(plain, quote=False), out
    # the native API's format=html is the same code
    body = {"text": [doc], "source": "en", "target": "de", "format": "html"}
    r = httpx.post(f"{srv.url}/v1/translate", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["translations"][0]["text"] == out, r.text
    r = httpx.post(f"{srv.url}/v1/translate", json={**body, "num_alternatives": 2}, timeout=60)
    assert r.status_code == 400 and "format 'text' only" in r.json()["error"]["message"]


def test_glossary_and_do_not_translate_reach_the_output(srv):
    """Through a real engine: every term is in the translation as asked, in both APIs and
    in HTML; a term that cannot be kept is a 400 naming the field."""
    text = "And Jesus said unto them, Follow me, and I will make you fishers of men."
    body = {"text": text, "source": "en", "target": "de", "glossary": {"fishers": "Fischer"},
            "do_not_translate": ["Jesus"]}  # fmt: skip
    r = httpx.post(f"{srv.url}/v1/translate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()["translations"][0]["text"]
    assert "Fischer" in out and "Jesus" in out, out
    lt = {"q": text, "source": "en", "target": "de", "glossary": {"fishers": "Fischer"},
          "do_not_translate": ["Jesus"]}  # fmt: skip
    r = httpx.post(f"{srv.url}/translate", json=lt, timeout=60)
    assert r.status_code == 200 and r.json()["translatedText"] == out, r.text
    doc = {**body, "text": f"<p>{text.replace('Jesus', '<b>Jesus</b>')}</p>", "format": "html"}
    r = httpx.post(f"{srv.url}/v1/translate", json=doc, timeout=60)
    html_out = r.json()["translations"][0]["text"]
    assert "Fischer" in html_out and "Jesus" in html_out and html_out.count("<b>") == 1
    r = httpx.post(f"{srv.url}/v1/translate", json={**body, "glossary": {"men": ""}}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["parameter"] == "glossary", r.text


def test_lt_errors_are_libretranslate_shaped(srv):
    r = httpx.post(f"{srv.url}/translate", data={"source": "en", "target": "de"})
    assert r.status_code == 400 and "'q'" in r.json()["error"]
    assert r.json()["details"]["code"] == "missing_field"
    r = httpx.post(
        f"{srv.url}/translate", json={"q": "x", "source": "en", "target": "de", "format": "pdf"}
    )
    assert r.status_code == 400 and r.json()["details"]["allowed"] == ["text", "html"]
    r = httpx.post(
        f"{srv.url}/translate", content=b"{oops", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["details"]["code"] == "malformed_json"
    r = httpx.post(f"{srv.url}/translate", content=b"x", headers={"content-type": "text/csv"})
    assert r.status_code == 415


def _form_data(fields: dict[str, str]) -> dict[str, tuple[None, str]]:
    """Fields as multipart parts without file names: what a browser's FormData sends."""
    return {k: (None, v) for k, v in fields.items()}


def test_lt_web_page_multipart_translate(srv, keyed):
    """LibreTranslate's web page posts a FormData (multipart/form-data): q, source, target,
    format, alternatives (a string) and api_key (empty without a key). Answered as a JSON or
    urlencoded body is; detection works from it; a key in the form is checked."""
    page = {"q": DE, "source": "auto", "target": "en", "format": "text", "alternatives": "3",
            "api_key": ""}  # fmt: skip
    r = httpx.post(f"{srv.url}/translate", files=_form_data(page), timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body["translatedText"], str) and body["translatedText"].strip()
    assert body["detectedLanguage"]["language"] == "de"
    assert len(body["alternatives"]) == 3
    as_json = httpx.post(f"{srv.url}/translate", json={**page, "alternatives": 3}, timeout=60)
    assert as_json.json() == body
    # a repeated q is a list, as in a urlencoded form; a file part is ignored
    parts = [("q", (None, EN)), ("q", (None, EN)), ("source", (None, "en")),
             ("target", (None, "de")), ("extra", ("a.txt", b"x", "text/plain"))]  # fmt: skip
    r = httpx.post(f"{srv.url}/translate", files=parts, timeout=60)
    assert r.status_code == 200, r.text
    assert len(r.json()["translatedText"]) == 2
    r = httpx.post(f"{srv.url}/detect", files=_form_data({"q": DE}), timeout=60)
    assert r.status_code == 200 and r.json()[0]["language"] == "de"
    # api_key in the form (the page's key from its "Set API Key" prompt)
    r = httpx.post(f"{keyed.url}/translate", files=_form_data(page), timeout=60)
    assert r.status_code == 401 and r.json()["error"]
    keyed_page = {**page, "api_key": "s3cret-key"}
    r = httpx.post(f"{keyed.url}/translate", files=_form_data(keyed_page), timeout=60)
    assert r.status_code == 200, r.text
    bad = {**page, "api_key": "wrong"}
    assert (
        httpx.post(f"{keyed.url}/translate", files=_form_data(bad), timeout=60).status_code == 403
    )


def test_lt_blank_text_is_answered_as_it_is(srv):
    """LibreTranslate's page sends what is in its box once typing pauses, a lone space or line
    break included; LibreTranslate answers it as it is, and an error would replace the page's
    whole form. An empty text is still refused; a blank text in a list keeps its place."""
    page = {"q": " \n", "source": "auto", "target": "en", "format": "text", "alternatives": "3",
            "api_key": ""}  # fmt: skip
    r = httpx.post(f"{srv.url}/translate", files=_form_data(page), timeout=60)
    assert r.status_code == 200, r.text
    assert r.json() == {"translatedText": " \n"}
    crlf = {**page, "q": "\r\n"}  # a browser's form sends the box's line breaks as CRLF
    r = httpx.post(f"{srv.url}/translate", files=_form_data(crlf), timeout=60)
    assert r.status_code == 200 and r.json() == {"translatedText": "\n"}, r.text
    html_body = {**page, "q": "  ", "format": "html"}
    r = httpx.post(f"{srv.url}/translate", files=_form_data(html_body), timeout=60)
    assert r.status_code == 200 and r.json() == {"translatedText": "  "}, r.text
    listed = {"q": [DE, "  ", EN], "source": "auto", "target": "fr"}
    r = httpx.post(f"{srv.url}/translate", json=listed, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translatedText"][1] == "  " and all(body["translatedText"][i] for i in (0, 2))
    assert [d and d["language"] for d in body["detectedLanguage"]] == ["de", None, "en"]
    r = httpx.post(f"{srv.url}/translate", json={"q": "", "source": "en", "target": "de"})
    assert r.status_code == 400 and r.json()["details"]["code"] == "empty_text"
    # the languages are still checked when there is nothing to translate
    r = httpx.post(f"{srv.url}/translate", json={"q": " ", "source": "en", "target": "xx"})
    assert r.status_code == 400, r.text


def test_lt_form_line_breaks_count_as_the_page_counted_them(make_server):
    """The page limits its box to charLimit characters, a line break counting one; its form
    sends each as CRLF. Read as LF, a text at the limit is within it (urlencoded too)."""
    s = make_server(max_chars_per_text=12)
    text = "Follow\nme.\nN"  # 12 characters in the box, 14 as the form sends them
    fields = {"q": text.replace("\n", "\r\n"), "source": "en", "target": "de"}
    for sent in ({"files": _form_data(fields)}, {"data": fields}):
        r = httpx.post(f"{s.url}/translate", timeout=60, **sent)
        assert r.status_code == 200, r.text
        assert "\r" not in r.json()["translatedText"]
    too_long = {**fields, "q": fields["q"] + "!"}
    r = httpx.post(f"{s.url}/translate", files=_form_data(too_long), timeout=60)
    assert r.status_code == 413 and r.json()["details"]["code"] == "text_too_long", r.text


def test_lt_malformed_multipart_is_a_clear_400(srv):
    r = httpx.post(
        f"{srv.url}/translate",
        content=b"--b\r\nContent-Disposition: form-data; name=q\r\n\r\nunterminated",
        headers={"content-type": "multipart/form-data; boundary=b"},
    )
    # an unfinished part is dropped by the parser: q is then missing
    assert r.status_code == 400 and r.json()["details"]["code"] == "missing_field", r.text
    r = httpx.post(
        f"{srv.url}/translate",
        content=b"no boundary",
        headers={"content-type": "multipart/form-data"},
    )
    assert r.status_code == 400, r.text
    assert r.json()["details"]["code"] == "malformed_body"


# API keys -----------------------------------------------------------------------------------


def test_api_keys_required_when_configured(keyed):
    url = f"{keyed.url}/v1/translate"
    body = {"text": EN, "source": "en", "target": "de"}
    r = httpx.post(url, json=body)
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    assert "API key is required" in r.json()["error"]["message"]
    r = httpx.post(url, json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "invalid_api_key"
    assert (
        httpx.post(url, json=body, headers={"Authorization": "Bearer s3cret-key"}).status_code
        == 200
    )
    assert httpx.post(url, json=body, headers={"X-API-Key": "other-key"}).status_code == 200
    # Operations endpoints stay open.
    assert httpx.get(f"{keyed.url}/healthz").status_code == 200
    assert httpx.get(f"{keyed.url}/metrics").status_code == 200


@pytest.mark.parametrize("path", ["/v1/translate", "/translate", "/detect"])
def test_the_key_is_checked_before_the_body_is_parsed(keyed, path):
    """An unauthenticated client learns nothing about how its body was parsed."""
    broken = {"content": b'{"text": ', "headers": {"content-type": "application/json"}}
    r = httpx.post(f"{keyed.url}{path}", **broken)
    assert r.status_code == 401, r.text
    wrong = {**broken["headers"], "X-API-Key": "wrong"}
    assert (
        httpx.post(f"{keyed.url}{path}", content=broken["content"], headers=wrong).status_code
        == 403
    )
    good = {**broken["headers"], "X-API-Key": "other-key"}
    r = httpx.post(f"{keyed.url}{path}", content=broken["content"], headers=good)
    assert r.status_code == 400 and "not valid JSON" in r.text  # now the parse error


def test_an_empty_bearer_token_does_not_hide_a_valid_key():
    """``Authorization: Bearer `` (nothing after it; HTTP clients refuse to send the trailing
    space, raw ones do not) beside a valid X-API-Key: the valid key counts."""
    from starlette.requests import Request

    from server.auth import key_from_request

    def request(*headers: tuple[bytes, bytes]) -> Request:
        return Request({"type": "http", "headers": list(headers), "query_string": b""})

    assert key_from_request(request((b"authorization", b"Bearer "), (b"x-api-key", b"k"))) == "k"
    assert key_from_request(request((b"authorization", b"Bearer  t "))) == "t"
    assert key_from_request(request((b"authorization", b"Bearer "))) is None


def test_api_keys_with_libretranslate_client(keyed):
    assert LibreTranslateAPI(keyed.url, api_key="s3cret-key").translate(EN, "en", "de")
    with pytest.raises(urllib.error.HTTPError) as info:
        LibreTranslateAPI(keyed.url, api_key="nope").translate(EN, "en", "de")
    assert info.value.code == 403
    with pytest.raises(urllib.error.HTTPError) as info:
        LibreTranslateAPI(keyed.url).translate(EN, "en", "de")
    assert info.value.code == 401


def test_api_keys_off_by_default(srv):
    r = httpx.post(f"{srv.url}/v1/translate", json={"text": EN, "source": "en", "target": "de"})
    assert r.status_code == 200


# Metrics -------------------------------------------------------------------------------------


def samples(url: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{url}/metrics").text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_correctly(make_server):
    srv = make_server()
    # Before any event, every bounded series exists at zero (rate() and alerts see them).
    s = samples(srv.url)
    for key in ("tiny:shared+tgt/de", "tiny:shared+tgt/en", "tiny:shared+tgt/fr"):
        assert s[("lsmt_engine_loads_total", (("engine", key),))] == 0
        assert s[("lsmt_engine_load_failures_total", (("engine", key),))] == 0
        assert s[("lsmt_engine_load_seconds_count", (("engine", key),))] == 0
    for reason in ("queue_full", "timeout", "engine_unavailable"):
        assert s[("lsmt_rejected_requests_total", (("reason", reason),))] == 0
    for tier in ("device", "host"):
        assert s[("lsmt_engine_evictions_total", (("tier", tier),))] == 0
        assert s[("lsmt_engine_eviction_seconds_count", (("tier", tier),))] == 0
    two = "And Jesus said unto them, Follow me. And they left their nets."
    for _ in range(3):
        r = httpx.post(
            f"{srv.url}/v1/translate",
            json={"text": two, "source": "en", "target": "de", "beam_size": 1},
        )
        assert r.status_code == 200
    assert (
        httpx.post(f"{srv.url}/v1/translate", json={"text": "x", "target": "xx"}).status_code == 400
    )
    assert httpx.get(f"{srv.url}/v1/models").status_code == 200
    s = samples(srv.url)

    def v(name, **labels):
        return s.get((name, tuple(sorted(labels.items()))), 0.0)

    ep = "/v1/translate"
    assert v("lsmt_http_requests_total", endpoint=ep, status="200") == 3
    assert v("lsmt_http_requests_total", endpoint=ep, status="400") == 1
    assert v("lsmt_http_requests_total", endpoint="/v1/models", status="200") == 1
    assert v("lsmt_http_request_duration_seconds_count", endpoint=ep, status="200") == 3
    assert v("lsmt_http_request_duration_seconds_sum", endpoint=ep, status="200") > 0
    for stage in ("queue_wait", "tokenize", "detokenize"):
        assert v("lsmt_stage_duration_seconds_count", stage=stage) == 3, stage
    assert 1 <= v("lsmt_stage_duration_seconds_count", stage="translate") <= 3
    assert v("lsmt_batch_size_sum") == 6  # two sentences per request
    assert v("lsmt_batch_tokens_sum") == v("lsmt_tokens_total", direction="input") > 6
    assert v("lsmt_tokens_total", direction="output") > 0
    assert v("lsmt_engine_loads_total", engine="tiny:shared+tgt/de") == 1
    assert v("lsmt_engine_load_seconds_count", engine="tiny:shared+tgt/de") == 1
    assert v("lsmt_engine_load_seconds_count", engine="tiny:shared+tgt/fr") == 0
    assert v("lsmt_engines_loaded", tier="device") == 1
    assert v("lsmt_engine_bytes", tier="device") == srv.state.registry.device_bytes > 0
    assert v("lsmt_queue_depth", engine="tiny:shared+tgt/de") == 0
    # Bounded labels: no raw paths, no request ids.
    assert httpx.get(f"{srv.url}/no/such/path/123").status_code == 404
    s = samples(srv.url)
    endpoints = {dict(k[1]).get("endpoint") for k in s if k[0] == "lsmt_http_requests_total"}
    assert "unmatched" in endpoints and not any("123" in (e or "") for e in endpoints)


def test_two_apps_in_one_process_do_not_collide(make_server):
    a, b = make_server(), make_server()
    httpx.get(f"{a.url}/healthz")
    sa, sb = samples(a.url), samples(b.url)
    key = ("lsmt_http_requests_total", (("endpoint", "/healthz"), ("status", "200")))
    assert sa[key] == 1 and key not in sb


# Inputs that used to reach a 500 -----------------------------------------------------------

LONE_SURROGATE = "Hello \ud800 world."  # json.dumps escapes it: valid JSON, not valid Unicode


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/translate", {"text": LONE_SURROGATE, "source": "en", "target": "de"}),
        ("/v1/translate", {"text": LONE_SURROGATE, "source": "auto", "target": "en"}),
        ("/translate", {"q": LONE_SURROGATE, "source": "en", "target": "de"}),
        ("/translate", {"q": LONE_SURROGATE, "source": "auto", "target": "en"}),
        ("/detect", {"q": LONE_SURROGATE}),
    ],
)
def test_lone_surrogate_is_a_clear_400(srv, path, body):
    raw = json.dumps(body)
    assert "\\ud800" in raw
    r = httpx.post(f"{srv.url}{path}", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "lone UTF-16 surrogate (U+D800) at character 6" in r.text


@pytest.mark.parametrize("path", ["/translate", "/detect"])
def test_deeply_nested_json_is_a_clear_400(srv, path):
    body = '{"q": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = httpx.post(f"{srv.url}{path}", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "nested too deeply" in r.text


@pytest.mark.parametrize("value", ["1e400", "Infinity", "-Infinity"])
def test_infinite_alternatives_is_a_clear_400(srv, value):
    body = f'{{"q": "Follow me.", "source": "en", "target": "de", "alternatives": {value}}}'
    r = httpx.post(
        f"{srv.url}/translate", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    assert "'alternatives' must be an integer" in r.text


@pytest.mark.parametrize(
    ("body", "ctype", "reason"),
    [
        ('{"text": "caf\xe9", "target": "en"}'.encode("latin-1"), "application/json", "not UTF-8"),
        (
            '{"text": "caf\xe9", "target": "en"}'.encode("latin-1"),
            "application/json; charset=latin-1",
            "charset=latin-1 is not supported",
        ),
        (
            ('{"text": ' + "[" * 5000 + "]" * 5000 + ', "target": "en"}').encode(),
            "application/json",
            "nested too deeply",
        ),
    ],
)
def test_unreadable_v1_bodies_are_malformed_json_with_the_reason(srv, body, ctype, reason):
    r = httpx.post(f"{srv.url}/v1/translate", content=body, headers={"content-type": ctype})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "malformed_json" and reason in error["message"], error


def test_html_whitespace_entity_is_kept_not_refused(srv):
    doc = "<p>&nbsp;</p><p>Follow me.</p>"
    r = httpx.post(
        f"{srv.url}/translate",
        json={"q": doc, "source": "en", "target": "de", "format": "html"},
    )
    assert r.status_code == 200, r.text
    out = r.json()["translatedText"]
    assert out.startswith("<p>&nbsp;</p><p>") and "Follow me." not in out


def test_libretranslate_front_end_settings_and_suggestions(srv, keyed):
    """What LibreTranslate's web page reads first, in its field names; suggestions are not
    taken (its page then hides the control) and say so in its error shape."""
    settings = httpx.get(f"{srv.url}/frontend/settings", timeout=10).json()
    assert settings["charLimit"] == srv.state.settings.max_chars_per_text
    assert settings["keyRequired"] is False and settings["apiKeys"] is False
    assert settings["suggestions"] is False and settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == list(FORMATS)
    kinds = {".txt", ".html", ".md", ".docx", ".pptx", ".odt", ".odp", ".epub", ".srt", ".vtt",
             ".po"}  # fmt: skip
    assert set(FORMATS) == kinds
    assert settings["language"]["source"] == {"code": "auto", "name": "Auto Detect"}
    assert settings["language"]["target"]["code"] in srv.state.service.catalogue.languages
    keyed_settings = httpx.get(f"{keyed.url}/frontend/settings", timeout=10).json()
    assert keyed_settings["keyRequired"] is True and keyed_settings["apiKeys"] is True
    r = httpx.post(f"{srv.url}/suggest", data={"q": "Hi", "s": "Hallo", "source": "en",
                                               "target": "de"}, timeout=10)  # fmt: skip
    assert r.status_code == 403
    assert r.json()["error"] == "Suggestions are disabled on this server."
