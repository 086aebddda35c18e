"""The HTTP API end to end: real uvicorn on loopback, real tiny bundle, real CTranslate2."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

EN = "And Jesus said unto them, Follow me."
DE = "Und Jesus sprach zu ihnen: Folgt mir nach, und ich will euch zu Menschenfischern machen."
FR = "Et Jésus leur dit: Suivez-moi, et je vous ferai pêcheurs d'hommes."
EN_LONG = "And he said unto them, Go ye into all the world, and preach the gospel."


@pytest.fixture(scope="module")
def srv(module_server):
    s = module_server(
        warmup_routes=["en-de"], max_texts=8, max_chars_per_text=2000, max_request_bytes=64 * 1024
    )
    body = s.wait_ready()
    assert body["ready"], body
    return s


@pytest.fixture(scope="module")
def client(srv):
    with srv.client() as c:
        yield c


def tr(client, **body):
    return client.post("/v1/translate", json=body)


# Operations endpoints ---------------------------------------------------------------------


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_readyz_after_warmup(client):
    r = client.get("/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ready" and body["warmup"] == {
        "done": True,
        "routes": ["en-de"],
        "errors": {},
    }
    assert body["bundles"] == {"tiny": "ok"} and body["failed_engines"] == {}


def test_docs_and_openapi(client):
    r = client.get("/docs")
    assert r.status_code == 200 and "swagger" in r.text.lower()
    spec = client.get("/openapi.json").json()
    assert "/v1/translate" in spec["paths"] and "/translate" in spec["paths"]
    assert "TranslateRequest" in spec["components"]["schemas"]


def test_languages(client):
    body = client.get("/v1/languages").json()
    assert [lang["code"] for lang in body["languages"]] == ["de", "en", "fr"]
    de = next(lang for lang in body["languages"] if lang["code"] == "de")
    assert de["name"] == "German" and de["targets"] == ["en", "fr"]
    assert sorted(body["routes"]) == ["de-en", "de-fr", "en-de", "en-fr", "fr-de", "fr-en"]
    assert body["auto_detect"] == ["de", "en", "fr"]


def test_models_reflect_lazy_loading(client):
    body = client.get("/v1/models").json()
    # the bundles are named, their filesystem paths not disclosed
    assert [b["name"] for b in body["bundles"]] == ["tiny"]
    assert all("path" not in b for b in body["bundles"])
    engines = {e["key"]: e for e in body["engines"]}
    assert set(engines) == {"tiny:shared+tgt/de", "tiny:shared+tgt/en", "tiny:shared+tgt/fr"}
    de = engines["tiny:shared+tgt/de"]  # warmed up
    assert de["state"] == "loaded" and de["device"] == "cpu" and de["bytes"] > 0
    assert de["load_seconds"] > 0 and de["last_used"] and sorted(de["routes"]) == ["en-de", "fr-de"]
    # Never asked for: nothing assembled.
    fr = engines["tiny:shared+tgt/fr"]
    if fr["loads"] == 0:
        assert fr["state"] == "unloaded" and fr["bytes"] == 0
    assert body["used"]["device_bytes"] == sum(e["bytes"] for e in body["engines"])
    assert body["budgets"]["device_bytes"] > 0 and body["compute_type"] == "int8"


def test_metrics_endpoint(client):
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "lsmt_http_request_duration_seconds_bucket" in r.text


# Translation --------------------------------------------------------------------------------


def test_translate_single(client):
    r = tr(client, text=EN, source="en", target="de")
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["translations"]) == 1 and body["target"] == "de" and body["model"] == "tiny"
    t = body["translations"][0]
    assert t["text"].strip() and t["text"] != EN
    assert t["source"] == "en" and t["detected"] is None
    assert t["engine"] == "tiny:shared+tgt/de" and t["alternatives"] == []
    assert isinstance(t["score"], float) and t["score"] < 0
    assert r.headers["x-request-id"] == body["request_id"]


def test_list_keeps_order_and_matches_single_requests(client):
    texts = [EN, EN_LONG, "Follow me.", EN]
    singles = [
        tr(client, text=t, source="en", target="fr", beam_size=2).json()["translations"][0]["text"]
        for t in texts
    ]
    r = tr(client, text=texts, source="en", target="fr", beam_size=2)
    assert r.status_code == 200
    assert [t["text"] for t in r.json()["translations"]] == singles
    assert singles[0] == singles[3] and singles[0] != singles[1]


def test_auto_detects_per_text(client):
    r = tr(client, text=[DE, FR, EN_LONG], source="auto", target="en")
    assert r.status_code == 200, r.text
    out = r.json()["translations"]
    assert [t["source"] for t in out] == ["de", "fr", "en"]
    assert [t["detected"]["language"] for t in out] == ["de", "fr", "en"]
    assert all(0.5 < t["detected"]["confidence"] <= 1 for t in out)
    assert out[0]["engine"] == out[1]["engine"] == "tiny:shared+tgt/en"
    # Already in the target language: returned unchanged, no engine.
    assert out[2]["text"] == EN_LONG and out[2]["engine"] is None
    # Same result as naming the source.
    named = tr(client, text=DE, source="de", target="en").json()["translations"][0]
    assert named["text"] == out[0]["text"]


def test_long_text_split_into_sentences_and_rejoined(client, srv):
    s1, s2, s3 = (
        "And Jesus said unto them, Follow me.",
        "And they left their nets.",
        "And he went up into a mountain.",
    )
    text = f"{s1} {s2}\n\n  {s3}\n"
    batches_before = srv.state.metrics.batch_size._sum.get()
    r = tr(client, text=text, source="en", target="de", beam_size=1)
    assert r.status_code == 200
    out = r.json()["translations"][0]["text"]
    # All three sentences went to the engine in one batch.
    assert srv.state.metrics.batch_size._sum.get() - batches_before == 3
    each = [
        tr(client, text=s, source="en", target="de", beam_size=1).json()["translations"][0]["text"]
        for s in (s1, s2, s3)
    ]
    assert out == f"{each[0]} {each[1]}\n\n  {each[2]}\n"
    lines = out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""


def test_large_request_is_prepared_off_the_event_loop(client):
    para = " ".join([EN, EN_LONG, "And they left their nets."] * 6)  # ~1000 characters
    text = f"{para}\n\n{para}"
    assert 1500 < len(text) <= 2000
    r = tr(client, text=[text, text], source="en", target="de", beam_size=1)
    assert r.status_code == 200, r.text
    outs = [t["text"] for t in r.json()["translations"]]
    assert outs[0] == outs[1] and outs[0].count("\n") == 2 and outs[0].split("\n")[1] == ""


def test_alternatives_have_scores(client):
    r = tr(client, text=EN, source="en", target="de", num_alternatives=2, beam_size=4)
    assert r.status_code == 200
    t = r.json()["translations"][0]
    assert len(t["alternatives"]) == 2
    scores = [t["score"]] + [a["score"] for a in t["alternatives"]]
    assert scores == sorted(scores, reverse=True)
    assert all(a["text"].strip() for a in t["alternatives"])


def test_alternatives_raise_default_beam(client):
    r = tr(client, text=EN, source="en", target="de", num_alternatives=4)
    assert r.status_code == 200 and len(r.json()["translations"][0]["alternatives"]) == 4


def test_max_length_bounds_output(client):
    r = tr(client, text=EN_LONG, source="en", target="de", max_length=3, beam_size=1)
    assert r.status_code == 200
    short = r.json()["translations"][0]["text"]
    full = tr(client, text=EN_LONG, source="en", target="de", beam_size=1).json()
    assert len(short) < len(full["translations"][0]["text"])


def test_request_id_is_echoed(client):
    r = client.post(
        "/v1/translate",
        json={"text": EN, "target": "de", "source": "en"},
        headers={"X-Request-ID": "abc-123"},
    )
    assert r.headers.get_list("x-request-id") == ["abc-123"]  # once
    assert r.json()["request_id"] == "abc-123"
    bad = client.post(
        "/v1/translate", json={"text": EN, "target": "xx"}, headers={"X-Request-ID": "abc-123"}
    )
    assert bad.status_code == 400 and bad.headers.get_list("x-request-id") == ["abc-123"]
    r = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert r.headers["x-request-id"] != "bad id with spaces" and len(r.headers["x-request-id"])


# Client errors: status, code, and a message naming the problem and what is allowed -------------


def err(r, status, code):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code, body
    assert body["request_id"] == r.headers["x-request-id"]
    return body["error"]


def test_unknown_target_language(client):
    e = err(tr(client, text=EN, target="xx"), 400, "unknown_language")
    assert "'xx'" in e["message"] and e["allowed"] == ["de", "en", "fr"]


def test_unknown_source_language(client):
    e = err(tr(client, text=EN, source="klingon", target="de"), 400, "unknown_language")
    assert "klingon" in e["message"] and e["allowed"] == ["auto", "de", "en", "fr"]


# Texts in languages the tiny bundle (de, en, fr) does not serve, with what the identifier
# finds in them.
UNSERVED = [
    ("¿Dónde está la estación de tren? Quiero tomar un café con leche.", "es"),
    ("駅はどこですか。コーヒーを飲みたいです。", "ja"),
    ("기차역이 어디에 있습니까? 커피를 마시고 싶어요.", "ko"),
    ("火车站在哪里？我想喝杯咖啡。", "zh"),
    ("Москва 莫斯科 是俄罗斯的首都", "wuu"),  # mixed scripts: the identifier says Wu Chinese
]


@pytest.mark.parametrize("text, language", UNSERVED)
def test_auto_refuses_a_language_nobody_serves_and_names_it(client, text, language):
    e = err(tr(client, text=text, source="auto", target="en"), 400, "unsupported_language")
    assert e["detected"]["language"] == language and e["detected"]["confidence"] >= 0.5
    assert e["allowed"] == ["de", "en", "fr"] and e["parameter"] == "source"
    assert f"({language}, confidence" in e["message"] and "de, en, fr" in e["message"]
    assert e["message"].startswith("The text looks like") and "index" not in e  # one text


def test_auto_names_the_text_that_is_refused(client):
    e = err(tr(client, text=[DE, UNSERVED[1][0]], source="auto", target="en"), 400,
            "unsupported_language")  # fmt: skip
    assert e["index"] == 1 and e["message"].startswith("Text 1 looks like Japanese (ja, ")


def test_auto_with_a_short_unclear_text_translates_and_says_it_was_unsure(client):
    r = tr(client, text="Hello", source="auto", target="de")
    assert r.status_code == 200, r.text
    t = r.json()["translations"][0]
    assert t["warnings"] == ["uncertain_language"] and t["source"] in ("de", "en", "fr")
    assert t["detected"]["confidence"] < 0.5


def test_same_source_and_target(client):
    e = err(tr(client, text=EN, source="de", target="de"), 400, "unsupported_route")
    assert "de-en" in e["allowed"] and "both 'de'" in e["message"]


def test_empty_texts(client):
    err(tr(client, text="", target="de"), 400, "empty_text")
    err(tr(client, text=[], target="de"), 400, "empty_text")
    e = err(tr(client, text=[EN, "   \n "], target="de"), 400, "empty_text")
    assert e["index"] == 1 and "Text 1" in e["message"]


def test_too_many_texts(client):
    e = err(tr(client, text=[EN] * 9, source="en", target="de"), 413, "too_many_texts")
    assert e["limit"] == 8 and "at most 8" in e["message"]


def test_text_too_long_in_characters(client):
    e = err(tr(client, text="a" * 2001, source="en", target="de"), 413, "text_too_long")
    assert e["limit"] == 2000 and "2001" in e["message"]


def test_sentence_too_long_in_tokens(client):
    words = " ".join(["Jesus"] * 300)  # one sentence, > 128 positions
    e = err(tr(client, text=words, source="en", target="de"), 413, "text_too_long")
    assert e["limit_tokens"] == 128 and "tokens" in e["message"]


def test_request_too_large(client):
    r = client.post(
        "/v1/translate",
        content=b'{"text": "' + b"a" * 70000 + b'"}',
        headers={"content-type": "application/json"},
    )
    e = err(r, 413, "request_too_large")
    assert e["limit"] == 64 * 1024


@pytest.mark.parametrize(
    ("field", "value", "lo", "hi"),
    [
        ("beam_size", 0, 1, 8),
        ("beam_size", 9, 1, 8),
        ("num_alternatives", 5, 0, 4),
        ("num_alternatives", -1, 0, 4),
        ("max_length", 0, 1, 512),
        ("max_length", 513, 1, 512),
    ],
)
def test_parameters_out_of_range(client, field, value, lo, hi):
    e = err(
        tr(client, text=EN, source="en", target="de", **{field: value}),
        400,
        "parameter_out_of_range",
    )
    assert e["parameter"] == field and e["allowed"] == {"min": lo, "max": hi}
    assert f"{field}={value}" in e["message"]


def test_alternatives_need_a_wide_enough_beam(client):
    e = err(
        tr(client, text=EN, source="en", target="de", beam_size=2, num_alternatives=3),
        400,
        "parameter_out_of_range",
    )
    assert e["allowed"]["min"] == 4


def test_malformed_json(client):
    r = client.post(
        "/v1/translate", content=b'{"text": "x", ', headers={"content-type": "application/json"}
    )
    assert "not valid JSON" in err(r, 400, "malformed_json")["message"]
    r = client.post("/v1/translate", content=b"text=hello")
    assert "JSON object" in err(r, 400, "malformed_json")["message"]
    r = client.post("/v1/translate", json=["not", "an", "object"])
    err(r, 400, "malformed_json")


def test_schema_errors_name_the_field(client):
    e = err(tr(client, text=5, target="de"), 422, "invalid_request")
    assert any(f["field"].startswith("text") for f in e["fields"])
    e = err(tr(client, text=EN), 422, "invalid_request")
    assert e["fields"] == [{"field": "target", "problem": "field required"}]
    e = err(tr(client, text=EN, target="de", colour="blue"), 422, "invalid_request")
    assert "colour" in e["message"]


def test_unknown_model(client):
    e = err(tr(client, text=EN, source="en", target="de", model="huge"), 400, "unknown_model")
    assert e["allowed"] == ["tiny"]


def test_unknown_path_and_method(client):
    err(client.get("/v2/translate"), 404, "not_found")
    e = err(client.get("/v1/translate"), 405, "method_not_allowed")
    assert e["allowed"] == ["POST"]


def test_client_errors_never_500(client, srv):
    bad = [
        b"",
        b"null",
        b"[]",
        b'{"text": null, "target": "de"}',
        b'{"text": [1,2], "target": 3}',
        b'{"text": "x", "target": "de", "beam_size": "wide"}',
        b"\xff\xfe",
        b'"just a string"',
        b'{"text": {"a": 1}, "target": "de"}',
        b'{"text": "x", "target": "de", "source": null}',
    ]
    for body in bad:
        r = client.post("/v1/translate", content=body, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
        assert "error" in r.json()


def test_every_dependency_of_every_endpoint_runs_on_the_event_loop(srv):
    """FastAPI runs a plain ``def`` dependency in its thread pool, a hop through another
    thread on every request; the endpoints' dependencies only read state (a key lookup in
    the database goes to a worker thread itself: ``server.auth.caller_of``)."""
    import inspect

    from fastapi.routing import iter_route_contexts

    def calls(dependant):
        for sub in dependant.dependencies:
            yield sub.call
            yield from calls(sub)

    endpoints = {
        route.path: route.dependant
        for route in iter_route_contexts(srv.app.routes)
        if getattr(route, "dependant", None) is not None
    }
    assert {"/translate", "/v1/translate", "/v1/admin/reload"} <= set(endpoints)
    plain = {
        f"{path}: {call.__qualname__}"
        for path, dependant in endpoints.items()
        for call in calls(dependant)
        if not inspect.iscoroutinefunction(call)
    }
    assert plain == set()
