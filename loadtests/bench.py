"""Engine and server benchmarks: one command, a table of ratios measured side by side.

    python -m loadtests.bench [--quick] [--out runs/bench] [--repeats 5]
        [--only engines,server,lazy] [--threads 1] [--route en-fr]

Models of realistic size with random weights (loadtests/bench_models.py: d512, 12-2 and 6-6,
10 languages, a 32k SentencePiece vocabulary trained on real verses), exported and assembled
by the project's own code and run by CTranslate2 (int8 on CPU). ``--quick``: tiny models, for
CI. Every ratio compares variants measured in the same run, interleaved per repeat (the order
rotates between repeats); a ratio is the median over repeats of the per-repeat ratio.

- engines: decoding tokens/s with the output length held equal (``min_length ==
  max_length``; PyTorch: the end token masked), batch 1 (one call per sentence) and batched,
  greedy and beam 4: (1) 12-2 vs 6-6, (2) per-language filtered vs full target vocabulary,
  (3) an LSL route vs the dense model of the same shape, (5) CTranslate2 vs the PyTorch
  model's own search (``training.search``) on the same weights, (7) the hybrid 12-2 (LSTM
  decoder, on the hybrid engine) vs the Transformer 12-2 and 6-6, with where its time goes;
- server (4): N single-sentence requests sent at once to ``python -m server`` vs one direct
  ``translate_pieces`` call on the same sentences with an engine built as the server builds
  it (same loader, compute type and threads), and the same requests one after another;
- lazy (6): a cold route's first request vs a warm request, and the server's resident memory
  with one route loaded vs every route of the 10-language bundle loaded eagerly.

Writes ``results.json`` (with the machine and the command), ``results.csv`` (every timing)
and ``ratios.png``, ``engines.png``, ``server.png`` into ``--out``.

Long (~880 lines) on purpose: one command, one table; the seven measurements share the model
cache, the interleaving and the ratio table, and each is a few short steps (the models are
built in ``bench_models.py``, the server process and HTTP client live in ``server_process.py``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx

from lsmt_core.routes import parse_route

from . import bench_models
from .server_process import ROOT, ServerProcess, concurrent_requests, metric_sum

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class Mode:
    """Workload sizes of a run."""

    sizes: bench_models.Sizes
    repeats: int
    length: int  # decoded tokens per sentence (engines)
    single: int  # sentences translated one call each ("batch 1")
    batch: int  # sentences in one call ("batched")
    server_n: int  # concurrent requests (server)
    server_length: int  # max_length of the server requests
    cold_routes: int  # cold routes measured (lazy)


FULL = Mode(bench_models.FULL, 5, 32, 4, 16, 32, 48, 4)
QUICK = Mode(bench_models.QUICK, 2, 8, 2, 4, 6, 8, 2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="tiny models (CI)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    p.add_argument("--cache", type=Path, help="built models (default: <out>/cache)")
    p.add_argument("--repeats", type=int, help="default 5 (quick: 2)")
    p.add_argument("--only", default="engines,server,lazy", help="comma-separated parts")
    p.add_argument("--threads", type=int, default=1, help="threads per engine (and PyTorch)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--route", default="en-fr")
    return p.parse_args(argv)


def machine(args: argparse.Namespace) -> dict:
    import ctranslate2

    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "ctranslate2": ctranslate2.__version__,
        "device": args.device,
        "threads": args.threads,
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu_model"] = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    return info


def compute_type(device: str) -> str:
    return "int8_float16" if device == "cuda" else "int8"


# Engines ------------------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    run: Callable[[list[list[str]], int], tuple[float, int]]  # (sources, beam) -> (s, tokens)
    profile: dict[str, float] | None = None  # the hybrid engine's seconds by part (cumulated)


def engine_variant(name, bundle_dir, route, args, length, *, full_vocab=False) -> Variant:
    """The route's engine as the server builds it: CTranslate2, or the hybrid engine."""
    from lsmt_bundle import load_bundle
    from lsmt_bundle.ct2 import translate_pieces
    from lsmt_bundle.engines import load_engine

    bundle = load_bundle(bundle_dir)
    if full_vocab:  # the same bundle without its vocabulary-slice fusion
        bundle.manifest = bundle.manifest.model_copy(update={"fusions": []})
    dense = bundle.assemble(route)
    translator, _ = load_engine(
        dense,
        device=args.device,
        compute_type=compute_type(args.device),
        inter_threads=1,
        intra_threads=args.threads,
    )
    positions = bundle.max_source_positions

    def run(sources: list[list[str]], beam: int) -> tuple[float, int]:
        t0 = time.perf_counter()
        res = translate_pieces(
            translator, sources, positions, beam_size=beam, max_length=length, min_length=length
        )
        dt = time.perf_counter() - t0
        return dt, sum(len(r.hypotheses[0]) for r in res)

    return Variant(name, run, getattr(translator, "profile", None))


