"""Model, search and weight-initialisation tests (tiny models, CPU, seconds)."""

from __future__ import annotations

import pytest
import torch

from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID
from tests.tiny import tiny_model_config
from training.batching import Batch
from training.checkpoint import init_from_checkpoint
from training.model import Route, build_model
from training.model.layers import Conditioning
from training.search import beam_search, greedy_search
from training.step import label_smoothed_nll, train_step

LANGS = ["de", "en", "fr"]
DE_EN = Route("de", "en")


pytestmark = pytest.mark.usefixtures("one_thread")


def rand_src(b: int, s: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(4, vocab, (b, s), generator=gen)


@pytest.mark.parametrize("pre_norm", [True, False])
@pytest.mark.parametrize("sharing", ["shared", "separate"])
def test_shapes_and_padding_mask(pre_norm: bool, sharing: str):
    torch.manual_seed(0)
    model = build_model(
        tiny_model_config(pre_norm=pre_norm, decoder_sharing=sharing), 50, LANGS
    ).eval()
    gen = torch.Generator().manual_seed(1)
    src = rand_src(3, 7, 50, gen)
    tgt = torch.cat([torch.full((3, 1), BOS_ID), rand_src(3, 5, 50, gen)], dim=1)
    logits = model(src, tgt, DE_EN).logits
    assert logits.shape == (3, 6, 50)
    # extra padding columns change nothing
    padded = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, tgt, DE_EN).logits, logits, rtol=1e-5, atol=1e-5)
    # row 0 shortened by padding == row 0 alone, unpadded
    src2 = src.clone()
    src2[0, 4:] = PAD_ID
    alone = model(src2[:1, :4], tgt[:1], DE_EN).logits
    torch.testing.assert_close(model(src2, tgt, DE_EN).logits[:1], alone, rtol=1e-5, atol=1e-5)
    # encoder states at padded positions are invisible to the decoder
    memory, mask = model.encode(src2, DE_EN)
    noisy = memory.clone()
    noisy[0, 4:] += 100.0
    torch.testing.assert_close(
        model.decode(tgt, noisy, mask, DE_EN)[0], model.decode(tgt, memory, mask, DE_EN)[0]
    )
    # ... while a real position is visible (the test can fail)
    noisy[0, 2] += 100.0
    assert not torch.allclose(
        model.decode(tgt, noisy, mask, DE_EN)[0], model.decode(tgt, memory, mask, DE_EN)[0]
    )


