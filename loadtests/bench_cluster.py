"""The cluster application (server.cluster): translator replicas multiplexed by engine key vs
the same replicas behind key-blind balancing, under Zipf-popular routes over more keys than
one replica's budget holds.

    python -m loadtests.bench_cluster [--bundle models/default] [--requests 600]
                                      [--engines-per-replica 4] [--translators 2]
                                      [--concurrency 4] [--zipf 1.1] [--rounds 1]
                                      [--out runs/bench_cluster] [--quick]

One local Ray for the run; per round and mode (modes alternate) the application is deployed
afresh (no engine loaded), then ``--requests`` one-sentence requests (NTREX-128 news
sentences in the route's source language) are sent from ``--concurrency`` clients, their
routes drawn from a Zipf law over every route of the bundle (the same seeded draw for both
modes). Each translator replica's budget holds ``--engines-per-replica`` engines.

- ``multiplex``: Serve routes each engine key to a replica that holds it (``multiplex: true``);
- ``key-blind``: Serve's default power-of-two-choices balancing, blind to the key
  (``multiplex: false``): every replica meets every key.

Printed and saved (JSON, CSV, PNG): engine loads per 1,000 requests (the translators'
``lsmt_engine_loads_total`` from the cluster's merged /metrics, less the one engine each
translator builds at start to size its budget), p50/p95 latency, the keys
resident per replica at the end, and multiplex / key-blind ratios measured side by side.
On a 2-core machine the replicas share the same cores: absolute throughput does not scale
with replicas here (docs/benchmarks.md gives the projection).
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from .results import write_results
from .server_process import ROOT
from .timings import percentile

if TYPE_CHECKING:
    from server.bundles import ServedBundle

NTREX_DIR = ROOT / "lsmt_text" / "data" / "ntrex128"
NTREX_FILES = {
    "en": "newstest2019-src.eng.txt",
    "ar": "newstest2019-ref.arb.txt",
    "de": "newstest2019-ref.deu.txt",
    "es": "newstest2019-ref.spa.txt",
    "fr": "newstest2019-ref.fra.txt",
    "it": "newstest2019-ref.ita.txt",
    "pt": "newstest2019-ref.por.txt",
    "ru": "newstest2019-ref.rus.txt",
}
MODES = {"multiplex": True, "key-blind": False}
APP = "lsmt"
METRICS_REPORT_WAIT_S = 7.0  # a little over server.cluster_metrics.REPORT_INTERVAL_S


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_cluster", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--requests", type=int, default=600, help="requests per mode and round")
    p.add_argument("--engines-per-replica", type=int, default=4)
    p.add_argument("--translators", type=int, default=2, help="translator replicas")
    p.add_argument("--translator-cpus", type=float, default=0.75)
    p.add_argument("--concurrency", type=int, default=4, help="clients sending at once")
    p.add_argument("--zipf", type=float, default=1.1, help="exponent of route popularity")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_cluster")
    p.add_argument("--quick", action="store_true", help="40 requests, 2 engines per replica")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.engines_per_replica, args.concurrency = 40, 2, 2
    return args


def sentences(lang: str) -> list[str]:
    text = (NTREX_DIR / NTREX_FILES[lang]).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def zipf_routes(
    routes: list[tuple[str, str]], n: int, s: float, seed: int
) -> list[tuple[str, str]]:
    """``n`` routes drawn with probability ~ 1/rank^s, ranks in a seeded shuffled order."""
    rng = random.Random(seed)
    ranked = routes[:]
    rng.shuffle(ranked)
    weights = [1 / (rank + 1) ** s for rank in range(len(ranked))]
    return rng.choices(ranked, weights, k=n)


def requests_for(args: argparse.Namespace, routes: list[tuple[str, str]]) -> list[dict[str, Any]]:
    drawn = zipf_routes(routes, args.requests, args.zipf, args.seed)
    texts = {lang: sentences(lang) for lang in {s for s, _ in routes}}
    return [
        {"text": texts[src][i % len(texts[src])], "source": src, "target": tgt}
        for i, (src, tgt) in enumerate(drawn)
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_counters(url: str) -> dict[str, Any]:
    """From the cluster's merged /metrics: engine loads and their seconds summed over the
    translators, the keys resident on each translator, and per stage (tokenize and
    detokenize on the ingress, queue_wait and translate on the translators) the seconds and
    observations summed over every replica."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {"loads": 0.0, "load_s": 0.0, "resident": {}, "stages": {}}
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            replica = s.labels.get("replica", "")
            if s.name.startswith("lsmt_stage_duration_seconds_"):
                kind = s.name.rsplit("_", 1)[1]  # sum or count
                if kind in ("sum", "count"):
                    stage = out["stages"].setdefault(s.labels["stage"], {"sum": 0.0, "count": 0.0})
                    stage[kind] += s.value
            if not replica.startswith("Translator#"):
                continue
            if s.name == "lsmt_engine_loads_total":
                out["loads"] += s.value
            elif s.name == "lsmt_engine_load_seconds_sum":
                out["load_s"] += s.value
            elif s.name == "lsmt_engine_resident" and s.labels["tier"] == "device" and s.value:
                out["resident"].setdefault(replica, []).append(s.labels["engine"])
    out["resident"] = {r: sorted(k) for r, k in sorted(out["resident"].items())}
    return out


