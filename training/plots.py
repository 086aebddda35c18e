"""Loss and dev chrF curves from a run's ``metrics.jsonl`` (PNG, matplotlib Agg)."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(path: Path | str) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_metrics(metrics: Path | str, png: Path | str, title: str | None = None) -> Path | None:
    """Two panels: training loss/NLL per step; dev chrF (and the copy baseline) per step."""
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
        steps = [r["step"] for r in evals]
        ax2.plot(steps, [r["dev_chrf"] for r in evals], marker="o", label="dev chrF (greedy)")
        if all(r.get("copy_chrf") is not None for r in evals):
            ax2.plot(
                steps,
                [r["copy_chrf"] for r in evals],
                ls="--",
                color="grey",
                label="copy-the-source baseline",
            )
        ax2.set_xlabel("step")
        ax2.set_ylabel("chrF")
        ax2.set_title("dev chrF")
        ax2.grid(alpha=0.3)
        ax2.legend()
    else:
        ax2.set_axis_off()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(png)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
