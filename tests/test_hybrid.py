"""The hybrid model (Transformer encoder + LSTM decoder, Shallow paper section 3.2): the PyTorch
model, its start from a trained Transformer, its bundle, and its engine (CTranslate2 encoder +
ONNX Runtime decoder) against PyTorch, token for token."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from lsmt_bundle import load_bundle
from lsmt_bundle.engine_cache import EngineCache, fill_entry
from lsmt_bundle.engines import engine_files, load_engine, open_engine, save_engine
from lsmt_bundle.hybrid import HybridTranslator
from lsmt_core.manifest import Architecture
from tests.bundles import TinyBundle
from tests.parity import (
    MAX_LEN,
    allowed_pieces,
    assert_engine_matches_pytorch,
    source_ids,
    sources_of,
    variant_trainer,
)
from training.checkpoint import init_from_checkpoint
from training.model import ModelConfig, Route, build_model
from training.model.hybrid import HybridTransformer
from training.search import beam_search, greedy_search

TINY = dict(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)


def _model(**kw) -> HybridTransformer:
    torch.manual_seed(0)
    model = build_model(ModelConfig(**{**TINY, "decoder_kind": "lstm", **kw}), 90, ["en", "fr"])
    assert isinstance(model, HybridTransformer)
    return model.eval()


# -- the PyTorch model -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [{}, {"decoder_sharing": "separate"}, {"lstm_hidden_size": 24, "decoder_layers": 3}],
    ids=["shared", "separate", "hidden-24-3-layers"],
)
def test_incremental_decoding_equals_the_teacher_forced_pass(kw):
    model = _model(**kw)
    route = Route("en", "fr")
    src = torch.randint(5, 90, (3, 7))
    src[0, 4:] = 0  # padding is masked out of the attention
    tgt = torch.randint(5, 90, (3, 6))
    with torch.no_grad():
        full = model(src, tgt, route).logits
        memory, mask = model.encode(src, route)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, mask, route, cache, t) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    # the cache is used: without it a beam search re-runs the prefix and finds the same
    with_cache = beam_search(model, src, route, beam_size=3, max_len=10)
    without = beam_search(model, src, route, beam_size=3, max_len=10, use_cache=False)
    assert [h.tokens for h in with_cache] == [h.tokens for h in without]


def test_the_decoder_is_the_papers_lstm_and_separate_decoders_are_per_target():
    model = _model(decoder_sharing="separate", lstm_hidden_size=24)
    names = {n for n, _ in model.named_parameters() if ".by_lang.fr." in n}
    assert "decoder.by_lang.fr.layers.0.lstm.weight_ih_l0" in names
    assert "decoder.by_lang.fr.layers.0.norm.weight" in names  # layer norm on the input
    assert "decoder.by_lang.fr.attention.energy.weight" in names  # additive, one head
    assert "decoder.by_lang.fr.out_proj.weight" in names  # hidden 24 -> d_model 32
    lstm = model.decoder.by_lang["fr"].layers[1].lstm
    assert (lstm.input_size, lstm.hidden_size) == (24 + 32, 24)  # [output; context]
    assert not any(".self_attn." in n or "cross_attn" in n for n, _ in model.named_parameters()
                   if n.startswith("decoder"))  # fmt: skip


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"lms": {"rank": 2}}, "lms"),
        ({"language_specific": {"decoder_tgt": [1]}}, "decoder LSL"),
        ({"decoder_kind": "transformer", "lstm_hidden_size": 8}, "lstm_hidden_size"),
    ],
)
def test_config_refuses_what_the_hybrid_cannot_be(kw, message):
    with pytest.raises(ValidationError, match=message):
        ModelConfig(**{**TINY, "decoder_kind": "lstm", **kw})


def test_hybrid_init_copies_all_but_the_decoder_from_a_trained_transformer():
    torch.manual_seed(1)
    transformer = build_model(ModelConfig(**TINY), 90, ["en", "fr"])
    ckpt = {
        "model": transformer.state_dict(),
        "model_config": transformer.cfg.model_dump(mode="json"),
        "vocab_size": 90,
    }
    hybrid = _model()
    fresh = {n: p.clone() for n, p in hybrid.state_dict().items() if n.startswith("decoder.")}
    init_from_checkpoint(hybrid, ckpt, mode="hybrid")
    for name, value in hybrid.state_dict().items():
        if name.startswith("decoder."):
            assert torch.equal(value, fresh[name])  # the new decoder starts at random
        else:
            assert torch.equal(value, transformer.state_dict()[name]), name
    with pytest.raises(ValueError, match="hybrid"):
        init_from_checkpoint(_model(), ckpt, mode="copy")  # no decoder to copy: say so


def test_transformer_manifests_read_and_write_as_before():
    base = dict(d_model=8, heads=2, ffn_dim=8, activation="relu", pre_norm=True)
    base.update(layer_norm_eps=1e-5, encoder_layers=1, decoder_layers=1, max_positions=8)
    transformer = Architecture(**base)
    assert "decoder_kind" not in transformer.model_dump_json()  # old readers still read it
    hybrid = Architecture(**base, decoder_kind="lstm", lstm_hidden_size=8)
    assert Architecture.model_validate_json(hybrid.model_dump_json()) == hybrid
    with pytest.raises(ValidationError, match="lstm_hidden_size"):
        Architecture(**base, decoder_kind="lstm")


# -- exported and served: parity with PyTorch --------------------------------------------------

VARIANTS = {
    "hybrid-shared-vocab": dict(decoder_kind="lstm"),
    "hybrid-separate-lsl-postnorm-hidden48": dict(
        decoder_kind="lstm",
        decoder_sharing="separate",
        lstm_hidden_size=48,
        pre_norm=False,
        encoder_layers=3,
        language_specific={"encoder_src": [2]},
    ),
}
ROUTES = [Route("de", "en"), Route("en", "fr")]


@pytest.fixture(scope="module")
def train_variant(tmp_path_factory):
    vocab = {"target_vocab_size": lambda name: 220 if name.endswith("vocab") else None}
    return variant_trainer(tmp_path_factory, VARIANTS, steps=lambda name: 400, **vocab)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def tiny(request, train_variant) -> TinyBundle:
    return train_variant(request.param)


@pytest.mark.slow
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r[0]}-{r[1]}")
def test_hybrid_engine_matches_pytorch_greedy(tiny: TinyBundle, route):
    """Greedy tokens identical, per-token log-probs within 1e-3, outputs not degenerate."""
    assert_engine_matches_pytorch(tiny, route)


@pytest.mark.slow
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r[0]}-{r[1]}")
def test_hybrid_engine_beam_search_finds_pytorchs_best_hypothesis(tiny: TinyBundle, route):
    bundle = load_bundle(tiny.path)
    dense = bundle.assemble(route)
    engine, _ = load_engine(dense, compute_type="float32")
    allowed = allowed_pieces(tiny, dense)
    sources = sources_of(tiny, bundle, *route)
    results = engine.translate_batch(
        sources, beam_size=4, max_decoding_length=MAX_LEN, min_decoding_length=0
    )
    for pieces, result in zip(sources, results, strict=True):
        ids = source_ids(tiny, pieces)
        best = beam_search(tiny.model, ids, route, 4, MAX_LEN, allowed=allowed)[0]
        assert [tiny.sp.piece_to_id(p) for p in result.hypotheses[0]] == best.tokens
        expected = best.score / len(best.log_probs)  # length penalty 1: per token
        assert result.scores[0] == pytest.approx(expected, abs=1e-3)


@pytest.fixture(scope="module")
def shared(train_variant) -> TinyBundle:
    return train_variant("hybrid-shared-vocab")


@pytest.mark.slow
def test_decoding_options_hold_on_the_hybrid_engine(shared: TinyBundle):
    """What the server asks of every engine: alternatives, a minimum length and the
    repetition guards."""
    bundle = load_bundle(shared.path)
    engine, _ = load_engine(bundle.assemble(Route("en", "de")), compute_type="float32")
    sources = sources_of(shared, bundle, "en", "de")
    alternatives = engine.translate_batch(sources, beam_size=4, num_hypotheses=3)
    for result in alternatives:
        assert len({tuple(h) for h in result.hypotheses}) == 3
        assert result.scores == sorted(result.scores, reverse=True)
    for result in engine.translate_batch(sources, beam_size=2, min_decoding_length=40):
        assert len(result.hypotheses[0]) >= 40
    for result in engine.translate_batch(sources, beam_size=1, no_repeat_ngram_size=2):
        bigrams = list(zip(result.hypotheses[0], result.hypotheses[0][1:], strict=False))
        assert len(bigrams) == len(set(bigrams))
    # a long sentence beside short ones: each ends on its own (finished rows leave the batch)
    one_by_one = [engine.translate_batch([s], beam_size=4)[0].hypotheses for s in sources]
    together = [r.hypotheses for r in engine.translate_batch(sources, beam_size=4)]
    assert together == one_by_one
    with pytest.raises(ValueError, match="num_hypotheses"):
        engine.translate_batch(sources, beam_size=1, num_hypotheses=2)


@pytest.mark.slow
def test_int8_hybrid_engine_is_smaller_and_still_translates(shared: TinyBundle, tmp_path):
    bundle = load_bundle(shared.path)
    dense = bundle.assemble(Route("de", "en"))
    sources = sources_of(shared, bundle, "de", "en")
    f32, f32_bytes = load_engine(dense, compute_type="float32")
    int8, int8_bytes = load_engine(bundle.assemble(Route("de", "en")), compute_type="int8")
    assert isinstance(int8, HybridTranslator)
    assert int8_bytes < f32_bytes / 2
    reference = [r.hypotheses[0] for r in f32.translate_batch(sources, beam_size=1)]
    quantized = [r.hypotheses[0] for r in int8.translate_batch(sources, beam_size=1)]
    # int8 rounding moves some tokens of a model this small; the translations stay close
    pairs = zip(reference, quantized, strict=True)
    overlap = np.mean([len(set(a) & set(b)) / max(len(set(a)), 1) for a, b in pairs])
    assert overlap > 0.5, (reference, quantized)
    # a saved engine directory opens as the same engine
    saved = save_engine(bundle.assemble(Route("de", "en")), tmp_path / "engine", "int8")
    assert json.loads((saved / "hybrid.json").read_text())["quantization"] == "int8"
    reopened, _ = open_engine(saved, compute_type="int8")
    assert [r.hypotheses[0] for r in reopened.translate_batch(sources, beam_size=1)] == quantized


@pytest.mark.slow
def test_engine_cache_stores_and_serves_hybrid_engines(shared: TinyBundle, tmp_path):
    bundle = load_bundle(shared.path)
    cache = EngineCache(tmp_path / "cache", 1 << 30)
    entry, was_there = fill_entry(cache, bundle, Route("en", "fr"), "int8")
    assert not was_there and (entry / "decoder_step.onnx").is_file()
    assert fill_entry(cache, bundle, Route("en", "fr"), "int8") == (entry, True)
    engine, _ = open_engine(entry, compute_type="int8")
    files = engine_files(bundle.assemble(Route("en", "fr"), keep_int8=True), "int8")
    built, _ = open_engine(files, compute_type="int8")
    sources = sources_of(shared, bundle, "en", "fr")
    assert [r.hypotheses for r in engine.translate_batch(sources)] == [
        r.hypotheses for r in built.translate_batch(sources)
    ]


def test_greedy_search_of_the_hybrid_is_beam_one():
    model = _model()
    src = torch.randint(5, 90, (2, 6))
    greedy = greedy_search(model, src, Route("en", "fr"), max_len=12)
    beam = beam_search(model, src, Route("en", "fr"), beam_size=1, max_len=12)
    assert [h.tokens for h in greedy] == [h.tokens for h in beam]