def torch_variant(name, models, route, args, length) -> Variant:
    import sentencepiece as spm
    import torch

    from lsmt_core.tags import EOS_ID
    from training.search import beam_search, greedy_search

    torch.set_num_threads(args.threads)
    model = models.torch_model("deep").to(args.device)
    sp = spm.SentencePieceProcessor(model_file=str(models.tokenizer))
    vocab = sp.get_piece_size()
    # The end token masked: every output has ``length`` tokens, as with min_length in CT2.
    allowed = torch.ones(vocab, dtype=torch.bool, device=args.device)
    allowed[EOS_ID] = False

    def run(sources: list[list[str]], beam: int) -> tuple[float, int]:
        ids = [[sp.piece_to_id(p) for p in s] for s in sources]
        width = max(len(i) for i in ids)
        src = torch.tensor([i + [0] * (width - len(i)) for i in ids], device=args.device)
        t0 = time.perf_counter()
        if beam == 1:
            hyps = greedy_search(model, src, route, max_len=length, allowed=allowed)
        else:
            hyps = beam_search(model, src, route, beam_size=beam, max_len=length, allowed=allowed)
        dt = time.perf_counter() - t0
        return dt, sum(len(h.tokens) for h in hyps)

    return Variant(name, run)


ENGINE_COMPARISONS = [
    # (item, title, candidate, baseline, note); {deep} and {even} name the depths, e.g. 12-2
    ("1", "{deep} / {even} (full vocabulary)", "ct2 {deep} full", "ct2 {even} full",
     "paper: ~1.7x"),
    ("2", "filtered / full target vocabulary ({deep})", "ct2 {deep} filtered", "ct2 {deep} full",
     "paper: ~1.3x"),
    ("3", "LSL route / dense of the same shape ({deep}, filtered)", "ct2 LSL {deep} filtered",
     "ct2 {deep} filtered", "expected: ~1.0x"),
    ("5", "CTranslate2 int8 / PyTorch fp32 search ({deep}, full vocab.)", "ct2 {deep} full",
     "torch {deep} full", ""),
    ("7", "hybrid {deep} (LSTM decoder) / Transformer {deep} (full vocab.)",
     "hybrid {deep} full", "ct2 {deep} full", "paper: ~1.7x (GPU)"),
    ("7", "hybrid {deep} (LSTM decoder) / Transformer {even} (full vocab.)",
     "hybrid {deep} full", "ct2 {even} full", "paper: ~3x (GPU)"),
]  # fmt: skip


def tokenized_sources(models, route, n: int, limit: int) -> list[list[str]]:
    from lsmt_bundle import load_bundle
    from server.bundles import ServedBundle

    served = ServedBundle(load_bundle(models.bundles["deep"]))
    out = []
    for text in models.sentences[route[0]]:
        pieces = served.encode(text, route)
        if len(pieces) <= limit:
            out.append(pieces)
        if len(out) == n:
            return out
    raise SystemExit(f"not enough {route[0]} sentences of at most {limit} pieces")


def decode_settings(batch: int) -> list[tuple[str, int, int]]:
    """(setting, sentences per call, beam): batch 1 (one call per sentence) and ``batch``
    sentences in one call, each greedy and beam 4."""
    return [(f"batch {n}, beam {beam}", n, beam) for n in (1, batch) for beam in (1, 4)]


def time_setting(
    variant: Variant, sources: list[list[str]], n: int, beam: int, single: int
) -> tuple[float, int]:
    """(seconds, tokens) of one setting: ``single`` calls of one sentence each when ``n`` is
    1, else one call on ``n`` sentences."""
    calls = [[s] for s in sources[:single]] if n == 1 else [sources[:n]]
    timed = [variant.run(c, beam) for c in calls]
    return sum(t for t, _ in timed), sum(k for _, k in timed)


