"""LSMT routes as Argos Translate packages: exported from the shipped default model, installed
into argostranslate (the registry's, unmodified, in a fresh virtualenv of its own), translated
there offline, and compared with LSMT's server on the same sentences."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "models" / "default"
# argostranslate and the torch it needs through stanza: the local CPU wheel, never CUDA's
ARGOS_REQUIREMENTS = ["argostranslate==1.11.0", "torch==2.13.0"]
SENTENCES = {
    "en-fr": ["Where is the train station?", "The Lord is my shepherd.", "I am the light."],
    "fr-en": ["Où est la gare ?", "Au commencement était la Parole."],
}
# In argostranslate's process: install the packages, translate, print JSON.
ARGOS_SCRIPT = """
import json, sys
from pathlib import Path
import argostranslate.package as package
import argostranslate.translate as translate
request = json.loads(sys.stdin.read())
for path in request["packages"]:
    package.install_from_path(Path(path))
print(json.dumps({route: [translate.translate(t, *route.split("-")) for t in texts]
                  for route, texts in request["texts"].items()}))
"""


@pytest.fixture(scope="session")
def argos_python(request) -> Path:
    """The Python of a virtualenv with argostranslate, built once per requirements and kept
    in pytest's cache directory."""
    from loadtests.peer import python_with

    root = Path(request.config.cache.mkdir("lsmt-argos-venv")) / "-".join(ARGOS_REQUIREMENTS)
    return python_with(root, ARGOS_REQUIREMENTS)


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("argos")
    cmd = [sys.executable, "-m", "model_export", "argos", str(DEFAULT), "--out", str(out)]
    subprocess.run([*cmd, "--routes", ",".join(SENTENCES)], check=True, cwd=ROOT, timeout=300)
    return out


def test_a_package_is_an_argos_package_whose_model_adds_the_route_tags(packages):
    with zipfile.ZipFile(packages / "default-en_fr.argosmodel") as zf:
        names = set(zf.namelist())
        metadata = json.loads(zf.read("default-en_fr/metadata.json"))
        config = json.loads(zf.read("default-en_fr/model/config.json"))
    for name in ("model/model.bin", "sentencepiece.model", "README.md", "spacy/config.cfg"):
        assert f"default-en_fr/{name}" in names
    assert (metadata["from_code"], metadata["to_code"]) == ("en", "fr")
    assert (metadata["from_name"], metadata["to_name"]) == ("English", "French")
    assert "public domain" in metadata["license"] and metadata["lsmt"]["route"] == "en-fr"
    assert config["bos_token"] == "<2fr>" and config["add_source_bos"]
    assert config["add_source_eos"] and config["decoder_start_token"] == "<s>"


def test_argostranslate_translates_offline_as_the_lsmt_server_does(
    argos_python, packages, tmp_path
):
    home = tmp_path / "home"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        # offline sentence splitting: the package's spaCy pipeline (docs/export.md)
        "ARGOS_CHUNK_TYPE": "SPACY",
        "ARGOS_BEAM_SIZE": "1",
        "ARGOS_COMPUTE_TYPE": "int8",
        "ARGOS_DEVICE_TYPE": "cpu",
    }
    request = {
        "packages": [str(p) for p in sorted(packages.glob("*.argosmodel"))],
        "texts": SENTENCES,
    }
    done = subprocess.run(
        [str(argos_python), "-c", ARGOS_SCRIPT],
        input=json.dumps(request),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    argos = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(t.strip() for lines in argos.values() for t in lines), argos
    assert argos == lsmt_translations(SENTENCES, DEFAULT)
    # LSMT serving the packages themselves, as a LibreTranslate user would point it at theirs
    assert argos == lsmt_translations(SENTENCES, packages)


def lsmt_translations(texts: dict[str, list[str]], served: Path) -> dict[str, list[str]]:
    """The same sentences through LSMT's server on ``served`` (a bundle or a packages
    folder): greedy, as argostranslate was set to, and without the server's own additions
    (repetition guards, output checks)."""
    from fastapi.testclient import TestClient

    from server.app import create_app
    from server.settings import Settings

    settings = Settings(
        bundles=[served],
        device="cpu",
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        output_checks=False,
    )
    out = {}
    with TestClient(create_app(settings)) as client:
        for route, lines in texts.items():
            src, tgt = route.split("-")
            body = {"text": lines, "source": src, "target": tgt, "beam_size": 1}
            r = client.post("/v1/translate", json=body)
            assert r.status_code == 200, r.text
            out[route] = [t["text"] for t in r.json()["translations"]]
    return out
