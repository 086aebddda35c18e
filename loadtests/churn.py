"""Eviction churn: a real server with room for only a few engines, asked for every route of its
bundle in turn, round after round (issue 28's GPU serving check; it runs on the CPU too).

    python -m loadtests.churn [--bundle models/default] [--device cuda] [--engines 3]
                              [--rounds 5] [--routes N] [--out runs/churn]

A probe server measures one engine's bytes; the churn server then gets a device budget of
``--engines`` engines and a host budget of as many again. On CUDA an evicted engine moves to
the host tier (``unload_model(to_cpu=True)``) and is dropped when that is full; on the CPU
eviction drops it. Each round sends one request per route, in route order, so every round
evicts and reloads engines.

The check passes when every request was answered 200, engines were evicted from the device
(and, on CUDA, from the host) and loaded again, and memory stayed flat: from the end of the
second round (the first one that starts with the budgets full) to the end of the last, the
GPU's memory in use (nvidia-smi) and the server's resident memory each grew by at most
``--tolerance`` (default 10 %) plus 64 MiB. Saved: ``churn.json``, ``churn.csv`` (a line per
round) and ``churn.png`` (memory per round). Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from loadtests.results import print_checks, write_results
from loadtests.server_process import ServerProcess, metric_sum
from lsmt_core.routes import Route

MiB = 1 << 20
SLACK_BYTES = 64 * MiB  # allocator pools and the first uses of a code path
# No warm-up (round 1 starts empty) and no output checks (a flagged sentence would be decoded
# a second time, at beam 4: work this check is not about).
CHURN_ENV = {"LSMT_OUTPUT_CHECKS": "false", "LSMT_WARMUP_ROUTES": "[]"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.churn", description=__doc__)
    p.add_argument("--bundle", type=Path, default=Path("models/default"))
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--engines", type=int, default=3, help="device budget, in engines")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--routes", type=int, default=None, help="the first N routes only")
    p.add_argument("--tolerance", type=float, default=0.10, help="memory growth allowed")
    p.add_argument("--out", type=Path, default=Path("runs/churn"))
    args = p.parse_args(argv)
    if args.engines < 1 or args.rounds < 3:
        p.error("--engines must be >= 1 and --rounds >= 3 (flat is judged from round 2 on)")
    return args


def gpu_memory_used() -> int | None:
    """Bytes in use on GPU 0 by nvidia-smi, or None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.split()[0]) * MiB


def sentence_for(lang: str, i: int) -> str:
    """An NTREX-128 news sentence in ``lang`` (English where it has none)."""
    from lsmt_text.data.testsets import NTREX_FILES, ntrex_lines

    return ntrex_lines(lang if lang in NTREX_FILES else "en")[i]


def env_for(device: str, device_budget: int, host_budget: int) -> dict[str, str]:
    return {
        **CHURN_ENV,
        "LSMT_DEVICE": device,
        "LSMT_DEVICE_BUDGET_BYTES": str(device_budget),
        "LSMT_HOST_BUDGET_BYTES": str(host_budget),
    }


def one_engine_bytes(bundle: Path, device: str, route: tuple[str, str]) -> int:
    """The bytes the server reports for one loaded engine (of ``route``)."""
    big = 1 << 40
    with ServerProcess([bundle], env_for(device, big, big)) as server:
        body = {"text": sentence_for(route[0], 0), "source": route[0], "target": route[1]}
        r = httpx.post(f"{server.url}/v1/translate", json=body, timeout=300)
        r.raise_for_status()
        return httpx.get(f"{server.url}/v1/models", timeout=30).json()["used"]["device_bytes"]


