"""What a bulk twin costs on the CPU while it is open (server/bulk_twin.py): an engine alone
(what a route holds without documents beside short requests) against the engine and its
niced twin (what it holds while both overlap), on a real bundle.

    python -m loadtests.bench_lanes [--bundle models/default] [--routes en-es,en-fr,en-it,en-ru]
                                    [--rounds 4] [--out runs/bench_lanes]

Per round, both ways in turn (the order alternating), a fresh process opens the routes'
engines with the server's loaders (``server.engine_loader.default_loader`` and, the second
way, ``bulk_twin_loader``; no engine cache, so each is assembled as on a cold start) and
reports the resident memory they added (``/proc``), the bytes the device budget counts, and
each cold load's time (the twin's included). Printed and saved (JSON, CSV): the medians per
way and twin / one translator.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from lsmt_core.routes import Route, parse_route

from .results import write_results
from .server_process import ROOT

WAYS = {"one translator": 0, "twin": 1}  # whether the bulk twin opens too


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.bench_lanes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--routes", default="en-es,en-fr,en-it,en-ru")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_lanes")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # one measurement
    return p.parse_args(argv)


def resident_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


def measure(bundle: Path, routes: list[Route], twin: int) -> dict:
    """In this process: the routes' engines (and with ``twin`` their bulk twins) opened and
    held; what they added."""
    from server.bundles import load_served_bundle
    from server.engine_loader import bulk_twin_loader, default_loader
    from server.settings import Settings

    served = load_served_bundle(bundle)
    settings = Settings(device="cpu")
    warm, _ = default_loader(served.bundle, routes[0], settings)  # imports, first allocations
    warm.unload_model()
    del warm
    before, held, loads, budget = resident_mib(), [], [], 0
    for route in routes:
        t0 = time.perf_counter()
        for loader in (default_loader, bulk_twin_loader)[: 1 + twin]:
            engine, nbytes = loader(served.bundle, route, settings)
            held.append(engine)
            budget += nbytes
        loads.append(time.perf_counter() - t0)
    return {
        "resident_mib": resident_mib() - before,
        "budget_mib": budget / 2**20,
        "cold_load_ms": statistics.median(loads) * 1000,
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    routes = [parse_route(r) for r in args.routes.split(",")]
    if args.child is not None:
        print(json.dumps(measure(args.bundle, routes, args.child)))
        return {}
    rows = []
    for r in range(args.rounds):
        for way in list(WAYS)[:: 1 if r % 2 == 0 else -1]:
            cmd = [sys.executable, "-m", "loadtests.bench_lanes", "--child", str(WAYS[way]),
                   "--bundle", str(args.bundle), "--routes", args.routes]  # fmt: skip
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
            rows.append({"round": r, "way": way, **json.loads(out.stdout.splitlines()[-1])})
            print(rows[-1], flush=True)
    med = {
        way: {k: statistics.median(row[k] for row in rows if row["way"] == way) for k in rows[0]
              if k not in ("round", "way")}
        for way in WAYS
    }  # fmt: skip
    ratios = {k: med["twin"][k] / med["one translator"][k] for k in med["twin"]}
    result = {"settings": {k: str(v) for k, v in vars(args).items()}, "medians": med,
              "twin_over_one": ratios, "rows": rows}  # fmt: skip
    write_results(args.out, result, rows, name="lanes")
    for k, v in ratios.items():
        print(f"{k}: twin {med['twin'][k]:.1f} / one {med['one translator'][k]:.1f} = {v:.2f}x")
    print(f"-> {args.out}")
    return result


if __name__ == "__main__":
    main()
