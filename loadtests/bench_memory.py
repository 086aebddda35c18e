"""Where a server's memory goes once every route has served (issue 49): a real ``python -m
server`` per configuration, its resident memory idle and after one request on every route, split
into the idle process, the engines (the bytes the device budget counts) and the rest.

    python -m loadtests.bench_memory [--bundle models/default] [--rounds 2]
        [--configs default,one-translator,arena-2,one-translator+arena-2] [--out runs/bench_memory]

Configurations (environment of the server): ``default`` (an engine is one CTranslate2
translator; a route opens a niced bulk twin only while documents and short requests overlap,
server/bulk_twin.py, which one request per route never does); ``one-translator``
(``LSMT_BULK_NICE=0``: never a twin); ``arena-2 (``MALLOC_ARENA_MAX=2``: glibc's arenas bounded);
``one-translator+arena-2``. Rounds rotate the order. Memory only: the figures do not depend on
what else runs on the machine, unlike timings. Printed and saved: ``memory.json``,
``memory.csv`` (a row per configuration and round) and ``memory.png``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import httpx

from .results import write_results
from .server_process import ROOT, ServerProcess

CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "one-translator": {"LSMT_BULK_NICE": "0"},
    "arena-2": {"MALLOC_ARENA_MAX": "2"},
    "one-translator+arena-2": {"LSMT_BULK_NICE": "0", "MALLOC_ARENA_MAX": "2"},
}
# Everyday sentences per source language: one request of three per route.
SENTENCES = {
    "ar": "أين محطة القطار؟",
    "de": "Wo ist der Bahnhof?",
    "en": "Where is the train station?",
    "es": "¿Dónde está la estación de tren?",
    "fr": "Où est la gare ?",
    "it": "Dov'è la stazione ferroviaria?",
    "pt": "Onde fica a estação de comboios?",
    "ru": "Где находится вокзал?",
}
MIB = 2**20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_memory")
    return p.parse_args(argv)


def measure(bundle: Path, env: dict[str, str]) -> dict[str, float]:
    """One fresh server: RSS idle, then after a request on every route (MiB)."""
    with ServerProcess([bundle], {"LSMT_WARMUP_ROUTES": "[]", **env}) as server:
        time.sleep(1.0)  # the start-up's last allocations
        idle = server.rss_bytes()
        with httpx.Client(base_url=server.url, timeout=120) as client:
            routes = client.get("/v1/languages").json()["routes"]
            for route in routes:
                src, tgt = route.split("-")
                text = SENTENCES.get(src, SENTENCES["en"])
                body = {"text": [text] * 3, "source": src, "target": tgt}
                r = client.post("/v1/translate", json=body)
                r.raise_for_status()
            time.sleep(1.0)
            after = server.rss_bytes()
            engines = client.get("/v1/models").json()["engines"]
    loaded = [e for e in engines if e["state"] == "loaded"]
    engine_bytes = sum(e["bytes"] for e in loaded)
    return {
        "routes": len(routes),
        "engines": len(loaded),
        "idle_mib": idle / MIB,
        "after_mib": after / MIB,
        "engines_mib": engine_bytes / MIB,
        "rest_mib": (after - idle - engine_bytes) / MIB,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"unknown configurations {sorted(unknown)}; known: {list(CONFIGS)}")
    rows = []
    for k in range(args.rounds):
        for name in names[k % len(names) :] + names[: k % len(names)]:  # the order rotates
            row = {"config": name, "round": k, **measure(args.bundle, CONFIGS[name])}
            rows.append(row)
            print(f"round {k} {name:>24}: idle {row['idle_mib']:.0f} MiB, after "
                  f"{row['after_mib']:.0f} MiB = engines {row['engines_mib']:.0f} "
                  f"+ rest {row['rest_mib']:.0f}", flush=True)  # fmt: skip
    medians = {
        name: {
            key: statistics.median(r[key] for r in rows if r["config"] == name)
            for key in ("idle_mib", "after_mib", "engines_mib", "rest_mib")
        }
        for name in names
    }
    result = {"bundle": str(args.bundle), "rounds": args.rounds, "rows": rows, "medians": medians}
    write_results(args.out, result, rows, "memory")
    plot(medians, args.out / "memory.png")
    print(f"-> {args.out}/memory.json, memory.csv, memory.png")
    return result


def plot(medians: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(medians)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bottom = [0.0] * len(names)
    for key, label in (("idle_mib", "idle process"), ("engines_mib", "engines (budget bytes)"),
                       ("rest_mib", "the rest")):  # fmt: skip
        values = [medians[n][key] for n in names]
        ax.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("resident memory after every route (MiB)")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
