"""Locust latency runs: start the server (or target ``--url``), run locust headless, report.

    python -m loadtests.run [BUNDLE ...] [--users 16] [--duration 60s] [--out runs/locust]
    python -m loadtests.run --step --p95-target-ms 1000 [--step-users 1,2,4,8,16,32]
    python -m loadtests.run --url http://127.0.0.1:8000 ...

Traffic (loadtests/locustfile.py): sentences of the corpus's held-out test split
(``--corpus``, default data/default_mixed/corpus, the default model's; without a built corpus,
the committed NTREX-128 news sentences),
every route of the server with Zipf-like popularity, single texts and small lists, some
``auto`` sources. The server it starts gets a small engine budget (``--device-budget-mb``)
so that lazy loading and eviction happen under load.

Writes into ``--out``: locust's CSVs (``<name>_stats.csv``, ``_stats_history.csv``,
``_failures.csv``, ``_exceptions.csv``), ``summary.json`` (requests/s, p50/p95/p99,
failures, the server's engine loads and evictions, the machine) and ``latency.png`` /
``throughput.png`` over time; in step mode one run per user count and ``steps.png``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from .server_process import ROOT, ServerProcess, metric_sum

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
MAX_CHARS = 300  # longer verses make a few requests far slower than the rest
# the default model's corpus (make default-model builds it)
DEFAULT_CORPUS = ROOT / "data" / "default_mixed" / "corpus"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bundles", nargs="*", type=Path, help="bundles to serve (default: default)")
    p.add_argument("--url", help="target a running server instead of starting one")
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--spawn-rate", type=float, default=8.0)
    p.add_argument("--duration", default="60s", help="locust's --run-time (e.g. 60s, 2m)")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--split", default="test", help="corpus split of the sentences")
    p.add_argument("--per-language", type=int, default=300, help="sentences per language")
    p.add_argument("--zipf", type=float, default=1.0, help="route popularity exponent")
    p.add_argument("--auto", type=float, default=0.1, help="share of requests with auto")
    p.add_argument("--beam", type=int, help="beam size (default: the server's)")
    p.add_argument(
        "--device-budget-mb",
        type=float,
        default=96.0,
        help="engine budget of the started server (default 96: about 8 of the default "
        "model's 30 engines of 11 MB, so routes get evicted)",
    )
    p.add_argument(
        "--server-env", action="append", default=[], metavar="LSMT_X=V", help="repeatable"
    )
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "locust")
    p.add_argument("--step", action="store_true", help="raise users until p95 > target")
    p.add_argument("--p95-target-ms", type=float, default=1000.0)
    p.add_argument("--step-users", default="1,2,4,8,16,32,64")
    p.add_argument("--step-duration", default="30s")
    return p.parse_args(argv)


# Traffic ------------------------------------------------------------------------------------


def corpus_sentences(corpus: Path, split: str, per_language: int) -> dict[str, list[str]]:
    """Source-side sentences of a corpus split, per language (deduplicated, in file order)."""
    from lsmt_text.data.formats import directions, load_direction

    out: dict[str, dict[str, None]] = {}
    for src, tgt in directions(corpus, split):
        bucket = out.setdefault(src, {})
        for s, _ in load_direction(corpus, split, src, tgt):
            if len(bucket) < per_language and len(s) <= MAX_CHARS:
                bucket[s] = None
    return {lang: list(s) for lang, s in sorted(out.items()) if s}


def traffic_sentences(
    corpus: Path, split: str, per_language: int
) -> tuple[dict[str, list[str]], str]:
    """Source sentences per language for the load, and where they come from: the corpus
    split's when one was built, else NTREX-128's news sentences (committed), so that a fresh
    clone runs without building a corpus."""
    if (corpus / split).is_dir():
        return corpus_sentences(corpus, split, per_language), f"{corpus} ({split} split)"
    from lsmt_text.data.testsets import NTREX_FILES, ntrex_lines

    print(f"no corpus split at {corpus / split}: NTREX-128 news sentences instead")
    sentences = {
        lang: [s for s in ntrex_lines(lang) if len(s) <= MAX_CHARS][:per_language]
        for lang in sorted(NTREX_FILES)
    }
    return sentences, "NTREX-128 (lsmt_text/data/ntrex128)"


def write_traffic(args: argparse.Namespace, out: Path) -> dict:
    """The locustfile's environment, with the sentences in ``out/traffic.json``."""
    env = {
        "LSMT_LOCUST_ZIPF": str(args.zipf),
        "LSMT_LOCUST_AUTO": str(args.auto),
    }
    if args.beam:
        env["LSMT_LOCUST_BEAM"] = str(args.beam)
    sentences, source = traffic_sentences(args.corpus, args.split, args.per_language)
    path = out / "traffic.json"
    path.write_text(json.dumps({"sentences": sentences}, ensure_ascii=False) + "\n")
    env["LSMT_LOCUST_TRAFFIC"] = str(path)
    counts = {k: len(v) for k, v in sentences.items()}
    return {"env": env, "sentences": source, "sentences_per_language": counts}


