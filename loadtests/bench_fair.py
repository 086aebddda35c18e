"""Fair share under mixed load: one-sentence requests alone and beside heavy clients, with
the batches filled in arrival order (``fifo``), round-robin across clients (``fair``), or
round-robin with an express lane for short requests (``LSMT_EXPRESS_BATCH_SIZE``,
``--express``): as the server runs it on a CPU, the documents' batches on a niced bulk twin
opened while they overlap short requests (``express``, ``LSMT_BULK_NICE``, server/bulk_twin.py),
or one translator with a worker more for everything (``express-shared``, ``LSMT_BULK_NICE=0``).

    python -m loadtests.bench_fair [--bundle models/default] [--route en-es] [--heavy 8]
                                   [--small 20] [--rounds 2] [--express 1] [--small-rate R]
                                   [--out runs/bench_fair] [--quick]

For each round and policy (policies alternate, so all see the same machine state) a real
``python -m server`` serves the bundle with one API key per client; then:

- alone: ``--small`` one-sentence requests, one after the other;
- beside: ``--heavy`` clients each keep one request of 16 paragraphs (16 texts of four
  NTREX-128 news sentences each) in flight, and the same one-sentence requests are sent among
  them for ``--window`` seconds: one after the other (at least ``--small`` of them), or with
  ``--small-rate R`` R a second, each on time (open loop: every policy gets the same small
  traffic); the heavy clients' translated sentences per second are counted over the window.

Printed and saved (JSON, CSV, PNG): per policy the p50/p95 latency of the small requests alone
and beside the heavy ones, their ratio (issue 27's aim: within 3x of alone), and the heavy
throughput, with the ratios of each policy to fifo measured side by side in the run; and where
the small requests' time went beside the heavy ones (their ``Server-Timing`` stages, median and
over the slowest 5 %, and the time outside the server).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from server.settings import Settings
from server.timing import parse_server_timing

from .results import write_results
from .server_process import ROOT, ServerProcess
from .timings import SPLIT, Sample, percentile, stage_split

NTREX = ROOT / "lsmt_text" / "data" / "ntrex128" / "newstest2019-src.eng.txt"
POLICIES = ("fifo", "fair", "express-shared", "express")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_fair", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--route", default="en-es")
    p.add_argument("--heavy", type=int, default=8, help="heavy clients beside the small ones")
    p.add_argument("--small", type=int, default=20, help="small requests per measurement")
    p.add_argument("--rounds", type=int, default=2, help="rounds of every policy")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_fair")
    p.add_argument("--paragraphs", type=int, default=16, help="paragraphs per heavy request")
    p.add_argument(
        "--window", type=float, default=30.0, help="seconds the small requests run beside"
    )
    p.add_argument(
        "--max-batch-size", type=int, default=None, help="the server's LSMT_MAX_BATCH_SIZE"
    )
    p.add_argument(
        "--express", type=int, default=1, help="the express policy's LSMT_EXPRESS_BATCH_SIZE"
    )
    p.add_argument(
        "--bulk-nice",
        type=int,
        default=Settings.model_fields["bulk_nice"].default,
        help="the express policy's LSMT_BULK_NICE",
    )
    p.add_argument(
        "--small-rate",
        type=float,
        default=0.0,
        help="small requests per second beside the heavy ones, sent on time (open loop); "
        "0: one after the other (closed loop: a policy that answers faster sends more)",
    )
    p.add_argument(
        "--quick", action="store_true", help="2 heavy clients of 2 paragraphs, 4 small, 1 round"
    )
    args = p.parse_args(argv)
    if args.quick:
        args.heavy, args.small, args.rounds, args.paragraphs, args.window = 2, 4, 1, 2, 1.0
    return args


def documents(n: int, paragraphs: int, sentences: int = 4) -> list[list[str]]:
    """``n`` heavy requests, each ``paragraphs`` texts of ``sentences`` real news sentences."""
    lines = [line.strip() for line in NTREX.read_text(encoding="utf-8").splitlines() if line]
    per_doc = paragraphs * sentences
    docs = []
    for i in range(n):
        chunk = [lines[(i * per_doc + k) % len(lines)] for k in range(per_doc)]
        docs.append([" ".join(chunk[p : p + sentences]) for p in range(0, per_doc, sentences)])
    return docs


class HeavyClients:
    """One thread per body (a list of texts), each sending it again as soon as it is answered,
    until stopped; counts the sentences translated (the server's own split of each text)."""

    def __init__(self, url: str, bodies: list[dict], keys: list[str]) -> None:
        from server.text import sentences_of, split_text

        self.stop = threading.Event()
        self.sentences = 0
        self.errors = 0
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(url, body, key, n), daemon=True)
            for body, key, n in zip(
                bodies,
                keys,
                [
                    sum(len(sentences_of(split_text(t, b["source"]))) for t in b["text"])
                    for b in bodies
                ],
                strict=True,
            )
        ]

    def _run(self, url: str, body: dict, key: str, sentences: int) -> None:
        with httpx.Client(base_url=url, timeout=600, headers={"X-API-Key": key}) as client:
            while not self.stop.is_set():
                r = client.post("/v1/translate", json=body)
                with self.lock:
                    if r.status_code == 200:
                        self.sentences += sentences
                    else:
                        self.errors += 1

    def __enter__(self) -> HeavyClients:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def _sample(client: httpx.Client, body: dict) -> Sample:
    t0 = time.perf_counter()
    r = client.post("/v1/translate", json=body)
    seconds = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"small request answered {r.status_code}: {r.text[:200]}")
    return Sample(seconds, parse_server_timing(r.headers.get("server-timing", "")))


