"""``python -m loadtests.peer --stepped``: the requests/s each server holds at a latency target
(issue 49), under the traffic of a busy web page (one to three short sentences a request).

Per server (one after the other, as ``loadtests.peer`` starts and settles them): every route
answers once (so neither server's first steps pay for loading it), then locust runs
``--step-users`` concurrent users for ``--step-duration`` each, in order, stopping after the
first step whose p95 passes ``--p95-target-ms``. What a server holds at the target is the
largest requests/s of a step within it. Saved into ``--out``: ``stepped.json`` (every step),
``stepped.csv`` (a row per server and step) and ``stepped.png`` (p95 against requests/s).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .peers import Peers, best_under_target, rss_after_traffic, translate
from .results import write_results
from .run import read_stats, run_locust
from .server_process import ServiceProcess

SHORT_CHARS = 150  # a web page's sentences: the held-out ones up to this length


def page_traffic(
    sentences: dict[str, list[str]], routes: list[tuple[str, str]], out: Path
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """A busy web page's traffic: the short sentences (written to ``out/page_traffic.json``)
    and the locustfile's environment that sends them over ``routes``."""
    short = {lang: [s for s in lines if len(s) <= SHORT_CHARS] or lines
             for lang, lines in sentences.items()}  # fmt: skip
    traffic = out / "page_traffic.json"
    traffic.write_text(json.dumps({"sentences": short}) + "\n")
    env = {
        "LSMT_LOCUST_MODE": "page",
        "LSMT_LOCUST_ROUTES": ",".join(f"{s}-{t}" for s, t in routes),
        "LSMT_LOCUST_TRAFFIC": str(traffic),
    }
    return short, env


def stepped(args: argparse.Namespace, peers: Peers, result: dict) -> dict:
    short, env = page_traffic(peers.sentences, peers.routes, args.out)
    target = args.p95_target_ms
    result.update({"p95_target_ms": target, "step_duration": args.step_duration})
    rows = []
    for name, (start, settle) in peers.servers.items():
        print(f"stepping {name}", flush=True)
        with start() as server:
            out: dict = {"startup_s": server.startup_s, **settle(server)}
            for src, tgt in peers.routes:  # warm: no step pays for a load
                translate(server.url, short[src][0], src, tgt)
            out["steps"] = steps(server, args, env, args.out / f"{name}_page")
            out["held_rps"] = best_under_target(out["steps"], target)
            out["rss_end_bytes"], out["rss_after_bytes"] = rss_after_traffic(server)
        result[name] = out
        rows += [{"server": name, **{k: v for k, v in step.items() if k != "by_name"}}
                 for step in out["steps"]]  # fmt: skip
    if {"lsmt", "libretranslate"} <= set(result):
        held = result["libretranslate"]["held_rps"]
        result["lsmt_over_libretranslate"] = result["lsmt"]["held_rps"] / held if held else None
    write_results(args.out, result, rows, name="stepped")
    plot(result, list(peers.servers), args.out / "stepped.png", target)
    for name in peers.servers:
        print(f"{name:<16} holds {result[name]['held_rps']:.1f} requests/s at p95 <= "
              f"{target:.0f} ms")  # fmt: skip
    if result.get("lsmt_over_libretranslate") is not None:
        print(f"LSMT / LibreTranslate: {result['lsmt_over_libretranslate']:.2f}x")
    print(f"-> {args.out}/stepped.json, stepped.csv, stepped.png")
    return result


def steps(server: ServiceProcess, args: argparse.Namespace, env: dict, prefix: Path) -> list:
    """Locust's figures per user count, until a step's p95 passes the target."""
    out = []
    for users in map(int, args.step_users.split(",")):
        step = prefix.with_name(f"{prefix.name}{users}")
        run_locust(server.url, users, users, args.step_duration, step, env)
        out.append({"users": users, **read_stats(step)})
        print(f"  {users} users: {out[-1]['requests_per_s']} requests/s, p95 "
              f"{out[-1]['p95_ms']} ms", flush=True)  # fmt: skip
        if (out[-1]["p95_ms"] or 0) > args.p95_target_ms:
            break
    return out


def plot(result: dict, names: list[str], path: Path, target_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name in names:
        points = result[name]["steps"]
        ax.plot([s["requests_per_s"] for s in points], [s["p95_ms"] for s in points], "o-",
                label=f"{name}: {result[name]['held_rps']:.1f} req/s held")  # fmt: skip
        for s in points:
            ax.annotate(str(s["users"]), (s["requests_per_s"] or 0, s["p95_ms"] or 0),
                        fontsize=7, textcoords="offset points", xytext=(3, 3))  # fmt: skip
    ax.axhline(target_ms, color="grey", linestyle=":", label=f"p95 target {target_ms:.0f} ms")
    ax.set_xlabel("requests/s (1-3 short sentences each)")
    ax.set_ylabel("p95 (ms)")
    ax.set_title("throughput at a latency target (labels: users)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
