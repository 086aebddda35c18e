"""The parity check shared by the parity test modules: the assembled CTranslate2 engine of a
route decodes as the PyTorch model does, token for token; and the once-per-module training of
tiny bundle variants."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from lsmt_bundle import load_bundle
from lsmt_bundle.ct2 import load_translator
from tests.bundles import TinyBundle, make_tiny_bundle
from training.model import Route
from training.search import greedy_search

N_SENTENCES = 6
MAX_LEN = 48


def variant_trainer(
    tmp_path_factory, variants: dict[str, dict], **bundle_kw: Callable[[str], object]
) -> Callable[[str], TinyBundle]:
    """``train(name)``: the tiny bundle of ``variants[name]`` (model overrides), trained once;
    each ``bundle_kw`` value maps the name to that ``make_tiny_bundle`` argument."""
    done: dict[str, TinyBundle] = {}

    def train(name: str) -> TinyBundle:
        if name not in done:
            kw = {k: of(name) for k, of in bundle_kw.items()}
            out = tmp_path_factory.mktemp(name)
            done[name] = make_tiny_bundle(out, model_overrides=variants[name], **kw)
        return done[name]

    return train


def _sources(tb: TinyBundle, bundle, src: str, tgt: str) -> list[list[str]]:
    # Real verses the model was trained on: parity needs inputs it translates confidently.
    lines = tb.verses[src][-N_SENTENCES:]
    return [bundle.source_pieces(tb.sp.encode(line, out_type=str), src, tgt) for line in lines]


def _torch_greedy(tb: TinyBundle, pieces: list[str], route: Route):
    ids = torch.tensor([[tb.sp.piece_to_id(p) for p in pieces]])
    return greedy_search(tb.model, ids, route, max_len=MAX_LEN)[0]


def assert_engine_matches_pytorch(tiny: TinyBundle, route: tuple[str, str]) -> None:
    """The route's assembled engine decodes as the PyTorch model: greedy tokens identical,
    per-token log-probs within 1e-3, on verses the model was trained on; and the outputs are
    not degenerate (an untrained model proves nothing)."""
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
