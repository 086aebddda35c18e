"""Translation quality scores (sacreBLEU chrF and BLEU) and their summaries per direction
category; shared by checkpoint evaluation (training) and bundle evaluation (no torch)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .languages import PIVOT_LANGUAGE
from .routes import Route, parse_route

if TYPE_CHECKING:
    from .langid import LanguageIdentifier


def bleu_tokenize(lang: str) -> str:
    return {"zh": "zh", "ja": "char"}.get(lang, "13a")


def score(hyps: Sequence[str], refs: Sequence[str], tgt_lang: str) -> dict[str, float]:
    """Corpus chrF and BLEU (sacreBLEU) of ``hyps`` against one reference each."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    # the train extra; imported here so the server never needs it
    from sacrebleu.metrics.bleu import BLEU
    from sacrebleu.metrics.chrf import CHRF

    tok = bleu_tokenize(tgt_lang)
    return {
        "chrf": CHRF().corpus_score(list(hyps), [list(refs)]).score,
        "bleu": BLEU(tokenize=tok).corpus_score(list(hyps), [list(refs)]).score,
    }


def score_direction(
    hyps: Sequence[str],
    srcs: Sequence[str],
    refs: Sequence[str],
    tgt_lang: str,
    seconds: float,
    lid: LanguageIdentifier | None = None,
    with_baseline: bool = True,
) -> dict[str, Any]:
    """One direction's record: sentences, chrF and BLEU, the seconds its translation took, the
    copy-the-source baseline (``copy_chrf``, ``copy_bleu``) and, with ``lid``, the share of
    outputs in another language (``off_target``)."""
    res: dict[str, Any] = {"sentences": len(refs), **score(hyps, refs, tgt_lang)}
    res["seconds"] = seconds
    res["bleu_tokenize"] = bleu_tokenize(tgt_lang)
    if with_baseline:
        base = score(srcs, refs, tgt_lang)
        res["copy_chrf"], res["copy_bleu"] = base["chrf"], base["bleu"]
    if lid is not None:
        res["off_target"] = lid.off_target_rate(hyps, tgt_lang)
    return res


def category(route: Route) -> str:
    if route.tgt == PIVOT_LANGUAGE:
        return "x->en"
    if route.src == PIVOT_LANGUAGE:
        return "en->x"
    return "non-en"


_AVG_FIELDS = ("chrf", "bleu", "copy_chrf", "copy_bleu", "off_target")


def averages(directions: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Unweighted means per category (x->en, en->x, non-en) and over all directions."""
    groups: dict[str, list[dict[str, Any]]] = {"x->en": [], "en->x": [], "non-en": [], "all": []}
    for key, res in directions.items():
        groups[category(parse_route(key))].append(res)
        groups["all"].append(res)
    out: dict[str, dict[str, Any]] = {}
    for name, rows in groups.items():
        if not rows:
            continue
        avg: dict[str, Any] = {"directions": len(rows)}
        for f in _AVG_FIELDS:
            vals = [r[f] for r in rows if r.get(f) is not None]
            avg[f] = sum(vals) / len(vals) if vals else None
        out[name] = avg
    return out


def format_table(results: dict[str, Any]) -> str:
    def f(x: Any, fmt: str = "{:6.2f}") -> str:
        return "     -" if x is None else fmt.format(x)

    head = f"{'direction':<10} {'n':>5} {'chrF':>6} {'BLEU':>6} {'copy':>6} {'offtgt':>6}"
    lines = [head, "-" * len(head)]
    for key, r in results["directions"].items():
        lines.append(
            f"{key:<10} {r['sentences']:>5} {f(r['chrf'])} {f(r['bleu'])} "
            f"{f(r.get('copy_chrf'))} {f(r.get('off_target'), '{:6.1%}')}"
        )
    lines.append("-" * len(head))
    for name, a in results["averages"].items():
        lines.append(
            f"{'avg ' + name:<10} {a['directions']:>5} {f(a['chrf'])} {f(a['bleu'])} "
            f"{f(a.get('copy_chrf'))} {f(a.get('off_target'), '{:6.1%}')}"
        )
    return "\n".join(lines)


def report_results(results: dict[str, Any], out: Path | str | None) -> None:
    """Print the table of ``results`` and, with ``out``, write them there as JSON (both
    evaluations' command lines end so)."""
    print(format_table(results))
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        print(f"results -> {path}")
