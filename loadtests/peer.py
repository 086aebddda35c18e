"""LSMT side by side with LibreTranslate: the same weights, the same traffic, one machine.

    python -m loadtests.peer [--bundle models/default] [--routes en-fr,fr-en,...]
        [--rate 4] [--duration 60s] [--p95-target-ms 1000] [--out runs/peer]

LibreTranslate (the registry's ``libretranslate``, installed by this script into a virtualenv
of its own, ``--venv``) serves the bundle's routes exported as Argos Translate packages
(``python -m model_export argos``), offline; LSMT serves the bundle, or with ``--lsmt-serves
packages`` those same packages (docs/deploy.md, moving from LibreTranslate). Both decode greedily
with int8 CTranslate2 engines and the same threads (2 translations in parallel, one thread
each); LSMT without its repetition guards and output checks, which LibreTranslate lacks, and
with an engine cache (a fresh one in ``--out``) that it fills in the background after start
(``server/cache_fill.py``; measured once the fill is done, as a deployment's traffic would
find it; ``--no-engine-cache`` assembles each route on its first request instead). One
server runs at a time, each through its own ``POST /translate`` (LibreTranslate's API,
which LSMT also answers) with the same locust traffic (``LSMT_LOCUST_MODE=libretranslate``:
held-out sentences and two-sentence paragraphs, Zipf-popular routes):

- start-up time (process start to answering) and resident memory with every route
  available (LSMT: lazy, nothing loaded; then as the traffic ends and, at rest, ``SETTLE_S``
  = 5 s later);
- the first request on a route not used yet;
- p50/p95/p99 and errors at a fixed offered rate (``--rate`` requests/s), and the
  throughput at the largest user count whose p95 stays under ``--p95-target-ms``;
- the outputs of every held-out sentence compared (the same weights: they should agree);
- LSMT's answers at the fixed rate say where their time went (``Server-Timing``): the stages
  of its slowest 5 % and its slowest requests one by one, each marked when it was a route's
  first (``fixed_rate_stages``).

``--lsmt-env LSMT_X=V`` adds a server setting to LSMT's (e.g. ``LSMT_WARMUP_ROUTES=all``).
Writes ``results.json``, ``results.csv`` (one row per server and measurement) and
``peer.png`` (latency at the fixed rate, p95 against throughput in the steps) into ``--out``.

``--stepped`` (issue 49, ``loadtests.peer_steps``): only the throughput at a latency target.
Every route warmed, then users are added step by step (``--step-users``, default doubling
from 1 to 128), each sending one to three short sentences per request (``LSMT_LOCUST_MODE=
page``), until p95 passes ``--p95-target-ms`` (default 300): the requests/s each server held
at the target, side by side (``stepped.json``, ``stepped.csv``, ``stepped.png``). ``--peers
lsmt`` measures LSMT alone (no LibreTranslate installed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Callable
from pathlib import Path

from .peers import SETTLE_S, Peers, best_under_target, rss_after_traffic, translate
from .results import write_results
from .run import DEFAULT_CORPUS, read_stats, run_locust, traffic_sentences
from .server_process import ROOT, ServiceProcess, free_port, metric_sum
from .timings import Sample, stage_split

# torch: the local CPU wheel (never CUDA's); spaCy: the packages' offline sentence splitter,
# which LibreTranslate's argostranslate fork does not install itself
LIBRETRANSLATE = ["libretranslate==1.9.6", "torch==2.13.0", "spacy==3.8.18"]
THREADS = {"inter": 2, "intra": 1}
PEERS = ("lsmt", "libretranslate")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loadtests.peer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bundle", type=Path, default=ROOT / "models" / "default")
    p.add_argument("--routes", help="comma-separated SRC-TGT (default: every route)")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    p.add_argument("--per-language", type=int, default=60, help="held-out sentences")
    p.add_argument("--compare", type=int, default=10, help="sentences per route compared")
    p.add_argument("--rate", type=float, default=4.0, help="offered requests/s (fixed rate)")
    p.add_argument("--users", type=int, default=8, help="users sharing the fixed rate")
    p.add_argument("--duration", default="60s")
    p.add_argument("--p95-target-ms", type=float, help="default 1000; --stepped: 300")
    p.add_argument("--step-users", help="default 1,2,4,8; --stepped: 1,2,4,...,128")
    p.add_argument("--step-duration", default="30s")
    p.add_argument(
        "--stepped",
        action="store_true",
        help="only the throughput at the p95 target under page traffic (loadtests.peer_steps)",
    )
    p.add_argument("--peers", default="lsmt,libretranslate", help="the servers measured")
    p.add_argument("--venv", type=Path, default=ROOT / "runs" / "peer-venv")
    p.add_argument(
        "--no-engine-cache",
        dest="engine_cache",
        action="store_false",
        help="LSMT without an engine cache (each route assembled on its first request)",
    )
    p.add_argument(
        "--lsmt-serves",
        choices=("bundle", "packages"),
        default="bundle",
        help="what LSMT serves: the bundle, or the Argos packages LibreTranslate serves (ready "
        "models: no engine cache)",
    )
    p.add_argument(
        "--lsmt-env",
        action="append",
        default=[],
        metavar="LSMT_X=V",
        help="a server setting for LSMT beyond the run's own (repeatable), e.g. "
        "LSMT_WARMUP_ROUTES=all",
    )
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "peer")
    args = p.parse_args(argv)
    if any("=" not in kv for kv in args.lsmt_env):
        p.error("--lsmt-env takes KEY=VALUE")
    args.lsmt_settings = dict(kv.split("=", 1) for kv in args.lsmt_env)
    if args.p95_target_ms is None:
        args.p95_target_ms = 300.0 if args.stepped else 1000.0
    if args.step_users is None:
        args.step_users = "1,2,4,8,16,32,64,128" if args.stepped else "1,2,4,8"
    unknown = set(args.peers.split(",")) - set(PEERS)
    if unknown or (not args.stepped and args.peers != ",".join(PEERS)):
        p.error(f"--peers: {','.join(PEERS)}, or one of them with --stepped")
    if args.lsmt_serves == "packages":
        args.engine_cache = False  # a package is its own engine: nothing to build
    return args


def python_with(root: Path, requirements: list[str]) -> Path:
    """The Python of a virtualenv at ``root`` holding ``requirements`` from the registry,
    made once (also used by tests/test_argos.py)."""
    python = root / "bin" / "python"
    if not (root / "installed").is_file():
        print(f"installing {' '.join(requirements)} into {root}", flush=True)
        venv.create(root, with_pip=True, clear=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", *requirements]
        subprocess.run(pip, check=True, timeout=1200)
        (root / "installed").write_text("\n".join(requirements))
    return python


def lsmt_server(
    bundle: Path, engine_cache: Path | None, settings: dict[str, str] | None = None
) -> ServiceProcess:
    """LSMT as the runs measure it (CPU int8, greedy, no output checks), with ``settings``
    on top."""
    port = free_port()
    env = {
        "LSMT_DEVICE": "cpu",
        "LSMT_COMPUTE_TYPE": "int8",
        "LSMT_INTER_THREADS": str(THREADS["inter"]),
        "LSMT_INTRA_THREADS": str(THREADS["intra"]),
        "LSMT_DEFAULT_BEAM_SIZE": "1",
        "LSMT_REPETITION_PENALTY": "1.0",
        "LSMT_NO_REPEAT_NGRAM_SIZE": "0",
        "LSMT_OUTPUT_CHECKS": "false",
        "LSMT_LOG_LEVEL": "warning",
        **(settings or {}),
    }
    if engine_cache is not None:
        shutil.rmtree(engine_cache, ignore_errors=True)  # filled by this run's server
        env["LSMT_ENGINE_CACHE_DIR"] = str(engine_cache)
    cmd = [sys.executable, "-m", "server", str(bundle), "--port", str(port)]
    return ServiceProcess(cmd, port, "/readyz", env, name="lsmt")


def wait_for_cache_fill(url: str, engines: int, timeout: float = 600.0) -> float:
    """Seconds until the server's background fill has visited ``engines`` engines."""
    t0 = time.perf_counter()
    while metric_sum(url, "lsmt_engine_cache_fills_total") < engines:
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"the engine cache fill did not end in {timeout:.0f} s")
        time.sleep(0.5)
    return time.perf_counter() - t0


