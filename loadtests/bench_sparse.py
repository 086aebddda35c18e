"""Decoding speed of an adaptive sparse route vs the dense model it came from (docs/sparse.md).

    python -m loadtests.bench_sparse [--quick] [--repeats N] [--threads T] [--out DIR]

One sparse model with random weights and a random selection per language (random selection
logits) is built at the size of ``training/recipes/sparse_attn_ffn_layers.yaml`` (d 256, 12-4
layers; every language keeps 8-2 layers, 3 of 4 heads, 4 of 8 FFN blocks) and exported through
the project's path (``export_bundle`` -> ``Bundle.assemble`` -> CTranslate2, int8 on CPU):

- ``sparse``: the route's engine as the server builds it (the ``sparse_subnetwork`` fusion:
  dropped layers removed, FFN blocks sliced, dropped heads zeroed but still computed);
- ``dense``: the same bundle assembled without the fusion, i.e. the full model it came from.

Both decode the same held-out verses with the output length held equal (``min_length ==
max_length``, as ``loadtests.bench``); the variants alternate within every repeat (the order
rotates); the ratio is the median of the per-repeat ratios. Random weights are enough for
speed when the lengths are equal. Writes ``results.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lsmt_core.routes import parse_route

from .bench import Variant, decode_settings, engine_variant, machine, time_setting
from .bench_models import TEST_BOOK, _train_tokenizer, split_verses
from .server_process import ROOT


@dataclass(frozen=True)
class SparseSizes:
    d_model: int
    heads: int
    ffn_dim: int
    layers: tuple[int, int]  # trained (encoder, decoder)
    kept: tuple[int, int]  # kept per language
    heads_kept: int
    ffn_blocks: tuple[int, int]  # (blocks, kept)
    vocab: int
    languages: tuple[str, ...] = ("de", "en", "fr")
    books: tuple[int, ...] = tuple(range(40, 67))  # New Testament


@dataclass(frozen=True)
class SparseMode:
    sizes: SparseSizes
    repeats: int
    length: int  # decoded tokens per sentence
    single: int  # sentences decoded one call each
    batch: int  # sentences in one call


FULL = SparseMode(SparseSizes(256, 4, 1024, (12, 4), (8, 2), 3, (8, 4), 16000), 5, 32, 4, 16)
QUICK = SparseMode(
    SparseSizes(64, 4, 128, (4, 2), (2, 1), 3, (4, 2), 1000, books=(40, TEST_BOOK)), 1, 8, 2, 4
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_sparse", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny model (CI)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_sparse")
    p.add_argument("--repeats", type=int, help="default 5 (quick: 1)")
    p.add_argument("--threads", type=int, default=1, help="threads per engine")
    p.add_argument("--route", default="en-fr")
    return p.parse_args(argv)


def build(sizes: SparseSizes, out: Path, log=print) -> tuple[Path, dict[str, list[str]], dict]:
    """Tokenizer and the sparse bundle (random weights and selection); held-out verses."""
    import torch

    from model_export.from_torch import export_bundle
    from training.model import ModelConfig, build_model

    held_out, train = split_verses(sizes)  # type: ignore[arg-type]
    tokenizer = _train_tokenizer(train, out / "tokenizer", sizes.vocab)
    import sentencepiece as spm

    vocab = spm.SentencePieceProcessor(model_file=str(tokenizer)).get_piece_size()
    cfg = ModelConfig(
        d_model=sizes.d_model,
        heads=sizes.heads,
        ffn_dim=sizes.ffn_dim,
        encoder_layers=sizes.layers[0],
        decoder_layers=sizes.layers[1],
        pre_norm=True,
        dropout=0.0,
        max_positions=256,
        sparse=dict(
            attention=True,
            heads_kept=sizes.heads_kept,
            ffn=True,
            ffn_blocks=sizes.ffn_blocks[0],
            ffn_blocks_kept=sizes.ffn_blocks[1],
            layers=True,
            encoder_layers_kept=sizes.kept[0],
            decoder_layers_kept=sizes.kept[1],
        ),
    )
    torch.manual_seed(4)
    model = build_model(cfg, vocab, list(sizes.languages)).eval()
    with torch.no_grad():  # a random sub-network per language; kept scores near 1
        for p in model.sparse_scores.logits.values():
            p.normal_(3.0, 1.0)
    routes = [(s, t) for s in sizes.languages for t in sizes.languages if s != t]
    export_bundle(
        model, out / "bundle", name="bench-sparse", tokenizer_model=tokenizer, routes=routes
    )
    params = {
        "dense": sum(p.numel() for n, p in model.named_parameters() if "sparse_scores" not in n)
    }
    log(f"built the sparse bundle: {params['dense'] / 1e6:.1f}M parameters (dense)")
    return out / "bundle", held_out, params


def sources_for(bundle_dir: Path, held_out, route, n: int, limit: int = 128) -> list[list[str]]:
    from lsmt_bundle import load_bundle
    from server.bundles import ServedBundle

    served = ServedBundle(load_bundle(bundle_dir))
    out = [p for p in (served.encode(t, route) for t in held_out[route[0]]) if len(p) <= limit]
    if len(out) < n:
        raise SystemExit(f"not enough {route[0]} sentences of at most {limit} pieces")
    return out[:n]


def engine_parameters(bundle_dir: Path, route, sparse: bool) -> int:
    from lsmt_bundle import load_bundle

    bundle = load_bundle(bundle_dir)
    if not sparse:
        bundle.manifest = bundle.manifest.model_copy(update={"fusions": []})
    return sum(int(v.size) for v in bundle.assemble(route).weights.values())


def measure(variants: list[Variant], sources, settings, mode: SparseMode) -> list[dict]:
    """One row per (repeat, setting, variant); the variants alternate within every setting
    and their order rotates between repeats."""
    for v in variants:  # first calls allocate; not timed
        v.run(sources[:2], 1)
    rows = []
    for rep in range(mode.repeats):
        order = variants[rep % 2 :] + variants[: rep % 2]
        for setting, n, beam in settings:
            for v in order:
                seconds, tokens = time_setting(v, sources, n, beam, mode.single)
                # equal work on both sides: every sentence decoded to mode.length tokens
                if tokens != (mode.single if n == 1 else n) * mode.length:
                    raise SystemExit(f"{v.name}: output of another length than {mode.length}")
                rows.append(
                    {"repeat": rep, "setting": setting, "variant": v.name, "seconds": seconds,
                     "tokens": tokens, "tokens_per_s": tokens / seconds}
                )  # fmt: skip
    return rows


def ratio_table(rows: list[dict], settings) -> list[dict]:
    """Per setting: median tokens/s of both variants and the median of per-repeat ratios."""
    table = []
    for setting, _, _ in settings:
        tps = {
            v: {r["repeat"]: r["tokens_per_s"] for r in rows if r["setting"] == setting and
                r["variant"] == v}
            for v in ("sparse", "dense")
        }  # fmt: skip
        table.append(
            {
                "setting": setting,
                "sparse_tokens_per_s": statistics.median(tps["sparse"].values()),
                "dense_tokens_per_s": statistics.median(tps["dense"].values()),
                "ratio": statistics.median(
                    tps["sparse"][k] / tps["dense"][k] for k in tps["dense"]
                ),
            }
        )
    return table


def print_summary(result: dict, args, mode: SparseMode) -> None:
    print(f"{result['mode']} mode, int8 on CPU, {args.threads} thread(s), {mode.repeats} repeats")
    print(f"route {result['route']}, {mode.length} tokens per sentence; engine parameters "
          f"sparse {result['engine_parameters']['sparse'] / 1e6:.2f}M, dense "
          f"{result['engine_parameters']['dense'] / 1e6:.2f}M")  # fmt: skip
    for r in result["table"]:
        print(
            f"  {r['setting']:<18} sparse {r['sparse_tokens_per_s']:8.1f} tok/s  dense "
            f"{r['dense_tokens_per_s']:8.1f} tok/s  ratio {r['ratio']:.2f}"
        )
    print(f"wrote {args.out / 'results.json'} ({result['seconds']:.0f} s)")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.device = "cpu"
    mode = QUICK if args.quick else FULL
    if args.repeats:
        mode = SparseMode(**{**mode.__dict__, "repeats": args.repeats})
    route = parse_route(args.route)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bundle_dir, held_out, _ = build(mode.sizes, args.out / "model")
    variants: list[Variant] = [
        engine_variant("sparse", bundle_dir, route, args, mode.length),
        engine_variant("dense", bundle_dir, route, args, mode.length, full_vocab=True),
    ]
    sources = sources_for(bundle_dir, held_out, route, max(mode.batch, mode.single))
    settings = decode_settings(mode.batch)
    rows = measure(variants, sources, settings, mode)
    table = ratio_table(rows, settings)
    result = {
        "command": "python -m loadtests.bench_sparse "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "mode": "quick" if args.quick else "full",
        "machine": machine(args),
        "sizes": asdict(mode.sizes),
        "workload": {k: v for k, v in mode.__dict__.items() if k != "sizes"},
        "route": "-".join(route),
        "engine_parameters": {
            "sparse": engine_parameters(bundle_dir, route, True),
            "dense": engine_parameters(bundle_dir, route, False),
        },
        "table": table,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    print_summary(result, args, mode)
    return result


if __name__ == "__main__":
    main()
