"""Loss and dev chrF curves from a run's ``metrics.jsonl`` (PNG, matplotlib Agg)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_metrics(path: Path | str) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def _save(fig, png: Path | str) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = Path(png)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_metrics(metrics: Path | str, png: Path | str, title: str | None = None) -> Path | None:
    """Two panels: training loss/NLL per step; chrF per step on dev and on each in-loop test
    set (``training.eval_testsets``), each beside its copy-the-source baseline."""
    records = read_metrics(metrics)
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        steps = [r["step"] for r in train]
        ax1.plot(steps, [r["loss"] for r in train], label="loss (label-smoothed)")
        ax1.plot(steps, [r["nll"] for r in train], label="NLL", alpha=0.8)
        ax1.set_xlabel("step")
        ax1.set_ylabel("per target token")
        ax1.set_title("training loss")
        ax1.grid(alpha=0.3)
        ax1.legend()
    if evals:
        _chrf_curves(ax2, evals)
    else:
        ax2.set_axis_off()
    if title:
        fig.suptitle(title)
    return _save(fig, png)


def _chrf_curves(ax: Any, evals: list[dict]) -> None:
    """Dev and each test set's chrF, solid, with its copy baseline dashed in the same colour."""
    steps = [r["step"] for r in evals]
    curves = {"dev": ([r["dev_chrf"] for r in evals], [r.get("copy_chrf") for r in evals])}
    for name in dict.fromkeys(n for r in evals for n in r.get("testsets", {})):
        points = [r.get("testsets", {}).get(name, {}) for r in evals]
        curves[name] = ([p.get("chrf") for p in points], [p.get("copy_chrf") for p in points])
    for i, (name, (chrf, copy)) in enumerate(curves.items()):
        colour = f"C{i}"
        ax.plot(steps, [c if c is not None else float("nan") for c in chrf], marker="o",
                ms=3, color=colour, label=name)  # fmt: skip
        if all(c is not None for c in copy):
            ax.plot(steps, copy, ls="--", color=colour, alpha=0.6, label=f"{name}: copy")
    ax.set_xlabel("step")
    ax.set_ylabel("chrF (greedy)")
    ax.set_title("chrF, and copying the source (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def training_seconds(records: list[dict]) -> list[float]:
    """Cumulative training seconds at each record: ``elapsed_s`` restarts at every resume, so
    the segments are added up (eval records take the time of the train record before them)."""
    total, offset, last, out = 0.0, 0.0, 0.0, []
    for r in records:
        if r.get("kind") == "train":
            if r["elapsed_s"] < last:  # a resumed run: its clock started again
                offset += last
            last = r["elapsed_s"]
            total = offset + last
        out.append(total)
    return out


def plot_testset_curves(metrics: Path | str, png: Path | str, title: str | None = None) -> Path:
    """chrF on dev and on every test set scored in the loop (``training.eval_testsets``)
    against training minutes, each with its copy-the-source baseline (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics)
    seconds = training_seconds(records)
    evals = [(s / 60, r) for r, s in zip(records, seconds, strict=True) if r.get("kind") == "eval"]
    series = {"dev": [(m, r["dev_chrf"], r.get("copy_chrf")) for m, r in evals]}
    for m, r in evals:
        for name, c in r.get("testsets", {}).items():
            series.setdefault(name, []).append((m, c["chrf"], c.get("copy_chrf")))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (name, points) in enumerate(series.items()):
        color = f"C{i}"
        minutes, chrf, copy = zip(*points, strict=True)
        ax.plot(minutes, chrf, marker="o", ms=3, color=color, label=name)
        if copy[-1] is not None:
            ax.axhline(copy[-1], ls="--", lw=1, color=color, alpha=0.7)
    ax.set_xlabel("training time (minutes)")
    ax.set_ylabel("chrF (greedy, sampled sentences)")
    ax.grid(alpha=0.3)
    ax.legend(title="dashed: copying the source")
    if title:
        ax.set_title(title)
    return _save(fig, png)
