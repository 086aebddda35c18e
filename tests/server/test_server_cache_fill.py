"""The engine cache filled in the background (server.cache_fill): after start, every engine of
the bundle is built into the cache without being loaded, so that a route's first request
loads it without assembling; a second server on the same cache finds them all; a reload that
adds a language fills its engines; the fill is off without a cache or when turned off, and a
cache that cannot take an engine ends the fill while requests are still answered."""

from __future__ import annotations

import shutil
import time

import httpx
import pytest

from loadtests.server_process import metric_sum
from model_export.__main__ import main as model_export_main

pytestmark = pytest.mark.integration

BODY = {"text": "And Jesus said unto them, Follow me.", "source": "en", "beam_size": 1}


def fill_done(srv, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while srv.state.cache_fill_task is None or not srv.state.cache_fill_task.done():
        assert time.monotonic() < deadline, "the fill did not end"
        time.sleep(0.05)
    assert srv.state.cache_fill_task.exception() is None


def entries(cache) -> list:
    return [p for p in cache.iterdir() if not p.name.startswith(".")]


def fills(srv, outcome: str) -> float:
    return metric_sum(srv.url, "lsmt_engine_cache_fills_total", outcome=outcome)


def test_the_fill_builds_every_engine_unloaded_and_a_first_request_only_loads(
    make_server, tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    srv = make_server(engine_cache_dir=cache)
    fill_done(srv)
    served = srv.state.bundles[0]
    engines = len(set(served.engine_keys))
    assert len(entries(cache)) == engines == fills(srv, "built")
    assert fills(srv, "present") == fills(srv, "failed") == 0
    assert srv.state.registry.load_count == 0  # built, not loaded

    def no_assembly(*args, **kwargs):
        raise AssertionError("assembled although the fill had built the engine")

    monkeypatch.setattr(served.bundle, "assemble", no_assembly)
    for target in ("de", "fr"):
        r = httpx.post(f"{srv.url}/v1/translate", json={**BODY, "target": target})
        assert r.status_code == 200, r.text
    assert srv.state.registry.load_count == 2

    again = make_server(engine_cache_dir=cache)  # a second process on the same cache
    fill_done(again)
    assert fills(again, "present") == engines and fills(again, "built") == 0


def test_the_fill_stops_at_the_cache_bound_instead_of_evicting_its_own_entries(
    make_server, tmp_path
):
    full = make_server(engine_cache_dir=tmp_path / "full")
    fill_done(full)
    sizes = [sum(f.stat().st_size for f in e.iterdir()) for e in entries(tmp_path / "full")]
    srv = make_server(
        engine_cache_dir=tmp_path / "bounded", engine_cache_bytes=int(1.5 * max(sizes))
    )
    fill_done(srv)
    assert fills(srv, "built") == 1 and len(entries(tmp_path / "bounded")) == 1
    r = httpx.post(f"{srv.url}/v1/translate", json={**BODY, "target": "fr"})
    assert r.status_code == 200, r.text


def test_no_fill_without_a_cache_or_when_turned_off(make_server, tmp_path):
    assert make_server().state.cache_fill_task is None
    srv = make_server(engine_cache_dir=tmp_path / "cache", engine_cache_fill=False)
    assert srv.state.cache_fill_task is None
    r = httpx.post(f"{srv.url}/v1/translate", json={**BODY, "target": "de"})
    assert r.status_code == 200
    assert len(entries(tmp_path / "cache")) == 1


def test_a_cache_that_cannot_take_engines_ends_the_fill_and_requests_are_answered(
    make_server, tmp_path
):
    """The cache directory is a path under a regular file: no one can make it (root too)."""
    (tmp_path / "a-file").write_text("")
    srv = make_server(engine_cache_dir=tmp_path / "a-file" / "cache")
    fill_done(srv)
    assert fills(srv, "built") == fills(srv, "failed") == 0  # ended at the first engine
    assert metric_sum(srv.url, "lsmt_engine_cache_errors_total", reason="unwritable") == 1
    r = httpx.post(f"{srv.url}/v1/translate", json={**BODY, "target": "fr"})
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_a_reload_that_adds_a_language_fills_its_engines(added_language, make_server, tmp_path):
    _, add, exported = added_language
    bundle, cache = tmp_path / "bundle", tmp_path / "cache"
    shutil.copytree(exported, bundle)
    srv = make_server(bundle_dirs=[bundle], admin_keys=["admin"], engine_cache_dir=cache)
    fill_done(srv)
    before = fills(srv, "built")
    model_export_main(["add-language", str(bundle), "--from", str(add), "--which", "last"])
    r = httpx.post(f"{srv.url}/v1/admin/reload", headers={"Authorization": "Bearer admin"})
    assert r.status_code == 200 and r.json()["bundles"][0]["status"] == "reloaded", r.text
    fill_done(srv)
    engines = len(set(srv.state.bundles[0].engine_keys))
    assert fills(srv, "built") > before
    assert fills(srv, "built") + fills(srv, "present") - before == engines
    assert len(entries(cache)) >= engines