def measure_mode(
    args: argparse.Namespace, mode: str, bodies: list[dict[str, Any]], port: int, budget: int
) -> dict[str, Any]:
    from ray import serve

    from server.cluster import build_app

    settings = {
        "bundles": [str(args.bundle)],
        "device": "cpu",
        "device_budget_bytes": budget,
        "warmup_routes": [],
    }
    app = build_app(
        {
            "settings": settings,
            "translators": args.translators,
            "translator_cpus": args.translator_cpus,
            "multiplex": MODES[mode],
        }
    )
    serve.run(app, name=APP, route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    try:
        # The translators build one engine at start to size their budget: not the load's.
        time.sleep(METRICS_REPORT_WAIT_S)
        start = cluster_counters(url)
        latencies: list[float] = []
        errors = 0

        def send(body: dict[str, Any]) -> None:
            nonlocal errors
            t0 = time.perf_counter()
            r = httpx.post(f"{url}/v1/translate", json=body, timeout=120)
            latencies.append(time.perf_counter() - t0)
            errors += r.status_code != 200

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(send, bodies))
        wall = time.perf_counter() - t0
        time.sleep(METRICS_REPORT_WAIT_S)  # every replica's last report is in the view
        counters = cluster_counters(url)
    finally:
        serve.delete(APP)
    resident = counters["resident"]
    loads = counters["loads"] - start["loads"]
    stage_s = {
        name: (v["sum"] - start["stages"].get(name, {}).get("sum", 0.0))
        for name, v in counters["stages"].items()
    }
    return {
        "mode": mode,
        "requests": len(bodies),
        "errors": errors,
        "engine_loads": loads,
        "loads_per_1000": 1000 * loads / len(bodies),
        "load_s_per_request": (counters["load_s"] - start["load_s"]) / len(bodies),
        # CPU-bound work per request, where it runs (the projection in docs/benchmarks.md)
        "ingress_s_per_request": (stage_s.get("tokenize", 0) + stage_s.get("detokenize", 0))
        / len(bodies),
        "translate_s_per_request": stage_s.get("translate", 0) / len(bodies),
        "p50_s": statistics.median(latencies),
        "p95_s": percentile(latencies, 0.95),
        "requests_per_s": len(bodies) / wall,
        "resident_engines": sum(len(k) for k in resident.values()),
        "distinct_resident_keys": len({k for keys in resident.values() for k in keys}),
        "resident": resident,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = (
        "loads_per_1000",
        "p50_s",
        "p95_s",
        "requests_per_s",
        "distinct_resident_keys",
        "load_s_per_request",
        "ingress_s_per_request",
        "translate_s_per_request",
    )
    med = {m: {k: statistics.median(r[k] for r in rows if r["mode"] == m) for k in keys}
           for m in MODES}  # fmt: skip
    ratio = {k: med["multiplex"][k] / med["key-blind"][k] if med["key-blind"][k] else None
             for k in keys}  # fmt: skip
    return {"per_mode": med, "multiplex_over_key_blind": ratio}


def plot(summary: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = summary["per_mode"]
    modes = list(MODES)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.5))
    left.bar(modes, [med[m]["loads_per_1000"] for m in modes], color=["C0", "C1"])
    left.set_ylabel("engine loads per 1,000 requests")
    right.bar(modes, [med[m]["p95_s"] * 1000 for m in modes], color=["C0", "C1"])
    right.set_ylabel("p95 latency (ms)")
    fig.tight_layout()
    path = out / "cluster_multiplex.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def replica_budget(served: ServedBundle, engines_per_replica: int) -> int:
    """A translator replica's byte budget that holds ``engines_per_replica`` of the bundle's
    largest engines on the CPU, and not one more."""
    from server.cluster import largest_engine_bytes
    from server.settings import Settings

    return engines_per_replica * largest_engine_bytes(served, Settings(device="cpu")) + 1


@contextmanager
def local_serve(port: int) -> Iterator[None]:
    """One local Ray on the run's two cores with Serve's proxy on loopback ``port``; both
    shut down at the end, whatever happened."""
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from server.bundles import load_served_bundle

    args = parse_args(argv)
    served = load_served_bundle(args.bundle)
    routes = [tuple(r) for r in served.routes]
    budget = replica_budget(served, args.engines_per_replica)
    bodies = requests_for(args, routes)
    port = _free_port()
    rows = []
    with local_serve(port):
        for r in range(args.rounds):
            for mode in list(MODES)[r % 2 :] + list(MODES)[: r % 2]:
                row = {"round": r, **measure_mode(args, mode, bodies, port, budget)}
                rows.append(row)
                print(
                    f"round {r} {mode}: {row['loads_per_1000']:.0f} engine loads per 1,000 "
                    f"requests, p50 {row['p50_s'] * 1000:.0f} ms, p95 {row['p95_s'] * 1000:.0f} "
                    f"ms, {row['requests_per_s']:.1f} requests/s, {row['errors']} errors; "
                    f"{row['resident_engines']} engines resident, "
                    f"{row['distinct_resident_keys']} distinct keys",
                    flush=True,
                )
    summary = summarize(rows)
    settings = {k: str(v) for k, v in vars(args).items()}
    result = {"settings": {**settings, "budget_bytes": budget, "routes": len(routes)},
              "rows": rows, **summary}  # fmt: skip
    flat = [{k: v for k, v in row.items() if k != "resident"} for row in rows]
    write_results(args.out, result, flat, name="cluster_multiplex")
    plot(summary, args.out)
    ratio = summary["multiplex_over_key_blind"]
    print(
        f"multiplex / key-blind: engine loads {ratio['loads_per_1000']:.2f}x, "
        f"p95 {ratio['p95_s']:.2f}x, throughput {ratio['requests_per_s']:.2f}x"
    )
    return result


if __name__ == "__main__":
    main()
