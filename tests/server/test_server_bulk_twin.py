"""A route's bulk twin on a real server (server/bulk_twin.py): real CTranslate2 engines of the
tiny bundle behind a real uvicorn on loopback. No twin for short requests only or documents
only; one while both overlap, its bytes in the budget, ``/v1/models`` and the gauges, the
documents' outputs unchanged; dropped once the documents stop; a load that needs its bytes
takes them only after the batch running on it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from lsmt_bundle import load_bundle
from lsmt_core.routes import Route
from server.engine_loader import bulk_twin_loader, default_loader
from server.settings import Settings
from tests.server.conftest import SlowTranslator, scrape, wait_for

pytestmark = pytest.mark.integration

SHORT = {"text": "Where is the station?", "source": "en", "target": "de", "beam_size": 1}
DOCUMENT = {**SHORT, "text": ["Follow me."] * 24}  # every batch alike: no padding differs
PAGE = {**SHORT, "text": ["Follow me."] * 3}  # a web page's few sentences: not a document
KEY = "tiny:shared+tgt/de"
LANES = {"inter_threads": 2, "express_batch_size": 1, "max_batch_size": 8, "batch_wait_ms": 0}


def slow_twin(delay_s: float, unloaded_in_batch: list[int] | None = None):
    """The real twin loader, every batch ``delay_s`` longer (and watched: ``Watched``)."""

    def load_twin(bundle, route, settings):
        twin, nbytes = bulk_twin_loader(bundle, route, settings)
        slow = SlowTranslator(twin, delay_s)
        return (slow if unloaded_in_batch is None else Watched(slow, unloaded_in_batch)), nbytes

    return load_twin


def post(url: str, body: dict) -> dict:
    r = httpx.post(f"{url}/v1/translate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def texts(answer: dict) -> list[str]:
    return [t["text"] for t in answer["translations"]]


def engine(url: str, key: str = KEY) -> dict:
    engines = httpx.get(f"{url}/v1/models", timeout=60).json()["engines"]
    return next(e for e in engines if e["key"] == key)


def twin_events(url: str) -> dict[str, float]:
    samples = scrape(url)
    return {
        event: samples[f"lsmt_bulk_twin_events_total{{event={event}}}"]
        for event in ("opened", "dropped", "skipped", "failed")
    }


class Documents:
    """``clients`` threads sending ``body`` again and again until the block ends; every answer
    kept."""

    def __init__(self, url: str, clients: int = 2, body: dict = DOCUMENT) -> None:
        self.url, self.body, self.answers = url, body, []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.send) for _ in range(clients)]

    def send(self) -> None:
        while not self.stop.is_set():
            self.answers.append(post(self.url, self.body))

    def __enter__(self) -> Documents:
        for t in self.threads:
            t.start()
        wait_for(lambda: self.answers or self.stop.is_set(), "no document was answered")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=300)


def short_until(url: str, condition: Callable[[], object], what: str) -> object:
    """Short requests, one after another, until ``condition`` holds."""
    return wait_for(lambda: post(url, SHORT) and condition(), what)


def test_short_requests_only_or_documents_only_open_no_twin(make_server, slow):
    srv = make_server(loader=slow(0.05), bulk_twin_grace_s=0.5, **LANES)
    post(srv.url, SHORT)  # loaded
    with ThreadPoolExecutor(12) as pool:  # short ones fill the lane and the bulk slots
        assert len(list(pool.map(lambda b: post(srv.url, b), [SHORT] * 12))) == 12
        assert len(list(pool.map(lambda b: post(srv.url, b), [DOCUMENT] * 3))) == 3
    assert twin_events(srv.url) == {"opened": 0, "dropped": 0, "skipped": 0, "failed": 0}
    assert engine(srv.url)["bulk_twin_bytes"] == 0


def test_requests_of_a_few_sentences_beside_short_ones_open_no_twin(make_server, slow):
    """Below ``bulk_twin_min_sentences`` (8) a request is not a document: a web page's few
    sentences beside one-sentence requests share the engine; a document among them opens
    the twin, so the overlap was there to be seen."""
    srv = make_server(loader=slow(0.05), bulk_twin_grace_s=30, **LANES)
    post(srv.url, SHORT)  # loaded
    with Documents(srv.url, clients=3, body=PAGE):
        for _ in range(15):
            post(srv.url, SHORT)
    assert twin_events(srv.url)["opened"] == 0
    assert engine(srv.url)["bulk_twin_bytes"] == 0
    with Documents(srv.url, clients=2, body={**PAGE, "text": ["Follow me."] * 8}):
        short_until(srv.url, lambda: twin_events(srv.url)["opened"] >= 1, "no twin for 8")


def test_the_twin_opens_while_both_overlap_and_goes_after_the_documents(make_server, slow):
    srv = make_server(loader=slow(0.1), twin_loader=slow_twin(0.1), bulk_twin_grace_s=3, **LANES)
    alone = texts(post(srv.url, DOCUMENT))  # on the engine
    one = engine(srv.url)["bytes"]
    with Documents(srv.url) as documents:
        samples = short_until(
            srv.url,
            lambda: (s := scrape(srv.url))["lsmt_bulk_twins"] == 1 and s,
            "no bulk twin opened while documents and short requests overlapped",
        )
        assert isinstance(samples, dict)
        assert samples["lsmt_bulk_twin_bytes"] == one
        assert samples["lsmt_engine_bytes{tier=device}"] == 2 * one  # counted in the budget
        info = wait_for(
            lambda: (e := engine(srv.url))["bulk_twin_bytes"] and e, "the twin went too soon"
        )
        assert isinstance(info, dict)
        assert info["bulk_twin_bytes"] == one and info["bytes"] == 2 * one
        seen = len(documents.answers)
        wait_for(lambda: len(documents.answers) >= seen + 2, "no document ran on the twin")
    assert all(texts(answer) == alone for answer in documents.answers)  # the same outputs
    # The documents stopped: the twin goes after the grace, the engine stays.
    wait_for(lambda: engine(srv.url)["bulk_twin_bytes"] == 0, "the twin was not dropped")
    info = engine(srv.url)
    assert info["state"] == "loaded" and info["bytes"] == one
    events = twin_events(srv.url)
    assert events["opened"] >= 1 and events["dropped"] == events["opened"]
    assert events["failed"] == 0 and scrape(srv.url)["lsmt_bulk_twin_bytes"] == 0


class Watched:
    """A translator that records an unload while a batch runs on it."""

    def __init__(self, inner, unloaded_in_batch: list[int]) -> None:
        self.inner, self.unloaded_in_batch, self.running = inner, unloaded_in_batch, 0

    def translate_batch(self, *args, **kwargs):
        self.running += 1
        try:
            return self.inner.translate_batch(*args, **kwargs)
        finally:
            self.running -= 1

    def unload_model(self, to_cpu: bool = False) -> None:
        if self.running:
            self.unloaded_in_batch.append(self.running)
        self.inner.unload_model(to_cpu=to_cpu)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_load_takes_a_busy_twins_bytes_only_after_its_batch(make_server, tiny_bundle):
    """Room for the engine and its twin, not for a second engine beside both: the load of
    another key drops the twin, but only once the batch running on it has ended."""
    _, one = default_loader(load_bundle(tiny_bundle), Route("en", "de"), Settings(device="cpu"))
    unloaded_in_batch: list[int] = []

    def load(bundle, route, settings):
        engine, nbytes = default_loader(bundle, route, settings)
        return SlowTranslator(engine, 0.3), nbytes

    budget = 2 * one + one // 2
    srv = make_server(
        loader=load,
        twin_loader=slow_twin(0.3, unloaded_in_batch),
        device_budget_bytes=budget,
        bulk_twin_grace_s=30,
        **LANES,
    )
    with Documents(srv.url):
        short_until(srv.url, lambda: scrape(srv.url)["lsmt_bulk_twins"] == 1, "no twin opened")
        other = post(srv.url, {**SHORT, "target": "fr"})  # a cold key: needs the twin's bytes
        assert other["translations"][0]["text"]
    assert unloaded_in_batch == []
    assert engine(srv.url)["bulk_twin_bytes"] == 0
    assert engine(srv.url, "tiny:shared+tgt/fr")["state"] == "loaded"
    assert engine(srv.url)["state"] == "loaded"  # the twin went, not the engine
    events = twin_events(srv.url)
    assert events["dropped"] == events["opened"] >= 1
    assert srv.state.registry.device_bytes <= budget
