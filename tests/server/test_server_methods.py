"""A bundle whose routes are fused from LMS factors (+ Fuse Distillation), LAA matrices and LEE
vectors serves over HTTP like any other: per-route engines for the language-specific path;
with FD-share the LMS part is shared, so engines are per target language (LAA/LEE) only (the
pure-LMS FD-share case, one engine for all routes, is in tests/test_methods_parity.py)."""

from __future__ import annotations

import pytest

from tests.bundles import make_tiny_bundle

pytestmark = pytest.mark.integration

METHODS = dict(
    lms={"rank": 4, "fuse_distill": True, "init_std": 0.1},
    laa={"places": ["decoder_self"], "lee_points": [4, 5]},
)


@pytest.fixture(scope="module")
def methods_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("methods")
    return make_tiny_bundle(out, model_overrides=METHODS, steps=150, lms_paths=("ls", "shared"))


@pytest.mark.parametrize("path", ["ls", "shared"])
def test_lms_laa_lee_bundle_serves_over_http(make_server, methods_bundle, path):
    bundle_dir = (
        methods_bundle.path if path == "ls" else methods_bundle.path.with_name("bundle-shared")
    )
    srv = make_server(bundle_dirs=[bundle_dir])
    srv.wait_ready()
    with srv.client() as client:
        for src, tgt in (("de", "en"), ("en", "fr")):
            text = methods_bundle.verses[src][-1]
            r = client.post("/v1/translate", json={"text": text, "source": src, "target": tgt})
            assert r.status_code == 200, r.text
            assert r.json()["translations"][0]["text"].strip()
        keys = {e["key"] for e in client.get("/v1/models").json()["engines"]}
    if path == "shared":  # LMS shared by all routes; LAA/LEE still target-specific
        assert {k.split("/", 1)[-1] if "/" in k else k for k in keys} == {"de", "en", "fr"}, keys
        assert all(k.endswith(("tiny:shared+tgt/de", "tiny:shared+tgt/en", "tiny:shared+tgt/fr"))
                   for k in keys), keys  # fmt: skip
    else:
        assert len(keys) == len(methods_bundle.routes), keys
