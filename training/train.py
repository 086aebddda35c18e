"""Train a multilingual model from a recipe.

    python -m training.train --config training/recipes/baseline_6-6_shared.yaml --out runs/b66
    python -m training.train --out runs/b66 --resume               # continue after interruption
    torchrun --nproc_per_node 4 -m training.train --config ... --out ...   # DDP

Options: ``--device auto|cpu|cuda[:i]``, ``--max-steps N``, ``--time-limit MINUTES`` (stop
and save ``last.pt`` after that much training time), ``--set key.path=value ...`` (recipe
overrides, YAML values), ``--no-progress``.

Run directory: ``last.pt`` (full state, exact resume), ``best.pt`` (best dev chrF, weights
only), ``metrics.jsonl`` (one JSON record per log interval / evaluation), ``metrics.png``
(loss and dev chrF), ``recipe.yaml`` (the resolved recipe), ``data_stats.json``,
``summary.json``.

Design notes
- One route per micro-batch (homogeneous batches): language-specific modules see one
  language per forward. Routes are drawn with temperature sampling (``RouteSampler``).
- Loss: label-smoothed cross entropy summed over target tokens and divided by the number of
  target tokens of the whole update (all micro-batches, all ranks), so gradient accumulation
  and DDP give the gradient of one big batch. With ``data.target_vocab.restrict_output`` the
  softmax covers only the target language's pieces (``OutputVocabulary``), as the exported,
  vocabulary-sliced engine does.
- DDP: every rank draws the same route at each micro-step and a different batch of it, so all
  ranks use the same parameters in a step. Route-dependent modules leave other parameters
  unused, so DDP runs with ``find_unused_parameters=True`` when the model has any
  language-specific module (``training.ddp_find_unused_parameters: auto``); for dense models it
  is off (no extra graph traversal). Only rank 0 writes files; RNG states of all ranks are
  gathered into ``last.pt``.
- Exact resume: model, optimizer, LR schedule, grad scaler, sampler position and RNG states
  (torch CPU/CUDA, Python) are restored, so N steps + resume + N steps == 2N steps, bit for bit
  (same device, thread count and world size).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lsmt_core.tags import PAD_ID

from .batching import Batch, RouteSampler, SourceEncoder, encode_corpus
from .checkpoint import (
    build_checkpoint,
    capture_rng_state,
    init_from_checkpoint,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
    tokenizer_reference,
    unwrap,
)
from .model import Route, build_model
from .model.layers import LanguageSpecific
from .recipe import (
    Recipe,
    RecipeError,
    load_recipe,
    parse_overrides,
    recipe_from_dict,
    resolve_path,
    route_key,
)

# -- distributed / device ------------------------------------------------------------------------


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup_distributed(device: str = "auto") -> DistInfo:
    """Device choice and, under ``torchrun`` (WORLD_SIZE > 1), the process group
    (nccl on CUDA, gloo on CPU; rendezvous from the environment)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
        if dev.index is None:
            dev = torch.device("cuda", local_rank if world > 1 else torch.cuda.current_device())
        torch.cuda.set_device(dev)
    if world > 1 and not (dist.is_available() and dist.is_initialized()):
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return DistInfo(rank, world, local_rank, dev)


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype (None = fp32)."""
    if precision == "fp32":
        return None
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("fp16 needs CUDA; use bf16 or fp32 on CPU")
    return torch.bfloat16 if precision == "bf16" else torch.float16


# -- loss, schedule, step ------------------------------------------------------------------------


def label_smoothed_nll(
    logits: torch.Tensor,
    gold: torch.Tensor,
    eps: float,
    pad_id: int = PAD_ID,
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(label-smoothed loss, NLL), both summed over non-pad target tokens, in float32.

    loss = (1 - eps) * NLL + eps * mean over the vocabulary of -log p (as PyTorch's
    ``cross_entropy(label_smoothing=eps)`` and fairseq). ``keep`` marks the tokens that count
    (default: ``gold != pad_id``; given when ``gold`` holds positions in a restricted output).
    """
    if keep is None:
        keep = gold != pad_id
    lp = F.log_softmax(logits[keep].float(), dim=-1)
    target = gold[keep]
    nll = -lp.gather(-1, target[:, None]).squeeze(-1)
    loss = (1.0 - eps) * nll + eps * -lp.mean(dim=-1)
    return loss.sum(), nll.sum()


