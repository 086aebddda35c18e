"""The engine cache (lsmt_bundle.engine_cache): a hit loads the engine the miss built, a module
changed on disk is never served from a stale entry, a corrupt or half-written entry is removed
and rebuilt, the cache keeps to its byte bound (least recently used first), and the server's
loader builds once for every process sharing the directory."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lsmt_bundle import load_bundle
from lsmt_bundle.ct2 import open_translator
from lsmt_bundle.engine_cache import CONTENTS, EngineCache, engine_key, fill_entry
from lsmt_bundle.store import digest
from lsmt_core.routes import Route

pytestmark = pytest.mark.integration

ROUTE = Route("en", "fr")
SOURCES = [["▁b", "▁c", "▁d"], ["▁e", "▁f"]]


@pytest.fixture
def bundle_dir(added_language, tmp_path) -> Path:
    """A private copy of a tiny int8 LSL bundle (en, fr) with recorded digests."""
    dst = tmp_path / "bundle"
    shutil.copytree(added_language[2], dst)
    return dst


def translate(model) -> list:
    translator, _ = open_translator(model, compute_type="int8")
    bundle_tag = ["<2fr>"]
    results = translator.translate_batch([bundle_tag + s for s in SOURCES], beam_size=2,
                                         max_decoding_length=10, return_scores=True)  # fmt: skip
    return [(r.hypotheses[0], round(r.scores[0], 4)) for r in results]


def test_a_hit_loads_what_the_miss_built(bundle_dir, tmp_path):
    from lsmt_bundle.engines import engine_files

    bundle = load_bundle(bundle_dir)
    cache = EngineCache(tmp_path / "cache", 1 << 30)
    entry, was_there = fill_entry(cache, bundle, ROUTE, "int8")
    assert not was_there and cache.size() > 0
    assert fill_entry(cache, bundle, ROUTE, "int8") == (entry, True)
    built = engine_files(bundle.assemble(ROUTE, keep_int8=True), "int8")
    assert {p.name: p.read_bytes() for p in entry.iterdir() if p.name != CONTENTS} == built
    assert translate(entry) == translate(built)
    other = engine_key(bundle, Route("fr", "en"), "int8")
    assert other != engine_key(bundle, ROUTE, "int8") != engine_key(bundle, ROUTE, "float32")


def test_without_a_cache_engines_are_opened_from_a_temporary_directory(
    bundle_dir, tmp_path, monkeypatch
):
    """Without a cache the server's loader writes a route's engine to a temporary directory and
    opens it from there (a CTranslate2 model opened from memory keeps a copy of its files):
    the same engine, and nothing left behind."""
    import tempfile

    from lsmt_bundle.engine_cache import load_route_engine
    from lsmt_bundle.engines import engine_files

    bundle = load_bundle(bundle_dir)
    files = engine_files(bundle.assemble(ROUTE, keep_int8=True), "int8")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    engine, nbytes = load_route_engine(None, bundle, ROUTE, "int8", compute_type="int8")
    assert nbytes == len(files["model.bin"]) and list((tmp_path / "tmp").iterdir()) == []
    results = engine.translate_batch([["<2fr>", *s] for s in SOURCES], beam_size=2,
                                     max_decoding_length=10, return_scores=True)  # fmt: skip
    assert [(r.hypotheses[0], round(r.scores[0], 4)) for r in results] == translate(files)


def test_a_module_changed_on_disk_is_never_served_stale(bundle_dir, tmp_path):
    cache = EngineCache(tmp_path / "cache", 1 << 30)
    fill_entry(cache, load_bundle(bundle_dir), ROUTE, "int8")
    rel = "modules/shared.safetensors"
    weights = load_file(bundle_dir / rel)
    name = next(k for k, v in weights.items() if v.dtype == np.int8 and v.ndim == 2)
    weights[name] = (-weights[name]).astype(np.int8)  # a new export of other weights
    save_file(weights, str(bundle_dir / rel))
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    manifest["files"][rel] = digest((bundle_dir / rel).read_bytes()).model_dump()
    (bundle_dir / "manifest.json").write_text(json.dumps(manifest))
    changed = load_bundle(bundle_dir)
    assert not fill_entry(cache, changed, ROUTE, "int8")[1]  # built again from the new module
    assert len([p for p in cache.root.iterdir() if not p.name.startswith(".")]) == 2


def test_corrupt_or_half_written_entries_are_rebuilt(bundle_dir, tmp_path):
    bundle = load_bundle(bundle_dir)
    cache = EngineCache(tmp_path / "cache", 1 << 30)
    entry, _ = fill_entry(cache, bundle, ROUTE, "int8")
    model = entry / "model.bin"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    model.write_bytes(bytes(data))
    assert cache.get(entry.name) is None and not entry.exists()
    assert fill_entry(cache, bundle, ROUTE, "int8") == (entry, False)  # built again
    assert cache.get(entry.name) is not None
    (entry / CONTENTS).unlink()  # as if copied in part
    assert cache.get(entry.name) is None
    assert fill_entry(cache, bundle, ROUTE, "int8") == (entry, False)


def test_entries_listed_with_sha256_are_still_checked(bundle_dir, tmp_path):
    """Entries stored before the checksum became XXH3 list SHA-256: an intact one is still a
    hit, a damaged one is still refused."""
    import hashlib

    bundle = load_bundle(bundle_dir)
    cache = EngineCache(tmp_path / "cache", 1 << 30)
    entry, _ = fill_entry(cache, bundle, ROUTE, "int8")
    contents = json.loads((entry / CONTENTS).read_text())
    assert all(set(want) == {"bytes", "xxh3_128"} for want in contents.values())
    old = {
        name: {
            "bytes": want["bytes"],
            "sha256": hashlib.sha256((entry / name).read_bytes()).hexdigest(),
        }
        for name, want in contents.items()
    }
    (entry / CONTENTS).write_text(json.dumps(old))
    assert EngineCache.intact(entry) and cache.get(entry.name) == entry
    model = entry / "model.bin"
    data = bytearray(model.read_bytes())
    data[-1] ^= 0x01
    model.write_bytes(bytes(data))
    assert not EngineCache.intact(entry)
    old["model.bin"]["bytes"] += 1  # a size that disagrees fails before any hashing
    (entry / CONTENTS).write_text(json.dumps(old))
    assert cache.get(entry.name) is None and not entry.exists()


def test_the_cache_keeps_to_its_bound_least_recently_used_first(bundle_dir, tmp_path):
    bundle = load_bundle(bundle_dir)
    probe = EngineCache(tmp_path / "probe", 1 << 30)
    fill_entry(probe, bundle, ROUTE, "int8")
    one = probe.size()
    cache = EngineCache(tmp_path / "cache", int(2.5 * one))
    routes = [Route("en", "fr"), Route("fr", "en")]
    keys = [engine_key(bundle, r, "int8") for r in routes]
    for route in routes:
        fill_entry(cache, bundle, route, "int8")
    old = cache.root / keys[0]
    os.utime(old, (1, 1))  # long unused ...
    assert cache.get(keys[0]) is not None  # ... until this hit
    fill_entry(cache, bundle, Route("en", "fr"), "int8_float32")  # a third entry
    assert cache.size() <= cache.max_bytes
    left = {p.name for p in cache.root.iterdir()}
    assert keys[0] in left and keys[1] not in left


def test_the_server_loader_builds_once_for_every_process(bundle_dir, tmp_path, monkeypatch):
    from server import engine_loader
    from server.settings import Settings

    settings = Settings(device="cpu", engine_cache_dir=tmp_path / "cache")
    bundle = load_bundle(bundle_dir)
    translator, nbytes = engine_loader.default_loader(bundle, ROUTE, settings)
    engine_loader._engine_cache.cache_clear()  # as a second process would start

    def no_assembly(*args):
        raise AssertionError("assembled although the engine was cached")

    monkeypatch.setattr(bundle, "assemble", no_assembly)
    again, again_bytes = engine_loader.default_loader(bundle, ROUTE, settings)
    assert again_bytes == nbytes
    sources = [["<2fr>", *s] for s in SOURCES]
    first, second = (
        t.translate_batch(sources, beam_size=1, max_decoding_length=10) for t in (translator, again)
    )
    assert [r.hypotheses for r in first] == [r.hypotheses for r in second]


def test_the_server_loader_never_uses_an_entry_that_fails_its_check(bundle_dir, tmp_path):
    """A hit is checked while its engine loads: an entry whose bytes changed (same sizes) is
    not served but removed, and the engine built again and stored whole."""
    from lsmt_bundle.engine_cache import load_route_engine

    bundle = load_bundle(bundle_dir)
    cache = EngineCache(tmp_path / "cache", 1 << 30)
    built, nbytes = load_route_engine(cache, bundle, ROUTE, "int8", compute_type="int8")
    entry = cache.root / engine_key(bundle, ROUTE, "int8")
    model = entry / "model.bin"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    assert cache.get(entry.name, verify=False) == entry  # sizes alone do not see it

    calls = []
    real_assemble = bundle.assemble
    bundle.assemble = lambda *a, **k: calls.append(a) or real_assemble(*a, **k)
    again, again_bytes = load_route_engine(cache, bundle, ROUTE, "int8", compute_type="int8")
    assert len(calls) == 1 and again_bytes == nbytes  # built again ...
    assert EngineCache.intact(entry)  # ... and stored whole
    sources = [["<2fr>", *s] for s in SOURCES]
    first = built.translate_batch(sources, beam_size=1, max_decoding_length=10)
    second = again.translate_batch(sources, beam_size=1, max_decoding_length=10)
    assert [r.hypotheses for r in first] == [r.hypotheses for r in second]
    load_route_engine(cache, bundle, ROUTE, "int8", compute_type="int8")
    assert len(calls) == 1  # an intact hit: loaded, not built


def test_build_engines_fills_the_cache_the_server_reads(bundle_dir, tmp_path, capsys, monkeypatch):
    """``python -m model_export build-engines --cache`` stores what the server's loader would
    build: afterwards the loader assembles nothing, and a second fill builds nothing."""
    from lsmt_bundle.engine_cache import load_route_engine
    from model_export.__main__ import main

    argv = ["build-engines", str(bundle_dir), "--routes", "en-fr", "--cache", str(tmp_path / "c")]
    assert main(argv) == 0
    assert "en-fr: built" in capsys.readouterr().out
    assert main(argv) == 0
    assert "en-fr: already cached" in capsys.readouterr().out
    bundle = load_bundle(bundle_dir)
    monkeypatch.setattr(bundle, "assemble", lambda *a, **k: pytest.fail("assembled: not cached"))
    cache = EngineCache(tmp_path / "c", 1 << 30)
    engine, _ = load_route_engine(cache, bundle, ROUTE, "int8", compute_type="int8")
    assert engine.translate_batch([["<2fr>", *SOURCES[0]]], max_decoding_length=5)