# Locust -------------------------------------------------------------------------------------


def run_locust(url: str, users: int, rate: float, duration: str, prefix: Path, env: dict) -> None:
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--users",
        str(users),
        "--spawn-rate",
        str(rate),
        "--run-time",
        duration,
        "--host",
        url,
        "--csv",
        str(prefix),
        "--csv-full-history",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--stop-timeout",
        "30",
    ]
    print(f"locust: {users} users for {duration} -> {prefix}_*.csv", flush=True)
    # Locust exits 1 when any request failed: that is a result (in the CSVs), not an error.
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env})
    if not Path(f"{prefix}_stats.csv").is_file():
        raise SystemExit(f"locust wrote no statistics (exit status {done.returncode})")


def _number(value: str) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_stats(prefix: Path) -> dict:
    """The aggregated row and each request name of ``<prefix>_stats.csv``."""
    with open(f"{prefix}_stats.csv", newline="") as f:
        rows = list(csv.DictReader(f))

    def summary(row: dict) -> dict:
        n = int(row["Request Count"])
        fails = int(row["Failure Count"])
        return {
            "requests": n,
            "failures": fails,
            "failure_ratio": fails / n if n else 0.0,
            "requests_per_s": _number(row["Requests/s"]),
            "p50_ms": _number(row["50%"]),
            "p95_ms": _number(row["95%"]),
            "p99_ms": _number(row["99%"]),
            "mean_ms": _number(row["Average Response Time"]),
        }

    agg = next(r for r in rows if r["Name"] == "Aggregated")
    return {
        **summary(agg),
        "by_name": {r["Name"]: summary(r) for r in rows if r["Name"] != "Aggregated"},
    }


