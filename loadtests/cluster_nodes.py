"""Two Ray nodes on one machine, a translator on each, one node killed under traffic: every
request is answered.

    python -m loadtests.cluster_nodes [--bundle models/default] [--before 20] [--after 60]
                                      [--concurrency 4] [--out runs/cluster_nodes]

Starts a head node (``ray start --head``, 3 CPUs: the ingress, a translator, and room for
the replacement) and a second node (``ray start --address``, 1 CPU), as a two-machine cluster
would be started, each its own raylet and object store. The application (two translators
of 1 CPU; Serve spreads replicas over nodes; one HTTP proxy, on the head) serves the default
model. Clients send one-sentence requests over a few routes for ``--before`` seconds, then
the second node's raylet is killed (SIGKILL, as a machine lost: its worker processes, the
translator among them, go with it), and the clients go on for ``--after`` seconds.

Printed and saved (JSON, CSV): where the translators ran, when the node was killed and
when Serve had two translators running again, every answer by status and replica per
``--bucket`` seconds, and the requests with no HTTP answer at all (the aim: none). Stops
both nodes at the end (``ray stop``: every Ray process of this user on the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from .bench_cluster import APP, _free_port, sentences
from .bench_cluster_replace import Traffic, alive_translators
from .results import write_results
from .server_process import ROOT

SECOND_NODE = "lsmt_second_node"  # a custom resource naming the second node's raylet


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.cluster_nodes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--before", type=float, default=20.0, help="seconds before the kill")
    p.add_argument("--after", type=float, default=60.0, help="seconds after the kill")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--bucket", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "cluster_nodes")
    return p.parse_args(argv)


def ray_cli(*args: str) -> None:
    """A Ray command as a user types it (token authentication named, as Ray 2.60 needs)."""
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    subprocess.run([str(Path(sys.executable).parent / "ray"), *args], env=env, check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def second_raylet() -> psutil.Process:
    """The raylet started with the second node's resource."""
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "raylet" and SECOND_NODE in " ".join(proc.info["cmdline"] or []):
            return proc
    raise RuntimeError("the second node's raylet is not running")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    # Ray reads its authentication mode when imported: the driver joins the token cluster
    # that `ray start` made (Ray 2.60's default) only if told before.
    os.environ["RAY_AUTH_MODE"] = "token"
    import ray
    from ray import serve

    from server.cluster import build_app

    args = parse_args(argv)
    gcs_port = free_port()
    ray_cli(
        "start",
        "--head",
        f"--port={gcs_port}",
        "--node-ip-address=127.0.0.1",
        "--num-cpus=3",
        "--include-dashboard=false",
        "--disable-usage-stats",
    )
    try:
        ray_cli(
            "start",
            f"--address=127.0.0.1:{gcs_port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=1",
            f"--resources={json.dumps({SECOND_NODE: 1})}",
            "--disable-usage-stats",
        )
        ray.init(address=f"127.0.0.1:{gcs_port}")
        head = ray.get_runtime_context().get_node_id()
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
        settings = {"bundles": [str(args.bundle)], "device": "cpu", "warmup_routes": []}
        app = build_app({"settings": settings, "translators": 2, "translator_cpus": 1.0})
        serve.run(app, name=APP, route_prefix="/")
        placed = alive_translators()
        print(
            f"translators: {sum(n == head for n in placed.values())} on the head node, "
            f"{sum(n != head for n in placed.values())} on the second",
            flush=True,
        )
        routes = [("en", "fr"), ("en", "es"), ("fr", "en"), ("es", "en")]
        texts = {src: sentences(src) for src, _ in routes}
        bodies = [
            {"text": texts[s][i], "source": s, "target": t} for i in range(50) for s, t in routes
        ]
        traffic = Traffic(f"http://127.0.0.1:{port}", bodies, args.concurrency)
        try:
            time.sleep(args.before)
            killed_at = traffic.now()
            os.kill(second_raylet().pid, signal.SIGKILL)
            replaced_at = None
            while traffic.now() < killed_at + args.after:
                alive = alive_translators()
                if (
                    replaced_at is None
                    and len(alive) == 2
                    and all(n == head for n in alive.values())
                ):
                    replaced_at = traffic.now()
                time.sleep(0.5)
        finally:
            traffic.stop()
        after = alive_translators()
        serve.shutdown()
        ray.shutdown()
    finally:
        ray_cli("stop")
    statuses = Counter(status for _, _, status in traffic.answers)
    buckets = []
    for start in range(0, int(traffic.answers[-1][0]) + 1, int(args.bucket)):
        inside = [(r, s) for t, r, s in traffic.answers if start <= t < start + args.bucket]
        buckets.append(
            {
                "t_end_s": start + args.bucket,
                "requests": len(inside),
                "status": dict(Counter(str(s) for _, s in inside)),
                "replicas": dict(Counter(r for r, s in inside if s == 200)),
            }
        )
    result = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "translators_before": {name: node == head for name, node in placed.items()},
        "translators_after": {name: node == head for name, node in after.items()},
        "killed_at_s": killed_at,
        "replaced_at_s": replaced_at,
        "requests": len(traffic.answers),
        "status": {str(k): v for k, v in sorted(statuses.items())},
        "unanswered": statuses.get(0, 0),
        "buckets": buckets,
    }
    flat = [
        {
            "t_end_s": b["t_end_s"],
            "requests": b["requests"],
            "ok": b["status"].get("200", 0),
            "unanswered": b["status"].get("0", 0),
        }
        for b in buckets
    ]
    write_results(args.out, result, flat, name="cluster_nodes")
    print(
        f"{len(traffic.answers)} requests: {result['status']} (0: no HTTP answer); node "
        f"killed at {killed_at:.0f} s, two translators on the head at "
        f"{replaced_at if replaced_at is None else round(replaced_at)} s",
        flush=True,
    )
    return result


if __name__ == "__main__":
    main()
