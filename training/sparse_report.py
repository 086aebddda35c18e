"""Show the sub-networks an adaptive sparse model selected (Sparse paper, docs/sparse.md).

    python -m training.sparse_report RUN_DIR_OR_CHECKPOINT [--which best|last] [--plot OUT.png]

Prints, per language, which layers, heads and FFN blocks it keeps (encoder groups as a source
language, decoder groups as a target language), then how much every pair of languages shares
(the fraction of kept components both keep), per side. ``--plot`` draws one heat map per group
(rows: languages, columns: components; kept = dark).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .checkpoint import load_checkpoint

Component = tuple[str, int, int]  # (group, layer, head or block; -1 for the layer itself)


def kept_sets(record: dict[str, Any]) -> dict[str, dict[str, set[Component]]]:
    """Per language, per side: the kept components. Heads or blocks of a dropped layer are not
    counted: the route never runs them."""
    out: dict[str, dict[str, set[Component]]] = {}
    for lang, entry in record["languages"].items():
        sides: dict[str, set[Component]] = {"encoder": set(), "decoder": set()}
        for group, kept in entry.items():
            side = group.split("_", 1)[0]
            layers = entry.get(f"{side}_layers")
            if group.endswith("_layers"):
                sides[side].update((group, i, -1) for i in kept)
                continue
            for i, row in enumerate(kept):
                if layers is None or i in layers:
                    sides[side].update((group, i, k) for k in row)
        out[lang] = sides
    return out


def sharing(record: dict[str, Any]) -> dict[str, dict[tuple[str, str], float]]:
    """Per side, per language pair: |A & B| / |A | B| of their kept components (Jaccard)."""
    sets = kept_sets(record)
    langs = sorted(sets)
    out: dict[str, dict[tuple[str, str], float]] = {}
    for side in ("encoder", "decoder"):
        out[side] = {}
        for i, a in enumerate(langs):
            for b in langs[i + 1 :]:
                union = sets[a][side] | sets[b][side]
                out[side][(a, b)] = len(sets[a][side] & sets[b][side]) / max(1, len(union))
    return out


def _fmt(kept: list) -> str:
    if kept and isinstance(kept[0], list):
        return " ".join(f"L{i}:{','.join(map(str, row))}" for i, row in enumerate(kept))
    return ",".join(map(str, kept))


def report(record: dict[str, Any]) -> str:
    lines = [
        f"phase {record['phase']}, temperature {record['temperature']:.3f}, "
        f"budget {record['budget']} (indices 0-based)"
    ]
    for lang, entry in sorted(record["languages"].items()):
        lines.append(f"{lang}:")
        lines += [f"  {group:<20} {_fmt(kept)}" for group, kept in entry.items()]
    for side, pairs in sharing(record).items():
        lines.append(f"{side} sharing (Jaccard of kept components):")
        lines += [f"  {a}-{b}: {v:.2f}" for (a, b), v in pairs.items()]
    return "\n".join(lines)


def plot(record: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    langs = sorted(record["languages"])
    groups = list(record["budget"])
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 1.2 + 0.6 * len(langs) * len(groups)))
    for ax, group in zip(np.atleast_1d(axes), groups, strict=True):
        rows = []
        for lang in langs:
            kept = record["languages"][lang][group]
            if group.endswith("_layers"):
                n = max(max(k) for k in (record["languages"][x][group] for x in langs)) + 1
                rows.append([1 if i in kept else 0 for i in range(n)])
            else:
                width = max(
                    max(r, default=-1) for x in langs for r in record["languages"][x][group]
                )
                rows.append([int(k in row) for row in kept for k in range(width + 1)])
        ax.imshow(np.array(rows), cmap="Greys", vmin=0, vmax=1, aspect="auto")
        ax.set_yticks(range(len(langs)), langs)
        ax.set_title(f"{group} (kept = dark)", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path, help="run directory or checkpoint file")
    ap.add_argument("--which", choices=["best", "last"], default="last")
    ap.add_argument("--plot", type=Path, help="write a heat map of the selections here")
    args = ap.parse_args(argv)
    ckpt = load_checkpoint(args.checkpoint, args.which)
    record = ckpt.get("extra", {}).get("sparse")
    if record is None:
        print(f"{ckpt['_path']}: not an adaptive sparse model", file=sys.stderr)
        return 2
    print(report(record))
    if args.plot:
        print(f"plot: {plot(record, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
