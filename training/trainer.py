"""The training loop: ``Trainer(recipe, out).run()`` returns the summary dict.

The trainer wires the run together (data from :mod:`training.datasets`, the model, the
optimizer and one update from :mod:`training.step`, devices and DDP from
:mod:`training.distributed`, the run log from :mod:`training.run_log`), then loops: draw a
route's batches, update, log, evaluate, checkpoint.

- One route per micro-batch (homogeneous batches): language-specific modules see one
  language per forward. Routes are drawn with temperature sampling (``RouteSampler``).
- DDP: every rank draws the same route at each micro-step and a different batch of it, so all
  ranks use the same parameters in a step. Route-dependent modules leave other parameters
  unused, so DDP runs with ``find_unused_parameters=True`` when the model has any
  language-specific module (``training.ddp_find_unused_parameters: auto``); for dense models it
  is off. Only rank 0 writes files; RNG states of all ranks are gathered into ``last.pt``.
- Exact resume: model, optimizer, LR schedule, grad scaler, sampler position and RNG states
  (torch CPU/CUDA, Python) are restored, so N steps + resume + N steps == 2N steps, bit for bit
  (same device, thread count and world size).
"""

from __future__ import annotations

import functools
import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lsmt_text.paths import resolve_path

from .add_language import freeze_all_but, read_trained_model
from .batching import Batch
from .checkpoint import (
    NewVocabularies,
    build_checkpoint,
    capture_rng_state,
    init_from_checkpoint,
    restore_rng_state,
    save_checkpoint,
    unwrap,
)
from .datasets import build_training_data, vocab_size_of
from .distributed import (
    broadcast_from_main,
    device_name,
    gather_objects,
    is_main_thread,
    resolve_precision,
    setup_distributed,
    wrap_ddp,
)
from .model import build_model
from .model.methods import checkpoint_records
from .recipe import Recipe
from .run_log import RunLog, TrainWindow
from .step import OutputVocabulary, StepStats, make_optimizer, train_step
from .token_cache import TokenCache
from .vocab import decoding_vocab


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
        token_cache: TokenCache | None = None,
    ):
        self.recipe = recipe
        self.time_limit_s = time_limit_s
        self.out = Path(out_dir)
        self.dist = setup_distributed(device)
        self.run_log = RunLog(self.out, is_main=self.dist.is_main, progress=progress, stream=log)
        t = recipe.training
        if t.num_threads:
            torch.set_num_threads(t.num_threads)
        self.autocast_dtype = resolve_precision(t.precision, self.dist.device)
        self.scaler = torch.amp.GradScaler("cuda") if self.autocast_dtype == torch.float16 else None
        if self.dist.is_main:
            self.out.mkdir(parents=True, exist_ok=True)

        # data
        self.data = build_training_data(
            recipe,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
            pad_to_multiple=8 if self.dist.device.type == "cuda" else 1,
            progress=self.run_log.progress,
            log=self.log,
            keep=read_trained_model(recipe),
            token_cache=token_cache,
        )

        self.init_report: dict[str, Any] | None = None
        self.model: nn.Module = self._build_model(initialise=resume_from is None)
        self.output_vocab = None
        tv = recipe.data.target_vocab
        if tv is not None and tv.restrict_output:
            self.output_vocab = OutputVocabulary(
                self.data.target_vocab.ids, unwrap(self.model).vocab_size_of, self.dist.device
            )
        self.optimizer, self.scheduler = make_optimizer(self.model, recipe)
        self.step = 0
        self.best_chrf: float | None = None
        self.seconds_before = 0.0  # training time of earlier runs of this directory (resumes)
        self._run_start: float | None = None
        self._run_end: float | None = None  # the loop's end: what follows is not training
        self._start_step = 0
        # dropout differs per rank (as with independent batches)
        torch.manual_seed(t.seed + self.dist.rank)
        random.seed(t.seed + self.dist.rank)
        if resume_from is not None:
            self._restore(resume_from)
        if self.dist.distributed:
            self.model = wrap_ddp(self.model, self.dist, t.ddp_find_unused_parameters)
        self._stop_requested = False
        self._time_limit_hit = False  # --time-limit (not a signal) stopped the run

    def _build_model(self, initialise: bool) -> nn.Module:
        """The recipe's model on this rank's device, from ``init_from`` when ``initialise``
        (a resumed run loads its own weights instead); identical on every rank (DDP also
        broadcasts rank 0's)."""
        recipe = self.recipe
        torch.manual_seed(recipe.training.seed)
        random.seed(recipe.training.seed)
        model = build_model(
            recipe.model,
            vocab_size_of(self.data.tokenizer),
            self.data.languages,
            self.data.language_vocab_sizes,
        )
        donors = recipe.add_languages.donors if recipe.add_languages else None
        if recipe.init_from is not None and initialise:
            own = self.data.encoder.language_tokenizers
            vocabularies = NewVocabularies(
                self.data.tokenizer.pieces(), {lang: tok.pieces() for lang, tok in own.items()}
            )
            mapping = init_from_checkpoint(
                model, resolve_path(recipe.init_from), recipe.init_mode, donors, vocabularies
            )
            self.init_report = {
                "from": str(recipe.init_from),
                "mode": recipe.init_mode,
                "tensors": len(mapping),
            }
        if donors:  # on resume too: the frozen parameters must stay frozen
            trainable, frozen = freeze_all_but(model, set(donors))
            self.log(f"adding {sorted(donors)}: {trainable:,} parameters train, {frozen:,} frozen")
        return model.to(self.dist.device)

    # -- state ----------------------------------------------------------------------------------

    def _restore(self, ckpt: dict[str, Any]) -> None:
        m = unwrap(self.model)
        m.load_state_dict(ckpt["model"], strict=True)
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])
        self.data.sampler.load_state_dict(ckpt["sampler"])
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
            rng = gather_objects(self.dist, capture_rng_state())
            state = {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "sampler": self.data.sampler.state_dict(),
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
            routes=self.data.routes,
            tokenizer=self.data.tok_ref,
            language_tokenizers=self.data.language_tok_refs,
            dev_chrf=dev_chrf,
            best_dev_chrf=self.best_chrf,
            training_state=state,
            extra={
                "data_stats": self.data.stats,
                "init": self.init_report,
                **(
                    {"target_vocab": self.data.target_vocab.to_dict()}
                    if self.data.target_vocab
                    else {}
                ),
                **checkpoint_records(unwrap(self.model)),  # e.g. a sparse model's selection
            },
        )

    def save_last(self) -> None:
        ckpt = self.checkpoint(full=True)
        if ckpt is not None:
            save_checkpoint(ckpt, self.out / "last.pt")

    # -- logging --------------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        self.run_log.log(msg)

    # -- evaluation -----------------------------------------------------------------------------

    def evaluate(self) -> dict[str, Any] | None:
        """Greedy dev chrF on the fixed dev sample (rank 0); keeps ``best.pt``."""
        if not self.data.dev_pairs:
            return None
        record = None
        if self.dist.is_main:
            record = self._eval_record()
            improved = self.best_chrf is None or record["dev_chrf"] > self.best_chrf
            if improved:
                self.best_chrf = record["dev_chrf"]
                ckpt = self.checkpoint(dev_chrf=record["dev_chrf"], full=False)
                save_checkpoint(ckpt, self.out / "best.pt")
            record["best_dev_chrf"] = self.best_chrf
            self.run_log.write_metrics(record)
            self._log_eval(record, improved)
            self.run_log.plot()
        self.best_chrf = broadcast_from_main(self.dist, self.best_chrf)
        return record

    def _eval_record(self) -> dict[str, Any]:
        """The metrics record of one evaluation: dev scores, and the learning-curve test sets'."""
        from .evaluate import evaluate_pairs

        t0 = time.perf_counter()
        output_vocab = decoding_vocab(
            self.recipe, self.data.target_vocab.ids if self.data.target_vocab else None
        )

        def score(pairs):
            return evaluate_pairs(
                unwrap(self.model),
                self.data.encoder,
                pairs,
                beam=1,
                batch_size=self.recipe.training.eval_batch_size,
                lid=self._language_identifier,
                output_vocab=output_vocab,
            )

        res = score(self.data.dev_pairs)
        avg = res["averages"]["all"]
        curves = {}
        for name, pairs in self.data.curve_pairs.items():
            r = score(pairs)
            curves[name] = {
                "chrf": r["averages"]["all"]["chrf"],
                "copy_chrf": r["averages"]["all"]["copy_chrf"],
                "averages": {k: v["chrf"] for k, v in r["averages"].items()},
                "by_route": {k: round(v["chrf"], 2) for k, v in r["directions"].items()},
            }
        return {
            "kind": "eval",
            "step": self.step,
            "dev_chrf": avg["chrf"],
            "dev_bleu": avg["bleu"],
            "copy_chrf": avg["copy_chrf"],
            "off_target": avg["off_target"],
            "averages": {k: v["chrf"] for k, v in res["averages"].items()},
            "by_route": {k: round(v["chrf"], 2) for k, v in res["directions"].items()},
            **({"testsets": curves} if curves else {}),
            "seconds": time.perf_counter() - t0,
            "train_seconds": self.train_seconds(),  # learning curves against time
        }

    @functools.cached_property
    def _language_identifier(self) -> Any:
        """py3langid for the off-target rate, or None where it is not installed (a lent GPU
        machine's image: scripts/device/prepare.sh leaves it out of the kit), the rate then
        unmeasured rather than the run stopped."""
        from lsmt_core.langid import LanguageIdentifier  # loads its model: only when evaluating

        try:
            return LanguageIdentifier(self.data.languages)
        except ImportError:
            self.log("py3langid is not installed: evaluations measure no off-target rate")
            return None

    def _log_eval(self, record: dict[str, Any], improved: bool) -> None:
        off = record["off_target"]
        curves = record.get("testsets", {})
        self.log(
            f"step {self.step}: dev chrF {record['dev_chrf']:.2f} "
            f"(copy {record['copy_chrf']:.2f}, BLEU {record['dev_bleu']:.2f}, off-target "
            f"{'-' if off is None else f'{off:.1%}'}){' *best*' if improved else ''} "
            + "".join(
                f"{n} {c['chrf']:.2f} (copy {c['copy_chrf']:.2f}) " for n, c in curves.items()
            )
            + f"[{record['seconds']:.0f}s; {self.train_seconds() / 60:.0f} min trained, "
            f"~{self._eta()} left]"
        )

    # -- main loop ------------------------------------------------------------------------------

    def update(self, batches: list[Batch], stop_request: bool = False) -> StepStats:
        """One optimizer update on ``batches`` with this run's settings (:func:`train_step`)."""
        t = self.recipe.training
        unwrap(self.model).set_training_step(self.step)
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
        """Wall-clock training time of this run directory (its loop: updates, dev evaluations,
        periodic saves), resumes included."""
        end = self._run_end or time.perf_counter()
        now = 0.0 if self._run_start is None else end - self._run_start
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
            self._time_limit_hit = True
        return True

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_requested:  # second signal: give up at once
            raise KeyboardInterrupt
        self._stop_requested = True
        self.log(f"signal {signum}: stopping after this step and saving last.pt")

    def run(self) -> dict[str, Any]:
        n_params, per_route = self._announce()
        start_step, t_start = self.step, time.perf_counter()
        self._start_step, self._run_start = start_step, t_start
        stopped, last_record = self._loop(t_start)
        # the training time ends here, so last.pt and summary.json record the same (a resume
        # continues from the checkpoint's, and a time budget adds up across resumes)
        self._run_end = time.perf_counter()
        t = self.recipe.training
        # final evaluation (unless just done) and checkpoint; also at --time-limit, so that a
        # time-limited slice's last updates can become best.pt (not on a signal: stop at once).
        # Rank 0's clock decides for every rank (each evaluates, or none).
        finished = not stopped or broadcast_from_main(self.dist, self._time_limit_hit)
        if finished and t.eval_every > 0 and self.step % t.eval_every and self.step > start_step:
            self.evaluate()
        if t.save_every <= 0 or self.step % t.save_every != 0 or stopped:
            self.save_last()
        self.run_log.plot()
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

    def _announce(self) -> tuple[int, int]:
        """Write the run's recipe and data statistics, log the model; (parameters, per route)."""
        if self.dist.is_main:
            from .recipe import dump_recipe

            (self.out / "recipe.yaml").write_text(dump_recipe(self.recipe), encoding="utf-8")
            (self.out / "data_stats.json").write_text(json.dumps(self.data.stats, indent=2) + "\n")
            self.run_log.truncate_metrics(self.step)
        m = unwrap(self.model)
        n_params = sum(p.numel() for p in m.parameters())
        per_route = m.route_parameter_count(self.data.routes[0])
        pairs = sum(len(d) for d in self.data.datasets.values())
        self.log(
            f"model: {n_params / 1e6:.2f}M parameters ({per_route / 1e6:.2f}M per route), "
            f"{len(self.data.routes)} routes, {pairs} pairs, "
            f"device {self.dist.device}, world {self.dist.world_size}, "
            f"precision {self.autocast_dtype or 'fp32'}"
            + (f", init {self.init_report}" if self.init_report else "")
            + (f", resumed at step {self.step}" if self.step else "")
        )
        return n_params, per_route

    def _loop(self, t_start: float) -> tuple[bool, dict[str, Any] | None]:
        """Updates until ``max_steps``, a signal or the time limit, with the periodic logs,
        evaluations and checkpoints; (stopped early, the last train record)."""
        t = self.recipe.training
        old_handlers = {}
        if is_main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old_handlers[sig] = signal.signal(sig, self._on_signal)
        self.run_log.open_bar(t.max_steps, self.step)
        self.model.train()
        window = TrainWindow()
        last_record: dict[str, Any] | None = None
        try:
            while self.step < t.max_steps:
                sampler_state = self.data.sampler.state_dict()
                batches = [self.data.sampler.next_batch() for _ in range(t.accumulation)]
                stats = self.update(
                    batches, stop_request=self._stop_requested or self._out_of_time(t_start)
                )
                if stats.stop:  # no update made: give the batches back for an exact resume
                    self.data.sampler.load_state_dict(sampler_state)
                    return True, last_record
                self.step += 1
                window.add(stats)
                record = None
                if self.step % t.log_every == 0 or self.step == t.max_steps:
                    lr = self.scheduler.get_last_lr()[0]
                    record = window.record(self.step, lr, stats.grad_norm, t_start)
                    self.run_log.write_metrics(record)
                    last_record = record
                self.run_log.advance(record)
                if t.eval_every > 0 and self.step % t.eval_every == 0:
                    self.evaluate()
                    self.model.train()
                if t.save_every > 0 and self.step % t.save_every == 0:
                    self.save_last()
        finally:
            self.run_log.close_bar()
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
        return False, last_record
