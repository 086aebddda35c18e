"""Where an LSMT server's CPU goes under the traffic of a busy web page (issue 49: on a small
machine the requests/s held at a latency target are bound by the CPU, so the lever is the work
each request costs).

    python -m loadtests.profile_server [--bundle models/default] [--users 48]
        [--duration 30] [--routes en-fr,...] [--rate 50] [--out runs/profile_server]

A real server, set as ``loadtests.peer`` sets it (CPU int8, greedy, no output checks, its
engine cache filled first), answers every route once; then locust sends page traffic (one to
three short held-out sentences a request, ``LSMT_LOCUST_MODE=page``) from ``--users`` users,
and over ``--duration`` seconds in the middle of it:

- the server process's CPU seconds (all its threads, from the kernel), and the requests it
  answered (its ``lsmt_http_requests_total``): CPU milliseconds per request;
- py-spy samples, ``--rate`` a second, the Python thread that holds the GIL (``--gil``): the
  interpreter's work, which runs one thread at a time however many cores there are, so its
  share of the wall time says how near Python is to being the bound. The rest of the CPU is
  outside the GIL: CTranslate2's worker threads, C calls that release it, the kernel's part.
  py-spy stops the process for each sample, so the requests/s under the profile are somewhat
  below the server's unprofiled figure.

Printed and saved into ``--out``: ``profile.json`` (the totals, the GIL's time by package, the
top functions by own and by total samples, and LSMT's own functions by total samples: a
library's time, e.g. ``re``'s, traced to the request step that spends it), ``profile.csv``
(by package), ``functions.json`` and ``.csv`` (every sampled function), ``profile.png`` (CPU
ms per request: outside the GIL, and with it by package) and ``stacks.txt`` (py-spy's
collapsed stacks, for a flame graph).
py-spy reads the server's memory: it needs ptrace rights (root, or
``kernel.yama.ptrace_scope`` 0).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from .peer import lsmt_server, wait_for_cache_fill
from .peer_steps import page_traffic
from .peers import translate
from .results import write_results
from .run import DEFAULT_CORPUS, run_locust, traffic_sentences
from .server_process import ROOT, metric_sum

LEAD_S = 8.0  # locust's users start and settle before the samples begin
OURS = frozenset({"server", "lsmt_bundle", "lsmt_core", "lsmt_text"})  # LSMT's packages


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.profile_server", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--routes", help="comma-separated SRC-TGT (default: every route)")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--users", type=int, default=48, help="concurrent users sending pages")
    p.add_argument("--duration", type=float, default=30.0, help="seconds sampled")
    p.add_argument("--rate", type=int, default=50, help="py-spy samples a second")
    p.add_argument("--top", type=int, default=25, help="functions listed")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "profile_server")
    return p.parse_args(argv)


def function_of(frame: str) -> str:
    """A py-spy frame (``function (file:line)``) without its line: one row per function."""
    name, _, where = frame.rpartition(" (")
    return f"{name} ({where.rpartition(':')[0] or where.rstrip(')')})"


def package_of(function: str) -> str:
    """The top-level package or module of a function (``Batcher.run (server/batching.py)``
    -> ``server``): py-spy names files relative to the import path."""
    path = function.rpartition(" (")[2].rstrip(")")
    return path.split("/", 1)[0].removesuffix(".py") or "?"


def read_stacks(path: Path) -> tuple[Counter, Counter, Counter, int]:
    """py-spy's collapsed stacks (``frame;frame;... count``, outermost first): samples by
    function where it was the innermost frame (own), by function anywhere in the stack
    (total), by the innermost function's package, and the samples in all."""
    own: Counter = Counter()
    total: Counter = Counter()
    packages: Counter = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [function_of(f) for f in stack.split(";")]
        samples += n
        own[frames[-1]] += n
        packages[package_of(frames[-1])] += n
        for frame in set(frames):
            total[frame] += n
    return own, total, packages, samples


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of the process, all its threads."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def profile(args: argparse.Namespace, command: str) -> tuple[dict, list[dict]]:
    """The totals and shares (profile.json), and every sampled function's row."""
    from lsmt_bundle import load_bundle

    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    args.out.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(args.bundle)
    chosen = args.routes.split(",") if args.routes else [f"{s}-{t}" for s, t in bundle.routes]
    routes = [tuple(r.split("-")) for r in chosen]
    sentences, source = traffic_sentences(args.corpus, "test", 60)
    short, env = page_traffic(sentences, routes, args.out)
    engines = len({bundle.engine_key(route) for route in bundle.routes})
    stacks = args.out / "stacks.txt"
    with lsmt_server(args.bundle, args.out / "lsmt-engine-cache") as server:
        wait_for_cache_fill(server.url, engines)
        for src, tgt in routes:  # warm: the samples see no engine load
            translate(server.url, short[src][0], src, tgt)
        locust = threading.Thread(
            target=run_locust,
            args=(server.url, args.users, args.users, f"{LEAD_S + args.duration + 4:.0f}s",
                  args.out / "page", env),
        )  # fmt: skip
        locust.start()
        time.sleep(LEAD_S)
        cpu0, answered0 = cpu_seconds(server.proc.pid), answered(server.url)
        started = time.perf_counter()
        subprocess.run([pyspy, "record", "--pid", str(server.proc.pid), "--gil",
                        "--duration", f"{args.duration:.0f}", "--rate", str(args.rate),
                        "--format", "raw", "--output", str(stacks)], check=True)  # fmt: skip
        wall = time.perf_counter() - started
        cpu = cpu_seconds(server.proc.pid) - cpu0
        requests = answered(server.url) - answered0
        locust.join()
    own, total, packages, samples = read_stacks(stacks)
    # The CPU and the requests are counted over py-spy's whole call (its start included), the
    # samples over --duration: both as rates of the same steady traffic.
    rps = requests / wall
    gil_ms_per_sample = 1000 / args.rate / args.duration / rps
    package_rows = [
        {"package": name, "samples": n, "share_of_gil": n / samples,
         "gil_ms_per_request": n * gil_ms_per_sample}
        for name, n in packages.most_common()
    ]  # fmt: skip
    function_rows = sorted(
        ({"function": f, "own_samples": own[f], "total_samples": n,
          "own_share_of_gil": own[f] / samples, "total_share_of_gil": n / samples}
         for f, n in total.items()),
        key=lambda r: (-r["total_samples"], -r["own_samples"]),
    )  # fmt: skip
    cpu_ms = 1000 * cpu / requests
    result = {
        "command": command,
        "sentences": source,
        "users": args.users,
        "seconds": wall,
        "requests": requests,
        "requests_per_s": rps,
        "cpu_s": cpu,
        "cpu_cores_busy": cpu / wall,
        "cpu_ms_per_request": cpu_ms,
        "gil_busy_share": samples / args.rate / args.duration,  # near 1: Python is the bound
        "gil_ms_per_request": samples * gil_ms_per_sample,
        # CTranslate2's workers, C calls without the GIL, the kernel's part
        "outside_gil_ms_per_request": cpu_ms - samples * gil_ms_per_sample,
        "samples": samples,
        "packages": package_rows,
        "top_own": sorted(function_rows, key=lambda r: -r["own_samples"])[: args.top],
        "top_total": function_rows[: args.top],
        # LSMT's own functions, what they call included: the chain down to the costly part
        "top_ours": [r for r in function_rows if package_of(r["function"]) in OURS][: args.top],
    }
    return result, function_rows


