"""How a batch is filled (server.batching.select_sentences): fair shares between clients and
requests, arrival order kept within a request, the budgets kept; and, on a real server, a
one-sentence request is answered before the documents queued ahead of it."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from server.batching import DecodeOptions, Job, is_light, select_sentences

OPTS = DecodeOptions(beam_size=1, num_hypotheses=1, max_length=32)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def job(loop, owner: str, sentences: int, tokens: int = 5) -> Job:
    return Job([["▁x"] * tokens for _ in range(sentences)], OPTS, loop.create_future(), owner=owner)


def owners(items) -> list[str]:
    return [j.owner for j, _ in items]


def test_a_small_request_joins_the_next_batch_beside_big_ones(loop):
    heavy = [job(loop, f"h{i}", 40) for i in range(8)]
    small = job(loop, "s", 1)
    fair = select_sentences([*heavy, small], max_tokens=4096, max_size=64, fair=True)
    assert "s" in owners(fair) and small.next_index == 1
    assert owners(fair)[:9] == [*(f"h{i}" for i in range(8)), "s"]  # one each, in turn
    heavy = [job(loop, f"h{i}", 40) for i in range(8)]
    small = job(loop, "s", 1)
    fifo = select_sentences([*heavy, small], max_tokens=4096, max_size=64, fair=False)
    assert owners(fifo) == ["h0"] * 40 + ["h1"] * 24 and small.next_index == 0


def test_one_request_alone_fills_the_batch_as_in_arrival_order(loop):
    for fair in (True, False):
        lone = job(loop, "a", 20)
        items = select_sentences([lone], max_tokens=4096, max_size=16, fair=fair)
        assert [i for _, i in items] == list(range(16))


def test_clients_share_first_then_their_requests(loop):
    """A client with many requests gets no more than one with a single request."""
    many = [job(loop, "many", 10) for _ in range(5)]
    single = job(loop, "one", 10)
    items = select_sentences([*many, single], max_tokens=4096, max_size=10, fair=True)
    assert owners(items).count("one") == 5 and owners(items).count("many") == 5
    # within "many" the requests take turns, each in its own order
    taken = [(id(j), i) for j, i in items if j.owner == "many"]
    assert len({k for k, _ in taken}) == 5 and all(i == 0 for _, i in taken)


def test_budgets_hold_and_a_long_sentence_does_not_block_the_others(loop):
    long = Job([["▁x"] * 30], OPTS, loop.create_future(), owner="a")
    short = job(loop, "b", 10, tokens=4)
    first = job(loop, "c", 1, tokens=20)
    items = select_sentences([first, long, short], max_tokens=40, max_size=64, fair=True)
    assert sum(len(j.sources[i]) for j, i in items) <= 40
    assert long.next_index == 0 and short.next_index == 5  # 20 + 5 * 4 = 40
    alone = select_sentences([long], max_tokens=10, max_size=64, fair=True)
    assert len(alone) == 1  # one sentence longer than the budget still goes, alone


def test_every_sentence_is_taken_once_in_order(loop):
    jobs = [job(loop, f"o{k % 3}", n) for k, n in enumerate([7, 1, 12, 3, 9])]
    seen: dict[int, list[int]] = {id(j): [] for j in jobs}
    while any(j.next_index < len(j.sources) for j in jobs):
        for j, i in select_sentences(jobs, max_tokens=50, max_size=6, fair=True):
            seen[id(j)].append(i)
    assert [seen[id(j)] for j in jobs] == [list(range(len(j.sources))) for j in jobs]


def test_only_short_requests_with_sentences_left_are_light(loop):
    """A job is light by its request's size: a document's last sentence stays in the bulk lane
    (else it takes the express slot before a short request). A job whose sentences are all in
    batches is not light: counting it made the express lane pick a batch with nothing in it,
    again and again, and the loop never yielded."""
    short, document = job(loop, "a", 1), job(loop, "b", 24)
    assert is_light(short, 1) and not is_light(document, 1) and is_light(document, 24)
    document.next_index = 23
    assert not is_light(document, 1)
    short.next_index = 1
    assert not is_light(short, 1)


def documents_then_one(
    srv, document: dict, n: int, small: dict, bulk_busy: bool = False
) -> dict[str, float]:
    """Send ``n`` documents at once, then, once all are in the batcher's queue (and, with
    ``bulk_busy``, every bulk slot runs a batch), the small request; when each was answered
    (``doc<i>``, ``small``). Events, not sleeps: a loaded machine may take any time to
    prepare the documents."""
    url = srv.url
    finished: dict[str, float] = {}
    batcher = next(iter(srv.state.service.decoders.batchers.values()))
    submit, submitted = batcher.submit, []

    def counting_submit(sources, *args, **kwargs):  # on the server's event loop
        job = submit(sources, *args, **kwargs)
        submitted.append(len(sources))
        return job

    batcher.submit = counting_submit

    def send(name: str, body: dict) -> None:
        r = httpx.post(f"{url}/v1/translate", json=body, timeout=60)
        assert r.status_code == 200, r.text
        finished[name] = time.perf_counter()

    threads = [threading.Thread(target=send, args=(f"doc{i}", document)) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120  # a budget for events, not a wait for the work
    while len(submitted) < n or (bulk_busy and batcher._busy["bulk"] < batcher._capacity["bulk"]):
        assert time.monotonic() < deadline, ("the documents did not reach the batcher", submitted)
        time.sleep(0.005)
    assert submitted == [len(document["text"])] * n
    send("small", small)
    for t in threads:
        t.join()
    return finished


@pytest.mark.integration
@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_a_one_sentence_request_is_not_held_behind_documents(make_server, slow, policy):
    """Four requests of 24 sentences are queued, then one of a single sentence: fair batching
    answers it before them, arrival order after all of them."""
    srv = make_server(
        loader=slow(0.05), batch_policy=policy, inter_threads=1, max_batch_size=8,
        batch_wait_ms=0, express_batch_size=0,  # how the bulk slots fill their batches
    )  # fmt: skip
    small = {"text": "Follow me.", "source": "en", "target": "de", "beam_size": 1}
    document = {**small, "text": ["Follow me."] * 24}
    assert httpx.post(f"{srv.url}/v1/translate", json=small, timeout=60).status_code == 200
    # the documents are queued (12 batches of 0.05 s at least) when the small one is sent
    finished = documents_then_one(srv, document, 4, small)
    last_document = max(v for k, v in finished.items() if k != "small")
    first_document = min(v for k, v in finished.items() if k != "small")
    if policy == "fair":
        assert finished["small"] < first_document
    else:
        assert finished["small"] >= last_document - 0.05


@pytest.mark.integration
def test_the_express_lane_runs_a_short_request_in_a_small_batch(make_server, tmp_path):
    """Documents keep both bulk slots busy; a one-sentence request sent among them runs at
    once in an express batch of its own size beside them, on the engine (not on its bulk
    twin, which the overlap asks for: server/bulk_twin.py), and is answered before any
    document; the express lane runs no document sentence, so the bulk batches stay full."""
    from server.engine_loader import bulk_twin_loader, default_loader

    batches: list[tuple[str, list[list[str]]]] = []  # (translator, sources) per batch

    class Recording:  # every batch's sources; a batch takes 30 ms per sentence
        def __init__(self, inner, name: str) -> None:
            self.inner, self.name = inner, name

        def translate_batch(self, sources, *args, **kwargs):
            batches.append((self.name, [list(s) for s in sources]))
            time.sleep(0.03 * len(sources))
            return self.inner.translate_batch(sources, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    def recording(loader, name: str):
        def load(bundle, route, settings):
            engine, nbytes = loader(bundle, route, settings)
            return Recording(engine, name), nbytes

        return load

    srv = make_server(
        loader=recording(default_loader, "engine"),
        twin_loader=recording(bulk_twin_loader, "twin"),
        # the twin opens from the engine cache, as the engine's load left it: not assembled
        # again beside the short request
        engine_cache_dir=tmp_path / "engines",
        engine_cache_fill=False,
        inter_threads=2,
        express_batch_size=1,
        max_batch_size=8,
        batch_wait_ms=0,
    )
    small = {"text": "Where is the station?", "source": "en", "target": "de", "beam_size": 1}
    document = {**small, "text": ["Follow me."] * 24}
    assert httpx.post(f"{srv.url}/v1/translate", json=small, timeout=60).status_code == 200
    assert [name for name, _ in batches] == ["engine"]  # alone, too
    batches.clear()
    # the documents are queued and both lanes busy when the small one is sent
    finished = documents_then_one(srv, document, 3, small, bulk_busy=True)
    assert finished["small"] < min(v for k, v in finished.items() if k != "small")
    doc_sentence = batches[0][1][0]  # every document sentence is the same
    with_small = [(n, b) for n, b in batches if any(s != doc_sentence for s in b)]
    assert with_small == [("engine", with_small[0][1])] and len(with_small[0][1]) == 1
    rest = [(n, len(b)) for n, b in batches if (n, b) not in with_small]
    assert [size for _, size in rest] == [8] * 9  # every document sentence in a full batch
    # on the engine until the twin (opened in the background) is there, then on the twin
    names = [n for n, _ in rest]
    assert names == sorted(names) and set(names) <= {"engine", "twin"}, names
    # the small one ran while both bulk slots were busy: beside two batches, not after them
    small_at = batches.index(with_small[0])
    assert 2 <= small_at < len(batches) - 2, small_at
