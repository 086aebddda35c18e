"""The run log: messages, ``metrics.jsonl`` (one JSON record per log interval or evaluation),
``metrics.png`` and the progress bar. Only the main rank writes."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from .step import StepStats


class RunLog:
    def __init__(self, out: Path, *, is_main: bool, progress: bool, stream: TextIO | None):
        self.out = out
        self.is_main = is_main
        self.progress = progress and is_main
        self.stream = stream if stream is not None else sys.stderr
        self.bar: Any = None

    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    def log(self, msg: str) -> None:
        if self.is_main:
            from tqdm import tqdm

            tqdm.write(msg, file=self.stream)  # above the progress bar, not through it

    def write_metrics(self, record: dict[str, Any]) -> None:
        if self.is_main:
            with open(self.metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def truncate_metrics(self, step: int) -> None:
        """Drop records past ``step``: a resumed run rewrites what the interrupted one logged
        after its last checkpoint."""
        path = self.metrics_path
        if not self.is_main or not path.exists():
            return
        keep = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        path.write_text("".join(f"{line}\n" for line in keep), encoding="utf-8")

    def plot(self) -> None:
        if not self.is_main:
            return
        try:
            from .plots import plot_metrics

            plot_metrics(self.metrics_path, self.out / "metrics.png")
        except Exception as err:  # a plot must never kill a training run
            self.log(f"warning: plot failed: {err}")

    # -- progress bar ---------------------------------------------------------------------------

    def open_bar(self, total: int, initial: int) -> None:
        if self.progress:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                unit="step",
                dynamic_ncols=True,
                file=self.stream,
                smoothing=0.05,
            )

    def advance(self, record: dict[str, Any] | None = None) -> None:
        if self.bar is None:
            return
        self.bar.update(1)
        if record is not None:
            self.bar.set_postfix(
                loss=f"{record['loss']:.3f}",
                lr=f"{record['lr']:.1e}",
                tok_s=f"{record['tgt_tokens_per_s']:.0f}",
                refresh=False,
            )

    def close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class TrainWindow:
    """Sums over the updates since the last log record; ``record`` turns them into one."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss = self.nll = 0.0
        self.tok = self.src = self.sent = 0
        self.t = time.perf_counter()

    def add(self, stats: StepStats) -> None:
        self.loss += stats.loss * stats.ntokens
        self.nll += stats.nll * stats.ntokens
        self.tok += stats.ntokens
        self.src += stats.src_tokens
        self.sent += stats.sentences

    def record(self, step: int, lr: float, grad_norm: float, t_start: float) -> dict[str, Any]:
        now = time.perf_counter()
        dt = max(now - self.t, 1e-9)
        tok = max(self.tok, 1)
        out = {
            "kind": "train",
            "step": step,
            "loss": self.loss / tok,
            "nll": self.nll / tok,
            "ppl": math.exp(min(self.nll / tok, 50)),
            "lr": lr,
            "grad_norm": grad_norm,
            "tgt_tokens_per_s": self.tok / dt,
            "src_tokens_per_s": self.src / dt,
            "sentences_per_s": self.sent / dt,
            "elapsed_s": now - t_start,
        }
        self.reset()
        self.t = now
        return out