def small_samples(url: str, body: dict, n: int, key: str, window_s: float = 0.0) -> list[Sample]:
    """One-sentence requests one after the other: at least ``n``, and until ``window_s`` has
    passed."""
    out: list[Sample] = []
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600, headers={"X-API-Key": key}) as client:
        while len(out) < n or time.perf_counter() - started < window_s:
            out.append(_sample(client, body))
    return out


def paced_samples(url: str, body: dict, rate: float, window_s: float, key: str) -> list[Sample]:
    """One-sentence requests sent at ``rate`` per second for ``window_s``, each on time
    whether or not the ones before were answered (an open loop: every policy gets the same
    small traffic, however fast it answers)."""
    n = max(1, round(rate * window_s))
    limits = httpx.Limits(max_connections=n)
    with (
        httpx.Client(base_url=url, timeout=600, headers={"X-API-Key": key}, limits=limits) as c,
        ThreadPoolExecutor(n) as pool,
    ):
        start = time.perf_counter()
        futures = []
        for i in range(n):
            time.sleep(max(0.0, start + i / rate - time.perf_counter()))
            futures.append(pool.submit(_sample, c, body))
        return [f.result() for f in futures]


def measure_policy(args: argparse.Namespace, policy: str) -> dict:
    """Alone, then beside the heavy clients, on a fresh server with ``policy``."""
    src, tgt = args.route.split("-")
    keys = [f"heavy-{i}" for i in range(args.heavy)] + ["small"]
    env = {
        "LSMT_BATCH_POLICY": "fifo" if policy == "fifo" else "fair",
        "LSMT_EXPRESS_BATCH_SIZE": str(args.express if policy.startswith("express") else 0),
        "LSMT_BULK_NICE": "0" if policy == "express-shared" else str(args.bulk_nice),
        "LSMT_API_KEYS": ",".join(keys),
        "LSMT_WARMUP_ROUTES": args.route,
        "LSMT_QUEUE_SIZE": "1024",
        "LSMT_REQUEST_TIMEOUT_S": "600",
    }
    if args.max_batch_size is not None:
        env["LSMT_MAX_BATCH_SIZE"] = str(args.max_batch_size)
    small = {"text": "The meeting starts at nine tomorrow morning.", "source": src, "target": tgt}
    heavy = [
        {"text": d, "source": src, "target": tgt} for d in documents(args.heavy, args.paragraphs)
    ]
    with ServerProcess([args.bundle], env) as server:
        small_samples(server.url, small, 2, "small")  # warm
        alone = [x.seconds for x in small_samples(server.url, small, args.small, "small")]
        with HeavyClients(server.url, heavy, keys[:-1]) as clients:
            time.sleep(2.0)  # every heavy client has a request in flight
            start, before = time.perf_counter(), clients.sentences
            if args.small_rate:
                samples = paced_samples(server.url, small, args.small_rate, args.window, "small")
            else:
                samples = small_samples(server.url, small, args.small, "small", args.window)
            window = time.perf_counter() - start
            throughput = (clients.sentences - before) / window
        errors = clients.errors
    if errors or throughput == 0:
        raise RuntimeError(
            f"{policy}: the heavy clients got {errors} errors and no answer in the window: "
            "the measurement would mean nothing"
        )
    beside = [x.seconds for x in samples]
    return {
        "policy": policy,
        "alone_p50_s": statistics.median(alone),
        "alone_p95_s": percentile(alone, 0.95),
        "beside_p50_s": statistics.median(beside),
        "beside_p95_s": percentile(beside, 0.95),
        "p95_beside_over_alone": percentile(beside, 0.95) / percentile(alone, 0.95),
        "heavy_sentences_per_s": throughput,
        "heavy_errors": errors,
        "window_s": window,
        "small_requests_beside": len(beside),
        **{f"beside_{k}": v for k, v in stage_split(samples).items()},
    }


