"""Evaluate a checkpoint: beam or greedy search, chrF/BLEU per direction, copy baseline,
off-target rate.

    python -m training.evaluate --checkpoint runs/baseline --testset dev [--beam 4]
        [--batch-size 32] [--max-sentences N] [--routes de-en en-de] [--out results.json]

- ``--testset``: a corpus split (``dev``, ``test``), ``acts``, ``ntrex`` or one package
  source's held-out documents (``libreoffice-help-test``); see :mod:`lsmt_text.data.testsets`.
- Scores are sacreBLEU corpus chrF (chrF2, character 6-grams) and BLEU per direction. BLEU
  tokenisation: ``zh`` for Chinese, ``char`` for Japanese, ``13a`` otherwise (recorded in the
  JSON); chrF needs no tokenisation and is the headline metric.
- Averages (unweighted over directions): ``x->en``, ``en->x``, ``non-en`` (neither side
  English) and ``all``.
- The *copy* baseline scores the source sentence itself as the translation: a model that
  scores near it has learned nothing useful (names and numbers alone give a few chrF).
- Off-target rate: share of outputs whose language, by py3langid restricted to the model's
  languages, is not the target language (the LAA paper's LangAcc = 1 - off-target). Empty
  outputs count as off-target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from lsmt_core.langid import LanguageIdentifier
from lsmt_core.routes import Route, parse_route, route_key
from lsmt_core.scoring import averages, report_results, score_direction
from lsmt_text.paths import resolve_path

from .batching import SourceEncoder
from .model import Seq2SeqTransformer
from .search import beam_search, greedy_search, output_mask

# -- decoding ------------------------------------------------------------------------------------


def max_decode_len(src_len: int, max_positions: int, a: float = 2.0, b: int = 10) -> int:
    return max(1, min(max_positions - 1, int(a * src_len) + b))


@torch.no_grad()
def translate_ids(
    model: Seq2SeqTransformer,
    sources: Sequence[Sequence[int]],
    route: Route,
    beam: int = 1,
    batch_size: int = 32,
    length_penalty: float = 1.0,
    device: torch.device | str | None = None,
    progress: Callable[[int], None] | None = None,
    output_ids: Sequence[int] | None = None,
) -> list[list[int]]:
    """Output ids (no BOS/EOS) for tagged source ids; batches sorted by length. With
    ``output_ids``, only those pieces can be output (the target language's vocabulary)."""
    device = device or next(model.parameters()).device
    allowed = output_mask(output_ids, model.vocab_size, device)
    was_training = model.training
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    max_pos = model.cfg.max_positions
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        src_len = max(len(sources[i]) for i in idx)
        src = torch.zeros(len(idx), src_len, dtype=torch.long)
        for row, i in enumerate(idx):
            src[row, : len(sources[i])] = torch.as_tensor(list(sources[i]), dtype=torch.long)
        src = src.to(device)
        max_len = max_decode_len(src_len, max_pos)
        if beam <= 1:
            hyps = greedy_search(model, src, route, max_len=max_len, allowed=allowed)
        else:
            hyps = beam_search(
                model,
                src,
                route,
                beam_size=beam,
                max_len=max_len,
                length_penalty=length_penalty,
                allowed=allowed,
            )
        for i, h in zip(idx, hyps, strict=True):
            out[i] = h.tokens
        if progress:
            progress(len(idx))
    if was_training:
        model.train()
    return out


def translate(
    model: Seq2SeqTransformer,
    encoder: SourceEncoder,
    texts: Sequence[str],
    route: Route,
    beam: int = 1,
    batch_size: int = 32,
    length_penalty: float = 1.0,
    progress: Callable[[int], None] | None = None,
    output_ids: Sequence[int] | None = None,
) -> list[str]:
    """Translate raw sentences along ``route`` (tagging as the model was trained; each
    language written with its tokenizer, ``encoder.tokenizer_of``)."""
    max_pos = model.cfg.max_positions
    sources = [encoder.encode(t, route, max_len=max_pos) for t in texts]
    ids = translate_ids(
        model,
        sources,
        route,
        beam,
        batch_size,
        length_penalty,
        progress=progress,
        output_ids=output_ids,
    )
    target = encoder.tokenizer_of(route.tgt)
    return [target.decode_ids(x) for x in ids]


def evaluate_pairs(
    model: Seq2SeqTransformer,
    encoder: SourceEncoder,
    pairs: dict[Route, list[tuple[str, str]]],
    beam: int = 1,
    batch_size: int = 32,
    length_penalty: float = 1.0,
    lid: LanguageIdentifier | None = None,
    with_baseline: bool = True,
    show_progress: bool = False,
    keep_outputs: bool = False,
    output_vocab: dict[str, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Translate and score every direction of ``pairs``; returns ``{"directions", "averages"}``.
    ``output_vocab``: per target language, the only pieces it may output."""
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(len(v) for v in pairs.values()), desc="translate", unit="sent")
    directions: dict[str, dict[str, Any]] = {}
    for route in sorted(pairs, key=route_key):
        srcs = [s for s, _ in pairs[route]]
        refs = [t for _, t in pairs[route]]
        t0 = time.perf_counter()
        hyps = translate(
            model,
            encoder,
            srcs,
            route,
            beam,
            batch_size,
            length_penalty,
            progress=bar.update if bar else None,
            output_ids=(output_vocab or {}).get(route.tgt),
        )
        res = score_direction(
            hyps, srcs, refs, route.tgt, time.perf_counter() - t0, lid, with_baseline
        )
        if keep_outputs:
            res["outputs"] = hyps
        directions[route_key(route)] = res
    if bar:
        bar.close()
    return {"directions": directions, "averages": averages(directions)}


# -- CLI -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m training.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--checkpoint", required=True, help="run directory (best.pt) or .pt file")
    ap.add_argument(
        "--testset",
        "--split",
        dest="testset",
        default="dev",
        help="dev, test, train, acts, ntrex or SOURCE-test (lsmt_text.data.testsets; default dev)",
    )
    ap.add_argument("--beam", type=int, default=4, help="beam size; 1 = greedy")
    ap.add_argument("--length-penalty", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    ap.add_argument("--max-sentences", type=int, default=None, help="first N per direction")
    ap.add_argument("--routes", nargs="*", default=None, help="subset, e.g. de-en en-de")
    ap.add_argument("--data-dir", default=None, help="corpus root (default: the recipe's)")
    ap.add_argument("--tokenizer", default=None, help="spm model/dir (default: checkpoint's)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--which", default="best", choices=["best", "last"])
    ap.add_argument("--no-langid", action="store_true", help="skip the off-target rate")
    ap.add_argument("--out", default=None, help="write results JSON here")
    ap.add_argument("--outputs", default=None, help="write hypotheses (JSONL) here")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    from lsmt_text.data import CorpusFormatError
    from lsmt_text.data.testsets import load_testset
    from lsmt_text.tokenizer import Tokenizer

    from .checkpoint import load_model
    from .vocab import decoding_vocab

    device = (
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    model, recipe, meta = load_model(args.checkpoint, device=device, which=args.which)
    tok_path = Path(args.tokenizer) if args.tokenizer else meta.tokenizer_model_path()
    tokenizer = Tokenizer(resolve_path(tok_path))
    own = {
        lang: Tokenizer(meta.language_tokenizer_model_path(lang))
        for lang in meta.language_tokenizers
    }
    encoder = SourceEncoder(tokenizer, meta.tag_scheme, recipe.data.quality_tag, own)
    data_dir = resolve_path(args.data_dir or recipe.data.dir)
    wanted = [parse_route(r) for r in args.routes] if args.routes else meta.routes
    try:
        split = load_testset(args.testset, data_dir, [(r.src, r.tgt) for r in wanted])
    except CorpusFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    pairs = _pairs_to_score(split, wanted, meta.languages, args.testset, args.max_sentences)
    if not pairs:
        print("nothing to evaluate", file=sys.stderr)
        return 2
    lid = None if args.no_langid else LanguageIdentifier(meta.languages)
    output_vocab = decoding_vocab(recipe, meta.extra.get("target_vocab", {}).get("ids"))
    t0 = time.perf_counter()
    results = evaluate_pairs(
        model,
        encoder,
        pairs,
        beam=args.beam,
        batch_size=args.batch_size,
        length_penalty=args.length_penalty,
        lid=lid,
        show_progress=True,
        keep_outputs=bool(args.outputs),
        output_vocab=output_vocab,
    )
    outputs = {k: v.pop("outputs") for k, v in results["directions"].items() if "outputs" in v}
    results.update(
        checkpoint=str(meta.path),
        step=meta.step,
        testset=args.testset,
        beam=args.beam,
        length_penalty=args.length_penalty,
        max_sentences=args.max_sentences,
        data_dir=str(data_dir),
        seconds=time.perf_counter() - t0,
        device=str(device),
        langid_languages=lid.languages if lid else None,
    )
    report_results(results, args.out)
    if args.outputs:
        _write_hypotheses(Path(args.outputs), outputs, pairs)
    return 0


def _pairs_to_score(
    split: dict[tuple[str, str], list[tuple[str, str]]],
    wanted: list[Route],
    languages: list[str],
    testset: str,
    max_sentences: int | None,
) -> dict[Route, list[tuple[str, str]]]:
    """The wanted routes' test pairs (the first ``max_sentences``), with a warning for each
    route the test set or the model lacks."""
    pairs: dict[Route, list[tuple[str, str]]] = {}
    for route in wanted:
        if (route.src, route.tgt) not in split:
            print(f"warning: no {testset} data for {route_key(route)}", file=sys.stderr)
            continue
        if route.src not in languages or route.tgt not in languages:
            print(f"warning: model has no language for {route_key(route)}", file=sys.stderr)
            continue
        rows = split[(route.src, route.tgt)]
        pairs[route] = rows[:max_sentences] if max_sentences else rows
    return pairs


def _write_hypotheses(
    path: Path, outputs: dict[str, list[str]], pairs: dict[Route, list[tuple[str, str]]]
) -> None:
    """One JSON line per sentence: route, source, reference, hypothesis."""
    with open(path, "w", encoding="utf-8") as f:
        for key, hyps in outputs.items():
            for (src, ref), hyp in zip(pairs[parse_route(key)], hyps, strict=True):
                row = {"route": key, "source": src, "reference": ref, "hypothesis": hyp}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
