"""Argos packages served beside LSMT bundles (issue 47): each package is a route, opened lazily
from its folder under the same registry; its translations are the bundle route's, token for
token (the package is that route, exported); the order of LSMT_BUNDLES decides which model
serves a pair and a request's ``model`` pins either; a broken package disables only itself."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from tests.test_packages import broken_packages

pytestmark = pytest.mark.integration

DEFAULT = Path(__file__).resolve().parents[2] / "models" / "default"
SENTENCES = ["Where is the train station?", "I would like a cup of coffee, please."]


@pytest.fixture(scope="module")
def packages(argos_zips, tmp_path_factory) -> Path:
    """en-fr zipped, fr-en unpacked (as argospm leaves it)."""
    folder = tmp_path_factory.mktemp("packages")
    shutil.copy(argos_zips / "default-en_fr.argosmodel", folder)
    with zipfile.ZipFile(argos_zips / "default-fr_en.argosmodel") as zf:
        zf.extractall(folder)
    return folder


def translate(client, texts, source, target, **kw):
    body = {"text": texts, "source": source, "target": target, **kw}
    r = client.post("/v1/translate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_package_route_translates_as_the_bundle_route_it_was_exported_from(make_server, packages):
    srv = make_server(bundle_dirs=[packages, DEFAULT])
    with srv.client() as c:
        engines = {e["key"]: e for e in c.get("/v1/models").json()["engines"]}
        assert engines["default-en_fr:model"]["state"] == "unloaded"  # opened when asked
        for src, tgt in (("en", "fr"), ("fr", "en")):
            texts = SENTENCES if src == "en" else ["Où est la gare ?", "Je suis la lumière."]
            package = translate(c, texts, src, tgt)  # first in LSMT_BUNDLES: the package
            bundle = translate(c, texts, src, tgt, model="default")
            assert package["model"] == f"default-{src}_{tgt}"
            assert [t["engine"] for t in package["translations"]] == [
                f"default-{src}_{tgt}:model"
            ] * 2
            for p, b in zip(package["translations"], bundle["translations"], strict=True):
                assert p["text"] == b["text"] and p["text"].strip()
                assert p["score"] == pytest.approx(b["score"], abs=1e-4)
        models = c.get("/v1/models").json()
        languages = c.get("/v1/languages").json()
    loaded = {e["key"]: e for e in models["engines"]}["default-en_fr:model"]
    assert loaded["state"] == "loaded" and loaded["bytes"] > 0
    kinds = {b["name"]: (b["kind"], b["routes"]) for b in models["bundles"]}
    assert kinds["default-en_fr"] == ("argos", ["en-fr"])
    assert kinds["default"][0] == "lsmt" and models["disabled"] == {}
    assert languages["served_by"]["en-fr"] == "default-en_fr"
    assert languages["served_by"]["en-es"] == "default"
    assert languages["models"]["default-fr_en"]["kind"] == "argos"
    assert languages["models"]["default-fr_en"]["provenance"]["package_version"] == "1.0"
    assert languages["models"]["default"]["provenance"]["step"].isdigit()


def test_the_first_model_listed_serves_a_pair_and_a_request_pins_another(make_server, packages):
    srv = make_server(bundle_dirs=[DEFAULT, packages])
    with srv.client() as c:
        assert c.get("/v1/languages").json()["served_by"]["en-fr"] == "default"
        assert translate(c, SENTENCES[:1], "en", "fr")["model"] == "default"
        assert translate(c, SENTENCES[:1], "en", "fr", model="default-en_fr")["model"] == (
            "default-en_fr"
        )
        r = c.post("/v1/translate", json={"text": ["Hi."], "source": "en", "target": "es",
                                          "model": "default-en_fr"})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_language"  # es, there


def test_broken_packages_are_disabled_with_their_reason_and_the_server_serves(
    make_server, argos_zips, tmp_path
):
    want = broken_packages(argos_zips, tmp_path)
    srv = make_server(bundle_dirs=[tmp_path, DEFAULT])
    ready = srv.wait_ready()
    with srv.client() as c:
        r = c.get("/readyz")
        models = c.get("/v1/models").json()
        translated = translate(c, SENTENCES[:1], "en", "fr")
    assert r.status_code == 200 and ready["ready"] and r.json()["status"] == "degraded"
    assert set(r.json()["disabled_models"]) == set(want) == set(models["disabled"])
    for name, reason in want.items():
        assert reason in models["disabled"][name]
    assert str(tmp_path) not in r.text  # names, not the operator's paths
    assert translated["model"] == "good"  # the good package of the folder serves en-fr


def test_a_package_changed_on_disk_fails_its_route_with_the_file_named(
    make_server, packages, tmp_path
):
    folder = tmp_path / "packages"
    shutil.copytree(packages, folder)
    srv = make_server(bundle_dirs=[folder, DEFAULT])
    model = folder / "default-fr_en" / "model" / "model.bin"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    with srv.client() as c:
        r = c.post("/v1/translate", json={"text": ["Bonjour."], "source": "fr", "target": "en"})
        ok = translate(c, SENTENCES[:1], "en", "fr")  # the other package is untouched
        ready = c.get("/readyz").json()
    assert r.status_code == 503, r.text
    assert "model/model.bin changed since the server opened it" in r.json()["error"]["message"]
    assert ok["model"] == "default-en_fr"
    assert "default-fr_en:model" in ready["failed_engines"]


def test_python_m_server_reports_a_broken_package_and_serves_the_rest(argos_zips, tmp_path):
    """The CLI opens the bundles itself (to exit on an invalid one): a broken package must
    still reach /readyz, not only its log."""
    import httpx

    from loadtests.server_process import ServerProcess

    shutil.copy(argos_zips / "default-en_fr.argosmodel", tmp_path)
    (tmp_path / "broken.argosmodel").write_bytes(b"not a zip")
    with ServerProcess([tmp_path]) as server:
        ready = httpx.get(server.url + "/readyz", timeout=10)
        r = httpx.post(server.url + "/v1/translate", timeout=60,
                       json={"text": ["Hello."], "source": "en", "target": "fr"})  # fmt: skip
    assert ready.status_code == 200 and ready.json()["status"] == "degraded"
    assert "not a zip file" in ready.json()["disabled_models"]["broken.argosmodel"]
    assert r.status_code == 200 and r.json()["model"] == "default-en_fr"
