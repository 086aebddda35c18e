"""Parity, the heart of the suite: assembled CTranslate2 engine == PyTorch model, per route.

Each variant is a tiny model briefly trained on real verses (an untrained model repeats one
token and proves nothing), exported as a float32 bundle and compared token for token.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_export.bundle import load_bundle
from model_export.ct2 import load_translator
from tests.bundles import TinyBundle, make_tiny_bundle
from training.model import Route
from training.search import greedy_search

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
N_SENTENCES = 6
MAX_LEN = 48


@pytest.fixture(scope="module")
def train_variant(tmp_path_factory):
    """``train_variant(name)``: the variant's tiny bundle, trained once per module."""
    done: dict[str, TinyBundle] = {}

    def train(name: str) -> TinyBundle:
        if name not in done:
            # the sparse model also learns its selection (docs/sparse.md): more updates
            steps = 800 if "sparse" in VARIANTS[name] else 400
            out = tmp_path_factory.mktemp(name)
            done[name] = make_tiny_bundle(out, model_overrides=VARIANTS[name], steps=steps)
        return done[name]

    return train


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def tiny(request, train_variant) -> TinyBundle:
    return train_variant(request.param)


@pytest.fixture(scope="module")
def sparse_tiny(train_variant) -> TinyBundle:
    return train_variant("sparse-heads-ffn-layers")


def _sources(tb: TinyBundle, bundle, src: str, tgt: str) -> list[list[str]]:
    # Real verses the model was trained on: parity needs inputs it translates confidently.
    lines = tb.verses[src][-N_SENTENCES:]
    return [bundle.source_pieces(tb.sp.encode(line, out_type=str), src, tgt) for line in lines]


def _torch_greedy(tb: TinyBundle, pieces: list[str], route: Route):
    ids = torch.tensor([[tb.sp.piece_to_id(p) for p in pieces]])
    return greedy_search(tb.model, ids, route, max_len=MAX_LEN)[0]


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r[0]}-{r[1]}")
def test_engine_matches_pytorch(tiny: TinyBundle, route):
    bundle = load_bundle(tiny.path)
    src, tgt = route
    translator, _ = load_translator(bundle.assemble(src, tgt), compute_type="float32")
    sources = _sources(tiny, bundle, src, tgt)
    results = translator.translate_batch(sources, beam_size=1, max_decoding_length=MAX_LEN)
    distinct: set[str] = set()
    for pieces, result in zip(sources, results, strict=True):
        expected = _torch_greedy(tiny, pieces, Route(src, tgt))
        got = result.hypotheses[0]
        assert [tiny.sp.piece_to_id(p) for p in got] == expected.tokens
        distinct.update(got)
        if len(expected.tokens) < MAX_LEN:  # finished with EOS: compare per-token log-probs
            scored = translator.score_batch([pieces], [got])[0]
            np.testing.assert_allclose(scored.log_probs, expected.log_probs, atol=1e-3)
    # A degenerate (untrained) model would emit one or two pieces; this one must say more.
    assert len(distinct) >= 10, f"outputs look untrained: {sorted(distinct)}"


def test_sparse_routes_are_smaller_engines_with_their_own_subnetworks(sparse_tiny: TinyBundle):
    tiny = sparse_tiny
    assert "sparse" in tiny.model.cfg.model_fields_set
    bundle = load_bundle(tiny.path)
    full = bundle.manifest.architecture
    selections = []
    for src, tgt in ROUTES:
        dense = bundle.assemble(src, tgt)
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
