"""Adding a target language with a decoder of its own (Shallow paper section 3.5: "a new
decoder ... initialised from the closest existing language"), on the tiny LSL model of
tests/test_add_language.py, whose decoder is shared: German's decoder starts as the trained
shared decoder, trains with German's other modules while every trained parameter stays
bit-identical, and goes into German's target module. The bundle gains German's modules only,
its old routes translate as before, and the routes into German decode with German's decoder
through CTranslate2 token for token as PyTorch does; a bundle made from it gives the same
model back as a checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from lsmt_bundle import BundleError, load_bundle
from lsmt_bundle.assembly import take_own_decoder
from lsmt_bundle.storage import max_error
from lsmt_core.manifest import TARGET_DECODER
from lsmt_core.routes import Route
from model_export.to_checkpoint import checkpoint_from_bundle
from tests.additions import assert_decodes_as_trained, grow, served_beams
from tests.bundles import file_digests
from tests.tiny import LSL_TOY_MODEL, lsl_toy_recipe, toy_sentences
from training.checkpoint import load_checkpoint
from training.recipe import RecipeError, load_recipe
from training.trainer import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
TEXTS = {lang: [row[lang] for row in toy_sentences(4, seed=11)] for lang in ("de", "en", "fr")}
OWN_DECODER_MODEL = {**LSL_TOY_MODEL, "language_decoders": ["de"]}


@pytest.fixture(scope="module")
def german(added_language, toy_data, tmp_path_factory) -> dict[str, Path]:
    """The en<->fr bundle's weights, the addition's run (German with its own decoder) and a
    copy of the bundle to grow."""
    weights, _, bundle = added_language
    data, tok = toy_data
    root = tmp_path_factory.mktemp("own_decoder")
    recipe = lsl_toy_recipe(
        data, tok, ["de", "en"], 20, model=OWN_DECODER_MODEL,
        init_from=str(weights), add_languages={"donors": {"de": "fr"}},
    )  # fmt: skip
    Trainer(recipe, root / "add", progress=False).run()
    grown = root / "bundle"
    shutil.copytree(bundle, grown)
    return {"weights": weights, "run": root / "add", "bundle": grown}


@pytest.fixture(scope="module")
def grown(german) -> tuple[Path, dict[str, str], list]:
    bundle = german["bundle"]
    before, en_fr = grow(bundle, german["run"], TEXTS["en"])
    return bundle, before, en_fr


def test_german_decoder_starts_from_the_shared_one_and_trains_alone(german):
    base, add = (load_checkpoint(p, "last") for p in (german["weights"], german["run"]))
    for name, tensor in base["model"].items():
        assert torch.equal(add["model"][name], tensor), name
    own = {n: t for n, t in add["model"].items() if n.startswith("target_decoder.by_lang.de.")}
    shared = {n: t for n, t in base["model"].items() if n.startswith("decoder.")}
    shared_of = {n: n.replace("target_decoder.by_lang.de.", "decoder.") for n in own}
    assert set(shared_of.values()) == set(shared)
    moved = [n for n in own if not torch.equal(own[n], shared[shared_of[n]])]
    assert len(moved) > len(own) // 2, "German's decoder did not train"
    assert add["model_config"]["language_decoders"] == ["de"]


def test_the_bundle_gains_german_and_its_decoder_only(grown):
    bundle, before, en_fr = grown
    after = file_digests(bundle)
    assert {p for p in before if after[p] != before[p]} == {"manifest.json"}
    assert set(after) - set(before) == {"modules/src/de.safetensors", "modules/tgt/de.safetensors"}
    opened = load_bundle(bundle)
    assert set(opened.verify().values()) == {"ok"}
    assert opened.manifest.language_decoders == ["de"]
    assert TARGET_DECODER in opened.manifest.weight_groups
    german_module = opened.read_module("tgt/de")
    assert any(k.startswith("target_decoder.layers.") for k in german_module)
    assert not any(k.startswith("target_decoder.") for k in opened.read_module("tgt/fr"))
    assert served_beams(bundle, Route("en", "fr"), TEXTS["en"]) == en_fr


@pytest.mark.parametrize("route", [Route("en", "de"), Route("fr", "de"), Route("de", "en")])
def test_german_routes_decode_as_the_trained_model(grown, german, route):
    """Greedy through the bundle's engine == greedy in PyTorch: into German with German's
    decoder (fr->de never trained: zero-shot), out of German with the shared one."""
    bundle_dir, _, _ = grown
    assert_decodes_as_trained(bundle_dir, german["run"], route, TEXTS[route[0]])
    bundle = load_bundle(bundle_dir)
    dense = bundle.assemble(route)
    name = "decoder.layers.0.ffn.fc1.weight"
    own = bundle.read_module("tgt/de")["target_decoder.layers.0.ffn.fc1.weight"]
    expected = own if route[1] == "de" else bundle.read_module("shared")[name]
    assert (dense.weights[name] == expected).all()


def test_the_grown_bundle_comes_back_as_the_trained_model(grown, german):
    """``model_export checkpoint`` of the grown bundle holds German's decoder under the
    model's name (within the int8 storage's rounding), so a further addition or fine-tuning
    starts from it."""
    bundle_dir, _, _ = grown
    ckpt = checkpoint_from_bundle(bundle_dir)
    assert ckpt["model_config"]["language_decoders"] == ["de"]
    trained = load_checkpoint(german["run"], "last")["model"]
    name = "target_decoder.by_lang.de.layers.1.self_attn.q_proj.weight"
    rounding = max_error("int8", {name: trained[name].numpy()})
    assert torch.allclose(ckpt["model"][name], trained[name], atol=rounding)
    assert not torch.allclose(
        ckpt["model"][name],
        trained[name.replace("target_", "").replace(".by_lang.de", "")],
        atol=rounding,
    )  # German's own, not the shared one


def test_a_decoder_of_its_own_needs_one_plain_shared_decoder():
    for model in (
        {**OWN_DECODER_MODEL, "decoder_sharing": "separate"},
        {**OWN_DECODER_MODEL, "language_specific": {"decoder_tgt": [1]}},
        {**OWN_DECODER_MODEL, "lms": {"rank": 2}},
    ):
        with pytest.raises(RecipeError, match="language_decoders"):
            load_recipe("tiny", {"model": model})


def test_an_own_decoder_that_lacks_weights_is_refused(grown):
    """Half of one decoder and half of another is never assembled."""
    bundle_dir, _, _ = grown
    bundle = load_bundle(bundle_dir)
    dense = bundle.assemble(Route("en", "fr"))
    dense.weights["target_decoder.layers.0.ffn.fc1.weight"] = dense.weights[
        "decoder.layers.0.ffn.fc1.weight"
    ]
    with pytest.raises(BundleError, match="own decoder lacks"):
        take_own_decoder(dense)


def test_only_new_languages_get_a_decoder_of_their_own(added_language):
    with pytest.raises(RecipeError, match="only new languages"):
        load_recipe("tiny", {
            "model": {**LSL_TOY_MODEL, "language_decoders": ["de", "fr"]},
            "init_from": str(added_language[0]), "add_languages": {"donors": {"de": "fr"}},
        })  # fmt: skip
