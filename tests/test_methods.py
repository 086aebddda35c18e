"""LMS + Fuse Distillation (LMS paper) and LAA + LEE (LAA paper) in the PyTorch model: the
initialisation equals the base model, pair-wise reads the right factors, the FD loss is the
paper's, LAA equals eq. 3-5 written out. Tiny models on CPU; seconds."""

from __future__ import annotations

import math

import pytest
import torch

from tests.tiny import random_batch as batch
from tests.tiny import tiny_model_config
from training.fuse_distill import fd_terms, symmetric_kl
from training.model import Route, build_model
from training.model.lms import LS_PATH, SHARED_PATH
from training.step import label_smoothed_nll, train_step

LANGS = ["de", "en", "fr"]
DE_EN = Route("de", "en")
VOCAB = 40

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


def model_pair(**kw):
    """(base model, model with ``kw``) whose shared weights are identical."""
    torch.manual_seed(0)
    base = build_model(tiny_model_config(), VOCAB, LANGS).eval()
    torch.manual_seed(0)
    other = build_model(tiny_model_config(**kw), VOCAB, LANGS).eval()
    return base, other


def logits(model, route=DE_EN, seed=0, lms_path=LS_PATH):
    b = batch(route, VOCAB, seed=seed)
    with torch.no_grad():
        return model(b.src, b.tgt_in, route, lms_path=lms_path).logits


@pytest.mark.parametrize(
    "lms",
    [
        {"rank": 4},
        {"rank": 4, "synthesis": "language", "attention": True},
        {"rank": 2, "fuse_distill": True},
    ],
    ids=["pair-ffn", "language-ffn-attention", "fd"],
)
def test_lms_at_initialisation_equals_the_dense_model_exactly(lms):
    base, model = model_pair(lms=lms)
    extra = sum(p.numel() for n, p in model.named_parameters() if ".lms_" in n)
    assert extra > 0 and all(
        (p != 0).any() for n, p in model.named_parameters() if n.endswith("lms_v.by_lang.de.weight")
    ), "vertical factors must be Gaussian, not zero"
    for route in (DE_EN, Route("fr", "de")):
        assert torch.equal(logits(base, route), logits(model, route))
        if lms.get("fuse_distill"):
            assert torch.equal(logits(base, route), logits(model, route, lms_path=SHARED_PATH))


