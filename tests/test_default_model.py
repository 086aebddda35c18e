"""The bundled default model: `python -m server` with no bundle named serves it, every offered
route answers, its translations of held-out verses and of held-out everyday sentences (Tatoeba)
beat copying the source by a margin, and the model card is what its generator makes of the
bundle and the committed evaluations.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from sacrebleu.metrics import CHRF

from lsmt_bundle import load_bundle
from lsmt_text.paths import committed_folder

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "models" / "default"
SENTENCES = 24
# The export keeps only routes >= 10 chrF above copying on the whole test book; on a small
# sample we ask for a little less, so the check has a margin without being flaky.
MIN_GAIN = 6.0
# Everyday sentences are short: more of them per direction. On the model card's 100 held-out
# sentences per direction every direction beats copying by 10.9 chrF or more (issue 42's aim:
# +10); this smaller sample through the server asks for less, so that it is not flaky, while
# still failing a model that only copies or answers in the wrong language.
EVERYDAY_SENTENCES = 60
EVERYDAY_MIN_GAIN = 1.0


@pytest.fixture(scope="module")
def heldout(tmp_path_factory) -> Path:
    """The held-out test book (Acts) and the held-out Tatoeba sentences for the bundle's
    languages, built from the real db and the committed Tatoeba files with the editions and
    directions the bundle was trained on (recorded in its provenance). A Tatoeba sentence's
    split depends on it alone, so this is the bundle's held-out slice, but for the rare pair
    that another source holds word for word (the full build keeps that source's copy)."""
    out = tmp_path_factory.mktemp("heldout") / "corpus"
    manifest = load_bundle(DEFAULT).manifest
    corpus = manifest.provenance["corpus"]
    editions = ",".join(f"{lang}={ed['code']}" for lang, ed in corpus["editions"].items())
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lsmt_text.data",
            "build",
            "--out",
            str(out),
            "--languages",
            ",".join(manifest.languages),
            "--editions",
            editions,
            "--directions",
            corpus["build_args"]["directions"],
            "--books",
            "44,45",
            "--sources",
            "bible,tatoeba",
            "--no-progress",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def server_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "LSMT_WARMUP_ROUTES": "[]"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "server", "--port", str(port)],  # no bundle: the default model
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"server did not start:\n{proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_default_bundle_is_small_language_specific_and_its_sources_licensed():
    bundle = load_bundle(DEFAULT)
    size = sum(p.stat().st_size for p in DEFAULT.rglob("*") if p.is_file())
    assert size < 40e6, f"default bundle is {size / 1e6:.1f} MB"
    assert len(bundle.manifest.languages) >= 6 and "en" in bundle.manifest.languages
    assert (DEFAULT / "modules" / "src").is_dir() and (DEFAULT / "modules" / "tgt").is_dir()
    assert {g.index for g in bundle.manifest.weight_groups} == {"shared", "src", "tgt"}
    corpus = bundle.manifest.provenance["corpus"]
    assert set(corpus["editions"]) == set(bundle.manifest.languages)
    for lang, ed in corpus["editions"].items():
        assert ed["public_domain"] and not ed["restricted"], (lang, ed)
    # every source it was trained on is named with its licence and package versions, or the
    # committed folder that holds it with its attribution (bundles built before the package
    # sources record the Bible's editions only)
    for name in corpus["build_args"].get("sources", ["bible"]):
        if name != "bible":
            info = corpus["sources"][name]
            assert info["licence"] and (info["packages"] or info.get("files")), name
            if info.get("files"):
                folder = ROOT / committed_folder(info["files"])  # where it is now
                assert list(folder.glob("LICENSE*")), name


def assert_above_copy(server_url: str, testset: dict, sentences: int, min_gain: float) -> None:
    """Every offered route, through HTTP: chrF of the first ``sentences`` pairs at least
    ``min_gain`` above copying the source."""
    chrf = CHRF()
    with httpx.Client(base_url=server_url, timeout=120) as client:
        for src, tgt in load_bundle(DEFAULT).routes:
            pairs = testset[(src, tgt)][:sentences]
            assert pairs, f"{src}-{tgt}: no held-out pair"
            sources = [s for s, _ in pairs]
            refs = [t for _, t in pairs]
            r = client.post("/v1/translate", json={"text": sources, "source": src, "target": tgt})
            assert r.status_code == 200, r.text
            hyps = [t["text"] for t in r.json()["translations"]]
            assert len(hyps) == len(sources)
            model = chrf.corpus_score(hyps, [refs]).score
            copy = chrf.corpus_score(sources, [refs]).score
            assert model >= copy + min_gain, f"{src}-{tgt}: chrF {model:.1f} vs copy {copy:.1f}"


