"""Write MODEL_CARD.md for the bundled default model from the files its build produced.

    python scripts/model_card.py [--bundle models/default] [--out MODEL_CARD.md]
        [--evidence docs/default_model]

Every figure comes from a file: the bundle's manifest (languages, routes, corpus sources and
licences, architecture) and the evidence folder that `scripts/build_default_model.sh` fills
(evaluations of the starting and the shipped model on each test set, the stage-3 run's
summary and metrics, the earlier stages' facts, the Apertium reference), so the card cannot
drift from the model and can be regenerated from a clean clone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lsmt_core.routes import route_key

ROOT = Path(__file__).resolve().parents[1]
# test set -> how the card names it
TESTSETS = {
    "acts": "Acts (Bible, held-out book)",
    "ntrex": "NTREX-128 (news)",
    "libreoffice-help-test": "LibreOffice help (held-out pages)",
    "libreoffice-ui-test": "LibreOffice UI strings (held-out dialogs)",
}


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def _evaluations(evidence: Path, side: str) -> dict[str, dict]:
    files = {t: evidence / side / f"{t}.json" for t in TESTSETS}
    return {t: _json(f) for t, f in files.items() if f.is_file()}


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "" if x is None else format(x, fmt)


def scores_table(before: dict | None, after: dict, offered: set[str]) -> list[str]:
    """One test set: per direction and on average, chrF before and after, BLEU after, the
    copy baseline, the gain over it and the off-target rate."""
    rows = [
        "| direction | offered | chrF before | chrF after | BLEU after | chrF copy | "
        "gain over copy | off-target |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    old = (before or {}).get("directions", {})
    for d, r in sorted(after["directions"].items()):
        off = r.get("off_target")
        rows.append(
            f"| {d} | {'yes' if d in offered else '**no**'} | {_num(old.get(d, {}).get('chrf'))} "
            f"| {r['chrf']:.1f} | {r['bleu']:.1f} | {r['copy_chrf']:.1f} | "
            f"{r['chrf'] - r['copy_chrf']:+.1f} | {'' if off is None else f'{off:.1%}'} |"
        )
    old_avg = (before or {}).get("averages", {})
    for name, r in after["averages"].items():
        rows.append(
            f"| avg {name} | | {_num(old_avg.get(name, {}).get('chrf'))} | {r['chrf']:.1f} | "
            f"{r['bleu']:.1f} | {r['copy_chrf']:.1f} | {r['chrf'] - r['copy_chrf']:+.1f} | |"
        )
    return rows


def source_table(corpus: dict, languages: list[str]) -> list[str]:
    """Training pairs with each language on one side, per source, and the source's licence."""
    per: dict[str, dict[str, int]] = {}
    for direction, counts in corpus.get("pairs_by_source", {}).items():
        for lang in direction.split("-"):
            for source, n in counts.items():
                per.setdefault(source, dict.fromkeys(languages, 0))[lang] += n
    rows = [
        "| source | licence | packages | " + " | ".join(languages) + " |",
        "|---|---|---|" + "---:|" * len(languages),
    ]
    for name, info in corpus.get("sources", {}).items():
        packages = ", ".join(f"`{p}` {v}" for p, v in sorted(info.get("packages", {}).items()))
        if len(info.get("packages", {})) > 3:
            first = sorted(info["packages"])[0]
            packages = f"`{first.rsplit('-', 1)[0]}-*` {info['packages'][first]}"
        counts = per.get(name, {})
        rows.append(
            f"| {name} | {info.get('licence', '')} | {packages} | "
            + " | ".join(f"{counts.get(lang, 0):,}" for lang in languages)
            + " |"
        )
    return rows