def test_causal_mask():
    torch.manual_seed(0)
    model = build_model(tiny_model_config(), 50, LANGS).eval()
    gen = torch.Generator().manual_seed(2)
    src = rand_src(2, 6, 50, gen)
    tgt = torch.cat([torch.full((2, 1), BOS_ID), rand_src(2, 7, 50, gen)], dim=1)
    base = model(src, tgt, DE_EN).logits
    for j in (1, 4, 7):
        changed = tgt.clone()
        changed[:, j] = (changed[:, j] + 7) % 46 + 4
        out = model(src, changed, DE_EN).logits
        torch.testing.assert_close(out[:, :j], base[:, :j], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(out[:, j:], base[:, j:])  # the future does see it


def test_routes_use_their_own_decoder():
    torch.manual_seed(0)
    model = build_model(tiny_model_config(decoder_sharing="separate"), 50, LANGS).eval()
    src = rand_src(2, 5, 50, torch.Generator().manual_seed(3))
    tgt = torch.full((2, 1), BOS_ID)
    a, b = model(src, tgt, Route("de", "en")).logits, model(src, tgt, Route("de", "fr")).logits
    assert not torch.allclose(a, b)
    shared = build_model(tiny_model_config(), 50, LANGS)
    dec = sum(p.numel() for p in shared.decoder.parameters())
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(p.numel() for p in shared.parameters()) + 2 * dec
    assert model.route_parameter_count(Route("de", "en")) == sum(
        p.numel() for p in shared.parameters()
    )


def copy_batch(gen: torch.Generator, b: int = 64, vocab: int = 16) -> Batch:
    lengths = torch.randint(3, 9, (b,), generator=gen)
    s = int(lengths.max())
    src = torch.zeros(b, s + 1, dtype=torch.long)
    tgt_in = torch.zeros(b, s + 1, dtype=torch.long)
    gold = torch.zeros(b, s + 1, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        seq = torch.randint(4, vocab, (n,), generator=gen)
        src[i, :n], src[i, n] = seq, EOS_ID
        tgt_in[i, 0], tgt_in[i, 1 : n + 1] = BOS_ID, seq
        gold[i, :n], gold[i, n] = seq, EOS_ID
    ntok = int((gold != PAD_ID).sum())
    return Batch(DE_EN, src, tgt_in, gold, ntok, int((src != PAD_ID).sum()))


@pytest.fixture(scope="module")
def copy_model():
    """A tiny model trained on the copy task (a few seconds on CPU)."""
    torch.manual_seed(0)
    model = build_model(tiny_model_config(d_model=64, ffn_dim=128), 16, LANGS)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(0)
    losses = []
    model.train()
    for _ in range(500):
        stats = train_step(
            model,
            [copy_batch(gen)],
            opt,
            None,
            label_smoothing=0.0,
            clip_norm=1.0,
            device=torch.device("cpu"),
        )
        losses.append(stats.nll)
        if len(losses) >= 10 and sum(losses[-10:]) / 10 < 0.02:  # ~200 steps
            break
    return model.eval(), losses


def test_tiny_model_learns_copy(copy_model):
    model, losses = copy_model
    assert losses[0] > 1.5  # starts near log(vocab)
    assert sum(losses[-10:]) / 10 < 0.02, losses[-10:]
    batch = copy_batch(torch.Generator().manual_seed(123), b=32)
    hyps = greedy_search(model, batch.src, DE_EN, max_len=12)
    exact = 0
    for row, h in enumerate(hyps):
        expected = [t for t in batch.gold[row].tolist() if t not in (PAD_ID, EOS_ID)]
        exact += h.tokens == expected
    assert exact >= 30, f"{exact}/32 sequences copied exactly"


@pytest.mark.parametrize("trained", [True, False])
def test_cached_beam_equals_uncached_and_greedy_equals_beam1(copy_model, trained: bool):
    if trained:
        model, vocab = copy_model[0], 16
    else:
        torch.manual_seed(5)
        model, vocab = build_model(tiny_model_config(), 40, LANGS).eval(), 40
    gen = torch.Generator().manual_seed(9)
    src = rand_src(5, 7, vocab, gen)
    src[1, 5:] = PAD_ID
    src[:, -1] = torch.where(src[:, -1] == PAD_ID, PAD_ID, EOS_ID)
    for k in (1, 3):
        cached = beam_search(model, src, DE_EN, beam_size=k, max_len=10, use_cache=True)
        plain = beam_search(model, src, DE_EN, beam_size=k, max_len=10, use_cache=False)
        for c, p in zip(cached, plain, strict=True):
            assert c.tokens == p.tokens
            assert abs(c.score - p.score) < 1e-4
    greedy = greedy_search(model, src, DE_EN, max_len=10)
    beam1 = beam_search(model, src, DE_EN, beam_size=1, max_len=10)
    assert [g.tokens for g in greedy] == [b.tokens for b in beam1]
    for g, b in zip(greedy, beam1, strict=True):
        assert abs(g.score - b.score) < 1e-4


def test_label_smoothed_loss_matches_torch():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=gen)
    gold = torch.randint(1, 11, (2, 5), generator=gen)
    gold[1, 3:] = PAD_ID
    loss, nll = label_smoothed_nll(logits, gold, 0.1)
    ref = torch.nn.functional.cross_entropy(
        logits.view(-1, 11),
        gold.view(-1),
        ignore_index=PAD_ID,
        label_smoothing=0.1,
        reduction="sum",
    )
    ref_nll = torch.nn.functional.cross_entropy(
        logits.view(-1, 11), gold.view(-1), ignore_index=PAD_ID, reduction="sum"
    )
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(nll, ref_nll)


def _ckpt(model) -> dict:
    return {
        "model": model.state_dict(),
        "model_config": model.cfg.model_dump(mode="json"),
        "vocab_size": model.vocab_size,
    }


@pytest.mark.parametrize("sharing", ["shared", "separate"])
def test_shallow_init_from_6_6(sharing: str):
    torch.manual_seed(0)
    deep = build_model(
        tiny_model_config(encoder_layers=6, decoder_layers=6, decoder_sharing=sharing), 30, LANGS
    )
    torch.manual_seed(1)
    shallow = build_model(
        tiny_model_config(encoder_layers=12, decoder_layers=2, decoder_sharing=sharing), 30, LANGS
    )
    mapping = init_from_checkpoint(shallow, _ckpt(deep), "shallow")
    src, dst = deep.state_dict(), shallow.state_dict()
    assert len(mapping) == len(dst)
    for i in range(12):
        for name, t in shallow.encoder.layers[i].state_dict().items():
            assert torch.equal(t, deep.encoder.layers[i // 2].state_dict()[name]), (i, name)
    dec_prefix = "decoder.by_lang.fr." if sharing == "separate" else "decoder."
    for i in range(2):
        for name in [k for k in dst if k.startswith(f"{dec_prefix}layers.{i}.")]:
            assert torch.equal(dst[name], src[name])
    for name in (
        "embed_tokens.weight",
        "encoder.final_norm.weight",
        f"{dec_prefix}final_norm.bias",
    ):
        assert torch.equal(dst[name], src[name])
    # the copy is exact: 12-2 encoder == 6-6 encoder with every layer applied twice
    shallow.eval()
    deep.eval()
    x = rand_src(2, 5, 30, torch.Generator().manual_seed(4))
    h = deep.embed(x)
    mask = (x != PAD_ID)[:, None, None, :]
    cond = Conditioning(DE_EN)
    for layer in deep.encoder.layers:
        h = layer(layer(h, mask, cond), mask, cond)
    h = deep.encoder.final_norm(h)
    torch.testing.assert_close(shallow.encode(x, DE_EN)[0], h)


def test_copy_init_fills_language_specific_copies():
    torch.manual_seed(0)
    dense = build_model(tiny_model_config(encoder_layers=3), 30, LANGS)
    lsl = build_model(
        tiny_model_config(
            encoder_layers=3, language_specific={"encoder_src": [2], "encoder_tgt": [3]}
        ),
        30,
        LANGS,
    )
    init_from_checkpoint(lsl, _ckpt(dense), "copy")
    for lang in LANGS:
        for name, t in lsl.encoder.layers[1].by_lang[lang].state_dict().items():
            assert torch.equal(t, dense.encoder.layers[1].state_dict()[name])
    x = rand_src(2, 5, 30, torch.Generator().manual_seed(4))
    y = torch.full((2, 3), BOS_ID)
    torch.testing.assert_close(lsl.eval()(x, y, DE_EN).logits, dense.eval()(x, y, DE_EN).logits)


def test_init_rejects_mismatch():
    deep = build_model(tiny_model_config(encoder_layers=2, decoder_layers=2), 30, LANGS)
    bigger = build_model(tiny_model_config(encoder_layers=2, decoder_layers=3), 30, LANGS)
    with pytest.raises(ValueError, match="decoder"):
        init_from_checkpoint(bigger, _ckpt(deep), "shallow")
    with pytest.raises(ValueError, match="no source tensor"):
        init_from_checkpoint(bigger, _ckpt(deep), "copy")
    other_vocab = build_model(tiny_model_config(), 31, LANGS)
    with pytest.raises(ValueError, match="vocabulary"):
        init_from_checkpoint(other_vocab, _ckpt(deep), "copy")
