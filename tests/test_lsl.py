"""Language-specific layers (LSL paper): routing, parameter accounting, architecture search,
selection into a recipe, dense initialisation. Tiny models on CPU; seconds."""

from __future__ import annotations

import json
from itertools import permutations
from pathlib import Path

import pytest
import torch

from tests.tiny import random_batch as batch
from tests.tiny import tiny_model_config
from training.checkpoint import load_checkpoint, save_checkpoint
from training.lsl import main as lsl_main
from training.lsl import parameter_counts
from training.model import LanguageSpecificConfig, ModelConfig, Route, build_model
from training.model.layers import Conditioning
from training.model.nas import CHOICES, SearchLayer, select_architecture
from training.recipe import load_recipe
from training.step import train_step
from training.trainer import Trainer

LANGS = ["de", "en", "fr"]
DE_FR = Route("de", "fr")


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


def cfg(**kw) -> ModelConfig:
    """A tiny model with a deeper encoder (4-1) for the LSL layer choices."""
    base = dict(d_model=16, heads=2, ffn_dim=32, encoder_layers=4, decoder_layers=1)
    return tiny_model_config(**{**base, "max_positions": 32, **kw})


def one_step(model, route: Route) -> dict[str, torch.Tensor]:
    """Parameters before one Adam step on a batch of ``route`` (the model is updated)."""
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    train_step(
        model,
        [batch(route)],
        opt,
        None,
        label_smoothing=0.1,
        clip_norm=1.0,
        device=torch.device("cpu"),
    )
    return before


def copy_of(name: str) -> tuple[str, str] | None:
    """(prefix, language) of a parameter inside a language-specific module."""
    if ".by_lang." not in name:
        return None
    prefix, rest = name.split(".by_lang.", 1)
    return prefix, rest.split(".", 1)[0]


# -- routing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("component", ["layer", "ffn", "attention"])
@pytest.mark.parametrize("sharing", ["separate", "shared"])
def test_route_updates_only_its_language_copies(component: str, sharing: str):
    torch.manual_seed(0)
    ls = {"encoder_src": [2], "encoder_tgt": [3], "component": component}
    model = build_model(cfg(language_specific=ls, decoder_sharing=sharing), 40, LANGS)
    before = one_step(model, DE_FR)
    after = dict(model.named_parameters())
    changed: dict[tuple[str, str], bool] = {}
    for name, old in before.items():
        moved = not torch.equal(old, after[name])
        where = copy_of(name)
        if where is None:
            continue
        changed[where] = changed.get(where, False) or moved
    expected_lang = {"encoder.layers.1": "de", "encoder.layers.2": "fr", "decoder": "fr"}
    seen_prefixes = set()
    for (prefix, lang), moved in changed.items():
        layer = next(k for k in expected_lang if prefix.startswith(k))
        seen_prefixes.add(layer)
        assert moved == (lang == expected_lang[layer]), (prefix, lang, moved)
    assert {"encoder.layers.1", "encoder.layers.2"} <= seen_prefixes
    assert ("decoder" in seen_prefixes) == (sharing == "separate")
    # shared layers are trained by every route
    assert not torch.equal(
        before["encoder.layers.0.ffn.fc1.weight"], after["encoder.layers.0.ffn.fc1.weight"]
    )


def test_source_and_target_copies_follow_the_route():
    """The same model on de->fr and fr->de: the src layer's de copy and the tgt layer's fr copy
    are used by one, the other way round by the other (outputs differ, gradients move)."""
    torch.manual_seed(0)
    model = build_model(cfg(language_specific={"encoder_src": [1], "encoder_tgt": [4]}), 40, LANGS)
    one_step(model, Route("fr", "de"))
    for name, p in model.named_parameters():
        where = copy_of(name)
        if where is not None and p.grad is not None:
            prefix, lang = where
            assert lang == ("fr" if prefix == "encoder.layers.0" else "de"), name


# -- effective parameters ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "ls,sharing",
    [
        ({"encoder_src": [1, 2], "encoder_tgt": [4]}, "separate"),
        ({"encoder_src": [2], "encoder_tgt": [3, 4], "component": "ffn"}, "shared"),
        ({"encoder_src": [1], "encoder_tgt": [4], "component": "attention"}, "separate"),
        ({"encoder_src": [1], "decoder_tgt": [1]}, "shared"),
    ],
)
def test_effective_parameters_per_route_equal_the_baseline(ls: dict, sharing: str):
    torch.manual_seed(0)
    lsl = build_model(cfg(language_specific=ls, decoder_sharing=sharing), 40, LANGS)
    dense = build_model(cfg(decoder_sharing=sharing), 40, LANGS)
    dense_route = dense.route_parameter_count(DE_FR)
    assert sum(p.numel() for p in lsl.parameters()) > sum(p.numel() for p in dense.parameters())
    for s, t in permutations(LANGS, 2):
        assert lsl.route_parameter_count(Route(s, t)) == dense_route
    # ... and that is exactly what one forward/backward of the route touches
    lsl.zero_grad(set_to_none=True)
    b = batch(DE_FR)
    lsl(b.src, b.tgt_in, DE_FR).logits.sum().backward()
    used = sum(p.numel() for p in lsl.parameters() if p.grad is not None)
    assert used == dense_route