def _grads(model, route):
    """Gradients after one backward of a ``route`` batch, every flat factor made non-zero
    first (at initialisation W_f = 0 leaves W_v without gradient)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lms_f." in n:
                p.normal_(std=0.1)
    b = batch(route, VOCAB)
    model.zero_grad()
    loss, _ = label_smoothed_nll(model(b.src, b.tgt_in, route).logits, b.gold, 0.1)
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters()}


def _used(grads, kind: str, lang: str) -> bool:
    name = f"encoder.layers.0.ffn.fc1.lms_{kind}.by_lang.{lang}.weight"
    g = grads[name]
    return g is not None and bool(g.abs().sum() > 0)


def test_pair_wise_reads_the_sources_vertical_and_the_targets_flat_factor():
    _, model = model_pair(lms={"rank": 4})
    grads = _grads(model.train(), DE_EN)
    assert _used(grads, "v", "de") and _used(grads, "f", "en")
    assert not any(_used(grads, "v", lang) for lang in ("en", "fr"))
    assert not any(_used(grads, "f", lang) for lang in ("de", "fr"))
    # ...and in the decoder too (pair-wise is the same on both sides)
    dec = "decoder.layers.1.ffn.fc2.lms_{}.by_lang.{}.weight"
    assert grads[dec.format("v", "de")] is not None and grads[dec.format("v", "en")] is None


def test_language_wise_reads_the_sides_language():
    _, model = model_pair(lms={"rank": 4, "synthesis": "language"})
    grads = _grads(model.train(), DE_EN)
    assert _used(grads, "v", "de") and _used(grads, "f", "de")  # encoder: source
    assert not _used(grads, "f", "en")
    dec = "decoder.layers.0.ffn.fc1.lms_{}.by_lang.{}.weight"
    assert grads[dec.format("f", "en")] is not None and grads[dec.format("f", "de")] is None


def test_fd_loss_terms_match_a_hand_computed_example():
    ls = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    sh = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    gold = torch.tensor([0, 1])
    # by hand: softmax, CE = -log p[gold], KL(p||q) = sum p (log p - log q)
    p = [[math.exp(v) / sum(math.exp(u) for u in row) for v in row] for row in ls.tolist()]
    q = [[math.exp(v) / sum(math.exp(u) for u in row) for v in row] for row in sh.tolist()]
    ce_l = -math.log(p[0][0]) - math.log(p[1][1])
    ce_s = -math.log(q[0][0]) - math.log(q[1][1])

    def kl(a, b):
        rows = zip(a, b, strict=True)
        return sum(x * math.log(x / y) for ra, rb in rows for x, y in zip(ra, rb, strict=True))

    want_kl = 0.5 * (kl(p, q) + kl(q, p))
    keep = torch.tensor([True, True])
    ce_ls, _ = label_smoothed_nll(ls, gold, 0.0, keep=keep)
    ce_sh, _ = label_smoothed_nll(sh, gold, 0.0, keep=keep)
    terms = fd_terms(ls, sh, ce_ls, ce_sh, keep)
    assert terms.ce_ls.item() == pytest.approx(ce_l, rel=1e-6)
    assert terms.ce_shared.item() == pytest.approx(ce_s, rel=1e-6)
    assert terms.kl.item() == pytest.approx(want_kl, rel=1e-6)
    assert terms.loss.item() == pytest.approx(0.5 * (ce_l + ce_s) + want_kl, rel=1e-6)
    assert symmetric_kl(ls, ls).item() == pytest.approx(0.0, abs=1e-7)


def test_fd_step_trains_both_paths_and_the_shared_pair():
    _, model = model_pair(lms={"rank": 2, "fuse_distill": True})
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    stats = train_step(
        model, [batch(DE_EN, VOCAB)], opt, None, label_smoothing=0.1, clip_norm=1.0,
        device=torch.device("cpu"),
    )  # fmt: skip
    assert math.isfinite(stats.loss)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert "encoder.layers.0.ffn.fc1.lms_shared_f.weight" in moved
    assert "encoder.layers.0.ffn.fc1.lms_f.by_lang.en.weight" in moved
    assert "encoder.layers.0.ffn.fc1.lms_f.by_lang.de.weight" not in moved


def test_fd_forward_returns_both_paths_and_their_symmetric_kl():
    """The training forward of an FD model is eq. 3/4's ingredients: the language-specific
    path's logits, the shared path's, and their symmetric KL as an auxiliary loss."""
    _, model = model_pair(lms={"rank": 2, "fuse_distill": True})
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ".lms_f." in n or ".lms_shared_f." in n:
                p.normal_(std=0.1)  # W_f = 0 at initialisation would make the paths equal
    b = batch(DE_EN, VOCAB)
    with torch.no_grad():
        out = model.train()(b.src, b.tgt_in, DE_EN)  # tiny models have no dropout
        model.eval()
        ls = model(b.src, b.tgt_in, DE_EN)
        shared = model(b.src, b.tgt_in, DE_EN, lms_path=SHARED_PATH)
    assert not ls.also_scored and not ls.aux_losses  # evaluation runs one path
    assert torch.equal(out.logits, ls.logits) and torch.equal(out.also_scored[0], shared.logits)
    assert not torch.allclose(ls.logits, shared.logits, atol=1e-3)
    want = symmetric_kl(ls.logits.flatten(0, 1), shared.logits.flatten(0, 1))
    assert out.aux_losses["fuse_distill_kl"].item() == pytest.approx(want.item(), rel=1e-5)


@pytest.mark.parametrize("places", [["decoder_self"], ["encoder_self", "decoder_cross"]])
def test_laa_with_zero_matrices_equals_the_base_model(places):
    base, model = model_pair(laa={"places": places, "lee_points": [1, 3, 4, 5, 6]})
    assert torch.equal(logits(base), logits(model))


def test_laa_is_eq_3_to_5_written_out():
    """The projection terms (Appendix A's form) = adding W^lang to W_Q/K/V and W^lang^T to W_O."""
    torch.manual_seed(1)
    _, model = model_pair(laa={"places": ["decoder_self", "decoder_cross"]})
    with torch.no_grad():
        for lang in LANGS:
            model.laa.by_lang[lang].weight.normal_(std=0.1)
    got = logits(model)
    m = model.laa.by_lang["en"].weight.detach()
    _, plain = model_pair()
    with torch.no_grad():
        plain.load_state_dict({k: v for k, v in model.state_dict().items() if "laa" not in k})
        for i in range(2):
            for attn in ("self_attn", "cross_attn"):
                block = plain.decoder.layers[i].get_submodule(attn)
                for proj in (block.q_proj, block.k_proj, block.v_proj):
                    proj.weight += m.T
                block.out_proj.weight += m
    assert torch.allclose(got, logits(plain), atol=1e-5)
    assert not torch.allclose(got, logits(model, Route("de", "fr")), atol=1e-3)


def test_lee_adds_the_targets_vector_at_the_switching_points():
    _, model = model_pair(laa={"lee_points": [4]})
    with torch.no_grad():
        model.lee.by_lang["en"].weight.fill_(0.5)
    seen = []
    block = model.decoder.layers[1].self_attn
    handle = block.register_forward_pre_hook(lambda m, a: seen.append(a[0].clone()))
    try:
        b = batch(DE_EN, VOCAB)
        with torch.no_grad():
            model(b.src, b.tgt_in, DE_EN)
    finally:
        handle.remove()
    x_plus = seen[0]  # pre-hooks run in registration order: LEE's first, so this includes E
    with torch.no_grad():
        model.lee.by_lang["en"].weight.zero_()
        seen.clear()
        handle = block.register_forward_pre_hook(lambda m, a: seen.append(a[0].clone()))
        model(b.src, b.tgt_in, DE_EN)
        handle.remove()
    assert not torch.allclose(x_plus, seen[0])


def test_configs_refuse_what_cannot_be_expressed():
    with pytest.raises(ValueError, match="LSL"):
        tiny_model_config(lms={"rank": 2}, language_specific={"encoder_src": [1]})
    with pytest.raises(ValueError, match=r"1\.\.6"):
        tiny_model_config(laa={"lee_points": [7]})
    with pytest.raises(ValueError, match="fuse_distill"):
        tiny_model_config(lms={"fuse_distill": True})


def test_symmetric_kl_gradient_reaches_both_paths():
    a = torch.randn(3, 5, requires_grad=True)
    b = torch.randn(3, 5, requires_grad=True)
    symmetric_kl(a, b).backward()
    assert a.grad.abs().sum() > 0 and b.grad.abs().sum() > 0  # eq. 4: no stop-gradient


def test_parameter_report_counts_as_figure_4():
    from training.method_params import parameter_report

    _, model = model_pair(
        lms={"rank": 2, "fuse_distill": True}, laa={"places": ["decoder_self"], "lee_points": [5]}
    )
    r = parameter_report(model)
    n_linears, d, ffn, n_lang = 2 * (2 + 2), 32, 64, len(LANGS)
    per_linear = 2 * (d + ffn)  # rank (r + c)
    assert r["lms"] == n_lang * n_linears * per_linear  # O(L d (r + c))
    assert r["lms_shared"] == n_linears * per_linear  # FD-share: O(d (r + c))
    assert r["laa"] == n_lang * d * d and r["lee"] == n_lang * d
    assert r["inference_share"] == r["lms_shared"] + r["laa"] + r["lee"]
    base, _ = model_pair()
    assert r["base"] == sum(p.numel() for p in base.parameters())
