"""Adding a language with a vocabulary of its own (Shallow paper section 3.5: a new source
embedding matrix with its own vocabulary, a new decoder with its own target embeddings), on the
tiny LSL model of tests/test_add_language.py: German gets a German-only tokenizer; its
embeddings start from the trained rows of the pieces the shared vocabulary knows; every trained
parameter stays bit-identical; the bundle gains German's modules and tokenizer only, its old
routes translate as before, and German's routes decode through CTranslate2 token for token as
PyTorch does, in both directions, read and written with German's own pieces."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from lsmt_bundle import load_bundle
from lsmt_core.routes import Route
from lsmt_text.tokenizer import Tokenizer, train
from server.bundles import ServedBundle
from tests.additions import assert_decodes_as_trained, grow, served_beams
from tests.bundles import file_digests
from tests.tiny import LSL_TOY_MODEL, lsl_toy_recipe, toy_sentences
from training.checkpoint import NewVocabularies, init_from_checkpoint, load_checkpoint
from training.model import build_model
from training.recipe import load_recipe
from training.trainer import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
TEXTS = {lang: [row[lang] for row in toy_sentences(4, seed=9)] for lang in ("de", "en")}


@pytest.fixture(scope="module")
def german(added_language, toy_data, tmp_path_factory) -> dict[str, Path]:
    """The en<->fr bundle's weights, German's tokenizer, the addition's run and the bundle
    grown by it (with the bundle's files before)."""
    weights, _, bundle = added_language
    data, tok = toy_data
    root = tmp_path_factory.mktemp("own_vocab")
    train(data, root / "de_tok", vocab_size=380, max_sentences_per_language=None,
          languages=["de"], num_threads=1)  # fmt: skip
    own = {"language_tokenizers": {"de": str(root / "de_tok")}}
    recipe = lsl_toy_recipe(
        data, tok, ["de", "en"], 20, data_keys=own,
        init_from=str(weights), add_languages={"donors": {"de": "fr"}},
    )  # fmt: skip
    Trainer(recipe, root / "add", progress=False).run()
    grown = root / "bundle"
    shutil.copytree(bundle, grown)
    return {"weights": weights, "tokenizer": root / "de_tok", "run": root / "add", "bundle": grown}


@pytest.fixture(scope="module")
def grown(german) -> tuple[Path, dict[str, str], list]:
    bundle = german["bundle"]
    before, en_fr = grow(bundle, german["run"], TEXTS["en"])
    return bundle, before, en_fr


def test_new_embeddings_start_from_the_rows_of_known_pieces(german, toy_data):
    ckpt = load_checkpoint(german["weights"], "last")
    shared = Tokenizer(toy_data[1]).pieces()
    own = Tokenizer(german["tokenizer"]).pieces()
    assert len(own) != len(shared) and set(own) != set(shared)
    model = build_model(
        load_recipe("tiny", {"model": LSL_TOY_MODEL}).model,
        len(shared),
        ["de", "en", "fr"],
        {"de": len(own)},
    )
    init_from_checkpoint(model, ckpt, donors={"de": "fr"},
                         vocabularies=NewVocabularies(shared, {"de": own}))  # fmt: skip
    trained = ckpt["model"]["embed_tokens.weight"]
    for table in (model.source_embed_tokens, model.target_embed_tokens):
        rows = table.by_lang["de"].weight.detach()
        assert rows.shape == (len(own), trained.shape[1])
        known = [(i, shared.index(p)) for i, p in enumerate(own) if p in shared]
        unknown = [i for i, p in enumerate(own) if p not in shared]
        assert known and unknown
        assert all(torch.equal(rows[i], trained[j]) for i, j in known)
        assert not any(torch.equal(rows[i], trained[i]) for i in unknown[:5])


def test_every_trained_parameter_is_bit_identical(german):
    base, add = (load_checkpoint(p, "last") for p in (german["weights"], german["run"]))
    for name, tensor in base["model"].items():
        assert torch.equal(add["model"][name], tensor), name
    assert add["language_vocab_sizes"] == {"de": 380}
    assert (
        add["language_tokenizers"]["de"]["spm_model"]
        == (german["tokenizer"] / "spm.model").read_bytes()
    )
    assert add["extra"]["target_vocab"]["ids"]["de"] == list(range(380))  # all of its own


def test_the_bundle_gains_german_and_its_tokenizer_only(grown):
    bundle, before, en_fr = grown
    after = file_digests(bundle)
    assert {p for p in before if after[p] != before[p]} == {"manifest.json"}
    assert set(after) - set(before) == {
        "modules/src/de.safetensors",
        "modules/tgt/de.safetensors",
        "tokenizers/de/spm.model",
    }
    opened = load_bundle(bundle)
    assert set(opened.verify().values()) == {"ok"}
    assert opened.manifest.language_tokenizers["de"].vocab_size == 380
    assert served_beams(bundle, Route("en", "fr"), TEXTS["en"]) == en_fr


@pytest.mark.parametrize("route", [Route("en", "de"), Route("de", "en"), Route("de", "fr")])
def test_german_routes_decode_as_the_trained_model(grown, german, route):
    """Greedy through the bundle's engine == greedy in PyTorch, with German's own ids."""
    bundle_dir, _, _ = grown
    served = ServedBundle(load_bundle(bundle_dir))
    de = spm.SentencePieceProcessor(model_file=str(german["tokenizer"] / "spm.model"))
    assert served.pieces(TEXTS["de"][0], "de") == de.encode(TEXTS["de"][0], out_type=str)
    assert_decodes_as_trained(bundle_dir, german["run"], route, TEXTS[route.src])


@pytest.mark.parametrize("route", [Route("en", "de"), Route("de", "en")])
def test_the_bundle_evaluation_reads_and_writes_german_as_the_server_does(grown, route):
    """``model_export.evaluate`` (the scores the shipping rule compares) tokenizes each side
    with its language's tokenizer, German's own here, as the server does."""
    from lsmt_bundle.ct2 import translate_pieces
    from lsmt_bundle.engines import load_engine
    from model_export.evaluate import Decoding, translate_route

    bundle_dir, _, _ = grown
    served = ServedBundle(load_bundle(bundle_dir))
    bundle, texts = served.bundle, TEXTS[route.src]
    translator, _ = load_engine(bundle.assemble(route), compute_type="float32")
    results = translate_pieces(
        translator, [served.encode(t, route) for t in texts], bundle.max_source_positions,
        beam_size=2,
    )  # fmt: skip
    served_texts = [served.decode(r.hypotheses[0], route.tgt) for r in results]
    evaluated = translate_route(
        bundle, translator, lambda lang: Tokenizer(bundle.tokenizer_path_of(lang)), texts,
        route, Decoding(beam=2),
    )  # fmt: skip
    assert evaluated == served_texts