def engine_variants(models, args, route, length: int, depth: dict[str, str]) -> list[Variant]:
    """The six engines compared: CTranslate2 even/deep, full/filtered vocabulary, LSL, the
    hybrid engine of the deep model with an LSTM decoder, and the PyTorch search on the deep
    model's weights."""
    deep, even, b = depth["deep"], depth["even"], models.bundles
    return [
        engine_variant(f"ct2 {even} full", b["even"], route, args, length, full_vocab=True),
        engine_variant(f"ct2 {deep} full", b["deep"], route, args, length, full_vocab=True),
        engine_variant(f"ct2 {deep} filtered", b["deep"], route, args, length),
        engine_variant(f"ct2 LSL {deep} filtered", b["lsl"], route, args, length),
        engine_variant(f"hybrid {deep} full", b["hybrid"], route, args, length, full_vocab=True),
        torch_variant(f"torch {deep} full", models, route, args, length),
    ]


def measure_engines(variants, sources, settings, mode: Mode, log) -> list[dict]:
    """One row per (repeat, setting, variant); within a repeat the variants run side by side
    per setting, and their order rotates between repeats so that no variant always goes
    first."""
    for v in variants:  # first calls allocate; not timed
        v.run(sources[:2], 1)
    rows = []
    for rep in range(mode.repeats):
        order = variants[rep % len(variants) :] + variants[: rep % len(variants)]
        for setting, n, beam in settings:
            for v in order:
                before = dict(v.profile or {})
                seconds, tokens = time_setting(v, sources, n, beam, mode.single)
                rows.append(
                    {
                        "part": "engines",
                        "repeat": rep,
                        "setting": setting,
                        "variant": v.name,
                        "seconds": seconds,
                        "tokens": tokens,
                        "tokens_per_s": tokens / seconds,
                        **_time_split(before, v.profile),
                    }
                )
        log(f"engines: repeat {rep + 1}/{mode.repeats} done", flush=True)
    return rows


def _time_split(before: dict[str, float], after: dict[str, float] | None) -> dict[str, float]:
    """A hybrid engine's seconds of one timing by part: CTranslate2 encoder, ONNX Runtime
    decoder, and the rest of its ``translate_batch`` (the numpy search and the copies)."""
    if after is None:
        return {}
    parts = ("encoder", "decoder", "total")
    spent = {part: after.get(part, 0.0) - before.get(part, 0.0) for part in parts}
    search = spent["total"] - spent["encoder"] - spent["decoder"]
    return {"encoder_s": spent["encoder"], "decoder_s": spent["decoder"], "search_s": search}


def hybrid_time_split(rows: list[dict], settings) -> list[dict]:
    """Per setting, the median share of the hybrid engine's time in each part."""
    split = []
    for setting, _, _ in settings:
        timed = [r for r in rows if r["setting"] == setting and "encoder_s" in r]
        shares = {
            part: statistics.median(r[f"{part}_s"] / r["seconds"] for r in timed)
            for part in ("encoder", "decoder", "search")
        }
        split.append({"setting": setting, "variant": timed[0]["variant"], **shares})
    return split


def check_equal_lengths(rows: list[dict], mode: Mode) -> None:
    """Every sentence decoded to ``mode.length`` tokens: equal work makes the ratios fair."""
    for r in rows:
        n_sent = mode.single if r["setting"].startswith("batch 1,") else mode.batch
        if r["tokens"] != n_sent * mode.length:
            raise SystemExit(f"output of another length than {mode.length} tokens: {r}")


def engine_table(rows: list[dict], settings, depth: dict[str, str]) -> list[dict]:
    """ENGINE_COMPARISONS, each in every setting."""
    table = []
    for num, title, cand, base, note in ENGINE_COMPARISONS:
        title, cand, base = (x.format(**depth) for x in (title, cand, base))
        for setting, _, _ in settings:
            table.append(
                {
                    "item": num,
                    "comparison": title,
                    "setting": setting,
                    **_paired(rows, setting, cand, base),
                    "note": note,
                }
            )
    return table


def bench_engines(models, mode: Mode, args, route, log) -> dict:
    depth = {k: "-".join(map(str, getattr(models.sizes, k))) for k in ("deep", "even")}
    log(f"engines: building {depth['deep']} and {depth['even']} engines", flush=True)
    variants = engine_variants(models, args, route, mode.length, depth)
    sources = tokenized_sources(models, route, max(mode.batch, mode.single), 128)
    settings = decode_settings(mode.batch)
    rows = measure_engines(variants, sources, settings, mode, log)
    check_equal_lengths(rows, mode)
    return {
        "route": "-".join(route),
        "output_tokens_per_sentence": mode.length,
        "sentences": {"batch 1": mode.single, "batched": mode.batch},
        "source_pieces_mean": statistics.mean(len(s) for s in sources[: mode.batch]),
        "table": engine_table(rows, settings, depth),
        "hybrid_time_split": hybrid_time_split(rows, settings),
        "rows": rows,
    }


