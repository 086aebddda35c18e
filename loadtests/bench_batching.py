"""Dynamic batching benchmark: concurrent single-sentence requests vs one direct translate_batch.

Side by side in one run, interleaved per repeat (these machines are noisy):

- ``direct``: one ``translate_batch`` call on all N sentences, in this process, with an engine
  built exactly as the server builds it (same loader, compute type and threads);
- ``server_concurrent``: N single-sentence ``POST /v1/translate`` requests sent at once to a
  real server (``python -m server`` in a subprocess) -> dynamic batching;
- ``server_sequential``: the same N requests one after another (no batching possible).

Also measured: one request on a cold route (assemble + load + translate) and on a warm one.

    python loadtests/bench_batching.py BUNDLE_DIR [--route en-de] [--n 32] [--repeats 5]
        [--beam 1] [--sentences FILE] [--out runs/bench_batching] [--env LSMT_BATCH_WAIT_MS=0]

Writes ``results.json``, ``results.csv`` and ``results.png`` into ``--out`` and prints a table.
Absolute times only mean something together with the machine, which is recorded in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# King James Version (public domain), Matthew 4-5: short, real English sentences.
SENTENCES_EN = [
    "And Jesus said unto them, Follow me.",
    "And they straightway left their nets, and followed him.",
    "And he went up into a mountain.",
    "Blessed are the meek: for they shall inherit the earth.",
    "Blessed are the merciful: for they shall obtain mercy.",
    "Blessed are the pure in heart: for they shall see God.",
    "Ye are the salt of the earth.",
    "Ye are the light of the world.",
    "A city that is set on an hill cannot be hid.",
    "Let your light so shine before men.",
    "Thou shalt not kill.",
    "Agree with thine adversary quickly.",
    "Give to him that asketh thee.",
    "Love your enemies, bless them that curse you.",
    "And when he was set, his disciples came unto him.",
    "And he opened his mouth, and taught them, saying.",
    "Then Jesus was led up of the spirit into the wilderness.",
    "And when he had fasted forty days and forty nights, he was afterward an hungred.",
    "Man shall not live by bread alone.",
    "Thou shalt not tempt the Lord thy God.",
    "Then the devil leaveth him.",
    "And angels came and ministered unto him.",
    "Repent: for the kingdom of heaven is at hand.",
    "And Jesus went about all Galilee, teaching in their synagogues.",
    "And his fame went throughout all Syria.",
    "And there followed him great multitudes of people.",
    "Blessed are they that mourn: for they shall be comforted.",
    "Blessed are the peacemakers.",
    "Rejoice, and be exceeding glad.",
    "Swear not at all.",
    "Be ye therefore perfect.",
    "He maketh his sun to rise on the evil and on the good.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, bundle: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "server",
                str(bundle),
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env={**os.environ, **env},
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise SystemExit("server did not become ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def metric_sum(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(name + " ") or line.startswith(name + "{")
    )


async def _open(port: int):
    return await asyncio.open_connection("127.0.0.1", port)


def _request_bytes(port: int, body: dict) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def _read_response(reader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(int(x.split(":", 1)[1]) for x in lines if x.lower().startswith("content-length"))
    return status, await reader.readexactly(length)


async def concurrent_requests(url: str, sentences: list[str], body: dict) -> float:
    """N requests at once over N open keep-alive connections. A minimal raw HTTP/1.1 client
    (httpx costs milliseconds of CPU per request, which on two cores would measure the
    client rather than the server)."""
    port = int(url.rsplit(":", 1)[1])
    conns = await asyncio.gather(*(_open(port) for _ in sentences))
    reqs = [_request_bytes(port, {**body, "text": s}) for s in sentences]
    t0 = time.perf_counter()
    for (_, writer), req in zip(conns, reqs, strict=True):
        writer.write(req)
    results = await asyncio.gather(*(_read_response(reader) for reader, _ in conns))
    dt = time.perf_counter() - t0
    for _, writer in conns:
        writer.close()
    bad = [status for status, _ in results if status != 200]
    if bad:
        raise SystemExit(f"server answered {bad}")
    return dt


def sequential_requests(url: str, sentences: list[str], body: dict) -> float:
    with httpx.Client(base_url=url, timeout=120) as client:
        client.get("/healthz")
        t0 = time.perf_counter()
        for s in sentences:
            r = client.post("/v1/translate", json={**body, "text": s})
            r.raise_for_status()
        return time.perf_counter() - t0


def single_request(url: str, body: dict) -> float:
    with httpx.Client(base_url=url, timeout=120) as client:
        client.get("/healthz")
        t0 = time.perf_counter()
        client.post("/v1/translate", json=body).raise_for_status()
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--route", default="en-de")
    ap.add_argument("--n", type=int, default=32, help="sentences (= concurrent requests)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--sentences", type=Path, help="one sentence per line (source language)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_batching")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="LSMT_X=V",
        help="server setting for the server process (repeatable)",
    )
    args = ap.parse_args()

    from server.__main__ import block_torch

    block_torch()
    from server.bundles import load_served_bundle
    from server.engines import default_loader
    from server.settings import Settings

    src, tgt = args.route.split("-")
    pool = args.sentences.read_text().splitlines() if args.sentences else SENTENCES_EN
    pool = [s.strip() for s in pool if s.strip()]
    if not args.sentences and src != "en":
        raise SystemExit("the built-in sentences are English; pass --sentences for " + src)
    sentences = [pool[i % len(pool)] for i in range(args.n)]
    body = {"source": src, "target": tgt, "beam_size": args.beam}
    settings = Settings(device="cpu")
    env = {
        "LSMT_DEVICE": "cpu",
        "LSMT_WARMUP_ROUTES": "[]",
        **dict(kv.split("=", 1) for kv in args.env),
    }

    # Cold vs warm: a fresh server, nothing loaded.
    server = ServerProcess(args.bundle, env)
    try:
        server.wait_ready()
        cold = single_request(server.url, {**body, "text": sentences[0]})
        warm = statistics.median(
            single_request(server.url, {**body, "text": sentences[i % len(sentences)]})
            for i in range(max(5, args.repeats))
        )

        # Direct engine, built as the server builds it.
        served = load_served_bundle(args.bundle)
        translator, nbytes = default_loader(served.bundle, src, tgt, settings)
        pieces = [served.encode(s, src, tgt) for s in sentences]
        translator.translate_batch(pieces[:2], beam_size=args.beam)  # warm

        rows = []
        batches0 = metric_sum(server.url, "lsmt_batch_size_count")
        for r in range(args.repeats):
            t0 = time.perf_counter()
            translator.translate_batch(
                pieces, beam_size=args.beam, max_decoding_length=256, max_input_length=0
            )
            direct = time.perf_counter() - t0
            conc = asyncio.run(concurrent_requests(server.url, sentences, body))
            seq = sequential_requests(server.url, sentences, body)
            rows.append(
                {
                    "repeat": r,
                    "direct_s": direct,
                    "server_concurrent_s": conc,
                    "server_sequential_s": seq,
                }
            )
            print(
                f"repeat {r}: direct {direct * 1000:.1f} ms, concurrent {conc * 1000:.1f} ms,"
                f" sequential {seq * 1000:.1f} ms",
                flush=True,
            )
        batches = metric_sum(server.url, "lsmt_batch_size_count") - batches0
    finally:
        server.stop()

    med = {
        k: statistics.median(r[k] for r in rows)
        for k in ("direct_s", "server_concurrent_s", "server_sequential_s")
    }
    # Each repeat sent n concurrent + n sequential requests; sequential ones are 1 batch each.
    conc_batches = (batches - args.repeats * args.n) / args.repeats
    result = {
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "device": "cpu",
            "compute_type": settings.resolved_compute_type,
            "inter_threads": settings.resolved_inter_threads,
            "intra_threads": settings.resolved_intra_threads,
        },
        "bundle": str(args.bundle),
        "route": args.route,
        "n": args.n,
        "beam": args.beam,
        "repeats": args.repeats,
        "engine_bytes": nbytes,
        "single_request_s": {"cold": cold, "warm_median": warm},
        "median_s": med,
        "ratios": {
            "concurrent_over_direct": med["server_concurrent_s"] / med["direct_s"],
            "sequential_over_concurrent": med["server_sequential_s"] / med["server_concurrent_s"],
        },
        "throughput_sentences_per_s": {k.replace("_s", ""): args.n / v for k, v in med.items()},
        "server_batches_per_concurrent_round": conc_batches,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    with open(args.out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    _plot(result, args.out / "results.png")

    print(
        f"\n{args.n} sentences, route {args.route}, beam {args.beam}, "
        f"{os.cpu_count()} CPU cores, {args.repeats} repeats (medians)"
    )
    print(f"{'mode':<22}{'time ms':>10}{'sent/s':>10}")
    for k, v in med.items():
        print(f"{k[:-2]:<22}{v * 1000:>10.1f}{args.n / v:>10.1f}")
    print(
        f"concurrent / direct = {result['ratios']['concurrent_over_direct']:.2f}x; "
        f"sequential / concurrent = {result['ratios']['sequential_over_concurrent']:.2f}x; "
        f"~{conc_batches:.1f} server batches per {args.n} concurrent requests"
    )
    print(f"single request: cold {cold * 1000:.1f} ms, warm {warm * 1000:.1f} ms")
    print(f"wrote {args.out}/results.json, results.csv, results.png")


def _plot(result: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    med = result["median_s"]
    labels = ["direct\ntranslate_batch", "server\nconcurrent", "server\nsequential"]
    values = [
        med["direct_s"] * 1000,
        med["server_concurrent_s"] * 1000,
        med["server_sequential_s"] * 1000,
    ]
    fig, ax = plt.subplots(figsize=(6, 4))
    bars = ax.bar(labels, values, color=["#888", "#2a7", "#c55"])
    ax.bar_label(bars, fmt="%.0f ms")
    ax.set_ylabel(f"time for {result['n']} sentences (ms, median)")
    ax.set_title(
        f"{result['route']}, beam {result['beam']}, {result['machine']['cpu_count']}-core CPU"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
