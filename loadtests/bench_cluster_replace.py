"""A translator replica killed and replaced under steady traffic: does the replacement take its
share? Per-replica request shares over time, with hot keys spreading to an idle replica
(``server.cluster_balance``) against without (every key stays where it was first loaded).

    python -m loadtests.bench_cluster_replace [--bundle models/default] [--routes 6]
                                              [--before 60] [--after 180] [--concurrency 4]
                                              [--window 30] [--bucket 15]
                                              [--arms balance,no-balance]
                                              [--out runs/bench_cluster_replace] [--quick]

One local Ray; per arm the application is deployed afresh (two translators, each budget
holding ``--engines-per-replica`` engines), then ``--concurrency`` clients send one-sentence
requests (NTREX-128 news) over ``--routes`` routes drawn Zipf-popular as in
``loadtests.bench_cluster``, for ``--before`` seconds; then the translator that served the
most is killed (``ray.kill``, as a crash) and the clients go on for ``--after`` seconds.
Every answer's replica (``X-LSMT-Replica``) and status are recorded.

Printed and saved (JSON, CSV, PNG): per ``--bucket`` seconds, each replica's share of the
requests; errors; when Serve had two translators running again; and the busiest replica's
share over the last bucket that ends within two minutes of the replacement starting (the
issue's aim: within 60/40), for each arm side by side. ``no-balance`` sets the balancing
window beyond the run (no key ever gains a replica): the behaviour before spreading.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from .bench_cluster import (
    APP,
    METRICS_REPORT_WAIT_S,
    _free_port,
    local_serve,
    replica_budget,
    sentences,
    zipf_routes,
)
from .results import write_results
from .server_process import ROOT

ARMS = ("balance", "no-balance")
AIM_AFTER_S = 120.0  # shares within 60/40 two minutes after the replacement starts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench_cluster_replace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--routes", type=int, default=6, help="routes in the traffic")
    p.add_argument("--engines-per-replica", type=int, default=4)
    p.add_argument("--translator-cpus", type=float, default=0.75)
    p.add_argument("--before", type=float, default=60.0, help="seconds before the kill")
    p.add_argument("--after", type=float, default=180.0, help="seconds after the kill")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--window", type=float, default=30.0, help="balance_window_s")
    p.add_argument("--bucket", type=float, default=15.0, help="seconds per share bucket")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_cluster_replace")
    p.add_argument(
        "--quick", action="store_true", help="short phases and window, balance only (the test)"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.before, args.after, args.window, args.bucket = 10.0, 40.0, 3.0, 5.0
        args.routes, args.engines_per_replica, args.concurrency = 3, 2, 2
        args.arms = "balance"
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = set(args.arms) - set(ARMS)
    if unknown:
        p.error(f"unknown arms {sorted(unknown)}: choose from {', '.join(ARMS)}")
    return args


class Traffic:
    """Clients sending requests over ``bodies`` in turn until stopped; every answer kept as
    (seconds since start, replica, status)."""

    def __init__(self, url: str, bodies: list[dict[str, Any]], concurrency: int) -> None:
        self.url, self.bodies, self.concurrency = url, bodies, concurrency
        self.answers: list[tuple[float, str, int]] = []
        self.stopping = threading.Event()
        self.t0 = time.monotonic()
        self.pool = ThreadPoolExecutor(concurrency)
        self.futures = [self.pool.submit(self._client, i) for i in range(concurrency)]

    def _client(self, first: int) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as client:
            i = first
            while not self.stopping.is_set():
                body = self.bodies[i % len(self.bodies)]
                try:
                    r = client.post("/v1/translate", json=body)
                    answer = (r.headers.get("x-lsmt-replica", ""), r.status_code)
                except httpx.TransportError:
                    answer = ("", 0)
                self.answers.append((time.monotonic() - self.t0, *answer))
                i += self.concurrency

    def now(self) -> float:
        return time.monotonic() - self.t0

    def stop(self) -> None:
        self.stopping.set()
        for f in self.futures:
            f.result()
        self.pool.shutdown()


def shares_by_bucket(answers: list[tuple[float, str, int]], bucket: float) -> list[dict[str, Any]]:
    """Per bucket of ``bucket`` seconds: requests, errors, each replica's share. A request
    that two replicas decoded for (``X-LSMT-Replica: A,B``: its output checks' retry went to
    the other one) counts half for each."""
    rows = []
    end = max((t for t, _, _ in answers), default=0.0)
    start = 0.0
    while start < end:
        inside = [(r, s) for t, r, s in answers if start <= t < start + bucket]
        ok: Counter[str] = Counter()
        for replicas, status in inside:
            if status == 200:
                names = replicas.split(",")
                ok.update({name: 1 / len(names) for name in names})
        total = sum(ok.values())
        rows.append(
            {
                "t_end_s": start + bucket,
                "requests": len(inside),
                "errors": sum(s != 200 for _, s in inside),
                "shares": {r: n / total for r, n in sorted(ok.items())} if total else {},
            }
        )
        start += bucket
    return rows


def alive_translators() -> dict[str, str]:
    """Each live translator replica (``Translator#id``) -> the id of the node it runs on, from
    the GCS's actor table (Ray's state API needs the dashboard, which is not started)."""
    import ray

    actors = ray._private.state.actors()  # type: ignore[attr-defined]
    prefix = f"SERVE_REPLICA::{APP}#"
    return {
        a["Name"].removeprefix(prefix): a["Address"]["NodeID"]
        for a in actors.values()
        if a["State"] == "ALIVE" and (a.get("Name") or "").startswith(f"{prefix}Translator#")
    }


def engine_loads(url: str) -> float:
    """Engine loads summed over the translators, departed ones included (their counters stay
    in the cluster's /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "lsmt_engine_loads_total"
    )


