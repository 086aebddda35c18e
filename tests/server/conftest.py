"""Fixtures for the server tests: a real tiny bundle and real uvicorn servers on loopback.

The bundle (tests/bundles.py: a tiny model briefly trained on real verses, separate decoders
so every target language has its own module file and engine) takes a while to train on two
cores, so it is cached in pytest's cache directory under a hash of the code that produces it;
any change to the bundle format, the exporter or tests/bundles.py rebuilds it.
Set LSMT_TEST_REBUILD_BUNDLE=1 to force a rebuild.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = ("de", "en", "fr")
BUNDLE_KW = dict(model_overrides={"decoder_sharing": "separate"}, steps=300, name="tiny")
# The Shallow paper's hybrid (Transformer encoder, LSTM decoder): served by the hybrid engine.
HYBRID_KW = dict(model_overrides={"decoder_kind": "lstm"}, steps=300, name="tiny-hybrid")


def _source_hash(kw: dict[str, Any]) -> str:
    h = hashlib.sha256(repr(sorted(kw.items())).encode())
    # What decides the bundle on disk: its format (manifest, tags), the exporter and the
    # recipe in tests/bundles.py. Training internals are covered by the parity tests.
    files = [ROOT / "tests" / "bundles.py"]
    files += [ROOT / "lsmt_core" / f for f in ("manifest.py", "tags.py")]
    files += [ROOT / "model_export" / "from_torch.py"]
    files += [ROOT / "lsmt_bundle" / f for f in ("storage.py", "store.py")]
    for f in files:
        h.update(f.relative_to(ROOT).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@pytest.fixture(scope="session")
def tiny_bundle(request) -> Path:
    """Path of a real tiny bundle (languages de, en, fr; all six routes; one engine per
    target language). Treat as read-only; copy it before changing it."""
    return _cached_bundle(request, BUNDLE_KW)


@pytest.fixture(scope="session")
def hybrid_bundle(request) -> Path:
    """Path of a real tiny hybrid bundle (LSTM decoder; de, en, fr). Read-only."""
    return _cached_bundle(request, HYBRID_KW)


def _cached_bundle(request, kw: dict[str, Any]) -> Path:
    """A tiny bundle trained with ``kw`` once and kept in pytest's cache directory."""
    cache_root = Path(request.config.cache.mkdir("lsmt-server-bundles"))
    out = cache_root / _source_hash(kw)
    bundle = out / "bundle"
    if os.environ.get("LSMT_TEST_REBUILD_BUNDLE") == "1" and out.exists():
        shutil.rmtree(out)
    if not (bundle / "manifest.json").is_file():
        from tests.bundles import make_tiny_bundle

        tmp = cache_root / f"{out.name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        make_tiny_bundle(tmp, languages=LANGUAGES, **kw)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return bundle


# A German text of two sentences (the tiny bundle's languages are de, en, fr).
GERMAN = "Und Gott sprach: Es werde Licht! Und es ward Licht."


@pytest.fixture(scope="session")
def bundle_without_de_fr(tiny_bundle, tmp_path_factory) -> Path:
    """The tiny bundle with its de<->fr routes taken out of the manifest: de-en, en-de, en-fr
    and fr-en remain, so de-fr and fr-de are translated through English (pivoting)."""
    import json

    dst = tmp_path_factory.mktemp("pivot") / "bundle"
    shutil.copytree(tiny_bundle, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["routes"] = [r for r in manifest["routes"] if set(r) != {"de", "fr"}]
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@pytest.fixture
def bundle_copy(tiny_bundle, tmp_path) -> Path:
    """A private, writable copy of the tiny bundle."""
    dst = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, dst)
    return dst


