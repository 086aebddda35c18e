"""Adaptive sparse Transformer (training.model.sparse_transformer): gates, losses, the two
phases, budgets."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.tiny import tiny_model_config
from training.batching import make_batch
from training.checkpoint import load_checkpoint
from training.model import Route, build_model
from training.model.layers import Conditioning, FeedForwardBlock
from training.model.sparse_config import SparseConfig
from training.model.sparse_transformer import (
    SparseTransformer,
    disparity_loss,
    gumbel_scores,
    sparsity_loss,
    temperature,
    topk_loss,
    topk_mask,
)
from training.recipe import load_recipe
from training.step import train_step
from training.trainer import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]
LANGS = ["de", "en", "fr"]
ALL = dict(
    attention=True,
    heads_kept=2,
    ffn=True,
    ffn_blocks=4,
    ffn_blocks_kept=2,
    layers=True,
    encoder_layers_kept=2,
    decoder_layers_kept=1,
)


def sparse_model(seed: int = 0, **sparse) -> SparseTransformer:
    torch.manual_seed(seed)
    cfg = tiny_model_config(encoder_layers=3, decoder_layers=2, sparse={**ALL, **sparse})
    model = build_model(cfg, 40, LANGS)
    assert isinstance(model, SparseTransformer)
    return model


def _batch(route: Route, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, 40, (7,), generator=g).tolist() for _ in range(3)]
    tgt = [torch.randint(4, 40, (5,), generator=g).tolist() for _ in range(3)]
    return make_batch(route, src, tgt)


# -- the losses against hand-computed values ---------------------------------------------------


def test_losses_match_hand_computed_values():
    s = torch.tensor([[0.2, 0.9, 0.5], [0.6, 0.1, 0.5]])  # 2 languages, 3 components
    want_s = sum(v * (math.log(v) - math.log(0.5)) for v in [0.2, 0.9, 0.5, 0.6, 0.1, 0.5])
    assert sparsity_loss(s).item() == pytest.approx(want_s, abs=1e-6)
    assert sparsity_loss(torch.tensor([0.0, 0.5])).item() == 0.0  # 0 log 0 = 0; s = prior
    # one pair of languages: 0.2*0.6 + 0.9*0.1 + 0.5*0.5
    assert disparity_loss(s).item() == pytest.approx(0.46, abs=1e-6)
    three = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    assert disparity_loss(three).item() == pytest.approx(1 + 0 + 2, abs=1e-6)  # pairs 01 02 12
    m = topk_mask(s, 1)
    assert m.tolist() == [[0, 1, 0], [1, 0, 0]]
    want_t = 0.2**2 + 0.1**2 + 0.5**2 + 0.4**2 + 0.1**2 + 0.5**2
    assert topk_loss(s, m).item() == pytest.approx(want_t, abs=1e-6)


def test_topk_ties_go_to_the_lower_index_and_temperature_anneals():
    assert topk_mask(torch.zeros(2, 4), 2).tolist() == [[1, 1, 0, 0]] * 2
    sp = SparseConfig(ffn=True, ffn_blocks_kept=1, temperature_decay=0.01)
    assert temperature(sp, 0) == 1.0
    assert temperature(sp, 50) == pytest.approx(math.exp(-0.5))
    assert temperature(sp, 10_000) == 0.5  # floor (Jang et al.)


def test_auxiliary_loss_is_the_weighted_sum_of_the_phase():
    model = sparse_model()
    scores = model.sparse_scores
    torch.manual_seed(3)
    gates, aux = scores.sample("encoder", step=0)  # phase one: c_s * L_s
    want = sum(0.1 * sparsity_loss(g) for g in gates.values())
    assert aux.detach().item() == pytest.approx(want.item(), rel=1e-5)
    torch.manual_seed(3)
    gates, aux = scores.sample("encoder", step=scores.sp.phase_one_steps)
    torch.manual_seed(3)
    want = 0.0
    for g in scores.side_groups("encoder"):
        s = gumbel_scores(scores.logits[g.name], temperature(scores.sp, 8000))
        m = topk_mask(s, g.kept)
        assert torch.equal(gates[g.name], m * s)
        want += 0.02 * disparity_loss(m * s) + 0.1 * topk_loss(s, m)
    assert aux.detach().item() == pytest.approx(float(want.detach()), rel=1e-5)


def test_training_forward_returns_the_gates_loss_weighted_by_target_tokens():
    model = sparse_model().train()
    b = _batch(Route("de", "en"))
    torch.manual_seed(5)
    out = model(b.src, b.tgt_in, b.route)
    torch.manual_seed(5)  # the same samples: encoder gates first, then the decoder's
    _, enc = model.sparse_scores.sample("encoder", 0)
    _, dec = model.sparse_scores.sample("decoder", 0)
    want = (enc + dec).item() * b.ntokens
    assert out.aux_losses["gates"].item() == pytest.approx(want, rel=1e-5)
    assert not model.eval()(b.src, b.tgt_in, b.route).aux_losses  # inference: no samples


# -- a zero score contributes nothing ---------------------------------------------------------


def _perturb(model, names: list[str]) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(name.startswith(n) for n in names):
                p.add_(torch.randn_like(p))


def _set_logits(model, group: str, lang: str, values) -> None:
    with torch.no_grad():
        model.sparse_scores.logits[group][LANGS.index(lang)] = torch.tensor(values)


def test_unselected_layer_head_and_block_contribute_nothing():
    model = sparse_model().eval()
    route = Route("de", "en")
    b = _batch(route)
    # de drops encoder layer 1; in layer 0 keeps heads 2, 3; in layer 2 FFN blocks 0, 1
    _set_logits(model, "encoder_layers", "de", [1.0, -1.0, 1.0])
    _set_logits(model, "encoder_heads", "de", [[-1.0, -1.0, 1.0, 1.0]] + [[1.0] * 4] * 2)
    _set_logits(model, "encoder_ffn", "de", [[1.0] * 4] * 2 + [[1.0, 1.0, -1.0, -1.0]])
    _set_logits(model, "encoder_layers", "en", [1.0, 1.0, -1.0])  # en keeps layer 1
    original = copy.deepcopy(model)
    _perturb(model, ["encoder.layers.1."])
    with torch.no_grad():  # heads 0, 1 of layer 0 (their value rows), blocks 2, 3 of layer 2
        attn = model.encoder.layers[0].self_attn
        attn.v_proj.weight[:16] += 1.0
        attn.v_proj.bias[:16] += 1.0
        ffn = model.encoder.layers[2].ffn
        ffn.fc1.weight[32:] += 1.0
        ffn.fc1.bias[32:] += 1.0
        ffn.fc2.weight[:, 32:] += 1.0
        assert torch.equal(
            model(b.src, b.tgt_in, route).logits, original(b.src, b.tgt_in, route).logits
        )
        # a language that keeps those components sees the changes (the test can fail)
        en = Route("en", "de")
        assert not torch.allclose(
            model(b.src, b.tgt_in, en).logits, original(b.src, b.tgt_in, en).logits
        )


def test_ffn_block_gate_is_equation_6_and_zero_equals_slicing():
    torch.manual_seed(0)
    block = FeedForwardBlock(8, 16, "relu", True, 1e-5, 0.0).eval()
    x = torch.randn(2, 3, 8)
    cond = Conditioning(Route("de", "en"))
    block_gate = torch.tensor([0.5, 0.0, 1.0, 0.25])
    beta = block_gate.repeat_interleave(4)
    w1, b1, w2, b2 = block.fc1.weight, block.fc1.bias, block.fc2.weight, block.fc2.bias
    h = torch.relu(x @ (w1.T * beta) + b1)
    want = h @ (beta[:, None] * w2.T) + b2
    assert torch.allclose(block.transform(x, cond, block_gate), want, atol=1e-6)
    block_gate = torch.tensor([1.0, 0.0, 1.0, 0.0])
    keep = torch.tensor([i for i in range(16) if i // 4 in (0, 2)])
    sliced = torch.relu(x @ w1[keep].T + b1[keep]) @ w2[:, keep].T + b2
    assert torch.allclose(block.transform(x, cond, block_gate), sliced, atol=1e-6)


# -- the two phases and the budget ------------------------------------------------------------


def _train(model, steps: int, start: int = 0):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    routes = [Route("de", "en"), Route("en", "fr"), Route("fr", "de")]
    for step in range(start, start + steps):
        model.set_training_step(step)
        route = routes[step % 3]
        train_step(
            model,
            [_batch(route, step)],
            opt,
            None,
            label_smoothing=0.0,
            clip_norm=0.0,
            device=torch.device("cpu"),
        )
    return model.eval()


def test_phase_two_uses_exactly_the_budget_for_every_language():
    model = sparse_model(phase_one_steps=5)
    _train(model, 12)
    sel = model.sparse_scores.selection()
    kept = {g.name: g.kept for g in model.sparse_scores.groups.values()}
    assert set(sel) == set(kept)
    for name, masks in sel.items():
        assert masks.shape[0] == len(LANGS)
        assert (masks.sum(-1) == kept[name]).all(), name
    # the training gates of phase two are non-zero on exactly the budget too
    model.train()
    for side in ("encoder", "decoder"):
        gates, _ = model.sparse_scores.sample(side, step=20)
        for name, g in gates.items():
            assert ((g > 0).sum(-1) == kept[name]).all(), name


def test_auxiliary_losses_train_the_scores_in_both_phases():
    # a heavy sparsity weight so that the KL to the prior, not the cross entropy, dominates
    model = sparse_model(phase_one_steps=3, sparsity_weight=10.0)
    _train(model, 3)  # phase one: the sparsity loss pulls the scores below the prior 0.5
    for name, p in model.sparse_scores.logits.items():
        assert (p < 0).float().mean() > 0.75, name
    mid = {n: p.detach().clone() for n, p in model.sparse_scores.logits.items()}
    _train(model, 3, start=3)  # phase two: the top-k loss separates kept from dropped
    changed = [not torch.equal(mid[n], p) for n, p in model.sparse_scores.logits.items()]
    assert all(changed)


def test_budget_is_validated():
    with pytest.raises(ValueError, match="heads_kept"):
        tiny_model_config(sparse={"attention": True})
    with pytest.raises(ValueError, match="exceeds"):
        tiny_model_config(
            sparse={"layers": True, "encoder_layers_kept": 3, "decoder_layers_kept": 1}
        )
    with pytest.raises(ValueError, match="pre_norm"):
        tiny_model_config(
            pre_norm=False,
            sparse={"layers": True, "encoder_layers_kept": 1, "decoder_layers_kept": 1},
        )


# -- recipes through the trainer: the selection lands in the checkpoint ------------------------


@pytest.mark.parametrize(
    "name", ["tiny_sparse", "tiny_sparse_attention", "tiny_sparse_ffn", "tiny_sparse_layers"]
)
def test_tiny_recipes_train_and_record_the_selection(name, toy_data, tmp_path):
    data, tok = toy_data
    t = {"eval_every": 0, "save_every": 0, "log_every": 1, "max_steps": 12}
    recipe = load_recipe(name, {"data": {"dir": str(data), "tokenizer": str(tok)}, "training": t})
    Trainer(recipe, tmp_path, progress=False).run()
    ckpt = load_checkpoint(tmp_path, "last")
    record = ckpt["extra"]["sparse"]
    assert record["phase"] == 2
    sp = recipe.model.sparse
    for lang, entry in record["languages"].items():
        for group, kept in entry.items():
            budget = record["budget"][group]
            if group.endswith("_layers"):
                assert len(kept) == budget, (lang, group)
            else:
                assert all(len(k) == budget for k in kept), (lang, group)
    assert ("encoder_heads" in record["budget"]) == sp.attention
    assert ("decoder_ffn" in record["budget"]) == sp.ffn
    assert ("encoder_layers" in record["budget"]) == sp.layers
    if name == "tiny_sparse":  # the report command on the same run
        from training.sparse_report import main as sparse_main
        from training.sparse_report import sharing

        assert sparse_main([str(tmp_path), "--plot", str(tmp_path / "sel.png")]) == 0
        assert (tmp_path / "sel.png").stat().st_size > 1000
        shared = sharing(record)
        assert set(shared) == {"encoder", "decoder"}
        assert all(0.0 <= v <= 1.0 for pairs in shared.values() for v in pairs.values())


# -- inference: selected components with their noise-free scores, folded exactly at export ----


def test_inference_gates_are_the_selected_noise_free_scores():
    model = sparse_model(temperature_decay=0.01)
    model.set_training_step(50)  # tau = exp(-0.5), recorded for inference
    assert model.sparse_scores.temperature.item() == pytest.approx(math.exp(-0.5))
    _set_logits(model, "encoder_layers", "de", [0.3, -1.0, 2.0])
    gates = model.sparse_scores.inference_scores("encoder")["encoder_layers"][0]
    tau = math.exp(-0.5)
    want = [1 / (1 + math.exp(-0.3 / tau)), 0.0, 1 / (1 + math.exp(-2.0 / tau))]
    assert gates.tolist() == pytest.approx(want, abs=1e-6)
    # the temperature travels with the state dict; older state dicts load at the floor
    state = model.state_dict()
    fresh = sparse_model(temperature_decay=0.01)
    fresh.load_state_dict(state, strict=True)
    assert fresh.sparse_scores.temperature.item() == pytest.approx(tau)
    del state["sparse_scores.temperature"]
    fresh.load_state_dict(state, strict=True)
    assert fresh.sparse_scores.temperature.item() == 0.5


def test_export_folds_the_scores_exactly_into_the_route_engine(toy_data, tmp_path):
    from lsmt_bundle import load_bundle
    from model_export.from_torch import export_bundle

    _, tok = toy_data
    torch.manual_seed(0)
    cfg = tiny_model_config(encoder_layers=3, decoder_layers=2, sparse=ALL)
    model = build_model(cfg, 360, LANGS).eval()
    with torch.no_grad():
        for p in model.sparse_scores.logits.values():
            p.uniform_(-2.0, 2.0)  # scores well inside (0, 1)
    export_bundle(
        model,
        tmp_path / "b",
        name="sparse",
        tokenizer_model=tok / "spm.model",
        routes=[("de", "en")],
        store_dtype="float32",
    )
    dense = load_bundle(tmp_path / "b").assemble(Route("de", "en"))
    g = {
        k: v[LANGS.index("de")].detach().numpy()
        for k, v in model.sparse_scores.inference_scores().items()
    }
    kept = [int(i) for i in (g["encoder_layers"] > 0).nonzero()[0]]
    assert len(kept) == 2 and 0 < min(g["encoder_layers"][kept]) < 1
    for j, i in enumerate(kept):  # engine layer j is the model's layer i
        layer, gamma = model.encoder.layers[i], g["encoder_layers"][i]
        heads = g["encoder_heads"][i].repeat(8)  # head size 8
        out = layer.self_attn.out_proj

        def close(name, value, j=j):
            assert abs(dense.weights[f"encoder.layers.{j}.{name}"] - value).max() < 1e-6, name

        want = out.weight.detach().numpy() * heads[None, :] * gamma
        close("self_attn.out_proj.weight", want)
        close("self_attn.out_proj.bias", out.bias.detach().numpy() * gamma)
        beta = g["encoder_ffn"][i].repeat(16)  # ffn 64 in 4 blocks
        keep = beta > 0
        fc1, fc2 = layer.ffn.fc1, layer.ffn.fc2
        want1 = fc1.weight.detach().numpy()[keep] * beta[keep, None]
        want2 = fc2.weight.detach().numpy()[:, keep] * beta[None, keep] * gamma
        close("ffn.fc1.weight", want1)
        close("ffn.fc1.bias", fc1.bias.detach().numpy()[keep])  # b1 is not scaled (eq. 6)
        close("ffn.fc2.weight", want2)
        close("ffn.fc2.bias", fc2.bias.detach().numpy() * gamma)


def test_selection_logits_can_learn_at_their_own_rate():
    model = sparse_model()
    (group,) = model.optimizer_groups(1e-3)  # the paper's setting: one group, one rate
    assert len(group["params"]) == len(list(model.parameters()))
    model = sparse_model(score_lr_scale=100.0)
    rest, scores = model.optimizer_groups(1e-3)
    assert scores["lr"] == pytest.approx(0.1) and rest["lr"] == 1e-3
    assert {id(p) for p in scores["params"]} == {id(p) for p in model.sparse_scores.logits.values()}
    assert len(rest["params"]) + len(scores["params"]) == len(list(model.parameters()))
    # initial_logit: every component starts at sigmoid(initial_logit)
    model = sparse_model(initial_logit=3.0)
    assert all((p == 3.0).all() for p in model.sparse_scores.logits.values())


def test_the_export_command_checks_a_sparse_model_outside_its_folded_layers(toy_data, tmp_path):
    """``python -m model_export`` compares the assembled route with the model (``verify``):
    the sub-network's layers are folded (scores, sliced FFN blocks), so it compares the rest
    and leaves the layers to the test above (it failed on the sliced FFN before)."""
    from lsmt_bundle import load_bundle
    from model_export.__main__ import main as export_main
    from training.train import main as train_main

    data, tok = toy_data
    run = tmp_path / "run"
    assert train_main(["--config", "tiny_sparse_ffn", "--out", str(run), "--no-progress",
                       "--max-steps", "4", "--set", f"data.dir={data}", f"data.tokenizer={tok}",
                       "training.eval_every=0"]) == 0  # fmt: skip
    out = tmp_path / "bundle"
    assert export_main(["--checkpoint", str(run), "--which", "last", "--out", str(out),
                        "--dtype", "int8"]) == 0  # fmt: skip
    bundle = load_bundle(out)
    assert [f.rule for f in bundle.manifest.fusions] == ["sparse_subnetwork"]
    assert bundle.assemble(Route("de", "en")).architecture.ffn_dim == 32  # 2 of 4 blocks of 16
