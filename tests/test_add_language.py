"""Incremental language addition (training.add_language, Shallow paper section 3.5): a tiny
LSL model trained on en<->fr gains German from the French modules; every parameter it had
stays bit-identical, the new ones learn, and the old target vocabularies are kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.tiny import tiny_overrides
from training.add_language import AddLanguageError, freeze_all_but
from training.checkpoint import load_checkpoint
from training.model import Route, build_model
from training.recipe import RecipeError, load_recipe
from training.trainer import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

LSL = {"language_specific": {"encoder_src": [1], "encoder_tgt": [2]}}
VOCAB = {"target_vocab": {"min_count": 1, "max_size": 200, "restrict_output": True}}


def recipe(data: Path, tok: Path, languages: list[str], steps: int, **top):
    ov = tiny_overrides(data, tok, max_steps=steps, save_every=steps)
    ov["data"] |= {"languages": languages, **VOCAB}
    return load_recipe("tiny", {**ov, "model": LSL, **top})


@pytest.fixture(scope="module")
def added(toy_data, tmp_path_factory) -> tuple[Path, Path]:
    """(the en<->fr run, the run that added de to it)."""
    data, tok = toy_data
    root = tmp_path_factory.mktemp("add_language")
    Trainer(recipe(data, tok, ["en", "fr"], 30), root / "base", progress=False).run()
    add = recipe(
        data, tok, ["de", "en"], 20,
        init_from=str(root / "base"), add_languages={"donors": {"de": "fr"}},
    )  # fmt: skip
    Trainer(add, root / "add", progress=False).run()
    return root / "base", root / "add"


def test_every_trained_parameter_is_bit_identical_and_the_new_ones_learn(added):
    base, add = (load_checkpoint(run, "last") for run in added)
    assert add["languages"] == ["de", "en", "fr"]
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
    cfg = load_recipe("tiny", {"model": LSL}).model
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
        recipe(data, tok, ["de", "en"], 5, add_languages={"donors": {"de": "fr"}})
    with pytest.raises(RecipeError, match="both new and donors"):
        recipe(data, tok, ["de", "en"], 5, init_from=str(added[0]),
               add_languages={"donors": {"de": "fr", "fr": "en"}})  # fmt: skip
    unknown = recipe(data, tok, ["de", "en"], 5, init_from=str(added[0]),
                     add_languages={"donors": {"de": "it"}})  # fmt: skip
    with pytest.raises(AddLanguageError, match="not in the trained model"):
        Trainer(unknown, tmp_path / "unknown", progress=False)
    again = recipe(data, tok, ["en", "fr"], 5, init_from=str(added[1]),
                   add_languages={"donors": {"fr": "en"}})  # fmt: skip
    with pytest.raises(AddLanguageError, match="already in the trained model"):
        Trainer(again, tmp_path / "again", progress=False)
    dense = build_model(load_recipe("tiny").model, 40, ["de", "en"])
    with pytest.raises(AddLanguageError, match="no language-specific modules"):
        freeze_all_but(dense, {"de"})
