"""The OpenAPI document tells the truth: schema-driven fuzzing (schemathesis) of every operation
of a real server with a real bundle, valid and invalid inputs, fails on any 5xx and on any
response whose status, content type or body the document does not describe."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.integration

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def srv(module_server):
    # A short request timeout keeps a fuzzed request (64 texts of 5,000 characters) short.
    return module_server(request_timeout_s=5)


# Every operation of the document (test_every_operation_is_fuzzed keeps the list complete).
OPERATIONS = [
    ("POST", "/v1/translate"),
    ("GET", "/v1/languages"),
    ("GET", "/v1/models"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("POST", "/translate"),
    ("GET", "/languages"),
    ("POST", "/languages"),
    ("POST", "/detect"),
    ("POST", "/v1/admin/reload"),
    ("GET", "/v1/admin/glossaries/{name}"),
    ("PUT", "/v1/admin/glossaries/{name}/{pair}"),
    ("DELETE", "/v1/admin/glossaries/{name}/{pair}"),
    ("GET", "/frontend/settings"),
    ("POST", "/suggest"),
    ("POST", "/translate_file"),
    ("GET", "/download_file/{filename}"),
]


@pytest.fixture(scope="module")
def api_schema(srv):
    return schemathesis.openapi.from_url(f"{srv.url}/openapi.json")


def test_every_operation_is_fuzzed(api_schema):
    documented = {(op.ok().method.upper(), op.ok().path) for op in api_schema.get_all_operations()}
    assert documented == set(OPERATIONS)


# Valid inputs for every operation; invalid ones where there is an input to break.
CASES = [(method, path, GenerationMode.POSITIVE) for method, path in OPERATIONS] + [
    (method, path, GenerationMode.NEGATIVE)
    for method, path in (("POST", "/v1/translate"), ("POST", "/translate"), ("POST", "/detect"))
]


# schemathesis' own pytest plugin does not run under pytest 9.2 (it reads a removed private
# attribute), so the cases are drawn with hypothesis directly: the same strategies and checks.
@pytest.mark.parametrize(
    ("method", "path", "mode"), CASES, ids=[f"{m} {p} {g.value}" for m, p, g in CASES]
)
def test_every_operation_answers_as_documented(api_schema, method, path, mode):
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=20,  # per operation and mode: bounded, so the suite stays quick
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case):
        case.call_and_validate(checks=CHECKS)

    fuzz()


def test_document_states_configured_ranges(srv):
    doc = httpx.get(f"{srv.url}/openapi.json").json()
    props = doc["components"]["schemas"]["TranslateRequest"]["properties"]
    beam = next(b for b in props["beam_size"]["anyOf"] if b.get("type") == "integer")
    limits = srv.state.settings
    assert (beam["minimum"], beam["maximum"]) == (1, limits.max_beam_size)
    text = {b["type"]: b for b in props["text"]["anyOf"]}
    assert text["string"]["maxLength"] == limits.max_chars_per_text
    assert text["array"]["maxItems"] == limits.max_texts
    lt = doc["components"]["schemas"]["LTTranslateRequest"]["properties"]
    assert lt["alternatives"]["maximum"] == limits.max_alternatives
    body = doc["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert set(body) == {
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    }
    assert "503" in doc["paths"]["/readyz"]["get"]["responses"]
    assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert "post" in doc["paths"]["/languages"]


def test_document_lists_the_warnings_a_translation_may_carry(srv):
    """The fuzzing above checks every answer against these schemas, warnings included."""
    from server.output_checks import FLAGS

    doc = httpx.get(f"{srv.url}/openapi.json").json()
    warnings = doc["components"]["schemas"]["Translation"]["properties"]["warnings"]
    assert warnings["items"]["enum"] == list(FLAGS)
    assert "uncertain_language" in warnings["description"]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/translate", {"text": "Follow me.", "target": "de", "beam_size": True}),
        ("/v1/translate", {"text": "Follow me.", "target": "de", "num_alternatives": False}),
        ("/translate", {"q": "Follow me.", "source": "en", "target": "de", "alternatives": True}),
    ],
)
def test_booleans_are_not_integers(srv, path, body):
    r = httpx.post(f"{srv.url}{path}", json=body)
    assert 400 <= r.status_code < 500, r.text
    assert "bool" in r.text or "integer" in r.text, r.text


def test_libretranslate_form_numbers_are_text(srv):
    """A form sends every value as text: alternatives=1 is the number 1, as LibreTranslate
    reads it; a non-number answers 400 naming the field."""
    form = {"q": "Follow me.", "source": "en", "target": "de", "alternatives": "1"}
    r = httpx.post(f"{srv.url}/translate", data=form)
    assert r.status_code == 200 and len(r.json()["alternatives"]) == 1, r.text
    r = httpx.post(f"{srv.url}/translate", data={**form, "alternatives": "many"})
    assert r.status_code == 400, r.text
    assert r.json()["details"] == {
        "code": "invalid_field",
        "message": r.json()["error"],
        "parameter": "alternatives",
    }