def read_history(prefix: Path) -> list[dict]:
    """Aggregated rows of ``<prefix>_stats_history.csv``: time, users, rps, percentiles."""
    out = []
    with open(f"{prefix}_stats_history.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["Name"] != "Aggregated":
                continue
            out.append(
                {
                    "t": int(r["Timestamp"]),
                    "users": int(r["User Count"]),
                    "rps": _number(r["Requests/s"]) or 0.0,
                    "fails_per_s": _number(r["Failures/s"]) or 0.0,
                    **{f"p{q}": _number(r[f"{q}%"]) for q in (50, 95, 99)},
                }
            )
    return out


def server_counters(url: str) -> dict:
    names = {
        "engine_loads": "lsmt_engine_loads_total",
        "engine_evictions": "lsmt_engine_evictions_total",
        "engine_load_failures": "lsmt_engine_load_failures_total",
        "rejected_requests": "lsmt_rejected_requests_total",
        "batches": "lsmt_batch_size_count",
        "sentences": "lsmt_batch_size_sum",
    }
    try:
        return {k: metric_sum(url, v) for k, v in names.items()}
    except Exception as exc:  # a server behind a proxy may not expose /metrics
        return {"error": str(exc)}


# Plots --------------------------------------------------------------------------------------


def plot_history(history: list[dict], out: Path, title: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return []
    t0 = history[0]["t"]
    t = [h["t"] - t0 for h in history]
    fig, ax = plt.subplots(figsize=(8, 4))
    for q, style in ((50, "-"), (95, "--"), (99, ":")):
        ax.plot(t, [h[f"p{q}"] for h in history], style, label=f"p{q}")
    ax.set_xlabel("seconds")
    ax.set_ylabel("response time (ms, rolling window)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(t, [h["rps"] for h in history], label="requests/s")
    ax.plot(t, [h["fails_per_s"] for h in history], label="failures/s")
    ax.set_xlabel("seconds")
    ax.set_ylabel("per second")
    users = ax.twinx()
    users.plot(t, [h["users"] for h in history], color="grey", alpha=0.5, label="users")
    users.set_ylabel("users")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)
    return ["latency.png", "throughput.png"]


def plot_steps(steps: list[dict], target_ms: float, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([s["requests_per_s"] for s in steps], [s["p95_ms"] for s in steps], "o-")
    for s in steps:
        ax.annotate(f"{s['users']}u", (s["requests_per_s"], s["p95_ms"]), fontsize=8)
    ax.axhline(target_ms, color="red", linestyle="--", label=f"p95 target {target_ms:g} ms")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p95 (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "steps.png", dpi=110)
    plt.close(fig)
    return ["steps.png"]


# Main ---------------------------------------------------------------------------------------


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    traffic = write_traffic(args, args.out)
    server = None
    if args.url:
        url = args.url.rstrip("/")
    else:
        env = {
            "LSMT_DEVICE_BUDGET_BYTES": str(int(args.device_budget_mb * (1 << 20))),
            **dict(kv.split("=", 1) for kv in args.server_env),
        }
        server = ServerProcess(args.bundles, env).__enter__()
        url = server.url
    try:
        before = server_counters(url)
        result: dict = {
            "command": "python -m loadtests.run " + " ".join(argv or sys.argv[1:]),
            "machine": machine(),
            "url": url if args.url else "started: python -m server",
            "bundles": [str(b) for b in args.bundles] or ["default"],
            "traffic": {k: v for k, v in traffic.items() if k != "env"}
            | {"zipf": args.zipf, "auto_share": args.auto, "beam": args.beam},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if args.step:
            result |= step_mode(args, url, traffic["env"])
        else:
            prefix = args.out / "locust"
            run_locust(url, args.users, args.spawn_rate, args.duration, prefix, traffic["env"])
            result |= {"users": args.users, "duration": args.duration, **read_stats(prefix)}
            title = f"{args.users} users, {args.duration}"
            result["plots"] = plot_history(read_history(prefix), args.out, title)
        after = server_counters(url)
        if "error" not in before and "error" not in after:
            result["server"] = {k: after[k] - before[k] for k in after}
    finally:
        if server is not None:
            server.stop()
    (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    _print(result, args)
    return result


def step_mode(args: argparse.Namespace, url: str, env: dict) -> dict:
    steps = []
    for users in [int(u) for u in args.step_users.split(",")]:
        prefix = args.out / f"step_u{users}"
        run_locust(url, users, max(users, 1), args.step_duration, prefix, env)
        stats = read_stats(prefix)
        steps.append({"users": users, **{k: v for k, v in stats.items() if k != "by_name"}})
        print(
            f"  {users} users: {stats['requests_per_s']:.2f} req/s, "
            f"p95 {stats['p95_ms']} ms, failures {stats['failures']}",
            flush=True,
        )
        if stats["p95_ms"] is not None and stats["p95_ms"] > args.p95_target_ms:
            break
    under = [s for s in steps if s["p95_ms"] is not None and s["p95_ms"] <= args.p95_target_ms]
    best = max(under, key=lambda s: s["requests_per_s"] or 0.0) if under else None
    crossed = next((s for s in steps if s not in under), None)
    return {
        "mode": "step",
        "p95_target_ms": args.p95_target_ms,
        "step_duration": args.step_duration,
        "steps": steps,
        "throughput_at_target": best and {k: best[k] for k in ("users", "requests_per_s")},
        "crossed_at_users": crossed and crossed["users"],
        "plots": plot_steps(steps, args.p95_target_ms, args.out),
    }


def _print(result: dict, args: argparse.Namespace) -> None:
    if result.get("mode") == "step":
        best = result["throughput_at_target"]
        print(
            f"p95 target {args.p95_target_ms:g} ms: "
            + (
                f"{best['requests_per_s']:.2f} req/s at {best['users']} users"
                if best
                else "missed at every step"
            )
            + (
                f"; crossed at {result['crossed_at_users']} users"
                if result["crossed_at_users"]
                else "; not crossed"
            )
        )
    else:
        print(
            f"{result['requests']} requests, {result['failures']} failures, "
            f"{result['requests_per_s']:.2f} req/s, p50 {result['p50_ms']} ms, "
            f"p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms"
        )
    if "server" in result:
        s = result["server"]
        loads, evictions = s["engine_loads"], s["engine_evictions"]
        print(f"server: {loads:.0f} engine loads, {evictions:.0f} evictions")
    print(f"wrote {args.out}/summary.json")


if __name__ == "__main__":
    main()
