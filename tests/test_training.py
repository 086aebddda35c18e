"""Trainer tests on a synthetic word-for-word corpus (documented layout) and a tiny
SentencePiece model trained here: recipes, batching, exact resume, CLI outputs, init."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lsmt_core.routes import route_key
from lsmt_core.tags import TagScheme, tag_source
from tests.tiny import TOY_ROUTES, tiny_recipe
from training.batching import (
    EOS_ID,
    PAD_ID,
    RouteData,
    RouteSampler,
    SourceEncoder,
    route_probabilities,
)
from training.checkpoint import load_checkpoint, load_model, save_checkpoint
from training.model import Route
from training.model.transformer import Seq2SeqTransformer
from training.recipe import RECIPES_DIR, RecipeError, load_recipe, recipe_from_dict
from training.step import make_optimizer
from training.train import main as train_main
from training.trainer import Trainer

DE_EN = Route("de", "en")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


# -- recipes ---------------------------------------------------------------------------------------


def test_builtin_recipes_load():
    names = {p.stem for p in RECIPES_DIR.glob("*.yaml")}
    assert {
        "tiny",
        "baseline_6-6_shared",
        "baseline_6-6_separate",
        "shallow_12-2",
        "paper_16-3_gpu",
    } <= names
    for name in names:
        r = load_recipe(name)
        assert r.name == name
    paper = load_recipe("paper_16-3_gpu")
    m, t = paper.model, paper.training
    assert (m.d_model, m.encoder_layers, m.decoder_layers, m.heads, m.ffn_dim) == (
        512,
        16,
        3,
        8,
        2048,
    )
    assert (t.lr, t.warmup_steps) == (4e-4, 4000)
    assert load_recipe("baseline_6-6_separate").model.decoder_sharing == "separate"
    shallow = load_recipe("shallow_12-2")
    assert (shallow.model.encoder_layers, shallow.model.decoder_layers) == (12, 2)


def test_recipe_rejects_bad_keys(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntraining:\n  lrr: 0.1\nmodel:\n  d_modle: 64\n")
    with pytest.raises(RecipeError) as err:
        load_recipe(bad)
    msg = str(err.value)
    assert "training.lrr: unknown key (did you mean 'lr'?)" in msg
    assert "model.d_modle: unknown key (did you mean 'd_model'?)" in msg
    assert str(bad) in msg
    with pytest.raises(RecipeError, match="unknown key"):
        recipe_from_dict({"name": "x", "trainig": {}})
    with pytest.raises(RecipeError, match=r"training.lr: .*greater than 0"):
        recipe_from_dict({"name": "x", "training": {"lr": -1}})
    with pytest.raises(RecipeError, match="not divisible"):
        recipe_from_dict({"name": "x", "model": {"d_model": 30, "heads": 4}})
    with pytest.raises(RecipeError, match="src-tgt"):
        recipe_from_dict({"name": "x", "data": {"routes": ["deen"]}})
    with pytest.raises(RecipeError, match="not found"):
        load_recipe("no-such-recipe")


def test_recipe_overrides():
    r = load_recipe("tiny", ["training.lr=1e-3", "model.encoder_layers=3", "data.routes=[de-en]"])
    assert r.training.lr == 1e-3 and r.model.encoder_layers == 3
    assert r.route_list([Route("de", "en"), Route("en", "de")]) == [Route("de", "en")]
    with pytest.raises(RecipeError, match=r"model\.encoder_layerz"):
        load_recipe("tiny", ["model.encoder_layerz=3"])


# -- data pipeline and batching --------------------------------------------------------------------


@pytest.mark.parametrize("scheme", list(TagScheme))
def test_source_encoder_matches_tag_source(toy_data, scheme):
    from lsmt_text.tokenizer import Tokenizer

    tok = Tokenizer(toy_data[1])
    enc = SourceEncoder(tok, scheme, "<LQ>")
    for text in ["Der mann und das kind.", "Le roi voit la mer.", "xyz ünknöwn 123"]:
        slow = [
            tok.piece_to_id(p) for p in tag_source(scheme, tok.encode(text), "de", "fr", "<LQ>")
        ]
        assert enc.encode(text, Route("de", "fr")) == slow
        assert EOS_ID in slow and 1 not in slow[:1]
    long = " ".join(["haus"] * 100)
    ids = enc.encode(long, Route("de", "fr"), max_len=20)
    assert len(ids) == 20 and ids[-1] == EOS_ID


def _toy_routedata(n: int, seed: int, route: Route = DE_EN) -> RouteData:
    rng = np.random.default_rng(seed)
    src = [list(rng.integers(4, 50, rng.integers(1, 30))) for _ in range(n)]
    tgt = [list(rng.integers(4, 50, rng.integers(1, 30))) for _ in range(n)]
    return RouteData.from_lists(route, src, tgt)


def test_batches_are_homogeneous_and_within_budget():
    data = {
        "de-en": _toy_routedata(300, 0, Route("de", "en")),
        "en-de": _toy_routedata(60, 1, Route("en", "de")),
    }
    sampler = RouteSampler(data, batch_tokens=200, temperature=5.0, seed=3)
    seen: dict[str, set] = {"de-en": set(), "en-de": set()}
    for _ in range(200):
        key, idx = sampler.next_indices()
        batch = sampler.data[key]
        cost = batch.cost()[idx]
        assert len(idx) == 1 or len(idx) * cost.max() <= 200
        seen[key].update(idx.tolist())
        b = sampler.next_batch()
        assert b.src.shape[0] * max(b.src.shape[1], b.gold.shape[1]) <= 200 or len(b) == 1
        assert (b.gold != PAD_ID).sum() == b.ntokens
        assert torch.equal(
            b.tgt_in[:, 1:][b.gold[:, 1:] != PAD_ID], b.gold[:, :-1][b.gold[:, 1:] != PAD_ID]
        )
    assert seen["de-en"] == set(range(300)) and seen["en-de"] == set(range(60))  # epochs cover


def test_temperature_sampling():
    sizes = {"a": 1000, "b": 100, "c": 10}
    p1 = route_probabilities(sizes, 1.0)
    assert p1["a"] == pytest.approx(1000 / 1110)
    p5 = route_probabilities(sizes, 5.0)
    z = sum(n**0.2 for n in sizes.values())
    assert p5["c"] == pytest.approx(10**0.2 / z)
    assert route_probabilities(sizes, 1e6)["c"] == pytest.approx(1 / 3, rel=1e-3)
    data = {k: _toy_routedata(n, i, Route(k, k + "x")) for i, (k, n) in enumerate(sizes.items())}
    sampler = RouteSampler(data, batch_tokens=100, temperature=5.0, seed=0)
    draws = [sampler.next_indices()[0] for _ in range(3000)]
    for k in sizes:
        assert draws.count(k) / 3000 == pytest.approx(p5[k], abs=0.03)


def test_a_schedule_offset_continues_the_decay_instead_of_warming_to_the_peak():
    """A run from trained weights (lr_schedule_offset = the updates they had) re-warms Adam in
    a few updates to the decayed rate they were at, never to the peak."""
    rates = {}
    for offset in (0, 10_000):
        recipe = tiny_recipe(
            Path("unused"), Path("unused"), lr=1e-3, warmup_steps=100, lr_schedule_offset=offset
        )
        opt, sched = make_optimizer(Seq2SeqTransformer(recipe.model, 32, ["de", "en"]), recipe)
        rates[offset] = []
        for _ in range(300):
            rates[offset].append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    assert max(rates[0]) == pytest.approx(1e-3)  # a new run reaches the peak at the warm-up's end
    decayed = 1e-3 * (100 / 10_100) ** 0.5
    assert max(rates[10_000]) == pytest.approx(decayed, rel=0.01)
    assert rates[10_000][20] == pytest.approx(decayed, rel=0.01)  # re-warmed within 20 updates
    assert rates[10_000][0] < decayed / 5  # but not at once: Adam's moments start empty
    assert rates[10_000][299] == pytest.approx(1e-3 * (100 / 10_300) ** 0.5)


def test_sampler_is_deterministic_and_resumable():
    data = {"de-en": _toy_routedata(200, 0), "en-de": _toy_routedata(50, 1, Route("en", "de"))}

    def run(s, n):
        return [(k, idx.tolist()) for k, idx in (s.next_indices() for _ in range(n))]

    a = RouteSampler(data, 150, seed=5)
    full = run(a, 80)
    assert run(RouteSampler(data, 150, seed=5), 80) == full
    assert run(RouteSampler(data, 150, seed=6), 80) != full
    b = RouteSampler(data, 150, seed=5)
    run(b, 30)
    state = b.state_dict()
    c = RouteSampler(data, 150, seed=5)
    c.load_state_dict(state)
    assert run(c, 50) == full[30:]


def test_sampler_shards_across_ranks():
    data = {"de-en": _toy_routedata(300, 0), "en-de": _toy_routedata(80, 1, Route("en", "de"))}
    r0 = RouteSampler(data, 150, seed=2, rank=0, world_size=2)
    r1 = RouteSampler(data, 150, seed=2, rank=1, world_size=2)
    for _ in range(40):
        (k0, i0), (k1, i1) = r0.next_indices(), r1.next_indices()
        assert k0 == k1  # same route at every micro-step on every rank
        assert not set(i0.tolist()) & set(i1.tolist())  # different batches


# -- training --------------------------------------------------------------------------------------


def _params(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path, "last")["model"]


def test_resume_is_exact(toy_data, tmp_path, monkeypatch):
    """N steps + resume == uninterrupted, bit for bit (dropout, accumulation, sampler): once
    after a run that ended at its max_steps, once after a SIGINT in the middle of a run."""
    import os
    import signal

    import training.trainer as train_mod

    data, tok = toy_data
    kw = dict(accumulation=2, log_every=1, eval_every=3, eval_sentences=4, save_every=3)

    def recipe(steps):
        return tiny_recipe(data, tok, max_steps=steps, **kw)

    Trainer(recipe(6), tmp_path / "full", progress=False).run()
    # 1) stop at max_steps=3, resume to 6
    Trainer(recipe(3), tmp_path / "part", progress=False).run()
    ckpt = load_checkpoint(tmp_path / "part" / "last.pt", "last")
    assert ckpt["step"] == 3
    Trainer(recipe(6), tmp_path / "part", resume_from=ckpt, progress=False).run()
    # 2) SIGINT after the 2nd update (between checkpoints), resume to 6
    real_step, calls = train_mod.train_step, []

    def interrupted_step(*args, **kwargs):
        out = real_step(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(train_mod, "train_step", interrupted_step)
    summary = Trainer(recipe(6), tmp_path / "sig", progress=False).run()
    monkeypatch.setattr(train_mod, "train_step", real_step)
    assert summary["stopped_early"] and summary["step"] == 2
    ckpt_sig = load_checkpoint(tmp_path / "sig" / "last.pt", "last")
    assert ckpt_sig["step"] == 2
    Trainer(recipe(6), tmp_path / "sig", resume_from=ckpt_sig, progress=False).run()

    a = _params(tmp_path / "full" / "last.pt")
    for run in ("part", "sig"):
        b = _params(tmp_path / run / "last.pt")
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (run, k)
        ca = load_checkpoint(tmp_path / "full" / "last.pt", "last")
        cb = load_checkpoint(tmp_path / run / "last.pt", "last")
        assert ca["sampler"] == cb["sampler"] and ca["scheduler"] == cb["scheduler"]
    losses = [
        [
            r["loss"]
            for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
            if r["kind"] == "train"
        ]
        for run in ("full", "part", "sig")
    ]
    assert losses[0] == losses[1] == losses[2] and len(losses[0]) == 6
    # negative control: the same resume with another dropout RNG state diverges
    ckpt["rng"] = [{**ckpt["rng"][0], "torch": torch.manual_seed(999).get_state()}]
    Trainer(recipe(6), tmp_path / "other", resume_from=ckpt, progress=False).run()
    c = _params(tmp_path / "other" / "last.pt")
    assert any(not torch.equal(a[k], c[k]) for k in a)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cuda_mixed_precision(toy_data, tmp_path, precision):
    data, tok = toy_data
    r = tiny_recipe(data, tok, max_steps=4, precision=precision, save_every=2, eval_every=4)
    summary = Trainer(r, tmp_path / "cuda", device="cuda", progress=False).run()
    assert summary["device"].startswith("cuda") and summary["last_train"]["loss"] < 20
    ckpt = load_checkpoint(tmp_path / "cuda" / "last.pt", "last")
    assert (ckpt["scaler"] is not None) == (precision == "fp16")
    r6 = tiny_recipe(data, tok, max_steps=6, precision=precision, save_every=2, eval_every=4)
    Trainer(r6, tmp_path / "cuda", device="cuda", resume_from=ckpt, progress=False).run()
    assert load_checkpoint(tmp_path / "cuda" / "last.pt", "last")["step"] == 6


def test_bf16_on_the_cpu_where_it_is_native(toy_data, tmp_path, monkeypatch):
    """training.precision bf16 on the CPU: autocast where the CPU multiplies bf16 natively
    (the losses then differ from fp32's in the last digits, the same batches learn alike);
    fp32 with a warning where bf16 would be emulated."""
    from training import distributed

    data, tok = toy_data

    def first_losses(run: str, precision: str) -> list[float]:
        r = tiny_recipe(data, tok, max_steps=4, precision=precision, save_every=4, eval_every=0)
        trainer = Trainer(r, tmp_path / run, device="cpu", progress=False)
        assert trainer.autocast_dtype == (torch.bfloat16 if precision == "bf16" else None)
        trainer.run()
        rows = map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
        return [row["loss"] for row in rows if row["kind"] == "train"]

    if distributed.cpu_has_native_bf16():
        fp32, bf16 = first_losses("fp32", "fp32"), first_losses("bf16", "bf16")
        assert fp32 != bf16
        assert bf16 == pytest.approx(fp32, rel=0.02)
    monkeypatch.setattr(distributed, "cpu_has_native_bf16", lambda: False)
    with pytest.warns(UserWarning, match="no native bf16"):
        assert distributed.resolve_precision("bf16", torch.device("cpu")) is None
    assert distributed.resolve_precision("auto", torch.device("cpu")) is None


def test_cli_set_is_repeatable():
    """`--set a --set b` keeps both overrides (the add-language demo's own_decoder arm lost
    its tokenizer to the default argparse action, which kept only the last)."""
    from training.train import parse_args

    args = parse_args(["--out", "x", "--set", "a=1", "b=2", "--set", "c=[de]"])
    assert args.set == ["a=1", "b=2", "c=[de]"]
    assert parse_args(["--out", "x"]).set == []


def test_cli_run_outputs(tiny_run):
    for name in (
        "last.pt",
        "best.pt",
        "metrics.jsonl",
        "metrics.png",
        "recipe.yaml",
        "summary.json",
        "data_stats.json",
    ):
        assert (tiny_run / name).is_file(), name
    records = [json.loads(x) for x in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [30, 60]
    for r in evals:  # the learning curve on NTREX, beside dev (which alone picks best.pt)
        ntrex = r["testsets"]["ntrex"]
        assert set(ntrex["by_route"]) == {"de-en", "en-de", "en-fr", "fr-en"}
        assert 0 < ntrex["copy_chrf"] < 100 and ntrex["chrf"] >= 0
    assert train[-1]["loss"] < train[0]["loss"] - 1.0  # it learns
    assert all(r["tgt_tokens_per_s"] > 0 for r in train)
    model, recipe, meta = load_model(tiny_run)
    assert not model.training and meta.step in (30, 60) and meta.path.name == "best.pt"
    assert [route_key(r) for r in meta.routes] == ["de-en", "en-de", "en-fr", "fr-en"]
    assert meta.languages == ["de", "en", "fr"] and meta.tag_scheme == TagScheme.TARGET_PREFIX
    assert meta.best_dev_chrf == max(r["dev_chrf"] for r in evals)
    assert not meta.has_training_state and recipe.name == "tiny"
    assert meta.tokenizer_model_path().read_bytes() == meta.spm_model_bytes()
    _, _, last_meta = load_model(tiny_run, which="last")
    assert last_meta.step == 60 and last_meta.has_training_state


def test_cli_refuses_to_overwrite_and_resumes(tiny_run, toy_data, capsys):
    data, tok = toy_data
    args = [
        "--config",
        "tiny",
        "--out",
        str(tiny_run),
        "--no-progress",
        "--set",
        f"data.dir={data}",
        f"data.tokenizer={tok}",
    ]
    assert train_main(args) == 2
    assert "--resume" in capsys.readouterr().err
    # resume with nothing left to do: a no-op that keeps the run intact
    assert train_main(["--out", str(tiny_run), "--resume", "--no-progress"]) == 0
    assert load_checkpoint(tiny_run, "last")["step"] == 60


def test_shallow_init_from_recipe(tiny_run, toy_data, tmp_path):
    data, tok = toy_data
    recipe = tiny_recipe(data, tok, max_steps=1)
    recipe = recipe.model_copy(
        update={
            "model": recipe.model.model_copy(update={"encoder_layers": 4, "decoder_layers": 1}),
            "init_from": tiny_run / "last.pt",
            "init_mode": "shallow",
        }
    )
    trainer = Trainer(recipe, tmp_path / "shallow", progress=False)
    src = load_checkpoint(tiny_run, "last")["model"]
    dst = trainer.model.state_dict()
    for i in range(4):
        for k in [k for k in src if k.startswith(f"encoder.layers.{i // 2}.")]:
            assert torch.equal(dst[k.replace(f"layers.{i // 2}.", f"layers.{i}.", 1)], src[k])
    for k in [k for k in dst if k.startswith("decoder.")]:
        assert torch.equal(dst[k], src[k])
    assert trainer.init_report["mode"] == "shallow"


def test_init_from_a_bundle_through_its_checkpoint(tiny_run, toy_data, tmp_path):
    """A bundle's weights come back as a checkpoint (``python -m model_export checkpoint``)
    that ``init_from`` reads: exported in float32, every parameter is the trained one, the
    tokenizer travels with it; a bundle directory given directly is refused with the command
    to run."""
    from model_export.__main__ import main as export_main

    data, tok = toy_data
    bundle, ckpt_file = tmp_path / "bundle", tmp_path / "from_bundle.pt"
    args = ["--checkpoint", str(tiny_run), "--which", "last", "--dtype", "float32"]
    assert export_main([*args, "--out", str(bundle)]) == 0
    assert export_main(["checkpoint", str(bundle), "--out", str(ckpt_file)]) == 0
    recipe = tiny_recipe(data, tok, max_steps=1)
    trainer = Trainer(
        recipe.model_copy(update={"init_from": ckpt_file}), tmp_path / "run", progress=False
    )
    trained = load_checkpoint(tiny_run, "last")["model"]
    state = trainer.model.state_dict()
    assert set(state) == set(trained)
    for k, v in trained.items():
        assert torch.equal(state[k], v), k
    with pytest.raises(ValueError, match="python -m model_export checkpoint"):
        Trainer(recipe.model_copy(update={"init_from": bundle}), tmp_path / "r2", progress=False)
    # it carries the bundle's tokenizer, as a training checkpoint does (extend-vocabulary)
    tokenizer = load_checkpoint(ckpt_file)["tokenizer"]
    assert tokenizer["spm_model"] == (bundle / "tokenizer" / "spm.model").read_bytes()
    # such a checkpoint records no step: slimming it (a GPU call's weights) still works
    from training.checkpoint import main as checkpoint_main

    slim = tmp_path / "slim.pt"
    assert checkpoint_main(["slim", str(ckpt_file), str(slim), "--dtype", "bfloat16"]) == 0
    assert all(v.dtype == torch.bfloat16 for v in load_checkpoint(slim)["model"].values())


def test_time_limit_stops_cleanly_and_resume_continues(toy_data, tmp_path):
    """``--time-limit``: no update after the limit, last.pt saved, --resume goes on; the
    training time of both runs adds up in the checkpoint."""
    data, tok = toy_data
    out = tmp_path / "run"
    stopped = Trainer(tiny_recipe(data, tok, max_steps=4), out, progress=False, time_limit_s=0.0)
    summary = stopped.run()
    assert summary["stopped_early"] and summary["step"] == 0
    first = load_checkpoint(out, "last")
    assert first["step"] == 0 and first["train_seconds"] > 0
    resumed = Trainer(tiny_recipe(data, tok, max_steps=4), out, progress=False, resume_from=first)
    summary = resumed.run()
    assert summary["step"] == 4 and not summary["stopped_early"]
    assert summary["train_seconds"] > first["train_seconds"]
    last = load_checkpoint(out, "last")["train_seconds"]
    assert first["train_seconds"] < last <= summary["train_seconds"]


def test_evaluations_without_py3langid_give_no_off_target_rate(toy_data, tmp_path, monkeypatch):
    """A machine without py3langid (a lent GPU's image) trains and evaluates: the dev scores
    are there, the off-target rate is None, and the log says why."""
    import io

    for name in ("py3langid", "py3langid.langid"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    data, tok = toy_data
    log = io.StringIO()
    run = tmp_path / "run"
    Trainer(tiny_recipe(data, tok, max_steps=2, eval_every=2), run, progress=False, log=log).run()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert evals and evals[-1]["off_target"] is None and evals[-1]["dev_chrf"] >= 0
    assert "py3langid is not installed" in log.getvalue()
    assert "off-target -" in log.getvalue()


def test_a_time_limited_run_evaluates_its_last_updates(toy_data, tmp_path):
    """At ``--time-limit`` the run evaluates where it stopped (between two ``eval_every``), so
    its last updates can become best.pt: a GPU call or CPU slice keeps what it trained."""
    data, tok = toy_data
    out = tmp_path / "run"
    trainer = Trainer(
        tiny_recipe(data, tok, max_steps=50, eval_every=1000),
        out,
        progress=False,
        time_limit_s=3600,
    )
    real_update, calls = trainer.update, []

    def update(batches, stop_request=False):
        calls.append(1)
        if len(calls) == 3:
            trainer.time_limit_s = 0.0  # the limit is reached after three updates
        return real_update(batches, stop_request)

    trainer.update = update
    summary = trainer.run()
    assert summary["stopped_early"] and summary["step"] == 3
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [3]
    assert load_checkpoint(out, "best")["step"] == 3


def test_slim_checkpoint_keeps_the_model_and_drops_resume_state(tiny_run, tmp_path):
    from training.checkpoint import main as checkpoint_main

    dst = tmp_path / "slim.pt"
    assert checkpoint_main(["slim", str(tiny_run / "last.pt"), str(dst), "--dtype", "float16"]) == 0
    slim = load_checkpoint(dst)
    assert "optimizer" not in slim and "rng" not in slim
    assert all(v.dtype == torch.float16 for v in slim["model"].values() if v.is_floating_point())
    full_model, _, meta = load_model(tiny_run, which="last")
    slim_model, _, slim_meta = load_model(dst)
    assert slim_meta.step == meta.step and slim_meta.routes == meta.routes
    src = torch.tensor([[5, 6, 7, EOS_ID]])
    route = meta.routes[0]
    tgt_in = torch.tensor([[2, 5, 6]])
    torch.testing.assert_close(
        slim_model(src, tgt_in, route).logits,
        full_model(src, tgt_in, route).logits,
        rtol=0,
        atol=2e-2,
    )


def test_interpolated_checkpoint_lies_between_the_tuned_and_the_start(tiny_run, tmp_path):
    """``interpolate``: every floating weight is (1 - w) * tuned + w * start, the ends are
    the two checkpoints themselves, and checkpoints of other shapes are refused."""
    from training.checkpoint import interpolate_checkpoints
    from training.checkpoint import main as checkpoint_main

    tuned, start = load_checkpoint(tiny_run / "last.pt"), load_checkpoint(tiny_run / "best.pt")
    start["model"] = {k: v + 1.0 if v.is_floating_point() else v for k, v in start["model"].items()}
    start_file = save_checkpoint(start, tmp_path / "start.pt")
    dst = tmp_path / "mid.pt"
    argv = ["interpolate", str(tiny_run / "last.pt"), str(start_file), str(dst), "--weight", "0.25"]
    assert checkpoint_main(argv) == 0
    mid = load_checkpoint(dst)
    assert "optimizer" not in mid and mid["extra"]["interpolated"]["weight"] == 0.25
    for k, v in tuned["model"].items():
        expected = 0.75 * v + 0.25 * start["model"][k] if v.is_floating_point() else v
        torch.testing.assert_close(mid["model"][k], expected)
    for w, end in ((0.0, tuned), (1.0, start)):
        ends = interpolate_checkpoints(tuned, start, w)["model"]
        assert all(torch.allclose(ends[k].float(), end["model"][k].float()) for k in ends)
    load_model(dst)  # a model the exporter can read
    key = next(iter(start["model"]))
    start["model"][key] = start["model"][key][:1]
    with pytest.raises(ValueError, match="shape"):
        interpolate_checkpoints(tuned, start, 0.5)
    with pytest.raises(ValueError, match="outside"):
        interpolate_checkpoints(tuned, tuned, 1.5)


@pytest.mark.parametrize("store_dtype", ["float32", "int8"])
def test_init_from_a_bundle_restores_every_weight(toy_data, tmp_path, store_dtype):
    """A recipe can start from an exported bundle (the shipped model) through its checkpoint:
    every parameter, the language-specific copies included, comes back (exactly from float32
    modules, within the storage error from int8 ones)."""
    from model_export.from_torch import export_bundle
    from model_export.to_checkpoint import checkpoint_from_bundle
    from training.checkpoint import init_from_checkpoint
    from training.model import build_model

    data, tok = toy_data
    lsl = {"language_specific": {"encoder_src": [1], "encoder_tgt": [2]}}
    recipe = tiny_recipe(data, tok, model=lsl)
    langs = ["de", "en", "fr"]
    vocab = 360
    torch.manual_seed(0)
    source = build_model(recipe.model, vocab, langs)
    bundle = tmp_path / "bundle"
    export_bundle(
        source,
        bundle,
        name="toy",
        tokenizer_model=tok / "spm.model",
        routes=[(s, t) for s, t in TOY_ROUTES],
        languages=langs,
        store_dtype=store_dtype,
        provenance={"recipe": recipe.model_dump(mode="json")},
    )
    torch.manual_seed(1)
    target = build_model(recipe.model, vocab, langs)
    mapping = init_from_checkpoint(target, checkpoint_from_bundle(bundle), "copy")
    assert len(mapping) == len(target.state_dict())
    assert any(".by_lang.fr." in name for name in mapping)
    tolerance = 0.0 if store_dtype == "float32" else 1 / 254 + 1e-3  # int8: half a step
    for name, value in source.state_dict().items():
        err = (target.state_dict()[name] - value).abs().max().item()
        assert err <= tolerance * max(value.abs().max().item(), 1e-6), name


def test_hybrid_run_from_a_transformer_trains_and_exports_a_hybrid_bundle(
    tiny_run, toy_data, tmp_path
):
    """The Shallow paper's recipe end to end: a trained Transformer's decoder replaced by an
    LSTM (``init_mode: hybrid``), trained through the CLI, exported as a hybrid bundle."""
    from lsmt_bundle import load_bundle
    from model_export.__main__ import main as export_main

    data, tok = toy_data
    out, bundle = tmp_path / "hybrid", tmp_path / "bundle"
    args = ["--config", "tiny_hybrid", "--out", str(out), "--no-progress", "--max-steps", "6"]
    sets = [f"data.dir={data}", f"data.tokenizer={tok}", f"init_from={tiny_run / 'last.pt'}"]
    sets += ["init_mode=hybrid", "training.eval_every=0", "training.batch_tokens=512"]
    assert train_main([*args, "--set", *sets]) == 0
    trained = load_checkpoint(out, "last")["model"]
    transformer = load_checkpoint(tiny_run, "last")["model"]
    assert "decoder.layers.0.lstm.weight_hh_l0" in trained
    assert not any(k.startswith("decoder.") and k in trained for k in transformer)
    assert export_main(["--checkpoint", str(out), "--which", "last", "--out", str(bundle)]) == 0
    architecture = load_bundle(bundle).manifest.architecture
    assert (architecture.decoder_kind, architecture.lstm_hidden_size) == ("lstm", 32)


def test_the_curve_plot_shows_each_test_set_beside_its_copy_baseline():
    """metrics.png's chrF panel: dev and every in-loop test set, each with its copy baseline
    (a test set evaluated only from some step on starts there)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from training.plots import _chrf_curves

    evals = [
        {"step": 100, "dev_chrf": 20.0, "copy_chrf": 10.0,
         "testsets": {"acts": {"chrf": 30.0, "copy_chrf": 8.0}}},
        {"step": 200, "dev_chrf": 25.0, "copy_chrf": 10.0,
         "testsets": {"acts": {"chrf": 31.0, "copy_chrf": 8.0},
                      "ntrex": {"chrf": 15.0, "copy_chrf": 12.0}}},
    ]  # fmt: skip
    fig, ax = plt.subplots()
    _chrf_curves(ax, evals)
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    plt.close(fig)
    assert lines["dev"] == [20.0, 25.0] and lines["dev: copy"] == [10.0, 10.0]
    assert lines["acts"] == [30.0, 31.0] and lines["acts: copy"] == [8.0, 8.0]
    assert np.isnan(lines["ntrex"][0]) and lines["ntrex"][1] == 15.0
    assert "ntrex: copy" not in lines  # no baseline where the set was not evaluated