def answered(url: str) -> float:
    """Page requests answered so far (LibreTranslate's endpoint, which the traffic uses)."""
    return metric_sum(url, "lsmt_http_requests_total", endpoint="/translate")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["packages"][:12]
    names = ["outside the GIL (CTranslate2, C)", *(r["package"] for r in rows)]
    ms = [result["outside_gil_ms_per_request"], *(r["gil_ms_per_request"] for r in rows)]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(names) + 1.5))
    ax.barh(names[::-1], ms[::-1], color=["C0"] * len(rows) + ["C1"])
    ax.set_xlabel("CPU ms per request (with the GIL: by package)")
    ax.set_title(f"LSMT under page traffic, {result['users']} users: "
                 f"{result['cpu_ms_per_request']:.1f} CPU ms per request")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    command = "python -m loadtests.profile_server " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    result, functions = profile(args, command)
    write_results(args.out, result, result["packages"], name="profile")
    write_results(args.out, functions, functions, name="functions")
    plot(result, args.out / "profile.png")
    print(f"{result['requests']:.0f} requests in {result['seconds']:.1f} s "
          f"({result['requests_per_s']:.1f}/s), {result['cpu_cores_busy']:.2f} cores busy, "
          f"the GIL held {100 * result['gil_busy_share']:.0f} % of the time: "
          f"{result['cpu_ms_per_request']:.2f} CPU ms per request, "
          f"{result['gil_ms_per_request']:.2f} of them with the GIL")  # fmt: skip
    for r in result["packages"][:15]:
        print(f"  {r['gil_ms_per_request']:7.2f} ms  {100 * r['share_of_gil']:5.1f} %  "
              f"{r['package']}")  # fmt: skip
    print(f"  {result['outside_gil_ms_per_request']:7.2f} ms          outside the GIL")
    print("top functions by own samples (share of the GIL's):")
    for r in result["top_own"][:15]:
        print(f"  {100 * r['own_share_of_gil']:5.1f} %  {r['function']}")
    print("LSMT's functions by total samples, callees included (share of the GIL's):")
    for r in result["top_ours"][:15]:
        print(f"  {100 * r['total_share_of_gil']:5.1f} %  {r['function']}")
    print(f"-> {args.out}/profile.json, .csv, functions.json, .csv, profile.png, stacks.txt")
    return result


if __name__ == "__main__":
    main()