def test_recipes_keep_the_baseline_cost_per_route():
    for name, base in [
        ("lsl_nas", "baseline_12-2_separate"),
        ("lsl_nas_sd", "shallow_12-2"),
        ("tiny_lsl_nas", None),
        ("tiny_lsl_nas_sd", None),
    ]:
        r = parameter_counts(load_recipe(name), 500, LANGS)
        assert r["per_route_min"] == r["per_route_max"] == r["baseline_per_route"], name
        assert r["total"] > r["baseline_total"], name
        if base is not None:
            b = parameter_counts(load_recipe(base), 500, LANGS)
            assert b["total"] == r["baseline_total"] and b["per_route_max"] == r["per_route_max"]
    nas = load_recipe("lsl_nas").model.language_specific
    assert (nas.encoder_src, nas.encoder_tgt) == ([3, 4], [9, 10, 11])
    sd = load_recipe("lsl_nas_sd").model
    assert sd.decoder_sharing == "shared" and sd.language_specific.encoder_tgt == [8, 9, 10, 11, 12]
    assert load_recipe("lsl_nas_search").model.language_specific.search


# -- architecture search -------------------------------------------------------------------------


def search_model(sharing: str = "separate"):
    torch.manual_seed(0)
    return build_model(cfg(language_specific={"search": True}, decoder_sharing=sharing), 40, LANGS)


def test_search_config_is_validated():
    with pytest.raises(ValueError, match="search"):
        LanguageSpecificConfig(search=True, encoder_src=[1])
    with pytest.raises(ValueError, match="search"):
        LanguageSpecificConfig(search=True, component="ffn")
    assert LanguageSpecificConfig().search is False  # backward compatible default


def test_mixing_weights_are_a_softmax_and_learn():
    model = search_model()
    layers = list(model.encoder.layers)
    assert all(isinstance(layer, SearchLayer) for layer in layers)
    with torch.no_grad():
        for i, layer in enumerate(layers):
            layer.mix_logits.copy_(torch.tensor([0.5 * i, -1.0, 2.0 - i]))
    for layer in layers:
        w = layer.mixing_weights()
        assert w.shape == (3,) and bool((w > 0).all())
        torch.testing.assert_close(w.sum(), torch.tensor(1.0))
        torch.testing.assert_close(w, torch.softmax(layer.mix_logits, 0))
    before = one_step(model, DE_FR)
    for i, layer in enumerate(layers):
        g = layer.mix_logits.grad
        assert g is not None and bool((g != 0).any()), i
        assert not torch.equal(before[f"encoder.layers.{i}.mix_logits"], layer.mix_logits)
    # only the route's two language copies (de as source, fr as target) were trained
    for name, old in before.items():
        where = copy_of(name)
        if where is not None and where[0].startswith("encoder."):
            moved = not torch.equal(old, dict(model.named_parameters())[name])
            assert moved == (where[1] in ("de", "fr")), name


def test_search_layer_computes_equation_1():
    model = search_model().eval()
    layer = model.encoder.layers[1]
    with torch.no_grad():
        layer.mix_logits.copy_(torch.tensor([0.3, -0.2, 1.1]))
    x = torch.randn(2, 5, 16)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    de_fr = Conditioning(DE_FR)
    w = torch.softmax(layer.mix_logits, 0)
    expected = (
        w[0] * layer.shared(x, mask, de_fr)
        + w[1] * layer.specific.by_lang["de"](x, mask, de_fr)
        + w[2] * layer.specific.by_lang["fr"](x, mask, de_fr)
    )
    torch.testing.assert_close(layer(x, mask, de_fr), expected)
    # the copies differ, so the source and target paths are really different layers
    assert not torch.allclose(
        layer.specific.by_lang["de"](x, mask, de_fr), layer.specific.by_lang["fr"](x, mask, de_fr)
    )
    # route accounting: shared + the src copy + the tgt copy of every search layer
    dense = build_model(cfg(decoder_sharing="separate"), 40, LANGS)
    enc_layer = sum(p.numel() for p in dense.encoder.layers[0].parameters())
    extra = model.cfg.encoder_layers * (2 * enc_layer + 3)
    assert model.route_parameter_count(DE_FR) == dense.route_parameter_count(DE_FR) + extra


def test_select_architecture_is_the_argmax():
    weights = [[0.2, 0.5, 0.3], [0.6, 0.3, 0.1], [0.3, 0.3, 0.4], [0.1, 0.2, 0.7]]
    assert select_architecture(weights) == {"encoder_src": [1], "encoder_tgt": [3, 4]}
    assert CHOICES == ("shared", "src", "tgt")


# -- trainer integration: search run -> select -> recipe; dense initialisation -----------------


def tiny(name: str, corpus: Path, tok: Path, **training):
    t = {"eval_every": 0, "save_every": 0, "log_every": 1, "max_steps": 2}
    t.update(training)
    return load_recipe(
        name,
        {"data": {"dir": str(corpus), "tokenizer": str(tok), "max_len": 48}, "training": t},
    )