def inverse_sqrt(warmup: int):
    """LR multiplier at update ``i`` (0-based): linear warm-up, then 1/sqrt decay."""

    def factor(i: int) -> float:
        s = i + 1
        return min(s / warmup, math.sqrt(warmup / s))

    return factor


ADAM_IMPLEMENTATIONS = {
    "loop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


def make_optimizer(model: nn.Module, recipe: Recipe, implementation: str | None = None):
    """Adam with the inverse-sqrt schedule. ``implementation`` (loop | foreach | fused) is
    for benchmarks; None lets torch choose (the same updates up to float rounding)."""
    t = recipe.training
    opt = torch.optim.Adam(
        model.parameters(),
        lr=t.lr,
        betas=t.betas,
        eps=t.adam_eps,
        weight_decay=t.weight_decay,
        **(ADAM_IMPLEMENTATIONS[implementation] if implementation else {}),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, inverse_sqrt(t.warmup_steps))
    return opt, sched


class OutputVocabulary:
    """Per target language, the output rows the training softmax is restricted to
    (``data.target_vocab.restrict_output``) and the map from piece ids to those rows."""

    def __init__(self, ids: dict[str, list[int]], vocab_size: int, device: torch.device):
        self.rows: dict[str, torch.Tensor] = {}
        self.remap: dict[str, torch.Tensor] = {}
        for lang, lang_ids in ids.items():
            rows = torch.tensor(sorted(lang_ids), dtype=torch.long)
            remap = torch.full((vocab_size,), -1, dtype=torch.long)
            remap[rows] = torch.arange(len(rows))
            self.rows[lang], self.remap[lang] = rows.to(device), remap.to(device)

    def restrict(self, route: Route, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output rows of the route's target language, ``gold`` as positions in them;
        padding stays where it was, outside-vocabulary pieces become -1 and fail the loss)."""
        remap = self.remap[route.tgt]
        return self.rows[route.tgt], torch.where(gold == PAD_ID, PAD_ID, remap[gold])


@dataclass
class StepStats:
    loss: float  # per target token (label-smoothed), over all ranks
    nll: float
    ntokens: int  # target tokens, all ranks
    src_tokens: int
    sentences: int
    grad_norm: float
    stop: bool = False


def train_step(
    model: nn.Module,
    batches: list[Batch],
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    *,
    label_smoothing: float,
    clip_norm: float,
    device: torch.device,
    world_size: int = 1,
    autocast_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    stop_request: bool = False,
    output_vocab: OutputVocabulary | None = None,
) -> StepStats:
    """One optimizer update over ``batches`` (gradient accumulation; DDP if ``model`` is
    wrapped). Gradients are those of the token-summed loss divided by the update's target
    tokens across all ranks. With ``stop_request`` on any rank, no update is made and
    ``stats.stop`` is True on every rank."""
    local = torch.tensor(
        [
            sum(b.ntokens for b in batches),
            sum(b.src_tokens for b in batches),
            sum(len(b) for b in batches),
            float(stop_request),
        ],
        dtype=torch.float64,
        device=device,
    )
    if world_size > 1:
        dist.all_reduce(local)
    ntok, src_tok, sents, stop = (float(x) for x in local.tolist())
    if stop > 0:
        return StepStats(math.nan, math.nan, 0, 0, 0, math.nan, stop=True)
    scale = world_size / ntok  # DDP averages gradients over ranks
    optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    nll_sum = torch.zeros((), dtype=torch.float64, device=device)
    for i, b in enumerate(batches):
        b = b.to(device)
        last = i == len(batches) - 1
        sync = contextlib.nullcontext()
        if world_size > 1 and not last and hasattr(model, "no_sync"):
            sync = model.no_sync()
        with sync:
            amp = contextlib.nullcontext()
            if autocast_dtype is not None:
                amp = torch.autocast(device.type, dtype=autocast_dtype)
            rows, gold = None, b.gold
            if output_vocab is not None:
                rows, gold = output_vocab.restrict(b.route, b.gold)
            with amp:
                logits = model(b.src, b.tgt_in, b.route, rows)
            loss, nll = label_smoothed_nll(logits, gold, label_smoothing, keep=b.gold != PAD_ID)
            scaled = loss * scale
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_sum += loss.detach().double()
        nll_sum += nll.detach().double()
    if scaler is not None:
        scaler.unscale_(optimizer)
    params = [p for p in model.parameters() if p.grad is not None]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip_norm if clip_norm > 0 else float("inf"))
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    sums = torch.stack([loss_sum, nll_sum])
    if world_size > 1:
        dist.all_reduce(sums)
    return StepStats(
        loss=float(sums[0]) / ntok,
        nll=float(sums[1]) / ntok,
        ntokens=int(ntok),
        src_tokens=int(src_tok),
        sentences=int(sents),
        grad_norm=float(grad_norm),
    )


def has_language_specific(model: nn.Module) -> bool:
    return any(isinstance(m, LanguageSpecific) for m in model.modules())


# -- data ----------------------------------------------------------------------------------------


def open_tokenizer(path: Path | str):
    from .tokenizer import Tokenizer

    return Tokenizer(resolve_path(path))


def vocab_size_of(tokenizer: Any) -> int:
    v = tokenizer.vocab_size
    return int(v() if callable(v) else v)


def load_pairs(
    data_dir: Path, split: str, routes: list[Route] | None = None
) -> dict[Route, list[tuple[str, str]]]:
    from .data import load_split

    raw = load_split(data_dir, split)
    pairs = {Route(s, t): rows for (s, t), rows in raw.items()}
    if routes is None:
        return pairs
    return {r: pairs[r] for r in routes if r in pairs}


def dev_sample(
    pairs: dict[Route, list[tuple[str, str]]], n: int, seed: int
) -> dict[Route, list[tuple[str, str]]]:
    """A fixed random sample of ``n`` pairs per direction (order kept)."""
    out = {}
    for route in sorted(pairs, key=route_key):
        rows = pairs[route]
        if len(rows) > n:
            rng = np.random.default_rng([seed, len(rows)])
            keep = np.sort(rng.choice(len(rows), size=n, replace=False))
            rows = [rows[i] for i in keep]
        out[route] = rows
    return out


# -- the trainer ---------------------------------------------------------------------------------


class Trainer:
    """Set-up and main loop; ``Trainer(recipe, out).run()`` returns the summary dict."""

    def __init__(
        self,
        recipe: Recipe,
        out_dir: Path | str,
        *,
        device: str = "auto",
        resume_from: dict[str, Any] | None = None,
        progress: bool = True,
        log: Any = None,
        time_limit_s: float | None = None,
    ):
        self.recipe = recipe
        self.time_limit_s = time_limit_s
        self.out = Path(out_dir)
        self.dist = setup_distributed(device)
        self.progress = progress and self.dist.is_main
        self._log_stream = log if log is not None else sys.stderr
        t = recipe.training
        if t.num_threads:
            torch.set_num_threads(t.num_threads)
        self.autocast_dtype = resolve_precision(t.precision, self.dist.device)
        self.scaler = torch.amp.GradScaler("cuda") if self.autocast_dtype == torch.float16 else None
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)

        # data
        self.tok_ref = tokenizer_reference(recipe.data.tokenizer)
        self.tokenizer = open_tokenizer(self.tok_ref["path"])
        data_dir = resolve_path(recipe.data.dir)
        train_pairs = load_pairs(data_dir, "train")
        self.routes = recipe.route_list(sorted(train_pairs, key=route_key))
        train_pairs = {r: train_pairs[r] for r in self.routes}
        if recipe.data.max_pairs_per_route:
            train_pairs = {r: v[: recipe.data.max_pairs_per_route] for r, v in train_pairs.items()}
        self.languages = sorted(
            set(recipe.data.languages or [])
            | {r.src for r in self.routes}
            | {r.tgt for r in self.routes}
        )
        self.encoder = SourceEncoder(
            self.tokenizer, recipe.model.tag_scheme, recipe.data.quality_tag
        )
        max_len = recipe.data.max_len or recipe.model.max_positions
        self.target_vocab = None  # training.vocab.TargetVocabularies with data.target_vocab
        if recipe.data.target_vocab is not None:
            from .vocab import setup_training_data

            self.datasets, dropped = setup_training_data(self, train_pairs, max_len)
        else:
            self.datasets, dropped = encode_corpus(
                train_pairs, self.tokenizer, self.encoder, max_len=max_len, progress=self.progress
            )
        self.dev_pairs: dict[Route, list[tuple[str, str]]] = {}
        if t.eval_every > 0:
            try:
                dev = load_pairs(data_dir, "dev", self.routes)
            except FileNotFoundError:
                dev = {}
            self.dev_pairs = dev_sample(dev, t.eval_sentences, t.seed)
        self.sampler = RouteSampler(
            self.datasets,
            batch_tokens=t.batch_tokens,
            max_sentences=t.max_sentences,
            temperature=t.temperature,
            seed=t.seed,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
            pad_to_multiple=8 if self.dist.device.type == "cuda" else 1,
        )
        self.data_stats = {
            route_key(r): {
                "pairs": len(self.datasets[route_key(r)]),
                "dropped_too_long": dropped[route_key(r)],
                "src_tokens": int(self.datasets[route_key(r)].src_lengths.sum()),
                "tgt_tokens": int(self.datasets[route_key(r)].tgt_lengths.sum()),
                "probability": self.sampler.probs[route_key(r)],
                "dev_pairs": len(self.dev_pairs.get(r, [])),
            }
            for r in self.routes
        }

        # model (identical initialisation on every rank; DDP also broadcasts rank 0's)
        torch.manual_seed(t.seed)
        random.seed(t.seed)
        self.model: nn.Module = build_model(
            recipe.model, vocab_size_of(self.tokenizer), self.languages
        )
        self.init_report: dict[str, Any] | None = None
        if recipe.init_from is not None and resume_from is None:
            mapping = init_from_checkpoint(
                self.model, resolve_path(recipe.init_from), recipe.init_mode
            )
            self.init_report = {
                "from": str(recipe.init_from),
                "mode": recipe.init_mode,
                "tensors": len(mapping),
            }
        self.model.to(self.dist.device)
        self.output_vocab = None
        tv = recipe.data.target_vocab
        if tv is not None and tv.restrict_output:
            self.output_vocab = OutputVocabulary(
                self.target_vocab.ids, vocab_size_of(self.tokenizer), self.dist.device
            )
        self.optimizer, self.scheduler = make_optimizer(self.model, recipe)
        self.step = 0
        self.best_chrf: float | None = None
        self.seconds_before = 0.0  # training time of earlier runs of this directory (resumes)
        self._run_start: float | None = None
        self._start_step = 0
        # dropout differs per rank (as with independent batches)
        torch.manual_seed(t.seed + self.dist.rank)
        random.seed(t.seed + self.dist.rank)
        if resume_from is not None:
            self._restore(resume_from)
        if self.dist.distributed:
            find = t.ddp_find_unused_parameters
            if find == "auto":
                find = has_language_specific(self.model)
            self.ddp_find_unused = bool(find)
            self.model = nn.parallel.DistributedDataParallel(
                self.model,
                device_ids=[self.dist.device.index] if self.dist.device.type == "cuda" else None,
                find_unused_parameters=self.ddp_find_unused,
                broadcast_buffers=False,
            )
        self._stop_requested = False

    # -- state ----------------------------------------------------------------------------------

    def _restore(self, ckpt: dict[str, Any]) -> None:
        m = unwrap(self.model)
        m.load_state_dict(ckpt["model"], strict=True)
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.sampler.load_state_dict(ckpt["sampler"])
        self.step = int(ckpt["step"])
        self.best_chrf = ckpt.get("best_dev_chrf")
        self.seconds_before = float(ckpt.get("train_seconds", 0.0))
        rng = ckpt.get("rng") or []
        if len(rng) == self.dist.world_size:
            restore_rng_state(rng[self.dist.rank])
        else:
            self.log(
                f"note: checkpoint has RNG states for {len(rng)} ranks, this run has "
                f"{self.dist.world_size}: dropout RNG re-seeded (resume not bit-exact)"
            )
            torch.manual_seed(self.recipe.training.seed + 7919 * self.step + self.dist.rank)

    def checkpoint(self, dev_chrf: float | None = None, full: bool = True) -> dict[str, Any] | None:
        """The checkpoint dict on rank 0 (None elsewhere); a collective when ``full``."""
        state = None
        if full:
            rng = [capture_rng_state()]
            if self.dist.distributed:
                rng = [None] * self.dist.world_size
                dist.all_gather_object(rng, capture_rng_state())
            state = {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "sampler": self.sampler.state_dict(),
                "rng": rng,
                "world_size": self.dist.world_size,
                "train_seconds": self.train_seconds(),
            }
        if not self.dist.is_main:
            return None
        return build_checkpoint(
            model=self.model,
            recipe=self.recipe,
            step=self.step,
            routes=self.routes,
            tokenizer=self.tok_ref,
            dev_chrf=dev_chrf,
            best_dev_chrf=self.best_chrf,
            training_state=state,
            extra={
                "data_stats": self.data_stats,
                "init": self.init_report,
                **({"target_vocab": self.target_vocab.to_dict()} if self.target_vocab else {}),
            },
        )

    def save_last(self) -> None:
        ckpt = self.checkpoint(full=True)
        if ckpt is not None:
            save_checkpoint(ckpt, self.out / "last.pt")

    # -- logging --------------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        if self.dist.is_main:
            from tqdm import tqdm

            tqdm.write(msg, file=self._log_stream)

    def write_metrics(self, record: dict[str, Any]) -> None:
        if self.dist.is_main:
            with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def _truncate_metrics(self) -> None:
        path = self.out / "metrics.jsonl"
        if not self.dist.is_main or not path.exists():
            return
        keep = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= self.step
        ]
        path.write_text("".join(f"{line}\n" for line in keep), encoding="utf-8")

    def plot(self) -> None:
        if not self.dist.is_main:
            return
        try:
            from .plots import plot_metrics

            plot_metrics(self.out / "metrics.jsonl", self.out / "metrics.png")
        except Exception as err:  # a plot must never kill a training run
            self.log(f"warning: plot failed: {err}")

    # -- evaluation -----------------------------------------------------------------------------

    def evaluate(self) -> dict[str, Any] | None:
        """Greedy dev chrF on the fixed dev sample (rank 0); keeps ``best.pt``."""
        if not self.dev_pairs:
            return None
        record = None
        if self.dist.is_main:
            from lsmt_core.langid import LanguageIdentifier

            from .evaluate import evaluate_pairs

            if not hasattr(self, "_lid"):
                self._lid = LanguageIdentifier(self.languages)
            t0 = time.perf_counter()
            res = evaluate_pairs(
                unwrap(self.model),
                self.tokenizer,
                self.encoder,
                self.dev_pairs,
                beam=1,
                batch_size=self.recipe.training.eval_batch_size,
                lid=self._lid,
                output_vocab=self.target_vocab.ids if self.output_vocab else None,
            )
            avg = res["averages"]["all"]
            record = {
                "kind": "eval",
                "step": self.step,
                "dev_chrf": avg["chrf"],
                "dev_bleu": avg["bleu"],
                "copy_chrf": avg["copy_chrf"],
                "off_target": avg["off_target"],
                "averages": {k: v["chrf"] for k, v in res["averages"].items()},
                "by_route": {k: round(v["chrf"], 2) for k, v in res["directions"].items()},
                "seconds": time.perf_counter() - t0,
            }
            improved = self.best_chrf is None or avg["chrf"] > self.best_chrf
            if improved:
                self.best_chrf = avg["chrf"]
                ckpt = self.checkpoint(dev_chrf=avg["chrf"], full=False)
                save_checkpoint(ckpt, self.out / "best.pt")
            record["best_dev_chrf"] = self.best_chrf
            self.write_metrics(record)
            off = avg["off_target"]
            self.log(
                f"step {self.step}: dev chrF {avg['chrf']:.2f} (copy {avg['copy_chrf']:.2f}, "
                f"BLEU {avg['bleu']:.2f}, off-target "
                f"{'-' if off is None else f'{off:.1%}'}){' *best*' if improved else ''} "
                f"[{record['seconds']:.0f}s; {self.train_seconds() / 60:.0f} min trained, "
                f"~{self._eta()} left]"
            )
            self.plot()
        if self.dist.distributed:
            box = [self.best_chrf]
            dist.broadcast_object_list(box, src=0)
            self.best_chrf = box[0]
        return record

    # -- main loop ------------------------------------------------------------------------------

    def update(self, batches: list[Batch], stop_request: bool = False) -> StepStats:
        """One optimizer update on ``batches`` with this run's settings (:func:`train_step`)."""
        t = self.recipe.training
        return train_step(
            self.model,
            batches,
            self.optimizer,
            self.scheduler,
            label_smoothing=t.label_smoothing,
            clip_norm=t.clip_norm,
            device=self.dist.device,
            world_size=self.dist.world_size,
            autocast_dtype=self.autocast_dtype,
            scaler=self.scaler,
            stop_request=stop_request,
            output_vocab=self.output_vocab,
        )

    def train_seconds(self) -> float:
        """Wall-clock training time of this run directory, resumes included."""
        now = 0.0 if self._run_start is None else time.perf_counter() - self._run_start
        return self.seconds_before + now

    def _eta(self) -> str:
        if self._run_start is None or self.step <= self._start_step:
            return "?"
        done = self.step - self._start_step
        left = (
            (time.perf_counter() - self._run_start)
            / done
            * (self.recipe.training.max_steps - self.step)
        )
        return f"{left / 60:.0f} min"

    def _out_of_time(self, t_start: float) -> bool:
        """``--time-limit`` reached: stop like on a signal (last.pt saved, exact resume)."""
        if self.time_limit_s is None or time.perf_counter() - t_start < self.time_limit_s:
            return False
        if not self._stop_requested:
            self.log(f"time limit of {self.time_limit_s:.0f}s reached: stopping, saving last.pt")
            self._stop_requested = True
        return True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_requested:  # second signal: give up at once
            raise KeyboardInterrupt
        self._stop_requested = True
        self.log(f"signal {signum}: stopping after this step and saving last.pt")

    def run(self) -> dict[str, Any]:
        t = self.recipe.training
        if self.dist.is_main:
            from .recipe import dump_recipe

            (self.out / "recipe.yaml").write_text(dump_recipe(self.recipe), encoding="utf-8")
            (self.out / "data_stats.json").write_text(json.dumps(self.data_stats, indent=2) + "\n")
            self._truncate_metrics()
        m = unwrap(self.model)
        n_params = sum(p.numel() for p in m.parameters())
        per_route = m.route_parameter_count(self.routes[0])
        self.log(
            f"model: {n_params / 1e6:.2f}M parameters ({per_route / 1e6:.2f}M per route), "
            f"{len(self.routes)} routes, {sum(len(d) for d in self.datasets.values())} pairs, "
            f"device {self.dist.device}, world {self.dist.world_size}, "
            f"precision {self.autocast_dtype or 'fp32'}"
            + (f", init {self.init_report}" if self.init_report else "")
            + (f", resumed at step {self.step}" if self.step else "")
        )
        old_handlers = {}
        if threading_is_main():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old_handlers[sig] = signal.signal(sig, self._on_signal)
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(
                total=t.max_steps,
                initial=self.step,
                unit="step",
                dynamic_ncols=True,
                file=self._log_stream,
                smoothing=0.05,
            )
        self.model.train()
        start_step, t_start = self.step, time.perf_counter()
        self._start_step, self._run_start = start_step, t_start
        window = {"loss": 0.0, "nll": 0.0, "tok": 0, "src": 0, "sent": 0, "t": time.perf_counter()}
        last_record: dict[str, Any] | None = None
        stopped = False
        try:
            while self.step < t.max_steps:
                sampler_state = self.sampler.state_dict()
                batches = [self.sampler.next_batch() for _ in range(t.accumulation)]
                stats = self.update(
                    batches, stop_request=self._stop_requested or self._out_of_time(t_start)
                )
                if stats.stop:  # no update made: give the batches back for an exact resume
                    self.sampler.load_state_dict(sampler_state)
                    stopped = True
                    break
                self.step += 1
                window["loss"] += stats.loss * stats.ntokens
                window["nll"] += stats.nll * stats.ntokens
                window["tok"] += stats.ntokens
                window["src"] += stats.src_tokens
                window["sent"] += stats.sentences
                if bar is not None:
                    bar.update(1)
                if self.step % t.log_every == 0 or self.step == t.max_steps:
                    now = time.perf_counter()
                    dt = max(now - window["t"], 1e-9)
                    tok = max(window["tok"], 1)
                    last_record = {
                        "kind": "train",
                        "step": self.step,
                        "loss": window["loss"] / tok,
                        "nll": window["nll"] / tok,
                        "ppl": math.exp(min(window["nll"] / tok, 50)),
                        "lr": self.scheduler.get_last_lr()[0],
                        "grad_norm": stats.grad_norm,
                        "tgt_tokens_per_s": window["tok"] / dt,
                        "src_tokens_per_s": window["src"] / dt,
                        "sentences_per_s": window["sent"] / dt,
                        "elapsed_s": now - t_start,
                    }
                    self.write_metrics(last_record)
                    if bar is not None:
                        bar.set_postfix(
                            loss=f"{last_record['loss']:.3f}",
                            lr=f"{last_record['lr']:.1e}",
                            tok_s=f"{last_record['tgt_tokens_per_s']:.0f}",
                            refresh=False,
                        )
                    window = {"loss": 0.0, "nll": 0.0, "tok": 0, "src": 0, "sent": 0, "t": now}
                if t.eval_every > 0 and self.step % t.eval_every == 0:
                    self.evaluate()
                    self.model.train()
                if t.save_every > 0 and self.step % t.save_every == 0:
                    self.save_last()
        finally:
            if bar is not None:
                bar.close()
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
        # final evaluation (unless just done) and checkpoint
        if (
            not stopped
            and t.eval_every > 0
            and self.step % t.eval_every != 0
            and self.step > start_step
        ):
            self.evaluate()
        if t.save_every <= 0 or self.step % t.save_every != 0 or stopped:
            self.save_last()
        self.plot()
        elapsed = time.perf_counter() - t_start
        summary = {
            "step": self.step,
            "stopped_early": stopped,
            "steps_this_run": self.step - start_step,
            "seconds": elapsed,
            "train_seconds": self.train_seconds(),
            "best_dev_chrf": self.best_chrf,
            "last_train": last_record,
            "parameters": n_params,
            "parameters_per_route": per_route,
            "world_size": self.dist.world_size,
            "device": str(self.dist.device),
            "device_name": device_name(self.dist.device),
        }
        if self.dist.is_main:
            (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            self.log(
                f"{'stopped' if stopped else 'done'} at step {self.step} "
                f"({elapsed:.0f}s this run); best dev chrF {self.best_chrf}; "
                f"checkpoints in {self.out}"
            )
        return summary


def device_name(device: torch.device) -> str:
    """What the run trained on, for model cards: the GPU's name, or the CPU and its threads."""
    if device.type == "cuda":
        return f"one {torch.cuda.get_device_name(device)} GPU"
    import platform

    return f"{platform.machine()} CPU, {torch.get_num_threads()} threads"


def threading_is_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


# -- CLI -----------------------------------------------------------------------------------------


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


def main(argv: list[str] | None = None) -> int:
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
        help="stop after this much training time, saving last.pt (continue with --resume)",
    )
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="recipe overrides")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
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