def _paired(rows: list[dict], setting: str, cand: str, base: str) -> dict:
    """Medians of tokens/s and the median of the per-repeat ratios."""

    def tps(variant: str) -> dict[int, float]:
        return {
            r["repeat"]: r["tokens_per_s"]
            for r in rows
            if r["setting"] == setting and r["variant"] == variant
        }

    c, b = tps(cand), tps(base)
    return {
        "candidate": cand,
        "baseline": base,
        "candidate_tokens_per_s": statistics.median(c.values()),
        "baseline_tokens_per_s": statistics.median(b.values()),
        "ratio": statistics.median(c[k] / b[k] for k in c),
    }


# Server (4) ---------------------------------------------------------------------------------


def _post(client: httpx.Client, body: dict) -> float:
    t0 = time.perf_counter()
    client.post("/v1/translate", json=body).raise_for_status()
    return time.perf_counter() - t0


def _output_tokens(url: str) -> float:
    return metric_sum(url, "lsmt_tokens_total", direction="output")


# Each way of translating returns (seconds, output tokens, batches): batches are the engine
# calls (direct: one), as the server counted them, or the requests sent one after another.


def _direct(
    translator, pieces, positions: int, length: int, guards: dict, beam: int
) -> tuple[float, int, int]:
    """One ``translate_pieces`` call on every sentence, as the server's engine would run it."""
    from lsmt_bundle.ct2 import translate_pieces

    t0 = time.perf_counter()
    res = translate_pieces(
        translator, pieces, positions, beam_size=beam, max_length=length, **guards
    )
    return time.perf_counter() - t0, sum(len(r.hypotheses[0]) for r in res), 1


def _server_concurrent(url: str, bodies: list[dict]) -> tuple[float, int, int]:
    """Every request sent at once; the server's metrics count the tokens and batches."""
    out0 = _output_tokens(url)
    b0 = metric_sum(url, "lsmt_batch_size_count")
    dt, _ = concurrent_requests(url, bodies)
    out = _output_tokens(url) - out0
    return dt, int(out), int(metric_sum(url, "lsmt_batch_size_count") - b0)


def _server_sequential(
    url: str, client: httpx.Client, bodies: list[dict]
) -> tuple[float, int, int]:
    """The requests one after another."""
    out0 = _output_tokens(url)
    dt = sum(_post(client, b) for b in bodies)
    out = _output_tokens(url) - out0
    return dt, int(out), len(bodies)


def measure_server(
    server: ServerProcess,
    client: httpx.Client,
    bodies: list[dict],
    direct: Callable[[], tuple[float, int, int]],
    repeats: int,
    setting: str,
    sentences: int,
) -> list[dict]:
    """One row per (repeat, way of translating): ``direct`` next to the same requests sent
    to the server at once and one after another; the order rotates between repeats."""
    ways = [
        ("direct", direct),
        ("server concurrent", partial(_server_concurrent, server.url, bodies)),
        ("server sequential", partial(_server_sequential, server.url, client, bodies)),
    ]
    direct()  # warm both sides
    concurrent_requests(server.url, bodies[:2])
    rows = []
    for rep in range(repeats):
        for name, fn in ways[rep % 3 :] + ways[: rep % 3]:
            seconds, tokens, batches = fn()
            rows.append(
                {
                    "part": "server",
                    "repeat": rep,
                    "setting": setting,
                    "variant": name,
                    "seconds": seconds,
                    "tokens": tokens,
                    "batches": batches,
                    "sentences_per_s": sentences / seconds,
                }
            )
    return rows


SERVER_COMPARISONS = [  # (title, candidate, baseline)
    ("server concurrent / direct translate_batch", "server concurrent", "direct"),
    ("server concurrent / server sequential", "server concurrent", "server sequential"),
]


def server_table(rows: list[dict]) -> list[dict]:
    """SERVER_COMPARISONS in every setting: medians of sentences/s and of the per-repeat
    ratios, with the output tokens of both sides (equal when the comparison is fair)."""
    table = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        sub = [r for r in rows if r["setting"] == setting]
        for title, cand, base in SERVER_COMPARISONS:
            c = {r["repeat"]: r for r in sub if r["variant"] == cand}
            b = {r["repeat"]: r for r in sub if r["variant"] == base}
            table.append(
                {
                    "item": "4",
                    "comparison": title,
                    "setting": setting,
                    "candidate": cand,
                    "baseline": base,
                    "unit": "sentences/s",
                    "candidate_value": statistics.median(r["sentences_per_s"] for r in c.values()),
                    "baseline_value": statistics.median(r["sentences_per_s"] for r in b.values()),
                    "ratio": statistics.median(
                        c[k]["sentences_per_s"] / b[k]["sentences_per_s"] for k in c
                    ),
                    "note": "target >= 0.9x" if base == "direct" else "batching gain",
                    "output_tokens": {
                        cand: statistics.median(r["tokens"] for r in c.values()),
                        base: statistics.median(r["tokens"] for r in b.values()),
                    },
                    "server_batches": statistics.median(r["batches"] for r in c.values()),
                }
            )
    return table


