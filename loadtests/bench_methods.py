"""Training throughput of the language-conditioned method recipes next to the dense baseline,
side by side in one process (docs/methods.md, "Measured").

    python loadtests/bench_methods.py [--recipes default_dense_8-2,lms_pair,...] [--steps 10]
        [--warmup 2] [--batch-tokens 2048] [--pairs-per-route 1000] [--threads 1]
        [--set key=value ...] [--out runs/bench_methods]

Every recipe's Trainer (model, optimizer, sampler: same seed, so the same sequence of
batches) is built first; then the updates run round-robin, one step of each recipe per
round, so that load from anything else on the machine falls on every recipe alike. The first
``--warmup`` rounds are not timed. Per round, each recipe's target tokens/s is divided by the
first recipe's (the baseline) in that round; the reported ratio is the median over rounds.
Timed is :meth:`training.trainer.Trainer.update` (forward, loss, backward, optimizer step) as
in ``loadtests/bench_training.py``; evaluation and checkpointing are off. Writes results.json
and results.csv under --out.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch

from loadtests.bench_training import bench_overrides
from loadtests.results import write_results
from training.recipe import load_recipe, parse_overrides
from training.trainer import Trainer

RECIPES = "default_dense_8-2,lms_pair,lms_language,lms_fd,laa_dec_self,laa_lee"


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def build(recipe_name: str, args: argparse.Namespace, out: Path) -> Trainer:
    overrides = bench_overrides(args.pairs_per_route, args.batch_tokens, args.threads)
    overrides = _merge(overrides, parse_overrides(args.set or []))
    recipe = load_recipe(recipe_name, overrides)
    return Trainer(recipe, out / recipe_name.replace("/", "_"), device="cpu", progress=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--recipes", default=RECIPES, help="comma-separated; the first is the baseline")
    p.add_argument("--steps", type=int, default=10, help="timed rounds")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--pairs-per-route", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--set", nargs="*", action="extend", metavar="KEY=VALUE",
                   help="overrides for every recipe (repeatable)")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("runs/bench_methods"))
    return p.parse_args(argv)


def run_rounds(trainers: dict[str, Trainer], warmup: int, steps: int) -> list[dict[str, dict]]:
    """``warmup`` untimed rounds, then ``steps`` timed ones, returned: per recipe, one update's
    target tokens, seconds and NLL. One step of each recipe per round, so that load from
    anything else on the machine falls on every recipe alike."""
    rounds: list[dict[str, dict]] = []
    for i in range(warmup + steps):
        this_round = {}
        for name, tr in trainers.items():
            t = tr.recipe.training
            batches = [tr.data.sampler.next_batch() for _ in range(t.accumulation)]
            t0 = time.perf_counter()
            stats = tr.update(batches)
            seconds = time.perf_counter() - t0
            this_round[name] = {"tokens": stats.ntokens, "seconds": seconds, "nll": stats.nll}
        if i >= warmup:
            rounds.append(this_round)
        step_s = " ".join(f"{v['seconds']:.2f}" for v in this_round.values())
        kind = "warm-up" if i < warmup else "timed"
        print(f"round {i + 1}/{warmup + steps} ({kind}): {step_s} s", flush=True)
    return rounds


def recipe_row(name: str, base: str, rounds: list[dict[str, dict]], params: int) -> dict:
    """One recipe's throughput over the rounds and its per-round ratios to ``base``."""
    tps = [r[name]["tokens"] / r[name]["seconds"] for r in rounds]
    base_tps = [r[base]["tokens"] / r[base]["seconds"] for r in rounds]
    ratios = [a / b for a, b in zip(tps, base_tps, strict=True)]
    tokens = sum(r[name]["tokens"] for r in rounds)
    seconds = sum(r[name]["seconds"] for r in rounds)
    return {
        "recipe": name,
        "trainable_parameters": params,
        "tgt_tokens_per_s": tokens / seconds,
        "median_step_s": statistics.median(r[name]["seconds"] for r in rounds),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "tokens": tokens,
        "seconds": seconds,
        "mean_nll": sum(r[name]["nll"] for r in rounds) / len(rounds),
    }


def print_row(row: dict) -> None:
    print(
        f"{row['recipe']:<20} {row['tgt_tokens_per_s']:>7.0f} target tokens/s  "
        f"x{row['ratio_median']:.2f} (rounds {row['ratio_min']:.2f}.."
        f"{row['ratio_max']:.2f})  median step {row['median_step_s']:.2f}s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    names = [r.strip() for r in args.recipes.split(",") if r.strip()]
    trainers = {name: build(name, args, args.out) for name in names}
    params = {
        name: sum(q.numel() for q in tr.model.parameters() if q.requires_grad)
        for name, tr in trainers.items()
    }
    rounds = run_rounds(trainers, args.warmup, args.steps)
    base = names[0]
    rows = []
    for name in names:
        rows.append(recipe_row(name, base, rounds, params[name]))
        print_row(rows[-1])
    machine = f"{platform.machine()} CPU, {torch.get_num_threads()} intra-op threads used"
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result = {"machine": machine, **settings, "baseline": base, "results": rows}
    write_results(args.out, result, rows)
    print(f"-> {args.out}/results.json, results.csv")
    return result


if __name__ == "__main__":
    main()
    raise SystemExit(0)
