"""Train a multilingual model from a recipe.

    python -m training.train --config training/recipes/baseline_6-6_shared.yaml --out runs/b66
    python -m training.train --out runs/b66 --resume               # continue after interruption
    torchrun --nproc_per_node 4 -m training.train --config ... --out ...   # DDP

Options: ``--device auto|cpu|cuda[:i]``, ``--max-steps N``, ``--time-limit MINUTES`` (stop
after that much training time, evaluate there and save ``last.pt``), ``--set key.path=value
...`` (recipe overrides, YAML values), ``--no-progress``, ``--token-cache DIR`` /
``--no-token-cache`` (the tokenized pairs kept between runs: :mod:`training.token_cache`).

Run directory: ``last.pt`` (full state, exact resume), ``best.pt`` (best dev chrF, weights
only), ``metrics.jsonl`` (one JSON record per log interval / evaluation), ``metrics.png``
(loss and dev chrF), ``recipe.yaml`` (the resolved recipe), ``data_stats.json``,
``summary.json``.

The command line and its wiring only; the run itself is :class:`training.trainer.Trainer`
(the loop), with :mod:`training.datasets`, :mod:`training.step` (loss, schedule, optimizer,
one update), :mod:`training.distributed` and :mod:`training.run_log`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

from .checkpoint import load_checkpoint
from .recipe import Recipe, RecipeError, load_recipe, parse_overrides, recipe_from_dict
from .token_cache import TokenCache, default_dir
from .trainer import Trainer


def prepare(args: argparse.Namespace) -> tuple[Recipe, dict[str, Any] | None]:
    """The recipe to run and, with ``--resume``, the checkpoint to continue from."""
    out = Path(args.out)
    overrides = parse_overrides(args.set)
    if args.max_steps is not None:
        overrides.setdefault("training", {})["max_steps"] = args.max_steps
    last = out / "last.pt"
    if args.resume and last.is_file():
        ckpt = load_checkpoint(last)
        recipe = recipe_from_dict(ckpt["recipe"], overrides, source=str(last))
        if args.config:
            given = load_recipe(args.config, overrides)
            if given.model != recipe.model:
                raise RecipeError(
                    f"--config {args.config} has a different model section than the run in "
                    f"{out}; resume with the run's own recipe (omit --config)"
                )
        return recipe, ckpt
    if args.resume and not args.config:
        raise RecipeError(f"--resume: no {last} to resume, and no --config to start from")
    if not args.config:
        raise RecipeError("--config RECIPE is required (a path or a built-in recipe name)")
    if last.is_file() and not args.resume:
        raise RecipeError(
            f"{out} already has last.pt: pass --resume to continue it, or use another --out"
        )
    return load_recipe(args.config, overrides), None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m training.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--config", help="recipe YAML (path or name in training/recipes/)")
    ap.add_argument("--out", required=True, help="run directory")
    ap.add_argument("--resume", action="store_true", help="continue from RUN_DIR/last.pt")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="MINUTES",
        help="stop after this much training time, evaluating there (best.pt if better) and "
        "saving last.pt (continue with --resume)",
    )
    # extend: `--set a=1 --set b=2` keeps both (the default action kept only the last)
    ap.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                    help="recipe overrides (repeatable)")  # fmt: skip
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--token-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="where tokenized training pairs are kept between runs and stages (default: "
        "$LSMT_TOKEN_CACHE, else $LSMT_CACHE/tokenized, else ~/.cache/lsmt/tokenized)",
    )
    ap.add_argument(
        "--no-token-cache", action="store_true", help="tokenize the pairs, keep nothing"
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        recipe, ckpt = prepare(args)
    except RecipeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    trainer = Trainer(
        recipe,
        args.out,
        device=args.device,
        resume_from=ckpt,
        progress=not args.no_progress,
        time_limit_s=None if args.time_limit is None else args.time_limit * 60,
        token_cache=None if args.no_token_cache else TokenCache(args.token_cache or default_dir()),
    )
    del ckpt
    try:
        trainer.run()
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
