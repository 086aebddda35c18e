"""Command line: export a checkpoint as a bundle, or write ready engines for chosen routes.

python -m model_export --checkpoint RUN_DIR --out BUNDLE_DIR [options]
python -m model_export build-engines BUNDLE_DIR --routes de-en,en-fr --out ENGINES_DIR
python -m model_export verify BUNDLE_DIR      # every file against its recorded checksum
python -m model_export checkpoint BUNDLE_DIR --out FILE.pt   # weights back, for init_from
python -m model_export add-language BUNDLE_DIR --from RUN    # a trained addition's modules
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lsmt_bundle import BundleError, DenseModel, load_bundle
from lsmt_bundle.dense import DECODER_EMBEDDING, OUTPUT_PROJECTION
from lsmt_bundle.storage import STORE_DTYPES, max_error
from lsmt_core.manifest import Manifest
from lsmt_core.routes import route_key

from .selection import chosen_routes, filter_routes, parse_routes, target_vocabulary

if TYPE_CHECKING:
    from training.checkpoint import CheckpointMeta
    from training.recipe import Recipe


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.safetensors"))


def export_main(argv: list[str]) -> int:
    """Checkpoint -> bundle: choose languages, routes and target vocabularies, record the
    provenance, write the bundle, and check what was written against the model."""
    args = export_arguments().parse_args(argv)
    from training.checkpoint import load_model

    from .from_torch import export_bundle

    started = time.perf_counter()
    model, recipe, meta = load_model(args.checkpoint, which=args.which)
    if model.cfg.language_specific.search:
        raise SystemExit(
            "an architecture-search model is not exported: run `python -m training.lsl select` "
            "and train the selected recipe"
        )
    languages, routes = chosen_routes(meta, args.languages, args.routes)
    target_vocab, rule = target_vocabulary(
        meta,
        recipe,
        languages,
        args.target_vocab_min_count,
        args.target_vocab_max_size,
        args.tokenizer_dir,
    )
    evaluation = json.loads(args.eval_json.read_text()) if args.eval_json else None
    routes, dropped = filter_routes(routes, evaluation, args.min_chrf_gain)
    manifest = export_bundle(
        model,
        args.out,
        name=args.name or recipe.name,
        tokenizer_model=meta.tokenizer_model_path(),
        routes=routes,
        languages=languages,
        store_dtype=args.dtype,
        target_vocab=target_vocab,
        target_vocab_rule=rule,
        provenance=export_provenance(recipe, meta, evaluation, dropped),
        lms_path=args.lms_path,
        language_tokenizer_models={
            lang: meta.language_tokenizer_model_path(lang) for lang in meta.language_tokenizers
        },
    )
    dense, worst = verify_export(model, args.out, manifest)
    print_summary(args.out, manifest, dense, worst, time.perf_counter() - started)
    return 0


def export_arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m model_export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="run directory or .pt file")
    p.add_argument("--which", choices=["best", "last"], default="best")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--name", help="bundle name (default: the recipe's name)")
    p.add_argument(
        "--dtype",
        choices=list(STORE_DTYPES),
        default="float16",
        help="module storage: float16 (default), float32, or int8 with per-row scales",
    )
    p.add_argument("--languages", help="comma-separated subset of the model's languages")
    p.add_argument("--routes", help="comma-separated SRC-TGT list (default: all trained routes)")
    p.add_argument("--target-vocab-min-count", type=int, help="K: keep pieces seen >= K times")
    p.add_argument("--target-vocab-max-size", type=int, help="N: keep at most N pieces")
    p.add_argument(
        "--tokenizer-dir",
        type=Path,
        help="directory with frequencies.json (default: the recipe's tokenizer)",
    )
    p.add_argument("--eval-json", type=Path, help="evaluation results to record as provenance")
    p.add_argument(
        "--lms-path",
        choices=["ls", "shared"],
        default="ls",
        help="LMS + Fuse Distillation: serve the language-specific path (ls) or the shared one "
        "(shared: one engine for every route); docs/methods.md",
    )
    p.add_argument(
        "--min-chrf-gain",
        type=float,
        help="with --eval-json: leave out routes whose chrF beats the copy-the-source "
        "baseline by less than this",
    )
    return p


def export_provenance(
    recipe: Recipe, meta: CheckpointMeta, evaluation: dict | None, dropped: dict[str, str]
) -> dict[str, Any]:
    """What the manifest records of where the model came from: recipe, checkpoint, corpus,
    evaluation and the routes left out."""
    from lsmt_text.paths import resolve_path

    provenance: dict[str, Any] = {
        "recipe": recipe.model_dump(mode="json"),
        "checkpoint": _portable(meta.path),
        "step": meta.step,
        "best_dev_chrf": meta.best_dev_chrf,
        "tokenizer_sha256": meta.tokenizer_sha256,
    }
    corpus = corpus_provenance(resolve_path(recipe.data.dir) / "stats.json")
    if corpus is not None:
        provenance["corpus"] = corpus
    if evaluation is not None:
        provenance["evaluation"] = evaluation
    if "interpolated" in meta.extra:  # training.checkpoint interpolate: which start, how far
        moved = meta.extra["interpolated"]
        provenance["interpolated"] = {**moved, "toward": _portable(Path(moved["toward"]))}
    if dropped:
        provenance["dropped_routes"] = dropped
    return provenance


def verify_export(model, out: Path, manifest: Manifest) -> tuple[DenseModel, float]:
    """Reload what was written, assemble its first route and compare every weight with the
    PyTorch model's, within the storage's rounding: the assembled route and the largest
    difference."""
    from training.model.methods import fused_weights

    bundle = load_bundle(out)
    route = bundle.routes[0]
    src, tgt = route
    dense = bundle.assemble(route)
    worst = verify_against_model(model, dense, src, tgt, fused_weights(manifest.fusions))
    tol = max_error(manifest.store_dtype, dense.weights) + 1e-6
    if worst > tol:
        raise SystemExit(f"verification failed: max |diff| {worst:g} > {tol:g} on {src}->{tgt}")
    return dense, worst


def verify_against_model(
    model, dense: DenseModel, src: str, tgt: str, fused: Callable[[str], bool] = lambda n: False
) -> float:
    """Largest absolute difference between assembled weights and the model's route weights
    (leaving out the method tensors and the weights their fusions change: ``fused``)."""
    from training.model.methods import is_method_tensor

    from .from_torch import dense_names

    names = dense_names(model)
    worst = 0.0
    for param_name, param in model.named_parameters():
        place = names[param_name]
        if is_method_tensor(param_name) or fused(place.name):
            continue
        if place.lang is not None and place.lang != (src if place.index == "src" else tgt):
            continue
        if place.name not in dense.weights:
            raise SystemExit(f"verification failed: {place.name} missing from the assembled route")
        expected = param.detach().cpu().numpy()
        worst = max(worst, float(np.abs(dense.weights[place.name] - expected).max()))
    return worst


def print_summary(
    out: Path, manifest: Manifest, dense: DenseModel, worst: float, seconds: float
) -> None:
    kinds = {
        "shared": out / "modules" / "shared.safetensors",
        "src": out / "modules" / "src",
        "tgt": out / "modules" / "tgt",
    }
    bytes_per = {"float32": 4, "float16": 2, "int8": 1}[manifest.store_dtype]
    route_params = sum(
        v.size for k, v in dense.weights.items() if k not in (DECODER_EMBEDDING, OUTPUT_PROJECTION)
    )
    all_routes = route_params * bytes_per * len(manifest.routes)
    print(f"bundle {manifest.name} -> {out} ({seconds:.1f} s)")
    print(
        f"  languages {len(manifest.languages)}, routes {len(manifest.routes)}, "
        f"store dtype {manifest.store_dtype}, verified max |diff| {worst:.2e}"
    )
    for kind, path in kinds.items():
        size = path.stat().st_size if path.is_file() else (_size(path) if path.exists() else 0)
        print(f"  modules/{kind:<6} {size / 1e6:9.2f} MB")
    print(f"  module store    {_size(out) / 1e6:9.2f} MB")
    print(f"  every route as a full model would take {all_routes / 1e6:9.2f} MB")


def build_engines_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m model_export build-engines",
        description="Ready engines (CTranslate2, or hybrid ones for LSTM-decoder bundles) for "
        "chosen routes: as model directories (--out) or into a server's engine cache "
        "(--cache, LSMT_ENGINE_CACHE_DIR) ahead of time.",
    )
    p.add_argument("bundle", type=Path)
    p.add_argument("--routes", help="comma-separated SRC-TGT (default: every route)")
    p.add_argument("--out", type=Path, help="a directory of engine directories, one per route")
    p.add_argument("--cache", type=Path, help="an engine cache directory to fill")
    p.add_argument("--cache-bytes", type=int, default=4 << 30, help="the cache's bound")
    p.add_argument(
        "--quantization", default="int8", help="int8 (default), int8_float16, float16, float32, ..."
    )
    args = p.parse_args(argv)
    if (args.out is None) == (args.cache is None):
        p.error("give one of --out and --cache")
    try:
        bundle = load_bundle(args.bundle)
        routes = parse_routes(args.routes) or bundle.routes
        if args.cache is not None:
            fill_engine_cache(bundle, routes, args.cache, args.cache_bytes, args.quantization)
        else:
            write_engines(bundle, routes, args.out, args.quantization)
    except BundleError as exc:
        raise SystemExit(f"error: {exc}") from exc
    return 0


def write_engines(bundle: Any, routes: list, out: Path, quantization: str) -> None:
    from lsmt_bundle.ct2 import INT8_AS_STORED
    from lsmt_bundle.engines import save_engine

    done: dict[str, Path] = {}
    for route in routes:
        key = bundle.engine_key(route)
        target = out / route_key(route)
        if key in done:  # same modules, same engine: link instead of a second copy
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(done[key].name, target_is_directory=True)
            print(f"{route_key(route)}: same engine as {done[key].name} (symlink)")
            continue
        dense = bundle.assemble(route, keep_int8=quantization in INT8_AS_STORED)
        save_engine(dense, target, quantization)
        done[key] = target
        size = sum(p.stat().st_size for p in target.iterdir() if p.is_file())
        print(f"{route_key(route)}: {target} ({size / 1e6:.1f} MB, {quantization})")


def fill_engine_cache(
    bundle: Any, routes: list, root: Path, max_bytes: int, quantization: str
) -> None:
    """What a server with ``LSMT_ENGINE_CACHE_DIR=root`` and this compute type would build
    on each route's first request, built now."""
    from lsmt_bundle.engine_cache import EngineCache, engine_key, fill_entry

    cache = EngineCache(root, max_bytes)
    for route in routes:
        if engine_key(bundle, route, quantization) is None:
            raise SystemExit("error: the bundle records no file digests: it cannot be cached")
        _, was_there = fill_entry(cache, bundle, route, quantization)
        print(f"{route_key(route)}: {'already cached' if was_there else 'built'} in {root}")
    print(f"engine cache {root}: {cache.size() / 1e6:.1f} MB (bound {max_bytes / 1e6:.0f} MB)")


