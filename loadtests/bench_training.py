"""Training throughput benchmark on this machine: the same recipe, the same batches, side by
side in one run, for each way of running a training step we can choose between.

    python loadtests/bench_training.py [--recipe default_dense_8-2] [--steps 20] [--warmup 3]
        [--batch-tokens 4096] [--pairs-per-route 1000] [--out runs/bench_training]
        [--configs fp32,bf16]      # only the configurations whose name has one of these words
        [--device cuda --batch-tokens 16384,65536,131072]   # a GPU: which batch fills it
        [--profile]                # and where an update's time goes (torch.profiler tables)

Configurations: intra-op threads (1, 2) x output layer (full vocabulary, restricted to the
target language's vocabulary: ``data.target_vocab.restrict_output``), then the Adam
implementation (per-parameter loop, ``foreach``, ``fused``), then the precision: fp32 against
bf16 autocast (``training.precision: bf16``; native on CPUs with AVX-512 BF16 or AMX, see
:func:`training.distributed.cpu_has_native_bf16`). Each one builds the recipe's model from the
same seed and times ``--steps`` optimizer updates after ``--warmup`` untimed ones on the same
sequence of batches; reported are target tokens/s, the ratio to the first configuration, and
the loss over the last updates (the same batches for every configuration, so a precision that
learns worse shows there). With several ``--batch-tokens``, every configuration runs at each
batch size: on a GPU, where the thread count does not matter, the tokens/s that stop growing
with the batch say the model fills the chip (scripts/device/train_default.sh picks its batch so).
Writes results.json, results.csv and results.png under --out.
Needs the recipe's corpus and tokenizer (``make default-model`` builds them first).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from loadtests.results import write_results
from training.distributed import cpu_has_native_bf16
from training.recipe import load_recipe
from training.step import make_optimizer
from training.trainer import Trainer

CONFIGS = [
    {"name": "1 thread, full softmax", "threads": 1, "restrict": False, "adam": "loop"},
    {"name": "2 threads, full softmax", "threads": 2, "restrict": False, "adam": "loop"},
    {"name": "1 thread, restricted softmax", "threads": 1, "restrict": True, "adam": "loop"},
    {"name": "2 threads, restricted softmax", "threads": 2, "restrict": True, "adam": "loop"},
    {
        "name": "2 threads, restricted, foreach Adam",
        "threads": 2,
        "restrict": True,
        "adam": "foreach",
    },
    {
        "name": "2 threads, restricted, fused Adam, fp32",
        "threads": 2,
        "restrict": True,
        "adam": "fused",
        "precision": "fp32",
    },
    {
        "name": "2 threads, restricted, fused Adam, bf16 autocast",
        "threads": 2,
        "restrict": True,
        "adam": "fused",
        "precision": "bf16",
    },
]
# NLL averaged over this many last updates: "the loss after the same updates"
LAST_UPDATES = 5
# updates profiled (--profile) after the timed ones
PROFILED_UPDATES = 3


def bench_overrides(
    pairs_per_route: int, batch_tokens: int, threads: int, precision: str = "fp32"
) -> dict:
    """Recipe overrides of a throughput benchmark: fewer pairs to load, the batch size,
    threads and precision asked for, no evaluations or checkpoints inside the timed steps."""
    return {
        "data": {"max_pairs_per_route": pairs_per_route},
        "training": {
            "batch_tokens": batch_tokens,
            "eval_every": 0,
            "save_every": 0,
            "num_threads": threads,
            "precision": precision,
        },
    }


def measure(
    recipe_name: str, cfg: dict, batch_tokens: int, args: argparse.Namespace, out: Path
) -> dict:
    overrides = bench_overrides(
        args.pairs_per_route, batch_tokens, cfg["threads"], cfg.get("precision", "fp32")
    )
    recipe = load_recipe(recipe_name, overrides)
    if recipe.data.target_vocab is None:
        raise SystemExit(f"{recipe_name} has no data.target_vocab: nothing to restrict")
    tv = recipe.data.target_vocab.model_copy(update={"restrict_output": cfg["restrict"]})
    recipe = recipe.model_copy(update={"data": recipe.data.model_copy(update={"target_vocab": tv})})
    trainer = Trainer(recipe, out / "run", device=args.device, progress=False)
    trainer.optimizer, trainer.scheduler = make_optimizer(
        trainer.model, recipe, implementation=cfg["adam"]
    )
    tokens, seconds, losses = 0, 0.0, []
    for i in range(args.warmup + args.steps):
        batches = next_update_batches(trainer)
        t0 = time.perf_counter()
        stats = trainer.update(batches)
        if on_gpu(trainer):
            torch.cuda.synchronize()
        if i >= args.warmup:
            seconds += time.perf_counter() - t0
            tokens += stats.ntokens
            losses.append(stats.nll)
    if args.profile:
        write_profile(trainer, out / f"profile-{batch_tokens}.txt")
    return {
        **cfg,
        "name": cfg["name"] if len(args.batch_tokens) == 1 else f"{cfg['name']}, {batch_tokens}",
        "batch_tokens": batch_tokens,
        # what an update held: a batch holds one direction, so --pairs-per-route caps it
        "tokens_per_update": tokens / args.steps,
        "tgt_tokens_per_s": tokens / seconds,
        "seconds": seconds,
        "tokens": tokens,
        "mean_nll": sum(losses) / len(losses),
        "last_nll": sum(losses[-LAST_UPDATES:]) / len(losses[-LAST_UPDATES:]),
        "precision": str(trainer.autocast_dtype or "fp32").removeprefix("torch."),
    }


def next_update_batches(trainer: Trainer) -> list:
    """The batches of the trainer's next update (one per accumulation step)."""
    return [trainer.data.sampler.next_batch() for _ in range(trainer.recipe.training.accumulation)]