@pytest.fixture(scope="module")
def search_run(lsl_corpus, lsl_tokenizer, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lsl") / "search"
    Trainer(tiny("tiny_lsl_search", lsl_corpus, lsl_tokenizer), out, progress=False).run()
    return out


def test_search_run_select_writes_a_loadable_recipe(search_run, tmp_path):
    ckpt = load_checkpoint(search_run, "last")
    assert ckpt["model_config"]["language_specific"]["search"] is True
    # the two training steps moved the mixing weights away from uniform
    assert any(
        not torch.equal(ckpt["model"][f"encoder.layers.{i}.mix_logits"], torch.zeros(3))
        for i in range(4)
    )
    # set known converged weights: layer 1 src, 2 shared, 3 tgt, 4 tgt
    logits = [[0.0, 2.0, 1.0], [1.5, 0.2, 0.1], [0.0, 0.5, 1.0], [-1.0, 0.0, 3.0]]
    for i, row in enumerate(logits):
        ckpt["model"][f"encoder.layers.{i}.mix_logits"] = torch.tensor(row)
    ckpt.pop("_path")
    run = tmp_path / "run"
    save_checkpoint(ckpt, run / "last.pt")
    out = tmp_path / "selected.yaml"
    plot = tmp_path / "mixing.png"
    assert (
        lsl_main(["select", "--checkpoint", str(run), "--out", str(out), "--plot", str(plot)]) == 0
    )
    recipe = load_recipe(out)
    ls = recipe.model.language_specific
    assert (ls.encoder_src, ls.encoder_tgt, ls.search) == ([1], [3, 4], False)
    assert recipe.name == "tiny_lsl_selected"
    assert recipe.model.decoder_sharing == "separate" and recipe.init_from is None
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(out.with_suffix(".mixing.json").read_text())
    assert [r["choice"] for r in data["layers"]] == ["src", "shared", "tgt", "tgt"]
    torch.testing.assert_close(
        torch.tensor(data["layers"][0]["src"]), torch.softmax(torch.tensor(logits[0]), 0)[1]
    )
    # the selected recipe builds and trains, and its routes cost what the baseline's do
    trainer = Trainer(
        recipe.model_copy(update={"training": recipe.training.model_copy(update={"max_steps": 1})}),
        tmp_path / "selected_run",
        progress=False,
    )
    summary = trainer.run()
    dense_cfg = recipe.model.model_copy(update={"language_specific": LanguageSpecificConfig()})
    dense = build_model(dense_cfg, trainer.model.vocab_size, trainer.data.languages)
    assert summary["parameters_per_route"] == dense.route_parameter_count(trainer.data.routes[0])
    # a search model is not exportable (mixing is not a dense model)
    from model_export.__main__ import main as export_main

    with pytest.raises(SystemExit, match="architecture-search"):
        export_main(["--checkpoint", str(search_run), "--out", str(tmp_path / "bundle")])


@pytest.mark.parametrize("name", ["tiny_lsl_nas", "tiny_lsl_nas_sd"])
def test_dense_initialisation_copies_weights_exactly(name, lsl_corpus, lsl_tokenizer, tmp_path):
    """LSL paper 3.3: every language's copy of an LSL starts as the dense layer."""
    lsl_recipe = tiny(name, lsl_corpus, lsl_tokenizer)
    dense_model = lsl_recipe.model.model_copy(
        update={"language_specific": LanguageSpecificConfig()}
    )
    dense_recipe = lsl_recipe.model_copy(update={"model": dense_model, "name": "dense"})
    Trainer(dense_recipe, tmp_path / "dense", progress=False).run()
    dense = load_checkpoint(tmp_path / "dense", "last")["model"]
    init = lsl_recipe.model_copy(update={"init_from": tmp_path / "dense", "init_mode": "copy"})
    trainer = Trainer(init, tmp_path / "lsl", progress=False)
    state = trainer.model.state_dict()
    copies = 0
    for key, value in state.items():
        dense_key = key
        if ".by_lang." in key and key.startswith("encoder."):
            prefix, rest = key.split(".by_lang.", 1)
            dense_key = f"{prefix}.{rest.split('.', 1)[1]}"
            copies += 1
        assert torch.equal(value, dense[dense_key]), key
    assert copies > 0
    n_langs = len(trainer.data.languages)
    ls = init.model.language_specific
    per_layer = sum(1 for k in dense if k.startswith("encoder.layers.0."))
    assert copies == n_langs * per_layer * (len(ls.encoder_src) + len(ls.encoder_tgt))
    # every route computes what the dense model computes
    dense_net = build_model(dense_model, trainer.model.vocab_size, trainer.data.languages)
    dense_net.load_state_dict(dense)
    trainer.model.eval()
    dense_net.eval()
    b = batch(Route("de", "en"), vocab=trainer.model.vocab_size)
    for route in trainer.data.routes:
        torch.testing.assert_close(
            trainer.model(b.src, b.tgt_in, route).logits, dense_net(b.src, b.tgt_in, route).logits
        )
