"""Evaluate a bundle as it is served: its CTranslate2 engines on a corpus split.

    python -m model_export.evaluate BUNDLE --data DATA_DIR [--testset test] [--beam 4]
        [--compute-type auto] [--device cpu] [--max-sentences N] [--routes de-en,en-de]
        [--out results.json]

``--testset``: ``test``/``dev`` (the corpus split), ``acts``, ``ntrex`` (needs no ``--data``),
``<source>-test`` (see :mod:`lsmt_text.data.testsets`).

Scores (chrF, BLEU, copy-the-source baseline, off-target rate) come from
:mod:`lsmt_core.scoring`, as for checkpoints, so the results are directly comparable.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsmt_bundle import Bundle, load_bundle
from lsmt_bundle.ct2 import translate_pieces
from lsmt_bundle.engines import load_engine
from lsmt_core.langid import LanguageIdentifier
from lsmt_core.routes import Route, route_key
from lsmt_core.scoring import averages, report_results, score_direction
from lsmt_text.data import CorpusFormatError
from lsmt_text.data.testsets import load_testset
from lsmt_text.tokenizer import Tokenizer

from .selection import parse_routes


@dataclass(frozen=True)
class Decoding:
    """How the engines decode: beam size and CTranslate2's guards against degenerate output
    (the server's defaults are repetition_penalty 1.1, no_repeat_ngram_size 4; off here unless
    asked, as the card's earlier evaluations were made)."""

    beam: int = 4
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0


def translate_route(
    bundle: Bundle,
    translator,
    tokenizer_of: Callable[[str], Tokenizer],
    texts: list[str],
    route: Route,
    decoding: Decoding,
) -> list[str]:
    """``texts`` translated as the server does: written with the source language's tokenizer,
    read with the target's (a language added with its own has one: Bundle.tokenizer_path_of)."""
    limit = bundle.max_source_positions - 1
    reader, writer = tokenizer_of(route.src), tokenizer_of(route.tgt)
    sources = [  # an over-long verse is cut (the server refuses it instead)
        bundle.source_pieces(reader.encode(reader.normalize(t, route.src)), route)[-limit:]
        for t in texts
    ]
    results = translate_pieces(
        translator,
        sources,
        bundle.max_source_positions,
        beam_size=decoding.beam,
        max_batch_size=32,
        repetition_penalty=decoding.repetition_penalty,
        no_repeat_ngram_size=decoding.no_repeat_ngram_size,
    )
    return [writer.decode_pieces(r.hypotheses[0]) for r in results]


def evaluate_bundle(
    bundle: Bundle,
    pairs: dict[Route, list[tuple[str, str]]],
    decoding: Decoding = Decoding(),
    compute_type: str = "int8",
    threads: int = 2,
    langid: bool = True,
    device: str = "cpu",
) -> dict[str, Any]:
    tokenizer_at = functools.cache(Tokenizer)  # one per file: most languages share one

    def tokenizer_of(lang: str) -> Tokenizer:
        return tokenizer_at(bundle.tokenizer_path_of(lang))

    lid = LanguageIdentifier(bundle.manifest.languages) if langid else None
    engines: dict[str, Any] = {}
    engine_bytes: dict[str, int] = {}
    directions: dict[str, dict[str, Any]] = {}
    for route, rows in sorted(pairs.items()):
        src, tgt = route
        key = bundle.engine_key(route)
        if key not in engines:
            engines[key], engine_bytes[key] = load_engine(
                bundle.assemble(route),
                compute_type=compute_type,
                intra_threads=threads,
                device=device,
            )
        t0 = time.perf_counter()
        srcs, refs = [s for s, _ in rows], [t for _, t in rows]
        hyps = translate_route(bundle, engines[key], tokenizer_of, srcs, route, decoding)
        res = score_direction(hyps, srcs, refs, tgt, time.perf_counter() - t0, lid)
        res["engine_bytes"] = engine_bytes[key]  # the route's weights as served
        directions[route_key(route)] = res
        print(
            f"{src}-{tgt}: chrF {res['chrf']:.1f} (copy {res['copy_chrf']:.1f}) "
            f"in {res['seconds']:.1f} s",
            file=sys.stderr,
        )
    return {"directions": directions, "averages": averages(directions)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m model_export.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bundle", type=Path)
    p.add_argument("--data", type=Path, help="corpus root (docs/data.md); not for ntrex")
    p.add_argument(
        "--testset",
        "--split",
        dest="testset",
        default="test",
        help="test, dev, acts, ntrex or SOURCE-test (default: test)",
    )
    p.add_argument("--beam", type=int, default=4)
    p.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        help="CTranslate2's guard (1: off; the server decodes with 1.1)",
    )
    p.add_argument(
        "--no-repeat-ngram-size",
        type=int,
        default=0,
        help="CTranslate2's guard (0: off; the server decodes with 4)",
    )
    p.add_argument(
        "--compute-type", default="auto", help="CTranslate2's (auto: int8, int8_float16 on CUDA)"
    )
    p.add_argument(
        "--device", default="cpu", help="cpu, cuda, or auto (cuda where CTranslate2 sees a GPU)"
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-sentences", type=int, help="first N per direction")
    p.add_argument("--routes", help="comma-separated SRC-TGT (default: every bundle route)")
    p.add_argument("--no-langid", action="store_true")
    p.add_argument("--out", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    bundle = load_bundle(args.bundle)
    wanted = parse_routes(args.routes) or bundle.routes
    try:
        testset = load_testset(args.testset, args.data, wanted)
    except CorpusFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    pairs = {r: testset[r][: args.max_sentences] for r in wanted if r in testset}
    missing = [route_key(r) for r in wanted if r not in testset]
    if missing:
        print(f"warning: no {args.testset} data for {', '.join(missing)}", file=sys.stderr)
    t0 = time.perf_counter()
    if args.device == "auto":
        import ctranslate2

        args.device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    if args.compute_type == "auto":
        args.compute_type = "int8_float16" if args.device == "cuda" else "int8"
    decoding = Decoding(args.beam, args.repetition_penalty, args.no_repeat_ngram_size)
    results = evaluate_bundle(
        bundle, pairs, decoding, args.compute_type, args.threads, not args.no_langid, args.device
    )
    results.update(
        bundle=str(args.bundle),
        testset=args.testset,
        beam=args.beam,
        repetition_penalty=args.repetition_penalty,
        no_repeat_ngram_size=args.no_repeat_ngram_size,
        compute_type=args.compute_type,
        device=args.device,
        max_sentences=args.max_sentences,
        data_dir=str(args.data) if args.data else None,
        seconds=time.perf_counter() - t0,
    )
    report_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