def libretranslate_server(python: Path, home: Path, languages: list[str]) -> ServiceProcess:
    port = free_port()
    env = {
        **home_env(home),
        "ARGOS_CHUNK_TYPE": "SPACY",  # the packages' own sentence splitter: offline
        "ARGOS_BEAM_SIZE": "1",
        "ARGOS_COMPUTE_TYPE": "int8",
        "ARGOS_DEVICE_TYPE": "cpu",
        "ARGOS_INTER_THREADS": str(THREADS["inter"]),
        "ARGOS_INTRA_THREADS": str(THREADS["intra"]),
    }
    main = "from libretranslate.main import main; main()"  # its console script, run by python
    cmd = [str(python), "-c", main, "--host", "127.0.0.1", "--port", str(port),
           "--load-only", ",".join(languages), "--disable-web-ui", "--char-limit", "5000",
           "--threads", "4"]  # fmt: skip
    return ServiceProcess(cmd, port, "/languages", env, name="libretranslate")


def home_env(home: Path) -> dict[str, str]:
    """argostranslate keeps its packages and caches under the user's directories: these."""
    return {
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }


def install_packages(python: Path, home: Path, packages: list[Path]) -> None:
    env = {**os.environ, **home_env(home)}
    code = (
        "import sys; from pathlib import Path; import argostranslate.package as p\n"
        "[p.install_from_path(Path(a)) for a in sys.argv[1:]]"
    )
    subprocess.run([str(python), "-c", code, *map(str, packages)], env=env, check=True)