def _portable(path: Path) -> str:
    """``path`` relative to the working directory when inside it (no host paths in bundles)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def corpus_provenance(stats_file: Path) -> dict | None:
    """What the bundle records of its training corpus (from the builder's ``stats.json``):
    how it was built, each language's Bible edition and each package source with its licence,
    so that the held-out slices can be rebuilt and the model card can name its sources. None
    if the file is absent."""
    if not stats_file.is_file():
        return None
    stats = json.loads(stats_file.read_text(encoding="utf-8"))
    return {
        "build_args": stats.get("build_args", {}),
        "source": stats.get("source", {}),
        "editions": {lang: e["primary"] for lang, e in stats.get("editions", {}).items()},
        # every source with its licence and package versions (corpora built before the
        # package sources have only the Bible, recorded above)
        "sources": {
            name: {k: info[k] for k in ("licence", "description", "packages", "files") if k in info}
            for name, info in stats.get("sources", {}).items()
        },
        "pairs_by_source": stats.get("pairs_by_source", {}).get("train", {}),
    }


def verify_main(argv: list[str]) -> int:
    """``python -m model_export verify BUNDLE``: check every file against its recorded size and
    checksum (XXH3-128 where recorded, else SHA-256); exit 1 if any is missing or differs."""
    p = argparse.ArgumentParser(
        prog="python -m model_export verify", description=verify_main.__doc__
    )
    p.add_argument("bundle", type=Path)
    args = p.parse_args(argv)

    try:
        bundle = load_bundle(args.bundle)
    except BundleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    report = bundle.verify()
    if not report:
        print(f"{args.bundle}: no checksums recorded (exported before they existed)")
        return 1
    for rel, status in report.items():
        print(f"{status:<10} {rel}" if status == "ok" else f"BAD        {rel}: {status}")
    bad = sum(status != "ok" for status in report.values())
    print(f"{len(report) - bad} of {len(report)} files ok")
    return 1 if bad else 0


def checkpoint_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m model_export checkpoint",
        description="Write a bundle's weights as a training checkpoint (init_from reads it). "
        "int8 modules come back dequantized, within their storage error.",
    )
    p.add_argument("bundle", type=Path)
    p.add_argument("--out", required=True, type=Path, help="checkpoint file (.pt)")
    args = p.parse_args(argv)
    from .to_checkpoint import write_checkpoint_from_bundle

    path = write_checkpoint_from_bundle(args.bundle, args.out)
    print(f"wrote {path} from {args.bundle}")
    return 0


def argos_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m model_export argos",
        description="Write routes of a bundle as Argos Translate packages (.argosmodel), one "
        "per route, for argostranslate and LibreTranslate (docs/export.md).",
    )
    p.add_argument("bundle", type=Path)
    p.add_argument("--routes", help="comma-separated SRC-TGT (default: every route)")
    p.add_argument("--out", required=True, type=Path, help="directory for the packages")
    p.add_argument("--quantization", default="int8", help="the models' CTranslate2 quantization")
    args = p.parse_args(argv)
    from .argos import ArgosExportError, write_argos_package

    try:
        bundle = load_bundle(args.bundle)
        for route in parse_routes(args.routes) or bundle.routes:
            path = write_argos_package(bundle, route, args.out, args.quantization)
            print(f"{route_key(route)}: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    except (BundleError, ArgosExportError) as exc:
        raise SystemExit(f"error: {exc}") from exc
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "argos":
        return argos_main(argv[1:])
    if argv and argv[0] == "checkpoint":
        return checkpoint_main(argv[1:])
    if argv and argv[0] == "build-engines":
        return build_engines_main(argv[1:])
    if argv and argv[0] == "verify":
        return verify_main(argv[1:])
    if argv and argv[0] == "add-language":
        from .add_language import add_language_main

        return add_language_main(argv[1:])
    return export_main(argv)


if __name__ == "__main__":
    sys.exit(main())
