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
}
ROUTES = [("de", "en"), ("en", "fr"), ("fr", "de")]
N_SENTENCES = 6
MAX_LEN = 48


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def tiny(request, tmp_path_factory) -> TinyBundle:
    out = tmp_path_factory.mktemp(request.param)
    return make_tiny_bundle(out, model_overrides=VARIANTS[request.param], steps=400)


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
