"""A study's report (``python -m lsmt_study report``): the arms' ``result.json`` files merged
from any number of result directories, one table per comparison (directions an arm never
trained apart, as zero-shot), ``results.csv`` and ``curves.png``."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from .study import Comparison, Study


def load_results(dirs: list[Path]) -> dict[str, dict[str, Any]]:
    """Every ``result.json`` under ``dirs``, by arm (a later directory's arm replaces an
    earlier one's)."""
    results: dict[str, dict[str, Any]] = {}
    for d in dirs:
        for path in sorted(d.rglob("result.json")):
            res = json.loads(path.read_text(encoding="utf-8"))
            results[res["arm"]] = res
    return results


def split_scores(result: dict[str, Any], testset: str) -> dict[str, dict[str, float | None]]:
    """Mean scores over the directions the arm trained and over the others (zero-shot); none
    for a test set the arm was not scored on."""
    if testset not in result["evaluations"]:
        return {}
    directions = result["evaluations"][testset]["directions"]
    trained = set(result["trained_routes"])
    groups: dict[str, list[dict[str, Any]]] = {"trained": [], "zero-shot": []}
    for key, res in directions.items():
        groups["trained" if key in trained else "zero-shot"].append(res)
    fields = ("chrf", "bleu", "copy_chrf", "copy_bleu", "off_target", "seconds", "sentences",
              "engine_bytes")  # fmt: skip
    out: dict[str, dict[str, float | None]] = {}
    for group, rows in groups.items():
        if rows:
            out[group] = {}
            for f in fields:
                vals = [r[f] for r in rows if r.get(f) is not None]
                total = f in ("seconds", "sentences")
                out[group][f] = (sum(vals) if total else sum(vals) / len(vals)) if vals else None
    return out


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f} %"


def comparison_table(
    comparison: Comparison, results: dict[str, dict[str, Any]], testsets: list[str]
) -> str:
    """One markdown table: an arm a row, each test set's chrF (and the difference to the
    baseline) and BLEU over the trained directions, off-target rate, zero-shot columns where
    an arm left directions out, decoding speed for a speed claim."""
    have = [a for a in comparison.arms if a in results]
    missing = [a for a in comparison.arms if a not in results]
    lines = [f"### {comparison.title}", "", f"Paper: {comparison.paper}", ""]
    if not have:
        return "\n".join([*lines, f"No results yet (arms {', '.join(missing)}).", ""])
    scores = {a: {t: split_scores(results[a], t) for t in testsets} for a in have}
    base = scores.get(comparison.baseline)
    zero_shot = any("zero-shot" in scores[a][t] for a in have for t in testsets)
    about = ["arm", "updates", "minutes", "M parameters (trained, per route)", "engine MB"]
    head = list(about)
    for t in testsets:
        head += [f"{t} chrF", f"{t} BLEU"]
    head.append(f"off-target ({testsets[0]})")
    if zero_shot:
        head += [f"zero-shot chrF ({testsets[0]})", "zero-shot off-target"]
    if comparison.speed:
        head.append(f"decoding, sentences/s ({testsets[0]})")
    rows = [head, ["---"] * len(head)]
    for a in have:
        res = results[a]
        updates = "+".join(str(s["step"]) for s in res["stages"])
        params = res["stages"][-1].get("parameters_per_route")
        minutes = sum(s["train_seconds"] for s in res["stages"]) / 60
        name = a + (" (baseline)" if a == comparison.baseline else "")
        first = scores[a][testsets[0]].get("trained", {})  # the off-target, size, speed columns
        engine = first.get("engine_bytes")
        row = [name, updates, _fmt(minutes, ".2f"), _fmt(params / 1e6 if params else None, ".2f"),
               _fmt(engine / 2**20 if engine else None)]  # fmt: skip
        for t in testsets:
            s = scores[a][t].get("trained", {})
            chrf = s.get("chrf")
            delta = ""
            if base and a != comparison.baseline and chrf is not None:
                b = base[t].get("trained", {}).get("chrf")
                delta = "" if b is None else f" ({chrf - b:+.1f})"
            row += [_fmt(chrf) + delta, _fmt(s.get("bleu"))]
        row.append(_pct(first.get("off_target")))
        if zero_shot:
            z = scores[a][testsets[0]].get("zero-shot", {})
            row += [_fmt(z.get("chrf")), _pct(z.get("off_target"))]
        if comparison.speed:
            secs, n = first.get("seconds"), first.get("sentences")
            row.append(_fmt(n / secs if secs and n else None, ".0f"))
        rows.append(row)
    if base:  # the copy-the-source baseline of the same sentences
        copy_row = ["copy the source", *[""] * (len(about) - 1)]
        for t in testsets:
            s = base[t].get("trained", {})
            copy_row += [_fmt(s.get("copy_chrf")), _fmt(s.get("copy_bleu"))]
        copy_row += [""] * (len(head) - len(copy_row))
        rows.append(copy_row)
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if missing:
        lines += ["", f"Not run yet: {', '.join(missing)}."]
    return "\n".join([*lines, ""])


def write_report(study: Study, results: dict[str, dict[str, Any]], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    testsets = [t for t in study.testsets if any(t in r["evaluations"] for r in results.values())]
    devices = sorted({s.get("device_name") or "?" for r in results.values() for s in r["stages"]})

    def values(key: str) -> str:  # as the results were made (a run may override the study)
        return " / ".join(sorted({f"{r.get(key)}" for r in results.values()}))

    engines = sorted(
        {f"{ev.get('compute_type')} on {ev.get('device', 'cpu')}"
         for r in results.values() for ev in r["evaluations"].values()}
    )  # fmt: skip
    parts = [
        f"# Study `{study.name}`: {study.description}".rstrip(": "),
        "",
        f"Each arm trained {values('minutes')} minutes of training time (its loop, dev "
        f"evaluations included: the minutes column is the time it took) on "
        f"{', '.join(devices)}; scores from its int8 bundle's engines ({', '.join(engines)}), "
        f"beam {values('beam')}, at most {values('max_sentences')} sentences per direction, "
        "averaged over the directions it trained (zero-shot: the others).",
        "",
    ]
    parts += [comparison_table(c, results, testsets) for c in study.comparisons]
    path = out / "report.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    _write_csv(results, out / "results.csv")
    _plot_curves(results, out / "curves.png")
    return path


def _write_csv(results: dict[str, dict[str, Any]], path: Path) -> None:
    fields = ["arm", "testset", "direction", "trained", "sentences", "chrf", "bleu",
              "copy_chrf", "copy_bleu", "off_target", "seconds", "engine_bytes"]  # fmt: skip
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for arm, res in sorted(results.items()):
            trained = set(res["trained_routes"])
            for testset, ev in res["evaluations"].items():
                for key, d in sorted(ev["directions"].items()):
                    w.writerow([arm, testset, key, key in trained,
                                *(d.get(f) for f in fields[4:])])  # fmt: skip


def _plot_curves(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for arm, res in sorted(results.items()):
        if res["dev_curve"]:
            xs, ys = zip(*res["dev_curve"], strict=True)
            ax.plot([x / 60 for x in xs], ys, marker=".", label=arm)
    ax.set_xlabel("training time (minutes)")
    ax.set_ylabel("dev chrF (greedy, in-loop sample)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
