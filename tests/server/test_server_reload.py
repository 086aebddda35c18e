"""Languages added to a served bundle without a restart (``POST /v1/admin/reload``): the new
routes are served, the old ones translate as before, an incomplete bundle is refused whole and
the served version stays, and the endpoint is behind the admin keys."""

from __future__ import annotations

import json
import shutil

import pytest

from model_export.__main__ import main as model_export_main

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADMIN = {"Authorization": "Bearer admin-secret"}
TEXTS = ["Bread and water.", "The old house."]


@pytest.fixture
def served(added_language, make_server, tmp_path):
    """(a server on a copy of the en<->fr bundle with an admin key, the copy, the de run)."""
    _, add, exported = added_language
    bundle = tmp_path / "bundle"
    shutil.copytree(exported, bundle)
    server = make_server(bundle_dirs=[bundle], admin_keys=["admin-secret"])
    return server, bundle, add


def _translate(client, source: str, target: str) -> list[str]:
    r = client.post("/v1/translate", json={"text": TEXTS, "source": source, "target": target})
    assert r.status_code == 200, r.text
    return [t["text"] for t in r.json()["translations"]]


def test_an_added_language_is_served_after_a_reload(served):
    server, bundle, add = served
    with server.client() as c:
        assert [lang["code"] for lang in c.get("/v1/languages").json()["languages"]] == ["en", "fr"]
        en_fr = _translate(c, "en", "fr")
        assert (
            c.post("/v1/translate", json={"text": "x", "source": "en", "target": "de"}).status_code
            == 400
        )
        model_export_main(["add-language", str(bundle), "--from", str(add), "--which", "last"])
        r = c.post("/v1/admin/reload", headers=ADMIN)
        assert r.status_code == 200, r.text
        (outcome,) = r.json()["bundles"]
        assert outcome["status"] == "reloaded" and outcome["added_languages"] == ["de"]
        assert {"en-de", "de-en", "de-fr", "fr-de"} <= set(outcome["added_routes"])
        languages = c.get("/v1/languages").json()
        assert [lang["code"] for lang in languages["languages"]] == ["de", "en", "fr"]
        assert "en-de" in languages["routes"]
        assert len(_translate(c, "en", "de")) == len(TEXTS)
        assert _translate(c, "en", "fr") == en_fr  # the old route, unchanged
        again = c.post("/v1/admin/reload", headers=ADMIN).json()["bundles"]
        assert again[0]["status"] == "unchanged"


def test_an_incomplete_bundle_is_refused_and_the_served_one_stays(served):
    server, bundle, add = served
    with server.client() as c:
        en_fr = _translate(c, "en", "fr")
        model_export_main(["add-language", str(bundle), "--from", str(add), "--which", "last"])
        (bundle / "modules" / "tgt" / "de.safetensors").unlink()  # as if still being copied
        r = c.post("/v1/admin/reload", headers=ADMIN)
        assert r.status_code == 409
        (outcome,) = r.json()["bundles"]
        assert outcome["status"] == "refused" and "tgt/de" in outcome["reason"]
        assert [lang["code"] for lang in c.get("/v1/languages").json()["languages"]] == ["en", "fr"]
        assert _translate(c, "en", "fr") == en_fr
        # a served module rewritten (a new export in place) takes a restart: refused
        manifest = json.loads((bundle / "manifest.json").read_text())
        shared = dict(manifest["files"]["modules/shared.safetensors"])
        manifest["files"]["modules/shared.safetensors"] = {**shared, "sha256": "0" * 64}
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        r = c.post("/v1/admin/reload", headers=ADMIN)
        assert r.status_code == 409 and "restart" in r.json()["bundles"][0]["reason"]
        manifest["files"]["modules/shared.safetensors"] = shared
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        # a module rewritten with other bytes is refused too (its digest is checked)
        manifest = json.loads((bundle / "manifest.json").read_text())
        shutil.copyfile(bundle / "modules" / "src" / "de.safetensors",
                        bundle / "modules" / "tgt" / "de.safetensors")  # fmt: skip
        assert "modules/tgt/de.safetensors" in manifest["files"]
        assert c.post("/v1/admin/reload", headers=ADMIN).status_code == 409


def test_reload_needs_an_admin_key_and_is_off_without_one(served, make_server, tiny_bundle):
    server, _, _ = served
    with server.client() as c:
        assert c.post("/v1/admin/reload").status_code == 401
        assert c.post("/v1/admin/reload", headers={"X-API-Key": "wrong"}).status_code == 403
    with make_server(bundle_dirs=[tiny_bundle]).client() as c:
        r = c.post("/v1/admin/reload", headers=ADMIN)
        assert r.status_code == 404 and r.json()["error"]["code"] == "admin_off"