def summarize(rows: list[dict]) -> dict:
    """Medians over rounds per policy, and each policy / fifo."""
    by = {p: [r for r in rows if r["policy"] == p] for p in POLICIES}
    med = {p: {k: statistics.median(r[k] for r in by[p]) for k in rows[0] if k != "policy"}
           for p in POLICIES}  # fmt: skip
    return {
        "per_policy": med,
        "over_fifo": {
            p: {
                "small_p95_beside": med[p]["beside_p95_s"] / med["fifo"]["beside_p95_s"],
                "heavy_throughput": med[p]["heavy_sentences_per_s"]
                / med["fifo"]["heavy_sentences_per_s"],
            }
            for p in POLICIES[1:]
        },
    }


def plot(summary: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    med = summary["per_policy"]
    x = range(len(POLICIES))
    left.bar([i - 0.2 for i in x], [med[p]["alone_p95_s"] for p in POLICIES], 0.4, label="alone")
    left.bar([i + 0.2 for i in x], [med[p]["beside_p95_s"] for p in POLICIES], 0.4,
             label="beside heavy clients")  # fmt: skip
    left.axhline(3 * min(med[p]["alone_p95_s"] for p in POLICIES), color="grey", ls="--",
                 lw=1, label="3x alone (aim)")  # fmt: skip
    left.set_xticks(list(x), POLICIES)
    left.set_ylabel("p95 latency of one sentence (s)")
    left.set_yscale("log")
    left.legend()
    right.bar(list(x), [med[p]["heavy_sentences_per_s"] for p in POLICIES])
    right.set_xticks(list(x), POLICIES)
    right.set_ylabel("heavy clients: sentences/s")
    fig.tight_layout()
    path = out / "fair_share.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    rows = []
    for r in range(args.rounds):
        for policy in POLICIES[r % len(POLICIES) :] + POLICIES[: r % len(POLICIES)]:
            row = {"round": r, **measure_policy(args, policy)}
            rows.append(row)
            print(
                f"round {r} {policy}: one sentence p95 alone {row['alone_p95_s'] * 1000:.0f} ms, "
                f"beside {args.heavy} heavy {row['beside_p95_s'] * 1000:.0f} ms "
                f"({row['p95_beside_over_alone']:.1f}x); heavy {row['heavy_sentences_per_s']:.1f} "
                "sentences/s",
                flush=True,
            )
            ms = {k: v * 1000 for k, v in row.items() if k.startswith("beside_")}
            split = ", ".join(
                f"{k} {ms[f'beside_median_{k}_s']:.0f}/{ms[f'beside_tail_{k}_s']:.0f}"
                for k in SPLIT
            )
            print(f"  small beside heavy, ms median/slowest 5 %: {split}", flush=True)
    summary = summarize([{k: v for k, v in row.items() if k != "round"} for row in rows])
    result = {"settings": {k: str(v) for k, v in vars(args).items()}, "rows": rows, **summary}
    write_results(args.out, result, rows, name="fair_share")
    plot(summary, args.out)
    for policy, ratios in summary["over_fifo"].items():
        print(
            f"{policy} / fifo: small p95 beside heavy {ratios['small_p95_beside']:.2f}x, "
            f"heavy throughput {ratios['heavy_throughput']:.2f}x"
        )
    print(f"-> {args.out}")
    return result


if __name__ == "__main__":
    main()