def test_every_offered_route_translates_held_out_verses_well_above_copy(server_url, heldout):
    from lsmt_text.data.testsets import load_testset

    languages = httpx.get(f"{server_url}/v1/languages", timeout=10).json()
    assert languages  # the endpoint answers for the default bundle
    assert_above_copy(server_url, load_testset("acts", heldout), SENTENCES, MIN_GAIN)


def test_every_offered_route_translates_held_out_everyday_sentences_above_copy(server_url, heldout):
    from lsmt_text.data.testsets import load_testset

    everyday = load_testset("tatoeba-test", heldout)
    assert_above_copy(server_url, everyday, EVERYDAY_SENTENCES, EVERYDAY_MIN_GAIN)


# The first tries and their kind: texts in languages the default model does not serve.
NOT_SERVED = [
    ("Wo ist der Bahnhof? Ich möchte einen Kaffee trinken.", "de"),
    ("駅はどこですか", "ja"),
    ("기차역이 어디에 있습니까?", "ko"),
    ("火车站在哪里？我想喝杯咖啡。", "zh"),
    ("Ich liebe 東京 und München sehr", "de"),  # mixed scripts
]


@pytest.mark.parametrize("text, language", NOT_SERVED)
def test_auto_answers_plainly_that_the_language_is_not_served(server_url, text, language):
    served = load_bundle(DEFAULT).manifest.languages
    for path, body in (
        ("/v1/translate", {"text": text, "source": "auto", "target": "fr"}),
        ("/translate", {"q": text, "source": "auto", "target": "fr"}),
    ):
        r = httpx.post(f"{server_url}{path}", json=body, timeout=30)
        assert r.status_code == 400, r.text
        error = r.json()["error"] if path == "/v1/translate" else r.json()["details"]
        assert error["code"] == "unsupported_language"
        assert error["detected"]["language"] == language
        assert error["allowed"] == sorted(served)
    detected = httpx.post(f"{server_url}/detect", json={"q": text}, timeout=30).json()
    assert detected[0]["language"] == language


def test_a_served_language_with_auto_still_translates(server_url):
    r = httpx.post(
        f"{server_url}/v1/translate",
        json={"text": "Good morning, how are you today?", "source": "auto", "target": "es"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    t = r.json()["translations"][0]
    assert t["source"] == "en" and t["detected"]["confidence"] > 0.9 and t["text"].strip()


def test_the_model_card_lists_the_routes_served(server_url):
    pairs = set(httpx.get(f"{server_url}/v1/languages", timeout=10).json()["routes"])
    assert pairs == {f"{s}-{t}" for s, t in load_bundle(DEFAULT).routes}
    card = (ROOT / "MODEL_CARD.md").read_text()
    count, rest = card.split("**Routes offered** (", 1)[1].split("):", 1)
    assert int(count) == len(pairs)
    assert set(rest.split(".", 1)[0].strip().split(", ")) == pairs


def test_the_model_card_is_generated_from_the_bundle_and_its_evaluations(tmp_path):
    spec = importlib.util.spec_from_file_location("model_card", ROOT / "scripts/model_card.py")
    model_card = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = model_card  # where its dataclass finds its module
    spec.loader.exec_module(model_card)
    card = model_card.build_card(DEFAULT, ROOT / "docs/default_model", tmp_path / "curve.png")
    assert card == (ROOT / "MODEL_CARD.md").read_text()
    # a slice shipped next joins the lineage from its summary and verdict, named by the
    # checkpoint it shipped: here the run's last one, a step after its best dev step
    evidence = tmp_path / "evidence"
    shutil.copytree(ROOT / "docs/default_model", evidence)
    evals = [json.loads(x) for x in (evidence / "metrics.jsonl").read_text().splitlines()]
    best = max((e for e in evals if e.get("kind") == "eval"), key=lambda e: e["dev_chrf"])
    summary = json.loads((evidence / "summary.json").read_text())
    summary["step"] = best["step"] + 50
    (evidence / "summary.json").write_text(json.dumps(summary))
    verdict = tmp_path / "verdict.json"
    verdict.write_text(json.dumps({"general_before": 28.82, "general_after": 29.5,
                                   "acts_before": 37.85, "acts_after": 37.6}))  # fmt: skip
    model_card.record_slice(evidence, verdict, 0.35, "2026-12-01", summary["step"])
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    manifest = json.loads((DEFAULT / "manifest.json").read_text())
    manifest["provenance"]["step"] = summary["step"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    card = model_card.build_card(bundle, evidence, tmp_path / "curve.png")
    row = (
        f"| 2026-12-01 | {summary['device_name']} | {summary['steps_this_run']:,} | "
        f"{round(summary['seconds'] / 60)} | {summary['step']:,} (last) | 0.35 | 28.82 -> 29.50 |"
    )
    assert row in card, row
    assert f"last checkpoint at step {summary['step']} of {summary['step']} run" in card
    assert f"best dev checkpoint at step {best['step']}" not in card
