"""Incremental language addition (training.add_language, model_export.add_language; Shallow
paper section 3.5), the documented workflow on a tiny LSL model: its en<->fr int8 bundle comes
back as a checkpoint, German is trained from the French modules with everything else frozen
(bit-identical, the old target vocabularies kept), and the bundle gains only German's modules:
its files unchanged, its old routes translating exactly as before, the new ones as PyTorch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from lsmt_bundle import load_bundle
from model_export.__main__ import main as model_export_main
from tests.additions import assert_decodes_as_trained, grow, served_beams
from tests.bundles import file_digests
from tests.tiny import LSL_TOY_MODEL, lsl_toy_recipe, toy_sentences
from training.add_language import AddLanguageError, freeze_all_but
from training.checkpoint import load_checkpoint
from training.model import Route, build_model
from training.recipe import RecipeError, load_recipe
from training.trainer import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def added(added_language) -> tuple[Path, Path]:
    """(the en<->fr model the addition started from: the bundle's weights, the addition)."""
    return added_language[0], added_language[1]


def test_every_trained_parameter_is_bit_identical_and_the_new_ones_learn(added):
    base, add = (load_checkpoint(run, "last") for run in added)
    assert base["languages"] == ["en", "fr"] and add["languages"] == ["de", "en", "fr"]
    for name, tensor in base["model"].items():
        assert torch.equal(add["model"][name], tensor), name
    new = [n for n in add["model"] if ".by_lang.de." in n]
    assert new and all(n not in base["model"] for n in new)
    moved = [
        n for n in new if not torch.equal(add["model"][n], base["model"][n.replace(".de.", ".fr.")])
    ]
    assert moved, "the new language's modules did not train"


def test_existing_languages_keep_their_target_vocabularies(added):
    base, add = (load_checkpoint(run, "last") for run in added)
    old, new = base["extra"]["target_vocab"]["ids"], add["extra"]["target_vocab"]["ids"]
    assert new["en"] == old["en"] and new["fr"] == old["fr"]  # en was recounted on de-en data
    assert new["de"] and "de" not in old


def test_new_source_and_target_combine_with_old_languages(added):
    """de->fr and fr->de were never trained: the new modules combine with the old ones."""
    ckpt = load_checkpoint(added[1], "last")
    cfg = load_recipe("tiny", {"model": LSL_TOY_MODEL}).model
    model = build_model(cfg, ckpt["vocab_size"], ckpt["languages"]).eval()
    model.load_state_dict(ckpt["model"])
    src = torch.tensor([[5, 6, 7, 3]])
    tgt = torch.tensor([[2, 5, 6]])
    outputs = {
        r: model(src, tgt, Route(*r)).logits for r in [("de", "fr"), ("fr", "de"), ("fr", "en")]
    }
    assert not torch.equal(outputs[("de", "fr")], outputs[("fr", "en")])
    assert all(torch.isfinite(o).all() for o in outputs.values())


def test_refused_additions(toy_data, added, tmp_path):
    data, tok = toy_data
    with pytest.raises(RecipeError, match="init_from"):
        lsl_toy_recipe(data, tok, ["de", "en"], 5, add_languages={"donors": {"de": "fr"}})
    with pytest.raises(RecipeError, match="both new and donors"):
        lsl_toy_recipe(data, tok, ["de", "en"], 5, init_from=str(added[0]),
               add_languages={"donors": {"de": "fr", "fr": "en"}})  # fmt: skip
    unknown = lsl_toy_recipe(data, tok, ["de", "en"], 5, init_from=str(added[0]),
                     add_languages={"donors": {"de": "it"}})  # fmt: skip
    with pytest.raises(AddLanguageError, match="not in the trained model"):
        Trainer(unknown, tmp_path / "unknown", progress=False)
    again = lsl_toy_recipe(data, tok, ["en", "fr"], 5, init_from=str(added[1]),
                   add_languages={"donors": {"fr": "en"}})  # fmt: skip
    with pytest.raises(AddLanguageError, match="already in the trained model"):
        Trainer(again, tmp_path / "again", progress=False)
    dense = build_model(load_recipe("tiny").model, 40, ["de", "en"])
    with pytest.raises(AddLanguageError, match="no language-specific modules"):
        freeze_all_but(dense, {"de"})


# -- the bundle side: python -m model_export add-language ---------------------------------------


EN = [row["en"] for row in toy_sentences(4, seed=9)]


@pytest.fixture(scope="module")
def grown(added_language, tmp_path_factory):
    """(bundle dir, its files before, en->fr before): the en<->fr bundle after adding de."""
    _, add, exported = added_language
    bundle = tmp_path_factory.mktemp("grown") / "bundle"
    shutil.copytree(exported, bundle)
    before, en_fr = grow(bundle, add, EN)
    return bundle, before, en_fr


def test_only_the_new_modules_and_the_manifest_are_written(grown):
    bundle, before, _ = grown
    after = file_digests(bundle)
    changed = {p for p in before if after[p] != before[p]}
    assert changed == {"manifest.json"}
    assert set(after) - set(before) == {"modules/src/de.safetensors", "modules/tgt/de.safetensors"}
    opened = load_bundle(bundle)
    assert set(opened.verify().values()) == {"ok"} and len(opened.verify()) == len(after) - 1
    assert opened.manifest.languages == ["de", "en", "fr"]
    assert {("de", "en"), ("en", "de"), ("de", "fr"), ("fr", "de")} <= set(opened.routes)
    record = opened.manifest.provenance["added_languages"]["de"]
    assert record["donors"] == {"de": "fr"} and record["trained_routes"] == ["de-en", "en-de"]


def test_existing_routes_translate_exactly_as_before(grown):
    bundle, _, en_fr = grown
    assert served_beams(bundle, Route("en", "fr"), EN) == en_fr


def test_a_new_route_is_the_trained_model(grown, added):
    """en->de through the grown bundle decodes as the PyTorch model of the addition does."""
    decoded = assert_decodes_as_trained(grown[0], added[1], Route("en", "de"), EN)
    vocab = set(load_checkpoint(added[1], "last")["extra"]["target_vocab"]["ids"]["de"])
    assert all(set(tokens) <= vocab for tokens in decoded)  # into German's vocabulary


def test_an_addition_that_does_not_fit_leaves_the_bundle_unchanged(
    grown, added, added_language, toy_data, tmp_path
):
    bundle, _, _ = grown
    before = file_digests(bundle)
    with pytest.raises(SystemExit, match="no language the bundle lacks"):
        model_export_main(["add-language", str(bundle), "--from", str(added[1]), "--which", "last"])
    assert file_digests(bundle) == before
    # a model with German that was not trained on this bundle's weights
    data, tok = toy_data
    stranger = tmp_path / "stranger"
    Trainer(lsl_toy_recipe(data, tok, ["de", "en", "fr"], 5), stranger, progress=False).run()
    en_fr = tmp_path / "en-fr"
    shutil.copytree(added_language[2], en_fr)
    untouched = file_digests(en_fr)
    with pytest.raises(SystemExit, match="differs from the run's"):
        model_export_main(["add-language", str(en_fr), "--from", str(stranger), "--which", "last"])
    assert file_digests(en_fr) == untouched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".en-fr.adding")]