# The benchmark's models have random weights: the output checks would flag every output and
# decode it again (the retry, at beam 4), timing what means nothing; the decoding guards stay.
RANDOM_WEIGHTS_ENV = {"LSMT_OUTPUT_CHECKS": "false"}


def _server_env(args, route) -> dict[str, str]:
    return {
        "LSMT_DEVICE": args.device,
        "LSMT_WARMUP_ROUTES": "-".join(route),
        **RANDOM_WEIGHTS_ENV,
    }


def bench_server(models, mode: Mode, args, route, log) -> dict:
    from server.bundles import load_served_bundle
    from server.engine_loader import default_loader
    from server.settings import Settings
    from server.text import sentences_of, split_text

    src, tgt = route
    bundle_dir = models.bundles["lsl"]
    texts = [t for t in models.sentences[src] if len(t) <= 200][: mode.server_n]
    served = load_served_bundle(bundle_dir)
    # The server's own splitting and tokenizing, so both sides translate the same pieces.
    pieces = [served.encode(s, route) for t in texts for s in sentences_of(split_text(t, src))]
    settings = Settings(device=args.device)
    translator, _ = default_loader(served.bundle, route, settings)
    positions, length = served.max_source_positions, mode.server_length
    guards = {
        "repetition_penalty": settings.repetition_penalty,
        "no_repeat_ngram_size": settings.no_repeat_ngram_size,
    }
    rows = []
    log("server: starting python -m server", flush=True)
    with (
        ServerProcess([bundle_dir], _server_env(args, route)) as server,
        httpx.Client(base_url=server.url, timeout=300) as client,
    ):
        for beam in (1, 4):
            bodies = [
                {"text": t, "source": src, "target": tgt, "beam_size": beam, "max_length": length}
                for t in texts
            ]
            direct = partial(_direct, translator, pieces, positions, length, guards, beam)
            setting = f"{len(texts)} requests, beam {beam}"
            rows += measure_server(
                server, client, bodies, direct, mode.repeats, setting, len(pieces)
            )
            log(f"server: beam {beam} done", flush=True)
    return {
        "route": f"{src}-{tgt}",
        "requests": len(texts),
        "sentences": len(pieces),
        "max_length": length,
        "server_settings": {
            "compute_type": settings.resolved_compute_type,
            "inter_threads": settings.resolved_inter_threads,
            "intra_threads": settings.resolved_intra_threads,
            "batch_wait_ms": settings.batch_wait_ms,
        },
        "table": server_table(rows),
        "rows": rows,
    }


# Lazy loading (6) ---------------------------------------------------------------------------


@dataclass
class LazyServer:
    """A server started with nothing loaded, then asked for one cold route after another."""

    start_s: float  # until /readyz
    rss_empty: int  # resident bytes before any request
    rss_one: int  # after the first route's first request
    engine_bytes_one: int  # engine memory the server reports with one route loaded
    rows: list[dict]  # per route: first (cold) request and median of 3 warm ones, in s


@dataclass
class EagerServer:
    """A server that loaded every route at start."""

    start_s: float  # until /readyz
    rss: int
    engine_bytes: int
    engines_loaded: int
    routes: int


def _lazy_env(args, warmup: str, engine_cache: Path | None = None) -> dict[str, str]:
    big = str(64 * GiB)  # no eviction: every engine stays
    env = {
        "LSMT_DEVICE": args.device,
        "LSMT_WARMUP_ROUTES": warmup,
        "LSMT_DEVICE_BUDGET_BYTES": big,
        **RANDOM_WEIGHTS_ENV,
    }
    if engine_cache is not None:
        env["LSMT_ENGINE_CACHE_DIR"] = str(engine_cache)
        # a miss must stay a miss: no background fill (server/cache_fill.py), whose result is
        # what the hit rows measure
        env["LSMT_ENGINE_CACHE_FILL"] = "false"
    return env