def churn(args: argparse.Namespace) -> dict:
    routes, engines = routes_and_engines(args.bundle, args.routes)
    engine_bytes = one_engine_bytes(args.bundle, args.device, routes[0])
    budget = int(args.engines * engine_bytes * 1.05)  # engines of other routes differ a little
    rounds, failures = [], []
    env = env_for(args.device, budget, budget)
    with ServerProcess([args.bundle], env) as server, httpx.Client(timeout=300) as client:
        url = server.url
        for n in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            answered = 0
            for i, (src, tgt) in enumerate(routes):
                body = {"text": sentence_for(src, n * 100 + i), "source": src, "target": tgt}
                r = client.post(f"{url}/v1/translate", json=body)
                if r.status_code == 200 and r.json()["translations"][0]["text"].strip():
                    answered += 1
                else:
                    failures.append({"round": n, "route": f"{src}-{tgt}", "status": r.status_code,
                                     "body": r.text[:300]})  # fmt: skip
            used = client.get(f"{url}/v1/models").json()["used"]
            rounds.append(
                {
                    "round": n,
                    "requests": len(routes),
                    "answered": answered,
                    "seconds": round(time.perf_counter() - t0, 3),
                    "device_bytes": used["device_bytes"],
                    "host_bytes": used["host_bytes"],
                    "gpu_memory_used": gpu_memory_used() if args.device == "cuda" else None,
                    "server_rss": server.rss_bytes(),
                    "device_evictions": metric_sum(
                        url, "lsmt_engine_evictions_total", tier="device"
                    ),
                    "host_evictions": metric_sum(url, "lsmt_engine_evictions_total", tier="host"),
                    "engine_loads": metric_sum(url, "lsmt_engine_loads_total"),
                }
            )
            print(f"round {n}: {rounds[-1]}", flush=True)
    checks = judge(rounds, failures, args, engines)
    return {
        "bundle": str(args.bundle),
        "device": args.device,
        "engine_bytes": engine_bytes,
        "device_budget_bytes": budget,
        "host_budget_bytes": budget,
        "routes": len(routes),
        "rounds": rounds,
        "failures": failures,
        "checks": checks,
        "passed": all(c["passed"] for c in checks),
    }


def routes_and_engines(bundle: Path, first: int | None) -> tuple[list[tuple[str, str]], int]:
    """The bundle's routes (the ``first`` ones), from its manifest, and how many engines serve
    them."""
    from lsmt_bundle.bundle import load_bundle

    b = load_bundle(bundle)
    routes = list(b.routes)[:first]
    return routes, len({b.engine_key(Route(src, tgt)) for src, tgt in routes})


def judge(
    rounds: list[dict], failures: list[dict], args: argparse.Namespace, engines: int
) -> list[dict]:
    """The pass/fail lines of the check (see the module's docstring)."""
    last, second = rounds[-1], rounds[1]
    checks = [
        {"check": "every request answered", "passed": not failures,
         "detail": f"{sum(r['answered'] for r in rounds)} of {sum(r['requests'] for r in rounds)}"},
        {"check": "engines evicted from the device", "passed": last["device_evictions"] > 0,
         "detail": f"{last['device_evictions']:.0f} evictions"},
        {"check": "engines loaded again", "passed": last["engine_loads"] > engines,
         "detail": f"{last['engine_loads']:.0f} loads of {engines} engines"},
    ]  # fmt: skip
    if args.device == "cuda":
        checks.append({"check": "engines dropped from the host tier",
                       "passed": last["host_evictions"] > 0,
                       "detail": f"{last['host_evictions']:.0f} evictions"})  # fmt: skip
    for field in ("gpu_memory_used", "server_rss"):
        if second[field] is None:
            continue
        allowed = second[field] * (1 + args.tolerance) + SLACK_BYTES
        peak = max(r[field] for r in rounds[1:])
        checks.append(
            {
                "check": f"{field} flat from round 2",
                "passed": peak <= allowed,
                "detail": f"round 2 {second[field] / MiB:.0f} MiB, highest after it "
                f"{peak / MiB:.0f} MiB, allowed {allowed / MiB:.0f} MiB",
            }
        )
    return checks


MEMORY_LINES = (
    ("gpu_memory_used", "GPU memory in use"),
    ("server_rss", "server RSS"),
    ("device_bytes", "engines on the device"),
    ("host_bytes", "engines on the host"),
)


def plot(result: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = result["rounds"]
    x = [r["round"] for r in rounds]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for field, label in MEMORY_LINES:
        if rounds[0][field] is not None:
            ax.plot(x, [r[field] / MiB for r in rounds], marker="o", label=label)
    ax.set_xticks(x)
    ax.set_xlabel("round (one request per route)")
    ax.set_ylabel("MiB")
    ax.set_title(
        f"eviction churn, {result['device']}, budget {result['device_budget_bytes'] / MiB:.0f} MiB"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "churn.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    result = churn(args)
    print_checks(result["checks"])
    json_path, csv_path = write_results(args.out, result, result["rounds"], name="churn")
    print(f"saved {json_path}, {csv_path}, {plot(result, args.out)}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)
