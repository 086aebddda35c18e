"""The method registry (``training.model.methods``): every registration's manifest record has
its fusion maths in ``lsmt_bundle.fusions``; every parameter a method adds is owned by it; the
builder, method_params and the exporter see the methods through it; the LMS path is an
argument; and the shipped model's weights export to the shipped bundle byte for byte."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
import torch

from lsmt_bundle import load_bundle
from lsmt_bundle.fusions import FUSION_RULES
from lsmt_core.manifest import Fusion
from lsmt_core.routes import Route
from tests.tiny import random_batch, tiny_model_config
from training.model import build_model
from training.model.layers import LS_PATH, SHARED_PATH
from training.model.methods import (
    METHODS,
    active_methods,
    fused_weights,
    method_fusions,
    module_tensors,
    parameter_owner,
    stored_in_bundle,
)
from training.model.sparse_transformer import SparseTransformer

ROOT = Path(__file__).resolve().parents[1]
LANGS = ["de", "en", "fr"]
SPARSE = {"attention": True, "heads_kept": 1, "layers": True}
SPARSE |= {"encoder_layers_kept": 1, "decoder_layers_kept": 1}
CONFIGS = {
    "lms-fd": dict(lms={"rank": 2, "fuse_distill": True}),
    "laa-lee": dict(laa={"places": ["decoder_self"], "lee_points": [3, 5]}),
    "sparse": dict(sparse=SPARSE),
    "hybrid": dict(decoder_kind="lstm"),
}


def test_every_record_a_method_writes_has_its_fusion_rule():
    records = typing.get_args(typing.get_args(Fusion)[0])
    rules = {typing.get_args(r.model_fields["rule"].annotation)[0] for r in records}
    written = {m.rule for m in METHODS if m.rule is not None}
    assert written <= rules and written <= set(FUSION_RULES)
    assert len({m.name for m in METHODS}) == len(METHODS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_methods_own_exactly_the_parameters_they_add(name):
    cfg = tiny_model_config(**CONFIGS[name])
    model = build_model(cfg, 40, LANGS)
    dense = build_model(tiny_model_config(), 40, LANGS)
    added = {n for n, _ in model.named_parameters()} - {n for n, _ in dense.named_parameters()}
    owned = {n for n, _ in model.named_parameters() if parameter_owner(n) is not None}
    assert owned <= added  # the hybrid's LSTM decoder is the base model of its class
    kinds = {kind for m in active_methods(cfg) for kind in m.kinds}
    assert {parameter_owner(n)[1] for n in owned} == kinds  # type: ignore[index]


def test_the_sparse_method_builds_its_class_and_exports_gates_not_logits():
    cfg = tiny_model_config(sparse=SPARSE)
    model = build_model(cfg, 40, LANGS)
    assert isinstance(model, SparseTransformer)
    assert not any(stored_in_bundle(n) for n, _ in model.named_parameters() if "sparse_" in n)
    tensors = module_tensors(model, ["de", "en"])
    modules = {(index, lang) for index in ("src", "tgt") for lang in ("de", "en")}
    assert {(t.index, t.lang) for t in tensors} == modules
    [fusion] = method_fusions(model)
    assert fused_weights([fusion])("encoder.layers.0.ffn.fc1.weight")
    assert not fused_weights([fusion])("embed_tokens.weight")


def test_each_lms_path_stores_its_own_factors():
    model = build_model(tiny_model_config(lms={"rank": 2, "fuse_distill": True}), 40, LANGS)
    shared = "encoder.layers.0.ffn.fc1.lms_shared_v.weight"
    by_lang = "encoder.layers.0.ffn.fc1.lms_v.by_lang.de.weight"
    assert stored_in_bundle(by_lang, LS_PATH) and not stored_in_bundle(shared, LS_PATH)
    assert stored_in_bundle(shared, SHARED_PATH) and not stored_in_bundle(by_lang, SHARED_PATH)
    assert stored_in_bundle("encoder.layers.0.ffn.fc1.weight", SHARED_PATH)
    [record] = method_fusions(model, SHARED_PATH)
    assert record.rule == "low_rank_sum" and record.path == SHARED_PATH


def test_the_lms_path_is_an_argument_not_model_state():
    model = build_model(tiny_model_config(lms={"rank": 2, "fuse_distill": True}), 40, LANGS)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lms_f." in n or ".lms_shared_f." in n:
                p.normal_(std=0.1)
    route = Route("de", "en")
    b = random_batch(route, 40)
    model.eval()
    with torch.no_grad():
        ls = model(b.src, b.tgt_in, route).logits
        shared = model(b.src, b.tgt_in, route, lms_path=SHARED_PATH).logits
        again = model(b.src, b.tgt_in, route).logits
    assert not hasattr(model, "lms_path")
    assert torch.equal(ls, again) and not torch.allclose(ls, shared, atol=1e-4)


@pytest.mark.slow
def test_the_shipped_weights_export_to_the_shipped_bundle_byte_for_byte(tmp_path):
    """models/default's weights, read back as a checkpoint and exported with the bundle's own
    settings, give the same manifest and the same files (checksums) as the shipped bundle."""
    from model_export.from_torch import export_bundle
    from model_export.to_checkpoint import checkpoint_from_bundle
    from training.checkpoint import model_from_checkpoint

    default = ROOT / "models" / "default"
    bundle = load_bundle(default)
    manifest = bundle.manifest
    assert manifest.target_vocab is not None
    model = model_from_checkpoint(checkpoint_from_bundle(default)).eval()
    vocab = {lang: bundle.read_module(f"tgt/{lang}")["target_vocab.ids"].tolist()
             for lang in manifest.languages}  # fmt: skip
    export_bundle(
        model,
        tmp_path / "again",
        name=manifest.name,
        tokenizer_model=default / manifest.tokenizer.path,
        routes=[Route(*r) for r in manifest.routes],
        languages=manifest.languages,
        store_dtype=manifest.store_dtype,
        target_vocab=vocab,
        target_vocab_rule=(manifest.target_vocab.min_count, manifest.target_vocab.max_size),
        provenance=manifest.provenance,
    )
    again = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert again == json.loads((default / "manifest.json").read_text())
