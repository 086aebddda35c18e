"""The locust runner and the benchmark, end to end in quick mode on tiny models.

Outputs are produced and well formed; no timing is asserted (these machines are shared).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick_models(tmp_path_factory):
    """The benchmark's quick models (tiny, random weights, real tokenizer), built once."""
    from loadtests import bench_models

    cache = tmp_path_factory.mktemp("bench-cache")
    return cache, bench_models.build(bench_models.QUICK, cache, log=lambda *a, **k: None)


def _png(path: Path) -> None:
    assert path.is_file() and path.read_bytes()[:8] == PNG, path


def test_bench_quick_writes_every_ratio(quick_models, tmp_path):
    from loadtests import bench

    cache, _ = quick_models
    out = tmp_path / "bench"
    result = bench.main(["--quick", "--repeats", "1", "--out", str(out), "--cache", str(cache)])

    saved = json.loads((out / "results.json").read_text())
    assert saved["mode"] == "quick" and saved["machine"]["cpu_count"] >= 1
    items = {r["item"] for r in saved["table"]}
    assert items == {"1", "2", "3", "4", "5", "6", "7"}
    for row in saved["table"]:
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert row["baseline_value"] > 0 and row["candidate_value"] > 0, row
    # Engines: 4 settings (batch 1 / batched, greedy / beam 4) per comparison, equal lengths.
    engine_rows = result["engines"]["rows"]
    assert {r["setting"] for r in engine_rows} == {
        "batch 1, beam 1",
        "batch 1, beam 4",
        "batch 4, beam 1",
        "batch 4, beam 4",
    }
    assert len({r["variant"] for r in engine_rows}) == 6
    # The hybrid engine's time, split between its encoder, decoder and search, adds up.
    for split in result["engines"]["hybrid_time_split"]:
        shares = [split[p] for p in ("encoder", "decoder", "search")]
        assert all(s > 0 for s in shares) and sum(shares) == pytest.approx(1.0, abs=0.05), split
    # Server: both sides decoded the same number of tokens.
    for row in result["server"]["table"]:
        if row["baseline"] == "direct":
            assert len(set(row["output_tokens"].values())) == 1, row["output_tokens"]
    lazy = result["lazy"]
    assert lazy["engines_loaded_eager"] == len(bench.QUICK.sizes.languages)
    assert lazy["rss_bytes"]["all_routes"] > 0 and lazy["rss_bytes"]["one_route_cache_hit"] > 0
    assert set(lazy["start_s"]) == {"lazy", "eager", "eager_cache_miss", "eager_cache_hit"}
    assert all(s > 0 for s in lazy["start_s"].values())
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["part"] for r in rows} == {"engines", "server", "lazy"}
    for name in ("ratios.png", "engines.png", "server.png"):
        _png(out / name)


def test_locust_run_and_step_mode(quick_models, small_corpus, tmp_path):
    """A real server on the quick LSL bundle, sentences from a corpus's test split."""
    from loadtests import run

    _, models = quick_models
    bundle = str(models.bundles["lsl"])
    out = tmp_path / "run"
    common = [bundle, "--corpus", str(small_corpus), "--device-budget-mb", "1"]
    summary = run.main([*common, "--users", "3", "--duration", "5s", "--out", str(out)])

    saved = json.loads((out / "summary.json").read_text())
    assert saved["requests"] == summary["requests"] > 0
    for key in ("requests_per_s", "p50_ms", "p95_ms", "p99_ms", "failures"):
        assert saved[key] is not None, key
    assert saved["failures"] == 0, saved["by_name"]
    assert saved["traffic"]["sentences"].endswith("(test split)")
    assert {"de", "en"} <= set(json.loads((out / "traffic.json").read_text())["sentences"])
    # A 1 MB budget holds one tiny engine: routes were loaded lazily and evicted.
    assert saved["server"]["engine_loads"] >= 2 and saved["server"]["engine_evictions"] >= 1
    for suffix in ("stats", "stats_history", "failures"):
        assert (out / f"locust_{suffix}.csv").is_file()
    _png(out / "latency.png")
    _png(out / "throughput.png")

    steps = tmp_path / "steps"
    args = ["--step", "--step-users", "1,2", "--step-duration", "3s", "--p95-target-ms", "1e9"]
    result = run.main([*common, *args, "--out", str(steps)])
    assert [s["users"] for s in result["steps"]] == [1, 2]
    assert result["throughput_at_target"]["users"] in (1, 2)
    assert result["crossed_at_users"] is None
    _png(steps / "steps.png")


