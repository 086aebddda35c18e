"""DistributedDataParallel on CPU (gloo): a 2-process step equals one process on the same data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID
from tests.tiny import tiny_model_config
from training.batching import Batch
from training.checkpoint import load_checkpoint
from training.model import Route, build_model
from training.step import train_step

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed unavailable"),
]

LANGS = ["de", "en", "fr"]
ROUTES = [Route("de", "en"), Route("en", "de")]


def _model(sharing: str):
    torch.manual_seed(0)
    return build_model(tiny_model_config(decoder_sharing=sharing), 40, LANGS)


def _batches(n: int) -> list[Batch]:
    """``n`` micro-batches of 8 rows, one route each (alternating), variable lengths."""
    gen = torch.Generator().manual_seed(42)
    out = []
    for k in range(n):
        rows, s, t = 8, 9, 7
        src = torch.zeros(rows, s, dtype=torch.long)
        tgt_in = torch.zeros(rows, t + 1, dtype=torch.long)
        gold = torch.zeros(rows, t + 1, dtype=torch.long)
        for i in range(rows):
            ls = int(torch.randint(2, s, (1,), generator=gen))
            lt = int(torch.randint(1, t + 1, (1,), generator=gen))
            src[i, :ls] = torch.randint(4, 40, (ls,), generator=gen)
            src[i, ls] = EOS_ID
            y = torch.randint(4, 40, (lt,), generator=gen)
            tgt_in[i, 0], tgt_in[i, 1 : lt + 1] = BOS_ID, y
            gold[i, :lt], gold[i, lt] = y, EOS_ID
        out.append(
            Batch(
                ROUTES[k % 2],
                src,
                tgt_in,
                gold,
                int((gold != PAD_ID).sum()),
                int((src != PAD_ID).sum()),
            )
        )
    return out


def _step(model, batches, world_size: int) -> dict:
    opt = torch.optim.SGD(model.parameters(), lr=0.5)  # SGD: parameters reveal gradient scale
    stats = train_step(
        model,
        batches,
        opt,
        None,
        label_smoothing=0.1,
        clip_norm=0.0,
        device=torch.device("cpu"),
        world_size=world_size,
    )
    inner = getattr(model, "module", model)
    return {
        "loss": stats.loss,
        "nll": stats.nll,
        "ntokens": stats.ntokens,
        "params": {k: v.detach().clone() for k, v in inner.state_dict().items()},
        "grads": {
            k: None if p.grad is None else p.grad.clone() for k, p in inner.named_parameters()
        },
    }


CASES = {"shared": 1, "separate": 2}  # decoder sharing -> micro-batches per step


def _worker(rank: int, world: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = {}
        for sharing, n in CASES.items():
            model = torch.nn.parallel.DistributedDataParallel(
                _model(sharing),
                find_unused_parameters=sharing == "separate",
                broadcast_buffers=False,
            )
            half = [b.rows(rank * 4, rank * 4 + 4) for b in _batches(n)]
            results[sharing] = _step(model, half, world)
        if rank == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory) -> dict:
    """Both cases run in one 2-process gloo group (rank 0's results)."""
    tmp = tmp_path_factory.mktemp("ddp")
    out = tmp / "rank0.pt"
    mp.spawn(_worker, args=(2, str(tmp / "init"), str(out)), nprocs=2, join=True)
    return torch.load(out, weights_only=True)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sharing", list(CASES))
def test_two_process_step_equals_single_process(ddp_results, sharing):
    """Same loss, same gradients, same updated weights; with separate decoders the two
    micro-batches use different decoders (unused parameters + gradient accumulation)."""
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = _step(_model(sharing), _batches(CASES[sharing]), 1)
    finally:
        torch.set_num_threads(n_threads)
    ddp = ddp_results[sharing]
    assert ddp["ntokens"] == single["ntokens"]
    assert ddp["loss"] == pytest.approx(single["loss"], rel=1e-6)
    assert ddp["nll"] == pytest.approx(single["nll"], rel=1e-6)
    unused = [k for k, g in single["grads"].items() if g is None]
    assert bool(unused) == (sharing == "separate")  # the 'fr' decoder is never used
    for k, g in single["grads"].items():
        if g is None:
            assert ddp["grads"][k] is None or not ddp["grads"][k].any(), k
        else:
            torch.testing.assert_close(ddp["grads"][k], g, rtol=1e-4, atol=1e-6, msg=k)
    for k, p in single["params"].items():
        torch.testing.assert_close(ddp["params"][k], p, rtol=1e-4, atol=1e-6, msg=k)
    # the test can fail: the step did change the weights
    assert not torch.equal(
        single["params"]["embed_tokens.weight"], _model(sharing).state_dict()["embed_tokens.weight"]
    )


@pytest.mark.timeout(300)
def test_torchrun_cli_two_processes(toy_data, tmp_path):
    """``torchrun --nproc_per_node 2 -m training.train`` (gloo): trains, evaluates, saves
    one checkpoint with both ranks' RNG states, and resumes."""
    data, tok = toy_data
    out = tmp_path / "ddp"
    args = [
        "--config",
        "tiny",
        "--out",
        str(out),
        "--no-progress",
        "--device",
        "cpu",
        "--set",
        f"data.dir={data}",
        f"data.tokenizer={tok}",
        "training.eval_every=4",
        "training.save_every=4",
        "training.eval_sentences=4",
        "model.decoder_sharing=separate",
        "training.num_threads=1",
    ]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "training.train",
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run(
        [*cmd, "--max-steps", "4"], cwd=root, env=env, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ckpt = load_checkpoint(out / "last.pt", "last")
    assert ckpt["step"] == 4 and ckpt["world_size"] == 2 and len(ckpt["rng"]) == 2
    assert ckpt["sampler"]["draws"] == 4
    r = subprocess.run(
        [*cmd, "--max-steps", "6", "--resume"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert load_checkpoint(out / "last.pt", "last")["step"] == 6
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [4, 6]
    assert "find_unused" not in r.stderr  # no DDP complaint about unused parameters
