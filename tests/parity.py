"""The parity check shared by the parity test modules: the assembled engine of a route (a
CTranslate2 translator, or the hybrid engine of an LSTM-decoder model) decodes as the PyTorch
model does, token for token; and the once-per-module training of tiny bundle variants."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from lsmt_bundle import load_bundle
from lsmt_bundle.engines import load_engine
from tests.bundles import TinyBundle, make_tiny_bundle
from training.model import Route
from training.model.layers import LS_PATH
from training.search import greedy_search, output_mask

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


def sources_of(tb: TinyBundle, bundle, src: str, tgt: str) -> list[list[str]]:
    # Real verses the model was trained on: parity needs inputs it translates confidently.
    lines = tb.verses[src][-N_SENTENCES:]
    route = Route(src, tgt)
    return [bundle.source_pieces(tb.sp.encode(line, out_type=str), route) for line in lines]


def source_ids(tb: TinyBundle, pieces: list[str]) -> torch.Tensor:
    return torch.tensor([[tb.sp.piece_to_id(p) for p in pieces]])


def allowed_pieces(tb: TinyBundle, dense) -> torch.Tensor | None:
    """The output mask of a route whose target vocabulary is filtered (None: the full one)."""
    if len(dense.target_vocab) == len(dense.source_vocab):
        return None
    ids = [tb.sp.piece_to_id(p) for p in dense.target_vocab]
    return output_mask(ids, tb.model.vocab_size, "cpu")


def _torch_greedy(tb: TinyBundle, pieces: list[str], route: Route, allowed, lms_path: str):
    ids = source_ids(tb, pieces)
    return greedy_search(tb.model, ids, route, MAX_LEN, allowed, lms_path=lms_path)[0]


def assert_engine_matches_pytorch(
    tiny: TinyBundle, route: tuple[str, str], device: str = "cpu", lms_path: str = LS_PATH
) -> None:
    """The route's assembled engine (float32, on ``device``) decodes as the PyTorch model on
    the CPU (on LMS path ``lms_path``, the one the bundle was exported on): greedy tokens
    identical, per-token log-probs within 1e-3, on verses the model was trained on; and the
    outputs are not degenerate (an untrained model proves nothing)."""
    bundle = load_bundle(tiny.path)
    src, tgt = route
    dense = bundle.assemble(Route(src, tgt))
    allowed = allowed_pieces(tiny, dense)
    translator, _ = load_engine(dense, compute_type="float32", device=device)
    sources = sources_of(tiny, bundle, src, tgt)
    results = translator.translate_batch(sources, beam_size=1, max_decoding_length=MAX_LEN)
    distinct: set[str] = set()
    for pieces, result in zip(sources, results, strict=True):
        expected = _torch_greedy(tiny, pieces, Route(src, tgt), allowed, lms_path)
        got = result.hypotheses[0]
        assert [tiny.sp.piece_to_id(p) for p in got] == expected.tokens
        distinct.update(got)
        if len(expected.tokens) < MAX_LEN:  # finished with EOS: compare per-token log-probs
            scored = translator.score_batch([pieces], [got])[0]
            np.testing.assert_allclose(scored.log_probs, expected.log_probs, atol=1e-3)
    # A degenerate (untrained) model would emit one or two pieces; this one must say more.
    assert len(distinct) >= 10, f"outputs look untrained: {sorted(distinct)}"