def measure_lazy(
    bundle_dir: Path,
    args,
    src: str,
    targets: list[str],
    texts: list[str],
    engine_cache: Path | None = None,
) -> LazyServer:
    """Start-up, memory and per-route cold and warm latency of a server that loads routes on
    first use (from ``engine_cache`` when it holds their engines, else filling it)."""

    def body(i: int, tgt: str) -> dict:
        text = texts[i % len(texts)]
        return {"text": text, "source": src, "target": tgt, "beam_size": 1, "max_length": 32}

    rows = []
    t0 = time.perf_counter()
    with (
        ServerProcess([bundle_dir], _lazy_env(args, "[]", engine_cache)) as server,
        httpx.Client(base_url=server.url, timeout=300) as client,
    ):
        start_s = time.perf_counter() - t0
        rss_empty = server.rss_bytes()
        for i, tgt in enumerate(targets):
            cold = _post(client, body(i, tgt))
            if i == 0:
                rss_one = server.rss_bytes()
                bytes_one = client.get("/v1/models").json()["used"]["device_bytes"]
            warm = statistics.median(_post(client, body(i + k + 1, tgt)) for k in range(3))
            rows.append({"part": "lazy", "route": f"{src}-{tgt}", "cold_s": cold, "warm_s": warm})
    return LazyServer(start_s, rss_empty, rss_one, bytes_one, rows)


def measure_eager(bundle_dir: Path, args, engine_cache: Path | None = None) -> EagerServer:
    """Start-up and memory of a server that loads every route before /readyz (from
    ``engine_cache`` when it holds their engines, else filling it)."""
    t0 = time.perf_counter()
    with ServerProcess([bundle_dir], _lazy_env(args, "all", engine_cache)) as server:
        start_s = time.perf_counter() - t0
        rss = server.rss_bytes()
        info = httpx.get(f"{server.url}/v1/models", timeout=30).json()
    return EagerServer(
        start_s,
        rss,
        engine_bytes=info["used"]["device_bytes"],
        engines_loaded=sum(1 for e in info["engines"] if e["state"] == "loaded"),
        routes=len(info["bundles"][0]["routes"]),
    )


def cache_rows(lazy: LazyServer, miss: LazyServer, hit: LazyServer, src: str) -> list[dict]:
    """Cold first requests with the engine cache (a miss fills it, a hit loads from it) next
    to those without it."""
    no_cache = statistics.median(r["cold_s"] for r in lazy.rows)
    rows = []
    for name, run in (("engine-cache hit", hit), ("engine-cache miss", miss)):
        cold = statistics.median(r["cold_s"] for r in run.rows)
        rows.append(
            {
                "item": "6",
                "comparison": f"cold route on an {name} / without the cache, first request",
                "setting": f"{len(run.rows)} routes from {src}, greedy",
                "candidate": name,
                "baseline": "no cache",
                "unit": "ms",
                "candidate_value": cold * 1000,
                "baseline_value": no_cache * 1000,
                "ratio": cold / no_cache,
                "note": "load + translate" if "hit" in name else "assemble + store + load",
            }
        )
    # A hit loads a built CTranslate2 model and assembles nothing: the process + engine baseline
    # measured, with the engine's own load and first translation in it.
    rows.append(
        {
            "item": "6",
            "comparison": "resident memory after one cold route, assembled / loaded built",
            "setting": f"{lazy.rows[0]['route']}, nothing else loaded",
            "candidate": "assembled (no cache)",
            "baseline": "engine-cache hit",
            "unit": "MiB",
            "candidate_value": lazy.rss_one / MiB,
            "baseline_value": hit.rss_one / MiB,
            "ratio": lazy.rss_one / hit.rss_one,
            "note": "<= 1.0: no assembly leftovers",
        }
    )
    return rows