class LiveServer:
    """The real app under a real uvicorn on 127.0.0.1, run in a thread of the test process
    (so tests may also look at ``state``: the registry and its counters)."""

    def __init__(self, app) -> None:
        import uvicorn

        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=5
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def state(self):
        return self.app.state.lsmt

    def start(self) -> LiveServer:
        self.thread.start()
        # an event (uvicorn's flag) within a budget: two busy cores may take long to start
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 60), **kw)

    def wait_ready(self, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while True:
                r = c.get("/readyz")
                body = r.json()
                if body["warmup"]["done"] or time.monotonic() > deadline:
                    return body
                time.sleep(0.05)


def _factory(tiny_bundle):
    from server.app import create_app
    from server.settings import Settings

    servers: list[LiveServer] = []

    def make(bundle_dirs=None, loader=None, twin_loader=None, **overrides) -> LiveServer:
        overrides.setdefault("warmup_routes", [])
        # The tiny model is degenerate by design (300 steps): output checks would decode
        # nearly every sentence twice and change what the other tests count and time, and the
        # decoding guards turn its loops into one output for different texts (the ordering
        # tests need them apart). test_server_output_checks turns the checks on.
        overrides.setdefault("output_checks", False)
        overrides.setdefault("repetition_penalty", 1.0)
        overrides.setdefault("no_repeat_ngram_size", 0)
        overrides.setdefault("device", "cpu")  # the CUDA tests ask for "cuda"
        settings = Settings(bundles=bundle_dirs or [tiny_bundle], **overrides)
        srv = LiveServer(create_app(settings, loader=loader, twin_loader=twin_loader)).start()
        servers.append(srv)
        return srv

    return make, servers


@pytest.fixture
def make_server(tiny_bundle) -> Iterator[Callable[..., LiveServer]]:
    """make_server(bundle_dirs=None, loader=None, twin_loader=None, **settings) -> started
    LiveServer, stopped at the end of the test. Warm-up and output checks are off unless
    named. ``loader`` opens the bulk twins too unless ``twin_loader`` is given."""
    make, servers = _factory(tiny_bundle)
    yield make
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def module_server(tiny_bundle) -> Iterator[Callable[..., LiveServer]]:
    """Like make_server, but the servers live until the end of the test module."""
    make, servers = _factory(tiny_bundle)
    yield make
    for s in servers:
        s.stop()


def slow_loader(delay_s: float, calls: list | None = None, load_delay_s: float = 0.0):
    """The real loader, but every translate_batch sleeps ``delay_s`` first (to hold batches in
    flight) and every load sleeps ``load_delay_s`` (to widen the cold-start window).
    ``calls`` collects the route of each load."""
    from server.engine_loader import default_loader

    def load(bundle, route, settings):
        if calls is not None:
            calls.append(route)
        time.sleep(load_delay_s)
        translator, nbytes = default_loader(bundle, route, settings)
        return SlowTranslator(translator, delay_s), nbytes

    return load


class SlowTranslator:
    def __init__(self, inner, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    def translate_batch(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return self.inner.translate_batch(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def slow() -> Callable[..., Any]:
    """slow(delay_s, calls=None, load_delay_s=0.0) -> loader (see slow_loader)."""
    return slow_loader


# -- keys databases (tests/server/databases.py) ---------------------------------------------


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    """One PostgreSQL server for the module's tests (skipped where pgserver is not installed);
    each test makes its own database on it (databases.new_database)."""
    pytest.importorskip("pgserver", reason="PostgreSQL for the tests comes from pgserver")
    from tests.server.databases import postgres_data_dir, start_postgres

    with postgres_data_dir() as data_dir:
        server = start_postgres(data_dir)
        yield server
        server.cleanup()


@pytest.fixture
def postgres_dir() -> Iterator[Path]:
    """A folder for the data of a PostgreSQL server the test starts and stops itself."""
    pytest.importorskip("pgserver", reason="PostgreSQL for the tests comes from pgserver")
    from tests.server.databases import postgres_data_dir

    with postgres_data_dir() as data_dir:
        yield data_dir


@pytest.fixture(params=["sqlite", "postgresql"])
def keys_db(request, tmp_path) -> str:
    """Where a test's keys database is: a SQLite file, or a new database on the module's
    PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "keys.db")
    from tests.server.databases import new_database

    return new_database(request.getfixturevalue("postgres"))


def scrape(url: str) -> dict[str, float]:
    """Every sample of /metrics: 'name' or 'name{label=value}' -> value."""
    out = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=60).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def wait_for(condition: Callable[[], object], what: str, budget_s: float = 120) -> object:
    """Poll ``condition`` until it is truthy (an event, within a budget a busy machine meets)."""
    deadline = time.monotonic() + budget_s
    while not (value := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.02)
    return value
