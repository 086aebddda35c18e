"""Parity, the heart of the suite: assembled CTranslate2 engine == PyTorch model, per route.

Each variant is a tiny model briefly trained on real verses (an untrained model repeats one
token and proves nothing), exported as a float32 bundle and compared token for token.
"""

from __future__ import annotations

import numpy as np
import pytest

from lsmt_bundle import load_bundle
from server.settings import cuda_device_count
from tests.bundles import TinyBundle
from tests.parity import assert_engine_matches_pytorch, variant_trainer
from training.model import Route

pytestmark = pytest.mark.slow

SPARSE = dict(
    attention=True,
    heads_kept=3,
    ffn=True,
    ffn_blocks=4,
    ffn_blocks_kept=2,
    layers=True,
    encoder_layers_kept=2,
    decoder_layers_kept=1,
    phase_one_steps=200,
    temperature_decay=0.01,
    # a run this short needs: start near the dense model, selection logits that separate
    initial_logit=3.0,
    score_lr_scale=100.0,
)
# Each variant combines several options so that every code path is covered in few trainings.
VARIANTS = {
    "baseline-shared-prenorm": {},
    "separate-decoders-postnorm-gelu-lsltags-lsffn": dict(
        decoder_sharing="separate",
        pre_norm=False,
        activation="gelu",
        tag_scheme="lsl",
        encoder_layers=4,
        decoder_layers=1,
        language_specific={"encoder_src": [2], "encoder_tgt": [3], "component": "ffn"},
    ),
    "lsl-layer-encoder-and-decoder": dict(
        language_specific={"encoder_src": [1], "encoder_tgt": [3], "decoder_tgt": [2]}
    ),
    "lsl-attention": dict(
        language_specific={"encoder_src": [1], "decoder_tgt": [2], "component": "attention"}
    ),
    # adaptive sparse (docs/sparse.md): each route's engine is its selected sub-network
    "sparse-heads-ffn-layers": dict(
        encoder_layers=3,
        decoder_layers=2,
        sparse=SPARSE,
    ),
}
ROUTES = [("de", "en"), ("en", "fr"), ("fr", "de")]


@pytest.fixture(scope="module")
def train_variant(tmp_path_factory):
    # the sparse model also learns its selection (docs/sparse.md): more updates
    steps = {"steps": lambda name: 800 if "sparse" in VARIANTS[name] else 400}
    return variant_trainer(tmp_path_factory, VARIANTS, **steps)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def tiny(request, train_variant) -> TinyBundle:
    return train_variant(request.param)


@pytest.fixture(scope="module")
def sparse_tiny(train_variant) -> TinyBundle:
    return train_variant("sparse-heads-ffn-layers")


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r[0]}-{r[1]}")
def test_engine_matches_pytorch(tiny: TinyBundle, route):
    assert_engine_matches_pytorch(tiny, route)


@pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device (CTranslate2 sees none)")
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r[0]}-{r[1]}")
def test_cuda_engine_matches_pytorch(tiny: TinyBundle, route):
    """The same engines on the GPU (CTranslate2's CUDA kernels, float32)."""
    assert_engine_matches_pytorch(tiny, route, device="cuda")


def test_sparse_routes_are_smaller_engines_with_their_own_subnetworks(sparse_tiny: TinyBundle):
    tiny = sparse_tiny
    assert "sparse" in tiny.model.cfg.model_fields_set
    bundle = load_bundle(tiny.path)
    full = bundle.manifest.architecture
    selections = []
    for src, tgt in ROUTES:
        dense = bundle.assemble(Route(src, tgt))
        a = dense.architecture
        assert (a.encoder_layers, a.decoder_layers) == (2, 1)  # dropped layers are gone
        assert a.ffn_dim == full.ffn_dim // 2
        assert dense.weights["encoder.layers.0.ffn.fc1.weight"].shape == (a.ffn_dim, a.d_model)
        assert "encoder.layers.2.ffn.fc1.weight" not in dense.weights
        # 3 of 4 heads: one head's out_proj columns are exactly zero in every attention module
        w = dense.weights["decoder.layers.0.cross_attn.out_proj.weight"]
        zero_heads = (np.abs(w).reshape(a.d_model, a.heads, -1).sum(axis=(0, 2)) == 0).sum()
        assert zero_heads == 1
        selections.append((dense.weights["encoder.layers.0.self_attn.q_proj.weight"].tobytes(),))
        ffn_params = sum(v.size for k, v in dense.weights.items() if ".ffn.fc" in k)
        assert ffn_params < tiny.model.route_parameter_count(Route(src, tgt))
    masks = tiny.model.sparse_scores.selection()
    langs = tiny.model.languages
    subnets = {
        (src, tgt): (
            [m[langs.index(src)].tolist() for g, m in masks.items() if g.startswith("encoder")],
            [m[langs.index(tgt)].tolist() for g, m in masks.items() if g.startswith("decoder")],
        )
        for src, tgt in ROUTES
    }
    assert len({repr(v) for v in subnets.values()}) == len(ROUTES), "routes share a sub-network"