def lazy_table(lazy: LazyServer, eager: EagerServer, src: str) -> list[dict]:
    """Cold vs warm latency, eager vs lazy memory and eager vs lazy start-up."""
    rows = lazy.rows
    engines = f"{eager.routes} routes, {eager.engines_loaded} engines"
    engine_mib = f"engines {eager.engine_bytes / MiB:.0f} vs {lazy.engine_bytes_one / MiB:.0f} MiB"
    return [
        {
            "item": "6",
            "comparison": "cold route / warm route, first request latency",
            "setting": f"{len(rows)} routes from {src}, greedy",
            "candidate": "cold",
            "baseline": "warm",
            "unit": "ms",
            "candidate_value": statistics.median(r["cold_s"] for r in rows) * 1000,
            "baseline_value": statistics.median(r["warm_s"] for r in rows) * 1000,
            "ratio": statistics.median(r["cold_s"] / r["warm_s"] for r in rows),
            "note": "assemble + load + translate",
        },
        {
            "item": "6",
            "comparison": "resident memory, every route eager / one route lazy",
            "setting": engines,
            "candidate": "eager",
            "baseline": "lazy, one route",
            "unit": "MiB",
            "candidate_value": eager.rss / MiB,
            "baseline_value": lazy.rss_one / MiB,
            "ratio": eager.rss / lazy.rss_one,
            "note": engine_mib,
        },
        {
            "item": "6",
            "comparison": "start-up time, eager / lazy",
            "setting": engines,
            "candidate": "eager",
            "baseline": "lazy",
            "unit": "s",
            "candidate_value": eager.start_s,
            "baseline_value": lazy.start_s,
            "ratio": eager.start_s / lazy.start_s,
            "note": "until /readyz",
        },
        {
            "item": "6",
            "comparison": "resident memory after one cold route / process + engine",
            "setting": f"{rows[0]['route']}, nothing else loaded",
            "candidate": "after the route",
            "baseline": "empty process + engine bytes",
            "unit": "MiB",
            "candidate_value": lazy.rss_one / MiB,
            "baseline_value": (lazy.rss_empty + lazy.engine_bytes_one) / MiB,
            "ratio": lazy.rss_one / (lazy.rss_empty + lazy.engine_bytes_one),
            "note": "engine bytes as CTranslate2 reports them",
        },
    ]


def eager_cache_row(eager: EagerServer, hit: EagerServer) -> dict:
    """Every route eager from a filled engine cache (``build-engines`` or a previous start)
    next to the same start without the cache."""
    return {
        "item": "6",
        "comparison": "start-up time, eager on an engine-cache hit / without the cache",
        "setting": f"{hit.routes} routes, {hit.engines_loaded} engines",
        "candidate": "engine-cache hit",
        "baseline": "no cache",
        "unit": "s",
        "candidate_value": hit.start_s,
        "baseline_value": eager.start_s,
        "ratio": hit.start_s / eager.start_s,
        "note": "until /readyz",
    }


def bench_lazy(models, mode: Mode, args, log) -> dict:
    bundle_dir = models.bundles["lsl"]
    src = "en"
    targets = [t for t in models.sizes.languages if t != src][: mode.cold_routes]
    texts = [t for t in models.sentences[src] if len(t) <= 200]
    log("lazy: server with nothing loaded", flush=True)
    lazy = measure_lazy(bundle_dir, args, src, targets, texts)
    with tempfile.TemporaryDirectory(prefix="lsmt-engine-cache-") as cache:
        log("lazy: the same with an empty engine cache, then with the filled one", flush=True)
        miss = measure_lazy(bundle_dir, args, src, targets, texts, Path(cache))
        hit = measure_lazy(bundle_dir, args, src, targets, texts, Path(cache))
    log("lazy: server loading every route at start, then again with the engine cache", flush=True)
    eager = measure_eager(bundle_dir, args)
    with tempfile.TemporaryDirectory(prefix="lsmt-engine-cache-") as cache:
        eager_miss = measure_eager(bundle_dir, args, Path(cache))
        eager_hit = measure_eager(bundle_dir, args, Path(cache))
    return {
        "rss_bytes": {
            "nothing_loaded": lazy.rss_empty,
            "one_route": lazy.rss_one,
            "one_route_cache_hit": hit.rss_one,
            "all_routes": eager.rss,
        },
        "engine_bytes": {"one_route": lazy.engine_bytes_one, "all_routes": eager.engine_bytes},
        "engines_loaded_eager": eager.engines_loaded,
        "routes": eager.routes,
        "start_s": {
            "lazy": lazy.start_s,
            "eager": eager.start_s,
            "eager_cache_miss": eager_miss.start_s,
            "eager_cache_hit": eager_hit.start_s,
        },
        "table": [
            *lazy_table(lazy, eager, src),
            *cache_rows(lazy, miss, hit, src),
            eager_cache_row(eager, eager_hit),
        ],
        "rows": lazy.rows,
        "cache_rows": {"miss": miss.rows, "hit": hit.rows},
    }


# Output -------------------------------------------------------------------------------------


def table_rows(result: dict) -> list[dict]:
    """Every part's table in one list, engines first; tokens/s where no unit is given."""
    out = []
    for part in ("engines", "server", "lazy"):
        for r in result.get(part, {}).get("table", []):
            out.append(
                {
                    "unit": r.get("unit", "tokens/s"),
                    "candidate_value": r.get("candidate_value", r.get("candidate_tokens_per_s")),
                    "baseline_value": r.get("baseline_value", r.get("baseline_tokens_per_s")),
                    **{k: r[k] for k in ("item", "comparison", "setting", "ratio", "note")},
                }
            )
    return sorted(out, key=lambda r: r["item"])