def measure(
    start: Callable[[], ServiceProcess],
    settle: Callable[[ServiceProcess], dict],
    args,
    routes,
    sentences,
    prefix: Path,
) -> dict:
    """Start-up, memory, a cold route, fixed-rate latency, throughput under the p95 target,
    and every held-out sentence's output; ``settle`` runs first (what it returns is kept)."""
    with start() as peer:
        out: dict = {"startup_s": peer.startup_s, **settle(peer)}
        out["rss_idle_bytes"] = peer.rss_bytes()
        src, tgt = routes[-1]  # least popular in the traffic: not used yet
        _, out["cold_first_request_s"] = translate(peer.url, sentences[src][0], src, tgt)
        _, out["warm_request_s"] = translate(peer.url, sentences[src][1], src, tgt)
        env = {
            "LSMT_LOCUST_MODE": "libretranslate",
            "LSMT_LOCUST_ROUTES": ",".join(f"{s}-{t}" for s, t in routes),
            "LSMT_LOCUST_TRAFFIC": str(prefix.parent / "traffic.json"),
        }
        fixed = prefix.with_name(f"{peer.name}_fixed")
        stages = fixed.with_name(f"{fixed.name}_stages.jsonl")
        stages.unlink(missing_ok=True)
        rate_env = {**env, "LSMT_LOCUST_THROUGHPUT": str(args.rate / args.users),
                    "LSMT_LOCUST_STAGES": str(stages)}  # fmt: skip
        run_locust(peer.url, args.users, args.users, args.duration, fixed, rate_env)
        out["fixed_rate"] = read_stats(fixed)
        if stages.is_file():  # LSMT's answers say where their time went
            out["fixed_rate_stages"] = fixed_rate_stages(stages)
        out["steps"] = []
        for users in map(int, args.step_users.split(",")):
            step = prefix.with_name(f"{peer.name}_step{users}")
            run_locust(peer.url, users, users, args.step_duration, step, env)
            stats = {"users": users, **read_stats(step)}
            out["steps"].append(stats)
            if (stats["p95_ms"] or 0) > args.p95_target_ms:
                break
        out["rss_end_bytes"], out["rss_after_bytes"] = rss_after_traffic(peer)
        out["outputs"] = {
            f"{s}-{t}": [translate(peer.url, x, s, t)[0] for x in sentences[s][: args.compare]]
            for s, t in routes
        }
        return out


