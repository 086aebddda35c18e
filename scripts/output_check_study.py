"""The output checks and decoding guards of the server, measured on a bundle
(``server.output_checks``; table in docs/server.md).

1. References as outputs (NTREX-128, every direction of the bundle): how often each check
   fires on translations that are right by definition: its false-alarm rate.
2. The bundle's own outputs (the first ``--sentences`` of NTREX and, with ``--data``, of the
   corpus's held-out Acts per direction), decoded as the server does (int8, beam 4) with each
   decoding setting of ``GUARDS``: chrF, and how often each flag fires.
3. The server's retry (``output_checks.RETRY``) on the sentences flagged with the server's
   default decoding setting (``Settings``): how often it clears a flag, and chrF of those
   sentences before and after.

    python scripts/output_check_study.py --bundle models/default --data data/default_mixed/corpus

Writes ``output_checks.json`` and ``output_checks.csv`` under ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from lsmt_core.routes import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.results import write_results
from lsmt_bundle import load_bundle
from lsmt_bundle.ct2 import translate_pieces
from lsmt_bundle.engines import load_engine
from lsmt_core.langid import LanguageDetector
from lsmt_core.scoring import score
from lsmt_text.data.testsets import load_testset
from server.bundles import ServedBundle
from server.output_checks import FLAGS, RETRY, sentence_flags
from server.settings import Settings

# Decoding settings compared: (name, repetition_penalty, no_repeat_ngram_size).
GUARDS = (("none", 1.0, 0), ("penalty 1.1", 1.1, 0), ("no-repeat 4", 1.0, 4),
          ("penalty 1.1 + no-repeat 4", 1.1, 4))  # fmt: skip
BEAM = 4
_settings = Settings()
DEFAULT_GUARDS = (_settings.repetition_penalty, _settings.no_repeat_ngram_size)


def decode(served: ServedBundle, engine, sources: list[list[str]], **options) -> list[list[str]]:
    results = translate_pieces(
        engine, sources, served.max_source_positions, max_batch_size=32, **options
    )
    return [r.hypotheses[0] for r in results]


def flags_of(served, detector, sources, outputs, tgt) -> list[set[str]]:
    return [
        sentence_flags(served.untagged(s), served.untagged(o), served.decode(o, tgt), tgt, detector)
        for s, o in zip(sources, outputs, strict=True)
    ]


def rates(flag_sets: list[set[str]]) -> dict[str, float]:
    n = max(len(flag_sets), 1)
    out = {f: 100 * sum(f in s for s in flag_sets) / n for f in FLAGS[:3]}
    out["any"] = 100 * sum(bool(s) for s in flag_sets) / n
    return out


def references_as_outputs(served: ServedBundle, detector: LanguageDetector) -> dict[str, Any]:
    pairs = load_testset("ntrex", None, served.routes)
    flag_sets = []
    for (src, tgt), rows in sorted(pairs.items()):
        sources = [served.encode(s, Route(src, tgt)) for s, _ in rows]
        refs = [served.pieces(t, tgt) for _, t in rows]
        flag_sets += flags_of(served, detector, sources, refs, tgt)
    return {"sentences": len(flag_sets), **rates(flag_sets)}


def study_testset(
    served: ServedBundle, detector: LanguageDetector, engines: dict, pairs, sentences: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    by_guard: dict[str, dict[str, list]] = {g[0]: {"hyps": [], "refs": [], "flags": []}
                                            for g in GUARDS}  # fmt: skip
    retry = {"flagged": 0, "cleared": 0, "chrf_before": [], "chrf_after": [], "refs": []}
    for (src, tgt), rows in sorted(pairs.items()):
        route, rows = Route(src, tgt), rows[:sentences]
        key = served.served_route(route).engine_key
        if key not in engines:
            engines[key], _ = load_engine(served.bundle.assemble(route), intra_threads=2)
        sources = [served.encode(s, route) for s, _ in rows]
        refs = [t for _, t in rows]
        for name, penalty, no_repeat in GUARDS:
            outs = decode(served, engines[key], sources, beam_size=BEAM,
                          repetition_penalty=penalty, no_repeat_ngram_size=no_repeat)  # fmt: skip
            flags = flags_of(served, detector, sources, outs, tgt)
            g = by_guard[name]
            g["hyps"] += [(tgt, served.decode(o, tgt)) for o in outs]
            g["refs"] += refs
            g["flags"] += flags
            if (penalty, no_repeat) != DEFAULT_GUARDS:
                continue
            flagged = [i for i, f in enumerate(flags) if f]
            if not flagged:
                continue
            again = decode(
                served, engines[key], [sources[i] for i in flagged],
                beam_size=max(BEAM, RETRY.min_beam_size),
                repetition_penalty=RETRY.repetition_penalty,
                no_repeat_ngram_size=RETRY.no_repeat_ngram_size,
            )  # fmt: skip
            after = flags_of(served, detector, [sources[i] for i in flagged], again, tgt)
            retry["flagged"] += len(flagged)
            retry["cleared"] += sum(
                len(a) < len(flags[i]) for a, i in zip(after, flagged, strict=True)
            )
            retry["chrf_before"] += [(tgt, served.decode(outs[i], tgt)) for i in flagged]
            retry["chrf_after"] += [(tgt, served.decode(o, tgt)) for o in again]
            retry["refs"] += [refs[i] for i in flagged]
    rows_out = []
    for name, _, _ in GUARDS:
        g = by_guard[name]
        rows_out.append(
            {"guard": name, "sentences": len(g["hyps"]), "chrf": pooled_chrf(g["hyps"], g["refs"]),
             **rates(g["flags"])}
        )  # fmt: skip
    retry_out = {
        "flagged": retry["flagged"],
        "cleared": retry["cleared"],
        "chrf_before": pooled_chrf(retry["chrf_before"], retry["refs"]),
        "chrf_after": pooled_chrf(retry["chrf_after"], retry["refs"]),
    }
    return rows_out, retry_out


def pooled_chrf(hyps: list[tuple[str, str]], refs: list[str]) -> float | None:
    """Mean over target languages of corpus chrF (the scoring of training.evaluate)."""
    by_tgt: dict[str, tuple[list[str], list[str]]] = {}
    for (tgt, hyp), ref in zip(hyps, refs, strict=True):
        by_tgt.setdefault(tgt, ([], []))
        by_tgt[tgt][0].append(hyp)
        by_tgt[tgt][1].append(ref)
    if not by_tgt:
        return None
    values = [score(h, r, tgt)["chrf"] for tgt, (h, r) in by_tgt.items()]
    return sum(values) / len(values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, default=Path("models/default"))
    ap.add_argument("--data", type=Path, default=None, help="corpus with the held-out Acts")
    ap.add_argument("--sentences", type=int, default=100, help="per direction and test set")
    ap.add_argument("--out", type=Path, default=Path("docs/measurements"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    served = ServedBundle(load_bundle(args.bundle))
    detector = LanguageDetector()
    result: dict[str, Any] = {"bundle": str(args.bundle), "beam": BEAM,
                              "sentences_per_direction": args.sentences}  # fmt: skip
    result["references"] = references_as_outputs(served, detector)
    print(f"references as outputs: {result['references']}")
    testsets = {"ntrex": load_testset("ntrex", None, served.routes)}
    if args.data is not None:
        testsets["acts"] = load_testset("acts", args.data, served.routes)
    engines: dict = {}
    result["testsets"] = {}
    csv_rows = []
    for name, pairs in testsets.items():
        guards, retry = study_testset(served, detector, engines, pairs, args.sentences)
        result["testsets"][name] = {"guards": guards, "retry": retry}
        csv_rows += [{"testset": name, **g} for g in guards]
        for g in guards:
            print(f"{name:6} {g['guard']:28} chrF {g['chrf']:.2f}  flags % "
                  + " ".join(f"{f} {g[f]:.2f}" for f in (*FLAGS[:3], "any")))  # fmt: skip
        print(f"{name:6} retry: {retry}")
    result["seconds"] = time.perf_counter() - t0
    write_results(args.out, result, csv_rows, "output_checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