def format_table(rows: list[dict]) -> str:
    lines = [
        f"{'#':<2} {'comparison':<58} {'setting':<20} {'baseline':>10} {'candidate':>10} "
        f"{'unit':<12} {'ratio':>6}  note",
    ]
    for r in rows:
        lines.append(
            f"{r['item']:<2} {r['comparison']:<58} {r['setting']:<20} "
            f"{r['baseline_value']:>10.1f} {r['candidate_value']:>10.1f} {r['unit']:<12} "
            f"{r['ratio']:>5.2f}x  {r['note']}"
        )
    return "\n".join(lines)


def write_outputs(result: dict, out: Path) -> list[str]:
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    parts = ("engines", "server", "lazy")
    rows = [r for part in parts for r in result.get(part, {}).get("rows", [])]
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return ["results.json", "results.csv", *plot(result, out)]


def plot(result: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    rows = table_rows(result)
    if rows:
        fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.2))
        labels = [f"({r['item']}) {r['comparison']}\n{r['setting']}" for r in rows][::-1]
        ratios = [r["ratio"] for r in rows][::-1]
        bars = ax.barh(range(len(rows)), ratios, color="#4a8")
        ax.bar_label(bars, fmt="%.2fx", fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(rows)), labels, fontsize=6)
        ax.set_xlabel("ratio (candidate / baseline, median of per-repeat ratios)")
        ax.set_title(_title(result), fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "ratios.png", dpi=120)
        plt.close(fig)
        written.append("ratios.png")
    for part, key, unit, name in (
        ("engines", "tokens_per_s", "decoded tokens/s", "engines.png"),
        ("server", "sentences_per_s", "sentences/s", "server.png"),
    ):
        prow = result.get(part, {}).get("rows", [])
        if not prow:
            continue
        settings = list(dict.fromkeys(r["setting"] for r in prow))
        variants = list(dict.fromkeys(r["variant"] for r in prow))
        fig, ax = plt.subplots(figsize=(9, 4))
        width = 0.8 / len(variants)
        for j, v in enumerate(variants):
            med = [
                statistics.median(r[key] for r in prow if r["setting"] == s and r["variant"] == v)
                for s in settings
            ]
            ax.bar([i + j * width for i in range(len(settings))], med, width, label=v)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(settings))], settings, fontsize=8)
        ax.set_ylabel(f"{unit} (median)")
        ax.set_title(_title(result), fontsize=8)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(name)
    return written


def _title(result: dict) -> str:
    m = result["machine"]
    return f"{result['mode']} mode, {m.get('cpu_model', m['processor'])}, {m['cpu_count']} cores"


# Main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    mode = QUICK if args.quick else FULL
    if args.repeats:
        mode = Mode(**{**mode.__dict__, "repeats": args.repeats})
    parts = set(args.only.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    route = parse_route(args.route)

    def log(msg: str, **kw) -> None:
        print(msg, **kw)

    started = time.perf_counter()
    models = bench_models.build(mode.sizes, args.cache or args.out / "cache", log)
    result: dict = {
        "command": "python -m loadtests.bench " + " ".join(sys.argv[1:] if argv is None else argv),
        "mode": "quick" if args.quick else "full",
        "machine": machine(args),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sizes": {**mode.sizes.__dict__, "target_vocab_sizes": models.target_vocab_sizes},
        "workload": {k: v for k, v in mode.__dict__.items() if k != "sizes"},
    }
    if "engines" in parts:
        result["engines"] = bench_engines(models, mode, args, route, log)
    if "server" in parts:
        result["server"] = bench_server(models, mode, args, route, log)
    if "lazy" in parts:
        result["lazy"] = bench_lazy(models, mode, args, log)
    result["seconds"] = time.perf_counter() - started
    result["table"] = table_rows(result)
    files = write_outputs(result, args.out)
    m = result["machine"]
    print(
        f"\n{result['mode']} mode; {m.get('cpu_model', m['processor'])}, {m['cpu_count']} cores, "
        f"{args.device}, {compute_type(args.device)}, {args.threads} thread(s) per engine; "
        f"{mode.repeats} repeats, interleaved; ratio = median of per-repeat ratios"
    )
    print(format_table(result["table"]))
    print(f"wrote {', '.join(files)} into {args.out} ({result['seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