def fixed_rate_stages(path: Path, slowest: int = 10) -> dict:
    """Where the fixed-rate traffic's time went in the server (each answer's Server-Timing,
    recorded by the locustfile): the stage split (median, and mean over the slowest 5 %), and
    the slowest requests one by one, each marked when it was the first answered on its route
    (whose decode holds the route's engine load: the first traffic's tail)."""
    from server.timing import parse_server_timing

    samples, rows, seen = [], [], set()
    for line in path.read_text().splitlines():
        x = json.loads(line)
        stages = parse_server_timing(x["server_timing"])
        samples.append(Sample(x["seconds"], stages))
        rows.append({"route": x["route"], "first_on_route": x["route"] not in seen,
                     "ms": x["seconds"] * 1000,
                     **{f"{k}_ms": v * 1000 for k, v in stages.items()}})  # fmt: skip
        seen.add(x["route"])
    rows.sort(key=lambda r: -r["ms"])
    return {"requests": len(samples), **stage_split(samples), "slowest": rows[:slowest]}


def prepare(args: argparse.Namespace) -> Peers:
    """The traffic file, the Argos packages and LibreTranslate's virtualenv (when it is
    measured), and the servers to start."""
    from lsmt_bundle import load_bundle

    args.out.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(args.bundle)
    chosen = args.routes.split(",") if args.routes else [f"{s}-{t}" for s, t in bundle.routes]
    routes = [(r.split("-")[0], r.split("-")[1]) for r in chosen]
    route_list = ",".join(chosen)
    languages = sorted({lang for r in routes for lang in r})
    sentences, source = traffic_sentences(args.corpus, "test", args.per_language)
    missing = [lang for lang in languages if not sentences.get(lang)]
    if missing:
        raise SystemExit(
            f"no traffic sentences for {', '.join(missing)} in {source}: pass --corpus, a "
            "corpus built with those languages (python -m lsmt_text.data build), or --routes"
        )
    sentences = {lang: sentences[lang] for lang in languages}
    (args.out / "traffic.json").write_text(json.dumps({"sentences": sentences}) + "\n")
    peers = args.peers.split(",")
    packages = args.out / "packages"
    if "libretranslate" in peers or args.lsmt_serves == "packages":
        subprocess.run([sys.executable, "-m", "model_export", "argos", str(args.bundle),
                        "--out", str(packages), "--routes", route_list],
                       check=True, cwd=ROOT)  # fmt: skip
    engines = len({bundle.engine_key(route) for route in bundle.routes})

    def lsmt_settle(server: ServiceProcess) -> dict:
        if not args.engine_cache:
            return {"engine_cache": False}
        return {"engine_cache": True, "cache_fill_s": wait_for_cache_fill(server.url, engines)}

    cache = args.out / "lsmt-engine-cache" if args.engine_cache else None
    served = packages if args.lsmt_serves == "packages" else args.bundle
    servers: dict = {"lsmt": (lambda: lsmt_server(served, cache, args.lsmt_settings), lsmt_settle)}
    if "libretranslate" in peers:
        python = python_with(args.venv, LIBRETRANSLATE)
        home = args.out / "libretranslate-home"
        files = [packages / f"{bundle.name}-{s}_{t}.argosmodel" for s, t in routes]
        if not (home / "installed").is_file():  # a second run reuses the installed packages
            install_packages(python, home, files)
            (home / "installed").write_text(route_list)
        servers["libretranslate"] = (
            lambda: libretranslate_server(python, home, languages),
            lambda server: {},
        )
    servers = {name: servers[name] for name in peers}
    return Peers(routes, sentences, source, servers)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    peers = prepare(args)
    result: dict = {
        "command": "python -m loadtests.peer " + " ".join(argv or sys.argv[1:]),
        "machine": {"processor": platform.processor(), "cpu_count": os.cpu_count()},
        "routes": [f"{s}-{t}" for s, t in peers.routes],
        "sentences": peers.source,
        "lsmt_serves": args.lsmt_serves,
        "lsmt_settings": args.lsmt_settings,
    }
    if args.stepped:
        from .peer_steps import stepped

        return stepped(args, peers, result)
    result["rate_rps"] = args.rate
    for name, (start, settle) in peers.servers.items():  # one after the other
        print(f"measuring {name}", flush=True)
        result[name] = measure(start, settle, args, peers.routes, peers.sentences,
                               args.out / name)  # fmt: skip
    result["agreement"] = agreement(result["lsmt"]["outputs"], result["libretranslate"]["outputs"])
    rows = table(result, args.p95_target_ms)
    write_results(args.out, result, rows)
    plot(result, args.out / "peer.png", args.p95_target_ms)
    for row in rows:
        print(f"{row['measure']:<40} {row['lsmt']:>12.1f} {row['libretranslate']:>14.1f}")
    print(f"identical outputs: {result['agreement']}")
    if "fixed_rate_stages" in result["lsmt"]:
        split = result["lsmt"]["fixed_rate_stages"]
        tail = ", ".join(
            f"{k.removeprefix('tail_').removesuffix('_s')} {v * 1000:.0f}"
            for k, v in split.items()
            if k.startswith("tail_")
        )
        first = sum(r["first_on_route"] for r in split["slowest"])
        print(f"LSMT's slowest 5 % at the fixed rate, mean ms per stage: {tail}; "
              f"{first} of the {len(split['slowest'])} slowest were a route's first")  # fmt: skip
    return result


