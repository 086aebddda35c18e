"""What a built corpus holds, and a check that its splits are disjoint: the tables
``python -m lsmt_text.data build`` prints and the verification it runs last."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from lsmt_core.languages import SPLITS
from lsmt_text.data import clean
from lsmt_text.data.formats import CorpusFormatError, directions, load_direction

# --------------------------------------------------------------------------------------------
# Statistics


def text_stats(lines: Iterable[str]) -> dict[str, int]:
    n = words = chars = 0
    for line in lines:
        n += 1
        words += len(line.split())
        chars += len(line)
    return {"segments": n, "words": words, "chars": chars}


def format_table(stats: dict) -> str:
    """Sentences, whitespace tokens and characters per language and split."""
    head = f"{'lang':<5}" + "".join(
        f"{s + ' seg':>12}{s + ' words':>14}{s + ' chars':>14}" for s in SPLITS
    )
    lines = [head, "-" * len(head)]
    for lang, per in stats["sentences"].items():
        row = f"{lang:<5}"
        for s in SPLITS:
            d = per.get(s, {"segments": 0, "words": 0, "chars": 0})
            row += f"{d['segments']:>12,}{d['words']:>14,}{d['chars']:>14,}"
        lines.append(row)
    return "\n".join(lines)


def format_cleaning(stats: dict) -> str:
    """Rule x language table of removed/changed verses."""
    keys = sorted({k for per in stats["cleaning"].values() for k in per})
    width = max([len(k) for k in keys] + [6]) + 1
    head = f"{'rule':<20}" + "".join(f"{k:>{width}}" for k in keys)
    lines = [head, "-" * len(head)]
    for rule, per in stats["cleaning"].items():
        lines.append(f"{rule:<20}" + "".join(f"{per.get(k, 0):>{width},}" for k in keys))
    return "\n".join(lines)


def source_table(stats: dict) -> list[dict]:
    """One row per source and language: the licence and the pairs that have the language on
    one side, per split (from ``pairs_by_source``)."""
    counts: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: dict.fromkeys(SPLITS, 0))
    for split, per_dir in stats.get("pairs_by_source", {}).items():
        for direction, per_source in per_dir.items():
            for lang in direction.split("-"):
                for source, n in per_source.items():
                    counts[(source, lang)][split] += n
    sources = stats.get("sources", {})
    return [
        {"source": s, "language": lang, "licence": sources.get(s, {}).get("licence", "")} | c
        for (s, lang), c in sorted(counts.items())
    ]


def write_source_table(path: Path, rows: list[dict]) -> None:
    """The per-source, per-language table as CSV (``sources.csv`` beside ``stats.json``)."""
    import csv

    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["source", "language", *SPLITS, "licence"])
        writer.writeheader()
        writer.writerows(rows)


def format_sources(stats: dict) -> str:
    """Pairs per source and language (either side) and split, with the source's licence."""
    rows = source_table(stats)
    head = f"{'source':<18}{'lang':<6}" + "".join(f"{s:>10}" for s in SPLITS) + "  licence"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['source']:<18}{r['language']:<6}"
            + "".join(f"{r[s]:>10,}" for s in SPLITS)
            + f"  {r['licence']}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Verification


def verify_disjoint(data_dir: Path | str) -> dict[str, int]:
    """Check that splits share no verse id and, per language, no normalised text.

    Raises ``CorpusFormatError`` on overlap (or on misaligned files); returns the number of
    distinct keys per split."""
    ids: dict[str, set[str]] = {s: set() for s in SPLITS}
    keys: dict[str, dict[str, set[str]]] = {s: defaultdict(set) for s in SPLITS}
    for split in SPLITS:
        for src, tgt in directions(data_dir, split):
            pairs, pair_ids = load_direction(data_dir, split, src, tgt, with_ids=True)  # type: ignore[misc]
            ids[split].update(i.split("@")[0] for i in pair_ids)
            for s, t in pairs:
                keys[split][src].add(clean.normalize_key(s))
                keys[split][tgt].add(clean.normalize_key(t))
    for a, b in itertools.combinations(SPLITS, 2):
        common = ids[a] & ids[b]
        if common:
            raise CorpusFormatError(f"{a} and {b} share verse ids, e.g. {sorted(common)[:5]}")
        for lang in set(keys[a]) & set(keys[b]):
            common_k = keys[a][lang] & keys[b][lang]
            if common_k:
                raise CorpusFormatError(
                    f"{a} and {b} share {len(common_k)} normalised {lang} segments, "
                    f"e.g. {sorted(common_k)[:3]}"
                )
    return {s: len(ids[s]) for s in SPLITS}
