"""Where a cold route's first request goes: the stages of building and using its engine.

    python -m loadtests.profile_cold [--bundle DIR | --bench-cache DIR] [--route en-de]
                                     [--repeats 5] [--out runs/profile_cold]

Stages, each timed on its own, repeated (medians): reading and decoding the route's modules,
assembling (selection and fusions, numpy), building and quantizing the CTranslate2 model and
writing it into a directory (``save_engine``, as the server writes a miss into its new cache
entry), listing the entry (its checksums), loading the translator from the directory, the
first translation, then the engine cache's hit path: checking an entry and loading it. An int8
bundle whose routes assemble in their stored int8 (the server's path) is also timed through
the float32 round trip it replaces (``[float32 round trip]`` rows, not in the sum). Without
``--bundle`` the benchmark's d512 LSL 12-2 model is used (``loadtests.bench_models``, built in
``--bench-cache`` when absent). Printed and saved as JSON and CSV.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from lsmt_core.routes import Route

from .results import write_results
from .server_process import ROOT


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.profile_cold", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bundle", type=Path, help="a bundle (default: the benchmark's LSL model)")
    p.add_argument("--bench-cache", type=Path, default=ROOT / "runs" / "bench" / "cache")
    p.add_argument("--route", default=None, help="SRC-TGT (default: the bundle's first route)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "profile_cold")
    p.add_argument("--quick", action="store_true", help="the benchmark's quick models, 1 repeat")
    return p.parse_args(argv)


def bundle_dir(args: argparse.Namespace) -> Path:
    if args.bundle is not None:
        return args.bundle
    from . import bench_models

    sizes = bench_models.QUICK if args.quick else bench_models.FULL
    return bench_models.build(sizes, args.bench_cache).bundles["lsl"]


BUILD = "build engine (spec, int8, write)"


def timed(stages: dict[str, list[float]], name: str, fn, *a):
    t0 = time.perf_counter()
    out = fn(*a)
    stages.setdefault(name, []).append(time.perf_counter() - t0)
    return out


def profile_once(path: Path, route: tuple[str, str], stages: dict[str, list[float]]) -> None:
    from lsmt_bundle import load_bundle
    from lsmt_bundle.assembly import assemble, keeps_int8
    from lsmt_bundle.engine_cache import EngineCache, engine_key
    from lsmt_bundle.engines import open_engine, save_engine

    bundle = load_bundle(path)
    src, tgt = route
    names = bundle.modules_for(Route(src, tgt))
    # The server's path first (int8 weights as stored where the bundle allows it), then,
    # for an int8 bundle, the float32 round trip it replaces (not part of the miss).
    paths = [("", keeps_int8(bundle.manifest))]
    if paths[0][1]:
        paths.append((" [float32 round trip]", False))
    for label, keep in reversed(paths):

        def read(keep: bool = keep) -> dict:
            return {n: bundle.read_module(n, keep) for n in names}

        modules = timed(stages, "read modules" + label, read)
        pieces = bundle.pieces_of(src), bundle.pieces_of(tgt)
        dense = timed(stages, "assemble" + label, assemble, bundle.manifest, modules, *pieces)
        if label:  # the round trip's engine: built and written, for comparison
            with tempfile.TemporaryDirectory() as tmp:
                timed(stages, BUILD + label, save_engine, dense, Path(tmp) / "engine", "int8")
    key = engine_key(bundle, Route(src, tgt), "int8")
    if key is None:
        raise SystemExit(f"error: {path} records no file digests (no engine cache)")
    with tempfile.TemporaryDirectory() as tmp:
        cache = EngineCache(tmp, 1 << 34)
        # as the server does on a miss: the engine written into the new entry, opened from it
        engine = timed(stages, BUILD + ", listed in the cache",
                       cache.store, key, lambda out: save_engine(dense, out, "int8"))  # fmt: skip
        translator, _ = timed(stages, "load translator", open_engine, engine)
        source = [bundle.source_pieces(bundle.pieces[100:108], Route(src, tgt))]
        timed(stages, "first translation", translator.translate_batch, source)
        entry = timed(stages, "cache hit: check the entry", cache.get, key)
        timed(stages, "cache hit: load translator", open_engine, entry)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    path = bundle_dir(args)
    from lsmt_bundle import load_bundle

    first = load_bundle(path).routes[0]
    route = tuple(args.route.split("-")) if args.route else first
    stages: dict[str, list[float]] = {}
    for _ in range(1 if args.quick else args.repeats):
        profile_once(path, route, stages)  # type: ignore[arg-type]
    rows = [
        {"stage": name, "median_ms": statistics.median(v) * 1000, "runs": len(v)}
        for name, v in stages.items()
    ]
    miss_stages = [r for r in rows if "[" not in r["stage"] and "cache hit" not in r["stage"]]
    miss = sum(r["median_ms"] for r in miss_stages)
    print(f"cold path of {route[0]}-{route[1]} in {path}:")
    for r in rows:
        print(f"  {r['stage']:<52} {r['median_ms']:8.1f} ms")
    print(f"  {'sum of the miss path':<52} {miss:8.1f} ms")
    result = {"bundle": str(path), "route": "-".join(route), "rows": rows, "miss_ms": miss}
    write_results(args.out, result, rows, name="profile_cold")
    return result


if __name__ == "__main__":
    main()