def table(result: dict, target_ms: float) -> list[dict]:
    """The comparison, one row per measurement, both servers side by side."""

    measures = {
        "start-up (s)": lambda r: r["startup_s"],
        "RSS idle (MiB)": lambda r: r["rss_idle_bytes"] / 2**20,
        "RSS as the traffic ends (MiB)": lambda r: r["rss_end_bytes"] / 2**20,
        f"RSS {SETTLE_S:.0f} s after the traffic (MiB)": lambda r: r["rss_after_bytes"] / 2**20,
        "cold first request (ms)": lambda r: r["cold_first_request_s"] * 1000,
        "warm request (ms)": lambda r: r["warm_request_s"] * 1000,
        "fixed rate: p50 (ms)": lambda r: r["fixed_rate"]["p50_ms"],
        "fixed rate: p95 (ms)": lambda r: r["fixed_rate"]["p95_ms"],
        "fixed rate: p99 (ms)": lambda r: r["fixed_rate"]["p99_ms"],
        "fixed rate: failures": lambda r: r["fixed_rate"]["failures"],
        f"throughput at p95 <= {target_ms:.0f} ms (req/s)": lambda r: best_under_target(
            r["steps"], target_ms
        ),
    }
    return [
        {"measure": name, **{p: float(get(result[p]) or 0.0) for p in PEERS}}
        for name, get in measures.items()
    ]


def plot(result: dict, out: Path, target_ms: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for i, peer in enumerate(PEERS):
        fixed = result[peer]["fixed_rate"]
        values = [fixed[f"p{q}_ms"] or 0.0 for q in (50, 95, 99)]
        left.bar([x + 0.4 * i for x in range(3)], values, width=0.4, label=peer)
        steps = result[peer]["steps"]
        right.plot([s["requests_per_s"] for s in steps], [s["p95_ms"] for s in steps], "o-",
                   label=peer)  # fmt: skip
    left.set_xticks([x + 0.2 for x in range(3)], ["p50", "p95", "p99"])
    left.set_ylabel("ms")
    left.set_title(f"latency at {result['rate_rps']} requests/s")
    right.axhline(target_ms, color="grey", linestyle=":")
    right.set_xlabel("requests/s")
    right.set_ylabel("p95 (ms)")
    right.set_title("p95 as users are added")
    for ax in (left, right):
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def agreement(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict:
    """Outputs identical, and identical but for LibreTranslate's formatting of a translation
    (``improve_translation_formatting``: the source's final punctuation copied or dropped,
    the first letter's case matched to the source's)."""
    pairs = [(x, y) for route in a for x, y in zip(a[route], b[route], strict=True)]
    same = sum(x.strip() == y.strip() for x, y in pairs)
    alike = sum(_unformatted(x) == _unformatted(y) for x, y in pairs)
    n = max(len(pairs), 1)
    return {
        "sentences": len(pairs),
        "identical": same,
        "share": same / n,
        "identical_but_formatting": alike,
        "share_but_formatting": alike / n,
    }


def _unformatted(text: str) -> str:
    import unicodedata

    text = text.strip()
    while text and unicodedata.category(text[-1]).startswith("P"):
        text = text[:-1].rstrip()
    return text[:1].lower() + text[1:]


if __name__ == "__main__":
    main()