def test_bench_methods_quick(small_corpus, small_tokenizer, tmp_path):
    """The method-recipe throughput runner, one round on tiny recipes; no timing asserted."""
    from loadtests import bench_methods

    out = tmp_path / "methods"
    result = bench_methods.main(
        [
            "--recipes",
            "tiny,tiny_lms_fd,tiny_laa_lee",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--batch-tokens",
            "256",
            "--pairs-per-route",
            "50",
            "--set",
            f"data.dir={small_corpus}",
            f"data.tokenizer={small_tokenizer}",
            "--out",
            str(out),
        ]
    )
    saved = json.loads((out / "results.json").read_text())
    assert saved["baseline"] == "tiny" and saved == json.loads(json.dumps(result))
    rows = {r["recipe"]: r for r in saved["results"]}
    assert list(rows) == ["tiny", "tiny_lms_fd", "tiny_laa_lee"]
    assert rows["tiny"]["ratio_median"] == 1.0
    for row in rows.values():
        assert math.isfinite(row["ratio_median"]) and row["ratio_median"] > 0, row
        assert row["tokens"] > 0 and math.isfinite(row["mean_nll"]), row
    # the methods add trainable parameters to the same base model
    assert rows["tiny_lms_fd"]["trainable_parameters"] > rows["tiny"]["trainable_parameters"]
    assert rows["tiny_laa_lee"]["trainable_parameters"] > rows["tiny"]["trainable_parameters"]
    with open(out / "results.csv", newline="") as f:
        assert [r["recipe"] for r in csv.DictReader(f)] == list(rows)


def test_bench_sparse_quick_times_both_engines_on_equal_work(tmp_path):
    """The sparse-vs-dense benchmark end to end on a tiny model (no timing asserted)."""
    from loadtests import bench_sparse

    out = tmp_path / "sparse"
    result = bench_sparse.main(["--quick", "--out", str(out)])
    saved = json.loads((out / "results.json").read_text())
    assert saved["table"] == result["table"] and len(saved["table"]) == 4
    for row in saved["table"]:
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
    tokens = {(r["setting"], r["variant"]): r["tokens"] for r in saved["rows"]}
    for setting in {s for s, _ in tokens}:  # equal work on both sides
        assert tokens[(setting, "sparse")] == tokens[(setting, "dense")], setting
    # the sparse route's engine is really smaller: layers removed, FFN sliced
    params = saved["engine_parameters"]
    assert 0 < params["sparse"] < params["dense"]


def test_fair_share_benchmark_quick(tmp_path):
    """Every policy measured on real servers with the default model; outputs well formed."""
    from loadtests import bench_fair

    out = tmp_path / "fair"
    result = bench_fair.main(["--quick", "--small-rate", "4", "--out", str(out)])
    saved = json.loads((out / "fair_share.json").read_text())
    assert [r["policy"] for r in saved["rows"]] == ["fifo", "fair", "express-shared", "express"]
    for row in saved["rows"]:
        assert row["heavy_errors"] == 0 and row["heavy_sentences_per_s"] > 0, row
        assert 0 < row["alone_p50_s"] <= row["alone_p95_s"], row
        assert row["small_requests_beside"] == 4, row  # sent on time: 4 a second for 1 s
        # the server's stages (Server-Timing) were read: a sentence was decoded
        assert row["beside_median_decode_s"] > 0 and row["beside_tail_decode_s"] > 0, row
    assert set(result["over_fifo"]) == {"fair", "express-shared", "express"}
    assert set(result["over_fifo"]["express"]) == {"small_p95_beside", "heavy_throughput"}
    with open(out / "fair_share.csv") as f:
        assert len(list(csv.DictReader(f))) == 4
    _png(out / "fair_share.png")


