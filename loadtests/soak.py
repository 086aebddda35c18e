"""Soak run: a real server under mixed traffic for a long time, watched for leaks and drift.

    python -m loadtests.soak [--bundle models/default] [--duration 60m] [--max-requests N]
                             [--users 4] [--interval 60] [--warmup 10m]
                             [--device-budget-mb 96] [--out runs/soak]

It starts ``python -m server`` with a keys database (SQLite), an admin key and an engine budget
small enough that routes are evicted and loaded again, then ``--users`` threads send, until
``--duration`` or ``--max-requests`` (whichever comes first), a mix over every route of the
bundle (weights): one sentence on ``/v1/translate`` (6), a list of 2-4 texts (2),
LibreTranslate's ``/translate`` (1), an HTML document through ``/translate_file`` and its
download (1), and one sentence with a key limited to ``--limited-rpm`` requests a minute (1: its
429 answers are the limit working, counted apart). Half-way, ``POST /v1/admin/reload``. The
sentences are NTREX-128's (committed), at most 300 characters.

Every ``--interval`` seconds a sample: the server's RSS, threads and open file descriptors
(its process and children), the p50/p95 latency and the requests, errors and 429s of the
interval, and the engine loads and evictions so far (``/metrics``). The run passes when
there was no error (an answer other than 200, or 429 for the limited key; or no answer), the
limited key met its limit, engines were evicted, the reload answered 200, and, comparing the
last third of the samples after ``--warmup`` with the first third, the highest RSS, threads
and descriptors grew by at most ``--flat`` (5 %) and the median p95 by at most ``--drift``
(10 %). Saved: ``soak.json`` (settings, samples, checks),
``soak.csv`` (a line per sample) and ``soak.png``. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from loadtests.results import print_checks, write_results
from loadtests.run import MAX_CHARS
from loadtests.server_process import ROOT, ServerProcess, metric_sum
from loadtests.timings import percentile

MiB = 1 << 20
ADMIN_KEY = "soak-admin"
TASKS = {"sentence": 6, "list": 2, "libretranslate": 1, "document": 1, "limited": 1}
HTML = "<html><body><h1>{0}</h1><p>{1}</p><p>{2}</p></body></html>"


def duration_s(text: str) -> float:
    """``90``, ``90s``, ``20m`` or ``1h`` in seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    if text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--duration", type=duration_s, default=duration_s("60m"))
    p.add_argument("--max-requests", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=4, help="threads sending, one request at a time")
    p.add_argument("--interval", type=duration_s, default=60.0, help="seconds between samples")
    p.add_argument("--warmup", type=duration_s, default=duration_s("10m"))
    p.add_argument(
        "--device-budget-mb",
        type=float,
        default=96.0,
        help="engine budget (default 96: about 8 of the default model's 30 engines of 11 MB)",
    )
    p.add_argument("--limited-rpm", type=int, default=20, help="the limited key's requests/min")
    p.add_argument("--flat", type=float, default=0.05, help="growth allowed after the warm-up")
    p.add_argument("--drift", type=float, default=0.10, help="p95 drift allowed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "soak")
    args = p.parse_args(argv)
    if args.warmup + 3 * args.interval > args.duration:
        p.error("--duration must leave at least three samples after --warmup")
    return args


@dataclass
class Window:
    """What the users saw since the last sample."""

    latencies: list[float] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    limited: int = 0


class Traffic:
    """The users' shared state: the current window, the error log, the stop flag."""

    def __init__(self, url: str, keys: dict[str, str], routes: list, sentences: dict) -> None:
        self.url, self.keys, self.routes, self.sentences = url, keys, routes, sentences
        self.lock = threading.Lock()
        self.window = Window()
        self.total = 0
        self.errors: list[dict] = []
        self.stop = threading.Event()

    def take_window(self) -> Window:
        with self.lock:
            window, self.window = self.window, Window()
            return window

    def record(self, task: str, seconds: float, answer: httpx.Response | httpx.HTTPError) -> None:
        """Count an answer (a response, or the error of a request that got none)."""
        status = answer.status_code if isinstance(answer, httpx.Response) else None
        limited = task == "limited" and status == 429
        with self.lock:
            self.total += 1
            self.window.requests += 1
            if status == 200 or limited:
                self.window.limited += limited
                if task != "document":  # a document is two requests and many sentences
                    self.window.latencies.append(seconds)
                return
            self.window.errors += 1
            if len(self.errors) < 100:
                detail = answer.text if isinstance(answer, httpx.Response) else repr(answer)
                self.errors.append({"task": task, "status": status, "detail": detail[:300]})

    def user(self, seed: int, max_requests: int) -> None:
        rng = random.Random(seed)
        tasks, weights = zip(*TASKS.items(), strict=True)
        with httpx.Client(base_url=self.url, timeout=120) as client:
            while not self.stop.is_set() and self.total < max_requests:
                task = rng.choices(tasks, weights)[0]
                src, tgt = rng.choice(self.routes)
                t0 = time.perf_counter()
                answer: httpx.Response | httpx.HTTPError
                try:
                    answer = self.send(client, rng, task, src, tgt)
                except httpx.HTTPError as exc:
                    answer = exc
                self.record(task, time.perf_counter() - t0, answer)

    def send(
        self, client: httpx.Client, rng: random.Random, task: str, src: str, tgt: str
    ) -> httpx.Response:
        pick = lambda: rng.choice(self.sentences[src])  # noqa: E731
        auth = {"X-API-Key": self.keys["limited" if task == "limited" else "user"]}
        if task in ("sentence", "limited"):
            body = {"text": pick(), "source": src, "target": tgt}
            return client.post("/v1/translate", json=body, headers=auth)
        if task == "list":
            body = {"text": [pick() for _ in range(rng.randint(2, 4))], "source": src,
                    "target": tgt}  # fmt: skip
            return client.post("/v1/translate", json=body, headers=auth)
        if task == "libretranslate":
            body = {"q": pick(), "source": src, "target": tgt, "api_key": self.keys["user"]}
            return client.post("/translate", json=body)
        html = HTML.format(pick(), pick(), pick()).encode()
        r = client.post(
            "/translate_file",
            files={"file": ("page.html", html, "text/html")},
            data={"source": src, "target": tgt, "api_key": self.keys["user"]},
        )
        if r.status_code != 200:
            return r
        return client.get(r.json()["translatedFileUrl"])


def add_key(db: Path, name: str, *limits: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "server", "keys", "--db", str(db), "add", name, *limits],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    return out.split()[-1]


def sentences_for(languages: set[str]) -> dict[str, list[str]]:
    from lsmt_text.data.testsets import ntrex_lines

    return {lang: [s for s in ntrex_lines(lang) if len(s) <= MAX_CHARS] for lang in languages}


def process_sample(server: ServerProcess) -> dict:
    """RSS, threads and open descriptors of the server's process and its children."""
    import psutil

    root = psutil.Process(server.proc.pid)
    procs = [root, *root.children(recursive=True)]
    return {
        "server_rss": sum(p.memory_info().rss for p in procs),
        "threads": sum(p.num_threads() for p in procs),
        "open_fds": sum(p.num_fds() for p in procs),
    }


def soak(args: argparse.Namespace) -> dict:
    from lsmt_bundle.bundle import load_bundle

    routes = list(load_bundle(args.bundle).routes)
    sentences = sentences_for({lang for route in routes for lang in route})
    with tempfile.TemporaryDirectory(prefix="lsmt-soak-") as tmp:
        db = Path(tmp) / "keys.db"
        keys = {
            "user": add_key(db, "soak-user"),
            "limited": add_key(db, "soak-limited", "--requests-per-minute", str(args.limited_rpm)),
        }
        env = {
            "LSMT_KEYS_DB": str(db),
            "LSMT_ADMIN_KEYS": ADMIN_KEY,
            "LSMT_DEVICE_BUDGET_BYTES": str(int(args.device_budget_mb * MiB)),
            "LSMT_WARMUP_ROUTES": "[]",
        }
        with ServerProcess([args.bundle], env) as server:
            traffic = Traffic(server.url, keys, routes, sentences)
            samples, reload = run(server, traffic, args)
    return {
        "bundle": str(args.bundle),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "routes": len(routes),
        "requests": traffic.total,
        "reload": reload,
        "samples": samples,
        "errors": traffic.errors,
        "checks": judge(samples, reload, args),
    }


def run(server: ServerProcess, traffic: Traffic, args) -> tuple[list[dict], dict | None]:
    """The users until the duration or the request count is reached, a sample every
    interval, the reload half-way: (samples, the reload's outcome)."""
    users = [
        threading.Thread(target=traffic.user, args=(args.seed + i, args.max_requests), daemon=True)
        for i in range(args.users)
    ]
    started = time.monotonic()
    for u in users:
        u.start()
    samples: list[dict] = []
    reload = None
    while True:
        next_at = started + (len(samples) + 1) * args.interval
        time.sleep(max(0.0, next_at - time.monotonic()))
        elapsed = time.monotonic() - started
        if reload is None and elapsed >= args.duration / 2:
            reload = reload_bundles(server.url, elapsed)
        samples.append(sample(server, traffic.take_window(), elapsed))
        print(f"{elapsed:7.0f} s  {format_sample(samples[-1])}", flush=True)
        done = elapsed >= args.duration or traffic.total >= args.max_requests
        if done or not any(u.is_alive() for u in users):
            break
    traffic.stop.set()
    for u in users:
        u.join(timeout=150)
    # the requests in flight at the last sample count in it, so that none goes unjudged
    tail = traffic.take_window()
    for key in ("requests", "errors", "limited"):
        samples[-1][key] += getattr(tail, key)
    return samples, reload


def reload_bundles(url: str, elapsed: float) -> dict:
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/v1/admin/reload", headers={"X-API-Key": ADMIN_KEY}, timeout=300)
    seconds = round(time.perf_counter() - t0, 3)
    return {"at_s": round(elapsed, 1), "status": r.status_code, "seconds": seconds,
            "body": r.text[:500]}  # fmt: skip


def quantile_ms(seconds: list[float], q: float) -> float | None:
    return round(percentile(seconds, q) * 1000, 1) if seconds else None


def sample(server: ServerProcess, window: Window, elapsed: float) -> dict:
    return {
        "elapsed_s": round(elapsed, 1),
        "requests": window.requests,
        "errors": window.errors,
        "limited": window.limited,
        "p50_ms": quantile_ms(window.latencies, 0.5),
        "p95_ms": quantile_ms(window.latencies, 0.95),
        **process_sample(server),
        "engine_loads": metric_sum(server.url, "lsmt_engine_loads_total"),
        "engine_evictions": metric_sum(server.url, "lsmt_engine_evictions_total"),
    }


def format_sample(s: dict) -> str:
    return (
        f"{s['requests']:5d} requests, {s['errors']} errors, {s['limited']} limited, "
        f"p50 {s['p50_ms']} ms, p95 {s['p95_ms']} ms, RSS {s['server_rss'] / MiB:.0f} MiB, "
        f"{s['threads']} threads, {s['open_fds']} fds, {s['engine_evictions']:.0f} evictions"
    )


def judge(samples: list[dict], reload: dict | None, args: argparse.Namespace) -> list[dict]:
    """The pass/fail lines (see the module's docstring)."""
    errors = sum(s["errors"] for s in samples)
    checks = [
        {"check": "no errors", "passed": errors == 0,
         "detail": f"{errors} of {sum(s['requests'] for s in samples)} requests"},
        {"check": "the limited key was limited", "passed": sum(s["limited"] for s in samples) > 0,
         "detail": f"{sum(s['limited'] for s in samples)} answers 429"},
        {"check": "engines evicted and loaded again",
         "passed": samples[-1]["engine_evictions"] > 0,
         "detail": f"{samples[-1]['engine_evictions']:.0f} evictions, "
                   f"{samples[-1]['engine_loads']:.0f} loads"},
        {"check": "reload in the middle answered",
         "passed": reload is not None and reload["status"] == 200, "detail": str(reload)},
    ]  # fmt: skip
    # After the warm-up, the last third of the samples against the first third: a leak grows
    # from one to the other, while threads and descriptors also move with the engines loaded
    # at the moment (a CTranslate2 translator has threads of its own), so the highest value of
    # each third is compared (for p95, the median of the samples' p95).
    after = [s for s in samples if s["elapsed_s"] >= args.warmup]
    third = max(1, len(after) // 3)
    early, late = after[:third], after[-third:]
    span = (
        f"{early[0]['elapsed_s']:.0f}-{early[-1]['elapsed_s']:.0f} s against "
        f"{late[0]['elapsed_s']:.0f}-{late[-1]['elapsed_s']:.0f} s"
    )
    for key in ("server_rss", "threads", "open_fds"):
        first, last = max(s[key] for s in early), max(s[key] for s in late)
        checks.append({"check": f"{key} flat after the warm-up",
                       "passed": last <= first * (1 + args.flat),
                       "detail": f"highest {first} then {last}, {span} "
                                 f"(allowed +{args.flat:.0%})"})  # fmt: skip
    first, last = (
        statistics.median([s["p95_ms"] for s in part if s["p95_ms"] is not None] or [0.0])
        for part in (early, late)
    )
    checks.append({"check": "p95 drift", "passed": last <= first * (1 + args.drift),
                   "detail": f"median p95 {first:.1f} then {last:.1f} ms, {span} "
                             f"(allowed +{args.drift:.0%})"})  # fmt: skip
    return checks


def plot(result: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["samples"]
    minutes = [x["elapsed_s"] / 60 for x in s]
    fig, axes = plt.subplots(2, 2, figsize=(9, 5.5), sharex=True)
    lines = (
        (axes[0, 0], "server_rss", "RSS (MiB)", MiB),
        (axes[0, 1], "threads", "threads", 1),
        (axes[1, 0], "open_fds", "open file descriptors", 1),
    )
    for ax, key, label, scale in lines:
        ax.plot(minutes, [x[key] / scale for x in s], marker=".")
        ax.set_ylabel(label)
    ax = axes[1, 1]
    for key in ("p50_ms", "p95_ms"):
        ax.plot(minutes, [x[key] for x in s], marker=".", label=key[:3])
    ax.set_ylabel("latency (ms)")
    ax.legend(fontsize=8)
    warmup = result["settings"]["warmup"] / 60
    for ax in axes.flat:
        ax.axvline(warmup, color="grey", linestyle=":", linewidth=1)
        if result["reload"]:
            ax.axvline(result["reload"]["at_s"] / 60, color="red", linestyle="--", linewidth=1)
    for ax in axes[1]:
        ax.set_xlabel("minutes (dotted: end of warm-up; dashed: reload)")
    fig.suptitle(f"soak: {result['requests']} requests, {result['routes']} routes", fontsize=9)
    fig.tight_layout()
    path = out / "soak.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    result = soak(args)
    result["passed"] = print_checks(result["checks"])
    json_path, csv_path = write_results(args.out, result, result["samples"], name="soak")
    print(f"saved {json_path}, {csv_path}, {plot(result, args.out)}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)