def measure_arm(
    args: argparse.Namespace, arm: str, bodies: list[dict[str, Any]], port: int, budget: int
) -> dict[str, Any]:
    import ray
    from ray import serve

    from server.cluster import build_app

    settings = {
        "bundles": [str(args.bundle)],
        "device": "cpu",
        "device_budget_bytes": budget,
        "warmup_routes": [],
    }
    window = args.window if arm == "balance" else 1e9
    app = build_app(
        {
            "settings": settings,
            "translators": 2,
            "translator_cpus": args.translator_cpus,
            "balance_window_s": window,
        }
    )
    serve.run(app, name=APP, route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    time.sleep(METRICS_REPORT_WAIT_S)  # the translators' sizing loads are not the traffic's
    loads_at_start = engine_loads(url)
    traffic = Traffic(url, bodies, args.concurrency)
    try:
        time.sleep(args.before)
        served = Counter(r for _, r, s in traffic.answers if s == 200)
        victim = served.most_common(1)[0][0]
        actor = ray.get_actor(f"SERVE_REPLICA::{APP}#{victim}", namespace="serve")
        killed_at = traffic.now()
        ray.kill(actor, no_restart=True)
        replaced_at = None
        while traffic.now() < killed_at + args.after:
            alive = alive_translators()
            if replaced_at is None and len(alive) == 2 and victim not in alive:
                replaced_at = traffic.now()
            time.sleep(0.5)
    finally:
        traffic.stop()
    try:
        time.sleep(METRICS_REPORT_WAIT_S)  # every replica's last report is in the view
        loads = engine_loads(url) - loads_at_start
    finally:
        serve.delete(APP)
    buckets = shares_by_bucket(traffic.answers, args.bucket)
    aim_end = (replaced_at or killed_at) + AIM_AFTER_S
    judged = [b for b in buckets if b["t_end_s"] <= aim_end and b["shares"]]
    busiest = max(judged[-1]["shares"].values()) if judged else None
    return {
        "arm": arm,
        "victim": victim,
        "killed_at_s": killed_at,
        "replaced_at_s": replaced_at,
        "requests": len(traffic.answers),
        "requests_per_s": len(traffic.answers) / traffic.answers[-1][0],
        "engine_loads": loads,
        "errors": sum(s != 200 for _, _, s in traffic.answers),
        "busiest_share_at_aim": busiest,
        "aim_bucket_end_s": judged[-1]["t_end_s"] if judged else None,
        "buckets": buckets,
    }


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(5 * len(rows), 3.5), squeeze=False)
    for ax, row in zip(axes[0], rows, strict=True):
        ts = [b["t_end_s"] for b in row["buckets"]]
        busiest = [max(b["shares"].values()) if b["shares"] else None for b in row["buckets"]]
        ax.step(ts, busiest, where="post", label="busiest replica's share")
        ax.axvline(row["killed_at_s"], color="C3", linestyle="--", label="kill")
        if row["replaced_at_s"] is not None:
            ax.axvline(row["replaced_at_s"], color="C2", linestyle=":", label="replacement up")
        ax.axhline(0.6, color="grey", linewidth=0.8, label="60 %")
        ax.set_ylim(0.4, 1.02)
        ax.set_xlabel("seconds")
        ax.set_title(row["arm"])
    axes[0][0].set_ylabel("share of requests")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "cluster_replace.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from server.bundles import load_served_bundle

    args = parse_args(argv)
    served = load_served_bundle(args.bundle)
    ranked = list(
        dict.fromkeys(zipf_routes([tuple(r) for r in served.routes], 10_000, 1.1, args.seed))
    )
    routes = ranked[: args.routes]
    texts = {src: sentences(src) for src, _ in routes}
    bodies = [
        {"text": texts[src][i], "source": src, "target": tgt}
        for i in range(50)
        for src, tgt in routes
    ]
    budget = replica_budget(served, args.engines_per_replica)
    port = _free_port()
    rows = []
    with local_serve(port):
        for arm in args.arms:
            row = measure_arm(args, arm, bodies, port, budget)
            rows.append(row)
            print(
                f"{arm}: killed {row['victim']} at {row['killed_at_s']:.0f} s, two translators "
                f"again at {row['replaced_at_s'] or float('nan'):.0f} s; busiest share "
                f"{row['busiest_share_at_aim']} in the bucket ending {row['aim_bucket_end_s']} "
                f"s; {row['errors']} errors of {row['requests']} ({row['requests_per_s']:.1f}/s), "
                f"{row['engine_loads']:.0f} engine loads",
                flush=True,
            )
    settings = {k: str(v) for k, v in vars(args).items()}
    result = {
        "settings": {**settings, "budget_bytes": budget, "routes": ["-".join(r) for r in routes]},
        "rows": rows,
    }
    flat = [
        {
            "arm": row["arm"],
            "t_end_s": b["t_end_s"],
            "requests": b["requests"],
            "errors": b["errors"],
            "busiest_share": max(b["shares"].values(), default=None),
        }
        for row in rows
        for b in row["buckets"]
    ]
    write_results(args.out, result, flat, name="cluster_replace")
    plot(rows, args.out)
    return result


if __name__ == "__main__":
    main()
