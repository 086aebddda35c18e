"""What pivoting costs: a pair translated through English against its direct route, on the
default model, through HTTP, as served.

    python -m loadtests.bench_pivot [--sentences 50] [--directions es-fr,fr-es]
        [--out runs/bench_pivot]

Two real servers, one after the other (never side by side, so neither slows the other): the
default model as shipped (every pair direct), and the same bundle with the routes between two
non-English languages taken out of its manifest, so that the server translates those pairs
through English (the response names the pivot: checked). Each sends the first ``--sentences``
NTREX-128 sentences of every non-English direction one request at a time (an interactive
user's traffic) and scores the outputs with chrF (``lsmt_core.scoring``). Prints, per
direction and on average, chrF direct and pivoted and the latency ratio; writes
``results.json``/``.csv`` and ``pivot.png`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from lsmt_core.routes import Route, parse_route, route_key
from lsmt_core.scoring import score
from lsmt_text.data.testsets import ntrex_pairs

from .results import write_results
from .server_process import ROOT, ServerProcess

DEFAULT_MODEL = ROOT / "models" / "default"
PIVOT = "en"


def without_direct_routes(bundle: Path, out: Path) -> list[Route]:
    """A copy of ``bundle`` at ``out`` serving only the routes into and out of English; the
    routes taken out (every pair the copy translates by pivot)."""
    shutil.copytree(bundle, out)
    manifest = json.loads((out / "manifest.json").read_text())
    removed = [Route(s, t) for s, t in manifest["routes"] if PIVOT not in (s, t)]
    manifest["routes"] = [[s, t] for s, t in manifest["routes"] if PIVOT in (s, t)]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return removed


def translate_each(url: str, route: Route, sources: list[str], pivoted: bool) -> dict[str, Any]:
    """One request per sentence; the outputs and each request's seconds."""
    outputs, seconds = [], []
    with httpx.Client(base_url=url, timeout=120) as client:
        for text in sources:
            t0 = time.perf_counter()
            r = client.post("/v1/translate", json={"text": text, "source": route.src,
                                                   "target": route.tgt})  # fmt: skip
            seconds.append(time.perf_counter() - t0)
            r.raise_for_status()
            t = r.json()["translations"][0]
            if t["pivot"] != (PIVOT if pivoted else None):
                raise AssertionError(f"{route_key(route)}: pivot {t['pivot']!r}")
            outputs.append(t["text"])
    return {"outputs": outputs, "seconds": seconds}


def run_server(
    bundle: Path, routes: list[Route], pairs: dict, pivoted: bool
) -> dict[Route, dict[str, Any]]:
    out = {}
    with ServerProcess([bundle]) as server:
        for route in routes:  # the first request of each route loads its engine(s): warm up
            translate_each(server.url, route, [pairs[route][0][0]], pivoted)
        for route in routes:
            out[route] = translate_each(server.url, route, [s for s, _ in pairs[route]], pivoted)
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["direction"] for r in rows]
    x = range(len(rows))
    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    a.bar([i - 0.2 for i in x], [r["chrf_direct"] for r in rows], 0.4, label="direct")
    a.bar([i + 0.2 for i in x], [r["chrf_pivot"] for r in rows], 0.4, label="through en")
    a.set_ylabel("chrF (NTREX)")
    a.legend()
    b.bar([i - 0.2 for i in x], [r["p50_ms_direct"] for r in rows], 0.4, label="direct")
    b.bar([i + 0.2 for i in x], [r["p50_ms_pivot"] for r in rows], 0.4, label="through en")
    b.set_ylabel("p50 latency, ms (one sentence)")
    b.set_xticks(list(x), names, rotation=60)
    fig.suptitle("Pivoting through English against the direct route (default model)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtests.bench_pivot", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--bundle", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--sentences", type=int, default=50, help="NTREX sentences per direction")
    ap.add_argument("--directions", help="e.g. es-fr,fr-es (default: every non-English one)")
    ap.add_argument("--out", type=Path, default=Path("runs/bench_pivot"))
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        pivot_bundle = Path(tmp) / args.bundle.name
        routes = without_direct_routes(args.bundle, pivot_bundle)
        if args.directions:
            wanted = {parse_route(d) for d in args.directions.split(",")}
            routes = [r for r in routes if r in wanted]
        pairs = {Route(*r): p[: args.sentences] for r, p in ntrex_pairs(routes).items()}
        routes = sorted(pairs)
        direct = run_server(args.bundle, routes, pairs, pivoted=False)
        pivot = run_server(pivot_bundle, routes, pairs, pivoted=True)

    rows = []
    for route in routes:
        refs = [t for _, t in pairs[route]]
        d, p = direct[route], pivot[route]
        rows.append({
            "direction": route_key(route),
            "sentences": len(refs),
            "chrf_direct": round(score(d["outputs"], refs, route.tgt)["chrf"], 2),
            "chrf_pivot": round(score(p["outputs"], refs, route.tgt)["chrf"], 2),
            "p50_ms_direct": round(1000 * statistics.median(d["seconds"]), 1),
            "p50_ms_pivot": round(1000 * statistics.median(p["seconds"]), 1),
        })  # fmt: skip
    mean = {k: round(statistics.mean(r[k] for r in rows), 2) for k in rows[0] if k != "direction"}
    ratio = mean["p50_ms_pivot"] / mean["p50_ms_direct"]
    print(f"{'direction':>9} {'chrF direct':>11} {'via en':>7} {'p50 ms direct':>13} {'via en':>7}")
    for r in rows:
        print(f"{r['direction']:>9} {r['chrf_direct']:>11.2f} {r['chrf_pivot']:>7.2f} "
              f"{r['p50_ms_direct']:>13.1f} {r['p50_ms_pivot']:>7.1f}")  # fmt: skip
    print(f"{'mean':>9} {mean['chrf_direct']:>11.2f} {mean['chrf_pivot']:>7.2f} "
          f"{mean['p50_ms_direct']:>13.1f} {mean['p50_ms_pivot']:>7.1f}")  # fmt: skip
    pivot_wins = [r["direction"] for r in rows if r["chrf_pivot"] > r["chrf_direct"]]
    print(f"pivot latency / direct: {ratio:.2f}x; pivot scores higher on {len(pivot_wins)} of "
          f"{len(rows)} directions: {', '.join(pivot_wins) or 'none'}")  # fmt: skip
    result = {"bundle": str(args.bundle), "pivot": PIVOT, "sentences": args.sentences,
              "mean": mean, "latency_ratio": round(ratio, 2), "pivot_wins": pivot_wins,
              "directions": rows}  # fmt: skip
    write_results(args.out, result, rows)
    plot(rows, args.out / "pivot.png")
    print(f"wrote {args.out}/results.json, results.csv, pivot.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