def build_card(bundle: Path, evidence: Path, curve: Path) -> str:
    from training.plots import plot_testset_curves

    manifest = _json(bundle / "manifest.json")
    prov = manifest["provenance"]
    recipe = prov["recipe"]
    corpus = prov.get("corpus") or {}
    before, after = _evaluations(evidence, "before"), _evaluations(evidence, "after")
    summary = _json(evidence / "summary.json")
    earlier = _json(evidence / "earlier_stages.json")["stages"]
    apertium = evidence / "apertium_ntrex.json"
    a = manifest["architecture"]
    ls = recipe["model"]["language_specific"]
    offered = {route_key((s, t)) for s, t in manifest["routes"]}
    dropped = prov.get("dropped_routes", {})
    vocab = manifest.get("target_vocab") or {}
    languages = manifest["languages"]
    plot_testset_curves(
        evidence / "metrics.jsonl",
        curve,
        "stage 3: chrF against training time (16 sentences per direction)",
    )
    ntrex = after["ntrex"]["averages"]
    lines = [
        "# Model card: the bundled default model (`models/default`)",
        "",
        "Generated by `scripts/model_card.py` from the bundle and `docs/default_model/`; do not "
        "edit by hand.",
        "",
        "## Summary",
        "",
        f"- **Languages**: {', '.join(languages)}.",
        f"- **Routes offered** ({len(offered)}): {', '.join(sorted(offered))}.",
        "- **Routes not offered** (chrF gain over copying the source on NTREX below the "
        "shipping bar): "
        + (", ".join(f"{k} ({v})" for k, v in sorted(dropped.items())) or "none")
        + ".",
        f"- **Quality**: on NTREX news, chrF {ntrex['all']['chrf']:.1f} on average over the "
        f"directions (x->en {ntrex['x->en']['chrf']:.1f}, en->x {ntrex['en->x']['chrf']:.1f}); "
        f"copying the source scores {ntrex['all']['copy_chrf']:.1f}. Per direction below.",
        f"- **Method**: language-specific encoder layers (LSL, Pires et al. 2023) on a deep "
        f"encoder / shallow decoder ({a['encoder_layers']}-{a['decoder_layers']}) Transformer "
        "with per-target-language vocabularies (Berard et al. 2021), trained in three stages: "
        "dense on the Bibles, LSL from it, then further on the Bibles and modern software "
        "documentation.",
        f"- **Bundle**: {_mb(bundle):.1f} MB on disk, modules stored as "
        f"{manifest['store_dtype']} (one scale per row), served as int8 CTranslate2 engines.",
        "",
        "## Architecture",
        "",
        f"- d_model {a['d_model']}, {a['heads']} heads, FFN {a['ffn_dim']}, {a['activation']}, "
        f"{'pre' if a['pre_norm'] else 'post'}-norm, {a['encoder_layers']} encoder and "
        f"{a['decoder_layers']} decoder layers, shared decoder, tied embeddings, sinusoidal "
        f"positions (max {a['max_positions']}), target tag `<2xx>` prepended to the source.",
        f"- Language-specific encoder layers (1-based): source-indexed {ls['encoder_src']}, "
        f"target-indexed {ls['encoder_tgt']} ({ls['component']}).",
        f"- Parameters: {summary['parameters'] / 1e6:.2f} M in total, "
        f"{summary['parameters_per_route'] / 1e6:.2f} M used by any one route (the cost of a "
        "dense model of the same shape).",
        "- Target vocabularies: pieces seen at least "
        f"{vocab.get('min_count')} times in the language's training text, the "
        f"{vocab.get('max_size')} most frequent, plus special, tag, character and byte pieces; "
        "sizes: "
        + ", ".join(f"{k} {v}" for k, v in sorted(vocab.get("sizes", {}).items()))
        + f" (of {manifest['tokenizer']['vocab_size']}).",
        "",
        "## Training data and licences",
        "",
        "Pairs in the training split with the language on one side (every direction between "
        "the languages; one pair counts for both its languages). Built by `python -m "
        "training.data build --sources "
        + ",".join(corpus.get("build_args", {}).get("sources", ["bible"]))
        + "` from the packages named (docs/data.md): Bibles aligned by verse, help pages by "
        "paragraph id, UI strings by context and English original, GNOME help and the Debian "
        "handbook by position; untranslated, misaligned and duplicate pairs removed; whole "
        "documents (a Bible book, a help page, a dialog) held out for dev and test.",
        "",
        *source_table(corpus, languages),
        "",
        "Bible editions (only editions recorded as public domain in `lsmt_core/languages.py`):",
        "",
        "| language | edition | licence |",
        "|---|---|---|",
    ]
    for lang in languages:
        ed = corpus.get("editions", {}).get(lang)
        if ed:
            lines.append(
                f"| {lang} | {ed['name']} {ed['year']} (`{ed['code']}`) | "
                f"{ed.get('licence') or 'not verified'} |"
            )
    lines += [
        "",
        "The model is derived from these texts; the share-alike licences (CC-BY-SA-3.0 of "
        "GNOME's help, the handbook's CC-BY-SA-3.0 option) and MPL-2.0 apply to the text, and "
        "whoever redistributes the model should name these sources as this card does.",
        "",
        f"Tokenizer: one SentencePiece unigram model, {manifest['tokenizer']['vocab_size']} "
        "pieces, trained on the Bibles in stage 1 and kept since (byte fallback covers any "
        "character); the per-target vocabularies were recounted on the mixed corpus.",
        "",
        "## Training",
        "",
    ]
    for st in earlier:
        lines.append(
            f"- `{st['name']}`: {st['what']}; {st['steps']} steps, {st['minutes']} min on "
            f"{st['machine']}."
        )
    minutes = summary["train_seconds"] / 60
    lines += [
        f"- `{recipe['name']}`: the LSL model trained further on the mixed corpus "
        f"(`training/recipes/{recipe['name']}.yaml`); best dev checkpoint at step "
        f"{prov['step']} of {summary['step']} run, {minutes:.0f} min of training on "
        f"{summary.get('device_name') or summary['device']}, in time-limited, resumed slices.",
        "",
        f"![learning curves]({curve.relative_to(ROOT).as_posix()})",
        "",
        "## Scores",
        "",
        "Bundles evaluated as served (int8 CTranslate2 engines, beam "
        f"{after['ntrex']['beam']}), sacreBLEU chrF and BLEU, on "
        + (
            f"the first {after['ntrex']['max_sentences']:,} sentence pairs per direction of each "
            if after["ntrex"].get("max_sentences")
            else "every sentence pair of each "
        )
        + "test set: *before* is the model stage 3 started from (Bible only), *after* the shipped "
        "one, *copy* scores the source itself as the translation. Off-target: share of outputs "
        "that py3langid, restricted to the bundle's languages, does not identify as the target "
        "language. NTREX was translated from English, so its x->en and x->y sources are "
        "translations.",
        "",
    ]
    for t, name in TESTSETS.items():
        if t in after:
            n = sum(r["sentences"] for r in after[t]["directions"].values())
            lines += [f"### {name}: `--testset {t}`, {n:,} sentence pairs", ""]
            lines += [*scores_table(before.get(t), after[t], offered), ""]
    if apertium.is_file():
        ref, ours = _json(apertium), after["ntrex"]["directions"]
        lines += [
            "Reference point on the same NTREX sentences, scored by the same code: the "
            f"rule-based Apertium ({ref['package']}) "
            + ", ".join(
                f"{d} chrF {r['chrf']:.1f} (this model {ours[d]['chrf']:.1f})"
                for d, r in sorted(ref["directions"].items())
                if d in ours
            )
            + f" (`{ref['command']}`).",
            "",
        ]
    lines += [
        "## Known limits",
        "",
        "- A small model (d 256) trained for hours on two CPU cores after its GPU stages: "
        "expect rough translations of everyday and news text; it is strongest on software "
        "documentation and Bible text, the domains it saw.",
        "- Nothing conversational was in its data (none ships in a package): greetings, chat "
        "and slang are weak.",
        "- The server splits long inputs into sentences and translates each on its own (no "
        "document context).",
        "",
        "## Rebuild",
        "",
        "```bash",
        "make default-model   # corpus, (stages 1-2 on a GPU), stage 3, evaluation, export, card",
        "```",
        "",
        "`scripts/build_default_model.sh` says which steps it runs; training resumes a run it "
        "finds, and uses a GPU when torch sees one.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--evidence", type=Path, default=ROOT / "docs" / "default_model")
    p.add_argument("--out", type=Path, default=ROOT / "MODEL_CARD.md")
    p.add_argument("--curve", type=Path, default=ROOT / "docs" / "default_model_curve.png")
    args = p.parse_args()
    args.out.write_text(build_card(args.bundle, args.evidence, args.curve.resolve()))
    print(f"model card -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