def on_gpu(trainer: Trainer) -> bool:
    return trainer.dist.device.type == "cuda"


def write_profile(trainer: Trainer, path: Path, updates: int = PROFILED_UPDATES) -> None:
    """Where an update's time goes: ``updates`` more updates under torch.profiler, its table
    of operators by total time (CPU and, on a GPU, CUDA) written to ``path``."""
    from torch.profiler import ProfilerActivity, profile

    gpu = on_gpu(trainer)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if gpu else [])]
    with profile(activities=activities) as prof:
        for _ in range(updates):
            trainer.update(next_update_batches(trainer))
        if gpu:
            torch.cuda.synchronize()
    sort = "cuda_time_total" if gpu else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=30)
    path.write_text(f"{updates} updates, sorted by {sort}\n{table}\n")
    print(f"profile of {updates} updates -> {path}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", default="default_dense_8-2")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument(
        "--batch-tokens",
        type=lambda v: [int(b) for b in v.split(",")],
        default=[4096],
        help="target tokens per update; comma-separated for several batch sizes",
    )
    p.add_argument("--pairs-per-route", type=int, default=1000)
    p.add_argument("--out", type=Path, default=Path("runs/bench_training"))
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (the trainer's)")
    p.add_argument(
        "--profile",
        action="store_true",
        help=f"then profile {PROFILED_UPDATES} more updates: profile-BATCH.txt under --out",
    )
    p.add_argument(
        "--configs",
        type=lambda v: [w.strip() for w in v.split(",") if w.strip()],
        default=None,
        help="comma-separated words: run only the configurations whose name has one of them",
    )
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    configs = [
        c for c in CONFIGS if args.configs is None or any(w in c["name"] for w in args.configs)
    ]
    if not configs:
        raise SystemExit(
            f"--configs {args.configs} matches none of: {[c['name'] for c in CONFIGS]}"
        )
    rows = []
    for cfg, batch_tokens in ((c, b) for c in configs for b in args.batch_tokens):
        row = measure(args.recipe, cfg, batch_tokens, args, args.out)
        row["ratio"] = row["tgt_tokens_per_s"] / (rows[0] if rows else row)["tgt_tokens_per_s"]
        rows.append(row)
        print(
            f"{row['name']:<32} {row['tgt_tokens_per_s']:>8.0f} target tokens/s  "
            f"x{row['ratio']:.2f}  (NLL over the last {LAST_UPDATES} updates "
            f"{row['last_nll']:.3f})",
            flush=True,
        )
        if row["tokens_per_update"] < 0.5 * batch_tokens:
            print(
                f"warning: updates held {row['tokens_per_update']:.0f} target tokens, not the "
                f"{batch_tokens} asked: a batch holds one direction's pairs, so raise "
                "--pairs-per-route",
                flush=True,
            )
    if args.device != "cpu" and torch.cuda.is_available():
        machine = torch.cuda.get_device_name()
    else:
        machine = (
            f"{platform.machine()} CPU, {torch.get_num_threads()} threads available, "
            f"native bf16: {cpu_has_native_bf16()}"
        )
    result = {"recipe": args.recipe, "machine": machine, **vars(args), "results": rows}
    result["out"] = str(args.out)
    write_results(args.out, result, rows)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.barh([r["name"] for r in rows], [r["tgt_tokens_per_s"] for r in rows])
    for i, r in enumerate(rows):
        ax.text(r["tgt_tokens_per_s"], i, f" x{r['ratio']:.2f}", va="center")
    ax.set_xlabel("target tokens / s")
    ax.set_title(f"{args.recipe}: training throughput ({machine})", fontsize=9)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(args.out / "results.png", dpi=100)
    print(f"-> {args.out}/results.json, results.csv, results.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
