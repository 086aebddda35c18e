"""Export benchmark: module store vs all-routes export, assembly + engine load time per route,
int8 vs float32 engine size.

    python loadtests/bench_export.py [--recipe lsl_nas] [--languages 10] [--routes 6]
        [--repeats 3] [--out runs/bench_export]

Weights are the recipe's freshly initialised model (sizes and timings do not depend on the
values); the tokenizer is data/tokenizer (build it with `make tokenizer`). Writes results.json,
results.csv and results.png under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from loadtests.results import write_results
from lsmt_bundle import Bundle, DenseModel, load_bundle
from lsmt_bundle.ct2 import save_translator
from lsmt_bundle.engines import load_engine
from lsmt_core.routes import Route, route_key
from model_export.from_torch import export_bundle
from training.model import build_model
from training.recipe import find_recipe, recipe_from_dict

LANGS = ["de", "en", "es", "fr", "it", "ja", "ko", "pt", "sw", "zh"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", default="lsl_nas")
    p.add_argument("--tokenizer", type=Path, default=Path("data/tokenizer/spm.model"))
    p.add_argument("--languages", type=int, default=10)
    p.add_argument("--routes", type=int, default=6, help="routes to time")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("runs/bench_export"))
    return p.parse_args()


def random_model(recipe_name: str, tokenizer: Path, langs: list[str]) -> torch.nn.Module:
    """The recipe's model, freshly initialised (seed 0) for the tokenizer's vocabulary."""
    import sentencepiece as spm
    import yaml

    recipe = recipe_from_dict(yaml.safe_load(find_recipe(recipe_name).read_text()))
    vocab = spm.SentencePieceProcessor(model_file=str(tokenizer)).get_piece_size()
    torch.manual_seed(0)
    return build_model(recipe.model, vocab, langs)


def module_store_bytes(bundle_dir: Path) -> int:
    return sum(f.stat().st_size for f in (bundle_dir / "modules").rglob("*.safetensors"))


def route_bytes(one_route: DenseModel) -> int:
    """One route as its own float16 model, the shared embeddings and output projection not
    counted."""
    return sum(
        v.size * 2
        for k, v in one_route.weights.items()
        if not k.startswith("decoder.output_projection") and k != "decoder.embed_tokens.weight"
    )


def engine_mb(one_route: DenseModel, tmp: Path) -> dict[str, float]:
    """The route's CTranslate2 engine on disk, float32 vs int8."""
    f32 = save_translator(one_route, tmp / "f32", "float32")
    i8 = save_translator(one_route, tmp / "i8", "int8")
    return {
        "engine_float32_mb": (f32 / "model.bin").stat().st_size / 1e6,
        "engine_int8_mb": (i8 / "model.bin").stat().st_size / 1e6,
    }


def time_routes(bundle: Bundle, routes: list[Route], repeats: int) -> list[dict]:
    """Per route, the median over ``repeats`` of its assembly and of its engine's load."""
    rows = []
    for route in routes:
        assemble_s, load_s = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            dense = bundle.assemble(route)
            t1 = time.perf_counter()
            translator, _ = load_engine(dense, compute_type="int8")
            t2 = time.perf_counter()
            del translator
            assemble_s.append(t1 - t0)
            load_s.append(t2 - t1)
        rows.append(
            {
                "route": route_key(route),
                "assemble_ms": 1e3 * statistics.median(assemble_s),
                "engine_load_ms": 1e3 * statistics.median(load_s),
            }
        )
    return rows


def plot(results: dict, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    names = ["module store", "every route as a model"]
    ax.barh(names, [results["store_mb"], results["all_routes_mb"]])
    ax.set_xlabel("MB (float16)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out / "results.png", dpi=100)


def print_summary(results: dict, rows: list[dict]) -> None:
    print(json.dumps({k: v for k, v in results.items() if k != "per_route"}, indent=2))
    for r in rows:
        print(
            f"{r['route']}: assemble {r['assemble_ms']:.0f} ms, engine load "
            f"{r['engine_load_ms']:.0f} ms"
        )


def main() -> int:
    args = parse_args()
    langs = LANGS[: args.languages]
    model = random_model(args.recipe, args.tokenizer, langs)
    others = [lang for lang in langs if lang != "en"]
    routes = [Route(s, "en") for s in others] + [Route("en", t) for t in others]
    results: dict = {"recipe": args.recipe, "languages": langs, "routes": len(routes)}
    with tempfile.TemporaryDirectory() as tmp:
        bundle_dir = Path(tmp) / "bundle"
        export_bundle(
            model,
            bundle_dir,
            name="bench",
            tokenizer_model=args.tokenizer,
            routes=routes,
            store_dtype="float16",
        )
        bundle = load_bundle(bundle_dir)
        store = module_store_bytes(bundle_dir)
        one_route = bundle.assemble(routes[0])
        all_routes = route_bytes(one_route) * len(routes)
        results.update(store_mb=store / 1e6, all_routes_mb=all_routes / 1e6)
        results.update(engine_mb(one_route, Path(tmp)))
        rows = time_routes(bundle, routes[: args.routes], args.repeats)
    results["per_route"] = rows
    results["median_assemble_ms"] = statistics.median(r["assemble_ms"] for r in rows)
    results["median_engine_load_ms"] = statistics.median(r["engine_load_ms"] for r in rows)
    write_results(args.out, results, rows)
    plot(results, args.out, f"{args.recipe}, {len(langs)} languages, {len(routes)} routes")
    print_summary(results, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