def test_lanes_benchmark_counts_the_engine_and_its_twin(tmp_path):
    """One translator against the engine with its bulk twin open, each in its own process on
    the default model: the twin's budget bytes are exactly the engine's, and every figure was
    measured."""
    from loadtests import bench_lanes

    out = tmp_path / "lanes"
    result = bench_lanes.main(["--rounds", "1", "--routes", "en-es,en-fr", "--out", str(out)])
    rows = json.loads((out / "lanes.json").read_text())["rows"]
    assert [r["way"] for r in rows] == ["one translator", "twin"]
    one, twin = rows
    assert twin["budget_mib"] == pytest.approx(2 * one["budget_mib"])
    assert all(r["resident_mib"] > 0 and r["cold_load_ms"] > 0 for r in rows), rows
    assert result["twin_over_one"]["budget_mib"] == pytest.approx(2.0)
    with open(out / "lanes.csv") as f:
        assert len(list(csv.DictReader(f))) == 2


def test_cluster_benchmark_quick(tmp_path):
    """Both modes measured on a real local Ray with the default model; outputs well formed."""
    from loadtests import bench_cluster

    out = tmp_path / "cluster"
    result = bench_cluster.main(["--quick", "--out", str(out)])
    saved = json.loads((out / "cluster_multiplex.json").read_text())
    assert [r["mode"] for r in saved["rows"]] == ["multiplex", "key-blind"]
    for row in saved["rows"]:
        assert row["errors"] == 0 and row["engine_loads"] >= 1, row
        assert 0 < row["p50_s"] <= row["p95_s"], row
        # each translator holds at most the engines its budget was sized for
        assert all(len(keys) <= 2 for keys in row["resident"].values()), row
    assert set(result["multiplex_over_key_blind"]) >= {"loads_per_1000", "p95_s"}
    with open(out / "cluster_multiplex.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    _png(out / "cluster_multiplex.png")


def test_a_request_two_replicas_decoded_for_counts_half_for_each():
    """An output check's retry can go to the other replica: the answer names both."""
    from loadtests.bench_cluster_replace import shares_by_bucket

    answers = [(0.1, "T#a", 200), (0.2, "T#a,T#b", 200), (0.3, "T#b", 200), (0.4, "", 503)]
    (row,) = shares_by_bucket(answers, bucket=1.0)
    assert row["shares"] == {"T#a": 0.5, "T#b": 0.5}
    assert row["requests"] == 4 and row["errors"] == 1


def test_cluster_replacement_benchmark_quick(tmp_path):
    """A translator killed under traffic on a real local Ray: Serve replaces it, and after
    the replacement is up the survivor's keys spread to it (both replicas answer)."""
    from loadtests import bench_cluster_replace

    out = tmp_path / "replace"
    result = bench_cluster_replace.main(["--quick", "--out", str(out)])
    (row,) = result["rows"]
    assert row["arm"] == "balance" and row["replaced_at_s"] is not None, row
    assert row["errors"] <= 2 * 2, row  # at most the requests in flight on the victim
    last = [b for b in row["buckets"] if b["shares"]][-1]
    assert len(last["shares"]) == 2 and row["victim"] not in last["shares"], row
    saved = json.loads((out / "cluster_replace.json").read_text())
    assert saved["rows"][0]["buckets"] == row["buckets"]
    with open(out / "cluster_replace.csv") as f:
        assert len(list(csv.DictReader(f))) == len(row["buckets"])
    _png(out / "cluster_replace.png")


def test_cold_path_profile_quick(quick_models, tmp_path):
    from loadtests import profile_cold

    cache, _ = quick_models
    out = tmp_path / "profile"
    result = profile_cold.main(["--quick", "--bench-cache", str(cache), "--out", str(out)])
    stages = [r["stage"] for r in result["rows"] if "[" not in r["stage"]]
    assert stages == [
        "read modules",
        "assemble",
        "build engine (spec, int8, write), listed in the cache",
        "load translator",
        "first translation",
        "cache hit: check the entry",
        "cache hit: load translator",
    ]
    assert all(r["median_ms"] > 0 for r in result["rows"])
    assert json.loads((out / "profile_cold.json").read_text())["miss_ms"] > 0


def test_cold_path_profile_times_an_int8_bundle_both_ways(tmp_path):
    """The default model (int8) is profiled on the server's path (weights as stored) and,
    beside it, through the float32 round trip, which the miss sum leaves out."""
    from loadtests import profile_cold

    default = Path(__file__).resolve().parents[1] / "models" / "default"
    out = tmp_path / "profile"
    result = profile_cold.main(["--quick", "--bundle", str(default), "--out", str(out)])
    stages = {r["stage"]: r["median_ms"] for r in result["rows"]}
    assert "build engine (spec, int8, write) [float32 round trip]" in stages
    server_path = (
        "read modules",
        "assemble",
        "build engine (spec, int8, write), listed in the cache",
    )
    miss = sum(stages[s] for s in (*server_path, "load translator", "first translation"))
    assert result["miss_ms"] == pytest.approx(miss)


def test_locust_libretranslate_mode_at_a_fixed_rate(quick_models, small_corpus, tmp_path):
    """The side-by-side traffic (loadtests.peer): LibreTranslate's /translate only, on the
    given routes, at users x throughput requests/s."""
    from loadtests import peer
    from loadtests.run import corpus_sentences, read_stats, run_locust
    from loadtests.server_process import ServerProcess

    _, models = quick_models
    traffic = tmp_path / "traffic.json"
    sentences = corpus_sentences(small_corpus, "test", 20)
    traffic.write_text(json.dumps({"sentences": sentences}))
    env = {
        "LSMT_LOCUST_MODE": "libretranslate",
        "LSMT_LOCUST_ROUTES": "en-de,de-en",
        "LSMT_LOCUST_TRAFFIC": str(traffic),
        "LSMT_LOCUST_THROUGHPUT": "1.0",
        "LSMT_LOCUST_STAGES": str(tmp_path / "stages.jsonl"),
    }
    with ServerProcess([models.bundles["lsl"]]) as server:
        prefix = tmp_path / "lt"
        run_locust(server.url, 2, 2, "6s", prefix, env)
    stats = read_stats(prefix)
    assert set(stats["by_name"]) <= {"translate sentence", "translate paragraph"}
    assert stats["requests"] > 0 and stats["failures"] == 0, stats
    assert stats["requests_per_s"] <= 2.5  # 2 users x 1 request/s, not as fast as possible
    # every answer's Server-Timing was recorded: where the fixed-rate traffic's time went
    split = peer.fixed_rate_stages(tmp_path / "stages.jsonl")
    # locust rewrites its CSV once a second and stops its writer at the end, so the CSV can
    # miss the last second's answers (2 users x 1 request/s); the stages file has them all
    assert stats["requests"] <= split["requests"] <= stats["requests"] + 4, split
    assert split["median_decode_s"] > 0 and split["tail_decode_s"] > 0, split
    first = [r for r in split["slowest"] if r["first_on_route"]]
    assert {r["route"] for r in first} <= {"en-de", "de-en"}
    assert len(first) <= 2 and all(r["ms"] >= r["total_ms"] > 0 for r in split["slowest"])


def test_peer_stepped_mode_against_lsmt_alone(tmp_path):
    """``loadtests.peer --stepped`` (issue 49) against LSMT only (LibreTranslate is not
    installed here): page traffic of one to three sentences, users stepped, the requests/s
    held at the p95 target, JSON, CSV and plot saved."""
    from loadtests import peer

    out = tmp_path / "stepped"
    args = ["--stepped", "--peers", "lsmt", "--routes", "en-es,es-en", "--no-engine-cache",
            "--step-users", "1,2", "--step-duration", "8s", "--p95-target-ms", "60000",
            "--out", str(out)]  # fmt: skip
    result = peer.main(args)
    steps = result["lsmt"]["steps"]
    assert [s["users"] for s in steps] == [1, 2]  # within the target: every step ran
    for step in steps:
        assert set(step["by_name"]) == {"translate page"}, step["by_name"]
        assert step["requests"] > 0 and step["failures"] == 0, step
    assert result["lsmt"]["held_rps"] == max(s["requests_per_s"] for s in steps)
    assert "libretranslate" not in result
    assert result["lsmt"]["rss_end_bytes"] > 0 and result["lsmt"]["rss_after_bytes"] > 0
    with open(out / "stepped.csv") as f:
        assert [r["server"] for r in csv.DictReader(f)] == ["lsmt", "lsmt"]
    _png(out / "stepped.png")


def test_peer_lsmt_server_takes_extra_settings():
    """``loadtests.peer --lsmt-env``: LSMT starts with the run's settings and the ones given
    (here its warm-up routes, which /readyz reports)."""
    import httpx

    from loadtests.peer import lsmt_server, parse_args
    from loadtests.server_process import ROOT

    args = parse_args(["--lsmt-env", "LSMT_WARMUP_ROUTES=en-es,es-en"])
    with lsmt_server(ROOT / "models" / "default", None, args.lsmt_settings) as server:
        ready = httpx.get(f"{server.url}/readyz", timeout=10).json()
    assert ready["warmup"]["routes"] == ["en-es", "es-en"] and ready["warmup"]["done"]
    with pytest.raises(SystemExit):
        parse_args(["--lsmt-env", "LSMT_WARMUP_ROUTES"])  # not KEY=VALUE


def test_traffic_comes_from_ntrex_when_no_corpus_was_built(small_corpus, tmp_path):
    """A fresh clone has no corpus: the load runs' traffic falls back to the committed NTREX
    sentences (within the length cap), and a built corpus's split is used when there is one."""
    from loadtests.run import MAX_CHARS, traffic_sentences
    from lsmt_text.data.testsets import NTREX_FILES, ntrex_lines

    sentences, source = traffic_sentences(tmp_path / "no-corpus", "test", 50)
    assert "NTREX-128" in source
    assert set(sentences) == set(NTREX_FILES)
    for lang, lines in sentences.items():
        assert len(lines) == 50 and all(len(s) <= MAX_CHARS for s in lines)
        assert set(lines) <= set(ntrex_lines(lang))
    built, source = traffic_sentences(small_corpus, "test", 20)
    assert str(small_corpus) in source and set(built) == {"de", "en", "zh"}
    assert not set(built["en"]) & set(ntrex_lines("en"))


def test_percentile_is_the_nearest_rank_of_a_quantile():
    from loadtests.timings import percentile

    values = [float(v) for v in range(100, -1, -1)]  # 0 to 100, unordered
    assert percentile(values, 0.5) == 50.0 and percentile(values, 0.95) == 95.0
    assert percentile(values, 0.0) == 0.0 and percentile(values, 1.0) == 100.0
    with pytest.raises(ValueError, match="between 0 and 1"):
        percentile(values, 95)  # a percent is not a quantile


def test_profile_stacks_are_summed_by_function_and_package(tmp_path):
    """py-spy's collapsed stacks: a function counts its own samples where it is innermost and
    its total wherever it is in a stack (once per stack), whatever the line."""
    from loadtests.profile_server import read_stacks

    stacks = tmp_path / "stacks.txt"
    stacks.write_text(
        "run (uvicorn/server.py:10);handle (server/app.py:5);encode (lsmt_core/text.py:7) 3\n"
        "run (uvicorn/server.py:12);handle (server/app.py:9) 2\n"
        "run (uvicorn/server.py:10);handle (server/app.py:5);handle (server/app.py:6) 1\n"
    )
    own, total, packages, samples = read_stacks(stacks)
    assert samples == 6
    assert own == {"encode (lsmt_core/text.py)": 3, "handle (server/app.py)": 3}
    assert total["run (uvicorn/server.py)"] == 6 and total["handle (server/app.py)"] == 6
    assert packages == {"lsmt_core": 3, "server": 3}


def test_profile_server_splits_a_loaded_servers_cpu(tmp_path):
    """A real server under page traffic, sampled by py-spy: requests answered, the process's
    CPU per request, split into the GIL's time (by package, adding up to it) and the rest."""
    from loadtests import profile_server

    out = tmp_path / "profile"
    result = profile_server.main(["--users", "4", "--duration", "4", "--rate", "200",
                                  "--routes", "en-es,es-en", "--out", str(out)])  # fmt: skip
    assert result["requests"] > 0 and result["cpu_ms_per_request"] > 0, result
    assert result["samples"] > 0 and 0 < result["gil_busy_share"] <= 1.05, result
    assert sum(r["share_of_gil"] for r in result["packages"]) == pytest.approx(1.0)
    assert sum(r["gil_ms_per_request"] for r in result["packages"]) == pytest.approx(
        result["gil_ms_per_request"]
    )
    # the samples are the server's: its entry point is in the stacks
    assert any("(server/__main__.py)" in r["function"] for r in result["top_total"])
    # LSMT's functions only, by what they and their callees hold: the request's steps
    ours = result["top_ours"]
    assert ours and all(profile_server.package_of(r["function"]) in profile_server.OURS
                        for r in ours)  # fmt: skip
    assert any(r["function"].startswith("TranslationService.translate ") for r in ours), ours
    with open(out / "functions.csv") as f:
        assert len(list(csv.DictReader(f))) >= len(result["top_own"])
    _png(out / "profile.png")


def test_peer_agreement_counts_identical_outputs():
    from loadtests.peer import agreement

    a = {"en-fr": ["Bonjour.", "Merci ", "et il dit."], "fr-en": ["Hello."]}
    b = {"en-fr": ["Bonjour.", "Merci", "Et il dit"], "fr-en": ["Hi."]}
    result = agreement(a, b)
    assert (result["sentences"], result["identical"], result["share"]) == (4, 2, 0.5)
    assert result["identical_but_formatting"] == 3  # LibreTranslate's case and punctuation


def test_lt_front_end_without_libretranslate_says_so(tmp_path):
    """``loadtests.lt_front_end`` drives LibreTranslate's own page, which needs the package
    (not a dependency of LSMT: its recorded run is in docs/benchmarks.md); without it the
    script says where it looked. Its matcher finds the page's request for a text, line breaks
    sent as a form sends them (CRLF)."""
    from types import SimpleNamespace

    from loadtests.lt_front_end import _form_fields, _translating, main

    with pytest.raises(SystemExit, match="no libretranslate package"):
        main(["--libretranslate", str(tmp_path), "--out", str(tmp_path / "out")])
    body = '--b\r\nContent-Disposition: form-data; name="q"\r\n\r\nA\r\nB\r\n--b--\r\n'
    response = SimpleNamespace(url="http://127.0.0.1:1/translate",
                               request=SimpleNamespace(post_data=body))  # fmt: skip
    assert _translating("A\nB")(response) and not _translating("A")(response)
    assert _form_fields(body, "multipart/form-data; boundary=b") == ["q"]
    part = 'Content-Disposition: form-data; name="file"; filename="a.txt"'
    assert _form_fields(part, "multipart/form-data; boundary=b") == ["file"]
    assert _form_fields("q=x&source=en", "application/x-www-form-urlencoded") == ["q", "source"]


def test_eviction_churn_on_the_default_model(tmp_path):
    """Two engines' room for eight routes: every request answered, engines evicted and loaded
    again, memory judged flat; JSON, CSV and plot saved."""
    from loadtests import churn

    out = tmp_path / "churn"
    args = ["--engines", "2", "--rounds", "3", "--routes", "8", "--out", str(out)]
    result = churn.main(args)
    assert result["passed"], result["checks"]
    rounds = result["rounds"]
    assert [r["answered"] for r in rounds] == [8, 8, 8]
    # eight routes, an engine each (source and target modules), through two engines' room:
    # every request loads its engine, and all but the first two evict one
    assert rounds[-1]["engine_loads"] == 24 and rounds[-1]["device_evictions"] == 22
    assert all(r["device_bytes"] <= result["device_budget_bytes"] for r in rounds)
    assert {c["check"] for c in result["checks"]} >= {
        "every request answered",
        "server_rss flat from round 2",
    }
    assert json.loads((out / "churn.json").read_text())["passed"]
    with open(out / "churn.csv") as f:
        assert len(list(csv.DictReader(f))) == 3
    _png(out / "churn.png")


def test_eviction_churn_fails_on_growing_memory_or_a_lost_request():
    from argparse import Namespace

    from loadtests.churn import MiB, judge

    def round_(n: int, rss: int) -> dict:
        return {"round": n, "requests": 4, "answered": 4, "gpu_memory_used": None,
                "server_rss": rss, "device_evictions": 3.0, "host_evictions": 0.0,
                "engine_loads": 6.0}  # fmt: skip

    args = Namespace(device="cpu", tolerance=0.10)
    flat = [round_(1, 500 * MiB), round_(2, 600 * MiB), round_(3, 610 * MiB)]
    assert all(c["passed"] for c in judge(flat, [], args, engines=2))
    growing = [*flat, round_(4, 800 * MiB)]  # > 600 * 1.1 + 64
    failed = {c["check"] for c in judge(growing, [], args, engines=2) if not c["passed"]}
    assert failed == {"server_rss flat from round 2"}
    lost = [{"round": 2, "route": "en-fr", "status": 503, "body": "..."}]
    failed = {c["check"] for c in judge(flat, lost, args, engines=2) if not c["passed"]}
    assert failed == {"every request answered"}
    assert not judge(flat, [], args, engines=6)[2]["passed"]  # 6 loads: nothing reloaded


def test_soak_short_run_answers_everything_and_records_each_interval(tmp_path):
    """The soak run's short mode on the default model: mixed traffic with a limited key,
    documents and a reload half-way, through a budget that evicts; no error, the limit met,
    a sample per interval with the process's resources; JSON, CSV and plot saved. (Flatness
    and drift are judged, not asserted: over seconds they measure the warm-up.)"""
    from loadtests import soak

    out = tmp_path / "soak"
    args = ["--duration", "24s", "--interval", "4", "--warmup", "4s", "--users", "3",
            "--limited-rpm", "6", "--out", str(out)]  # fmt: skip
    result = soak.main(args)
    passed = {c["check"]: c["passed"] for c in result["checks"]}
    for check in ("no errors", "the limited key was limited", "engines evicted and loaded again",
                  "reload in the middle answered"):  # fmt: skip
        assert passed[check], result["checks"]
    assert not result["errors"]
    samples = result["samples"]
    assert len(samples) == 6 and sum(s["requests"] for s in samples) == result["requests"]
    assert all(s["server_rss"] > 0 and s["threads"] > 0 and s["open_fds"] > 0 for s in samples)
    assert result["reload"]["at_s"] >= 12 and '"status":"unchanged"' in result["reload"]["body"]
    assert json.loads((out / "soak.json").read_text())["requests"] == result["requests"]
    with open(out / "soak.csv") as f:
        assert len(list(csv.DictReader(f))) == 6
    _png(out / "soak.png")


def test_soak_judges_growth_drift_and_errors():
    from argparse import Namespace

    from loadtests.soak import judge

    def sample(t: float, rss: int = 300, p95: float = 200.0, errors: int = 0) -> dict:
        return {"elapsed_s": t, "requests": 10, "errors": errors, "limited": 1, "p50_ms": 100.0,
                "p95_ms": p95, "server_rss": rss, "threads": 20, "open_fds": 30,
                "engine_loads": 5.0, "engine_evictions": 3.0}  # fmt: skip

    args = Namespace(warmup=10, flat=0.05, drift=0.10)
    reload = {"at_s": 30, "status": 200}
    steady = [sample(t) for t in range(0, 70, 10)]
    assert all(c["passed"] for c in judge(steady, reload, args))
    leaking = [sample(t, rss=300 + t) for t in range(0, 70, 10)]  # 310 early, 360 late
    failed = {c["check"] for c in judge(leaking, reload, args) if not c["passed"]}
    assert failed == {"server_rss flat after the warm-up"}
    drifting = [sample(t, p95=200 + 2 * t) for t in range(0, 70, 10)]
    failed = {c["check"] for c in judge(drifting, reload, args) if not c["passed"]}
    assert failed == {"p95 drift"}
    erring = [*steady[:-1], sample(60, errors=1)]
    failed = {c["check"] for c in judge(erring, {"at_s": 30, "status": 503}, args)
              if not c["passed"]}  # fmt: skip
    assert failed == {"no errors", "reload in the middle answered"}


def test_pivot_benchmark_quick(tmp_path):
    from loadtests.bench_pivot import main

    assert main(["--sentences", "2", "--directions", "es-fr,fr-es", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert [r["direction"] for r in result["directions"]] == ["es-fr", "fr-es"]
    for row in result["directions"]:
        assert 0 < row["chrf_direct"] <= 100 and 0 < row["chrf_pivot"] <= 100
        assert row["p50_ms_pivot"] > 0 and row["p50_ms_direct"] > 0
    assert (tmp_path / "pivot.png").stat().st_size > 0


def test_memory_benchmark_splits_a_servers_memory(tmp_path):
    """Two configurations on the default model, every route served once each: one request a
    route opens no bulk twin, so the default's engines count exactly as one translator's
    (``LSMT_BULK_NICE=0``), and the split adds up."""
    from loadtests import bench_memory

    out = tmp_path / "memory"
    configs = "default,one-translator"
    result = bench_memory.main(["--rounds", "1", "--configs", configs, "--out", str(out)])
    rows = {r["config"]: r for r in result["rows"]}
    assert set(rows) == {"default", "one-translator"}
    for r in rows.values():
        assert r["engines"] == r["routes"] > 0  # every route's engine loaded
        assert r["after_mib"] == pytest.approx(r["idle_mib"] + r["engines_mib"] + r["rest_mib"])
    default, one = rows["default"]["engines_mib"], rows["one-translator"]["engines_mib"]
    assert default == pytest.approx(one)
    with open(out / "memory.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    _png(out / "memory.png")
