"""Dynamic batching, one batcher per engine key.

A request becomes a ``Job``: its tokenized sentences for one engine and its decoding options.
The batcher waits until the oldest job has waited ``batch_wait_ms`` or the waiting sentences
reach ``max_batch_tokens`` (it does not wait when every request inside the server is already
in its queue: nobody else could join, so a lone request is not delayed). Then it fills a
batch, from jobs with the same decoding options as the oldest one, up to ``max_batch_tokens``
source tokens and ``max_batch_size`` sentences (:func:`select_sentences`), and runs one
``translate_batch`` in a worker thread (CTranslate2 releases the GIL). Up to
``inter_threads`` batches of one engine run at once (one more with the express lane, below). A
large job may be spread over several batches; its future resolves when all its sentences are
done.

Filling is fair by default (``batch_policy``): sentences are taken round-robin across
clients (a job's ``owner``: its API key, else its address) and, within a client, across its
jobs, each job's sentences in order. A one-sentence request then waits for one batch, not for
every document queued before it, and one client cannot take an engine by sending many
requests; with a single job waiting the batch is the same as in arrival order (``fifo``, kept
for comparison).

With ``express_batch_size`` E > 0 an engine has one batch slot more than ``inter_threads``,
the express lane (and CTranslate2 one worker more: ``Settings.engine_workers``): its batches
hold at most E sentences, from the jobs with the fewest sentences left first, and it takes
only light jobs (requests of at most E sentences). The bulk slots take light jobs only when
no heavy one waits. A one-sentence request beside documents then starts at once on the extra
worker instead of waiting for a full batch; with no light job waiting the lane is idle and
the bulk slots keep every core. On the CPU, while a route has documents (jobs heavier than the
lane takes) and light jobs at once, the documents' batches run on its bulk twin, a second
translator with niced threads (server/bulk_twin.py), so the short batch gets the cores first
instead of sharing them with the running batches.

The queue is bounded (``queue_size`` jobs waiting per engine): ``submit`` raises ``QueueFull``
at once instead of queueing forever. A job whose request timed out is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lsmt_bundle.contracts import Engine, TranslationResult
from lsmt_bundle.ct2 import translate_pieces

from .bundles import ServedRoute
from .engine_registry import EngineRegistry
from .engine_slots import EngineSlot, EngineUnavailable
from .metrics import Metrics
from .settings import Settings

log = logging.getLogger("server.batching")


class QueueFull(Exception):
    pass


class ShuttingDown(Exception):
    pass


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int
    num_hypotheses: int
    max_length: int
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0


@dataclass
class Hypothesis:
    pieces: list[str]
    score: float


@dataclass(eq=False)
class Job:
    sources: list[list[str]]
    options: DecodeOptions
    future: asyncio.Future[list[list[Hypothesis]]]
    enqueued_at: float = field(default_factory=time.perf_counter)
    results: list[list[Hypothesis] | None] = field(default_factory=list)
    next_index: int = 0  # first sentence not yet given to a batch
    done_count: int = 0
    started_at: float = 0.0  # its first sentence taken into a batch (0: still waiting)
    finished_at: float = 0.0  # its last sentence translated
    cancelled: bool = False
    owner: str = ""  # who sent it (fair batching): an API key's digest or a client address

    def __post_init__(self) -> None:
        self.results = [None] * len(self.sources)

    @property
    def pending_tokens(self) -> int:
        return sum(len(s) for s in self.sources[self.next_index :])

    @property
    def pending_sentences(self) -> int:
        return len(self.sources) - self.next_index


def is_light(job: Job, express_batch_size: int) -> bool:
    """Whether ``job`` belongs to the express lane: a request of at most its batch size of
    sentences, with sentences still to batch (a job whose sentences are all in batches waits
    for none). A document's last sentences stay in the bulk lane: counted as light, they took
    the express slot and short requests queued behind them (bench_fair's slowest 5 % waited
    109 ms in the queue)."""
    return len(job.sources) <= express_batch_size and job.pending_sentences > 0


def run_translate_batch(
    translator: Engine, sources: list[list[str]], opts: DecodeOptions, max_positions: int
) -> list[TranslationResult]:
    return translate_pieces(
        translator,
        sources,
        max_positions,
        beam_size=opts.beam_size,
        num_hypotheses=opts.num_hypotheses,
        max_length=opts.max_length,
        repetition_penalty=opts.repetition_penalty,
        no_repeat_ngram_size=opts.no_repeat_ngram_size,
    )


def select_sentences(
    jobs: list[Job], max_tokens: int, max_size: int, *, fair: bool = True
) -> list[tuple[Job, int]]:
    """The (job, sentence index) pairs of the next batch, from ``jobs`` (in arrival order),
    within ``max_tokens`` source tokens (one longer sentence still goes alone) and
    ``max_size`` sentences; each taken sentence advances its job's ``next_index``.

    ``fair``: round-robin over owners (in the order of their first job in ``jobs``) and,
    within an owner, over its jobs; a job whose next sentence does not fit sits this batch
    out. Otherwise ``jobs``' order: each job's sentences until the batch is full."""
    items: list[tuple[Job, int]] = []
    tokens = 0

    def take(job: Job) -> bool:
        """Add the job's next sentence if it fits."""
        nonlocal tokens
        n = len(job.sources[job.next_index])
        if items and tokens + n > max_tokens:
            return False
        items.append((job, job.next_index))
        job.next_index += 1
        tokens += n
        return True

    def full() -> bool:
        return len(items) >= max_size or (bool(items) and tokens >= max_tokens)

    waiting = [j for j in jobs if j.next_index < len(j.sources)]
    if not fair:
        for job in waiting:
            while job.next_index < len(job.sources) and len(items) < max_size and take(job):
                pass
            if full():
                break
        return items
    owners: dict[str, deque[Job]] = {}
    for job in waiting:
        owners.setdefault(job.owner, deque()).append(job)
    ring = deque(owners.values())
    while ring and not full():
        own_jobs = ring.popleft()
        job = own_jobs.popleft()
        if take(job) and job.next_index < len(job.sources):
            own_jobs.append(job)
        if own_jobs:
            ring.append(own_jobs)
    return items


class Batcher:
    def __init__(
        self,
        served_route: ServedRoute,
        registry: EngineRegistry,
        settings: Settings,
        metrics: Metrics,
        executor: ThreadPoolExecutor,
        requests_in_flight: Callable[[], int] | None = None,
    ) -> None:
        self.served_route = served_route
        self.requests_in_flight = requests_in_flight
        self.key = served_route.engine_key
        self.registry = registry
        self.settings = settings
        self.metrics = metrics
        self.executor = executor
        self.queue: deque[Job] = deque()
        self._wake = asyncio.Event()
        # Batch slots per lane (module docstring): the express lane is one slot more.
        express = 1 if settings.express_batch_size else 0
        self._capacity = {"bulk": settings.resolved_inter_threads, "express": express}
        self._busy = {"bulk": 0, "express": 0}
        self._lane_freed = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.batches_run = 0
        self._depth = metrics.queue_depth.labels(self.key)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"batcher:{self.key}")

    def is_full(self) -> bool:
        return sum(1 for j in self.queue if not j.cancelled) >= self.settings.queue_size

    def submit(self, sources: list[list[str]], options: DecodeOptions, owner: str = "") -> Job:
        if self._closing:
            raise ShuttingDown()
        if self.is_full():
            raise QueueFull()
        job = Job(sources, options, asyncio.get_running_loop().create_future(), owner=owner)
        self.queue.append(job)
        self._depth.set(len(self.queue))
        self._wake.set()
        self._lane_freed.set()  # a light job may take the express lane while bulk is busy
        self.start()
        return job

    async def close(self) -> None:
        """Finish running batches, fail what is still queued."""
        self._closing = True
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        while self.queue:
            job = self.queue.popleft()
            if not job.future.done():
                job.future.set_exception(ShuttingDown())
        self._depth.set(0)

    # The loop ---------------------------------------------------------------------------

    def _prune(self) -> None:
        while self.queue and (
            self.queue[0].cancelled or self.queue[0].next_index >= len(self.queue[0].sources)
        ):
            self.queue.popleft()
        self._depth.set(len(self.queue))

    async def _loop(self) -> None:
        wait_s = self.settings.batch_wait_ms / 1000.0
        while True:
            self._prune()
            if not self.queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            # Gather: until the oldest job has waited wait_s or the token budget is reached.
            head = self.queue[0]
            while True:
                remaining = head.enqueued_at + wait_s - time.perf_counter()
                if remaining <= 0 or self._waiting_tokens() >= self.settings.max_batch_tokens:
                    break
                if self._nobody_else_coming():
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), remaining)
                except TimeoutError:
                    break
            lane = await self._acquire_lane()
            self._prune()
            batch = self._take_batch(lane)
            if not batch:
                self._release_lane(lane)
                continue
            task = asyncio.create_task(self._run_batch(lane, *batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _acquire_lane(self) -> str:
        """A free batch slot: the express lane when a light job waits for it, else a bulk
        one. Also woken by ``submit``: a light job arriving while the bulk slots are busy
        takes the express lane at once."""
        while True:
            free = [lane for lane in ("bulk", "express") if self._busy[lane] < self._capacity[lane]]
            lane = "express" if "express" in free and self._light_waiting() else None
            if lane is None and "bulk" in free:
                lane = "bulk"
            if lane is not None:
                self._busy[lane] += 1
                return lane
            self._lane_freed.clear()
            await self._lane_freed.wait()

    def _release_lane(self, lane: str) -> None:
        self._busy[lane] -= 1
        self._lane_freed.set()

    def _is_light(self, job: Job) -> bool:
        return is_light(job, self.settings.express_batch_size)

    def _light_waiting(self) -> bool:
        return any(not j.cancelled and self._is_light(j) for j in self.queue)

    def _is_document(self, job: Job) -> bool:
        """A document (``server.bulk_twin``): more sentences than the express lane takes, and
        at least ``bulk_twin_min_sentences``."""
        n = len(job.sources)
        return n > self.settings.express_batch_size and n >= self.settings.bulk_twin_min_sentences

    def _both_kinds(self, slot: EngineSlot, lane: str, documents: bool) -> bool:
        """Whether documents and light jobs share the engine as a batch of ``lane`` starts
        (``documents``: it holds a document's sentences): its bulk twin is wanted."""
        if documents:
            return self._busy["express"] > 0 or self._light_waiting()
        return lane == "express" and (
            slot.twin.documents > 0
            or any(not j.cancelled and self._is_document(j) for j in self.queue)
        )

    def _nobody_else_coming(self) -> bool:
        """True when every request inside the server is already queued here: waiting
        could not gather anything, so a lone request is not delayed."""
        if self.requests_in_flight is None:
            return False
        waiting = sum(1 for j in self.queue if not j.cancelled)
        return self.requests_in_flight() <= waiting

    def _waiting_tokens(self) -> int:
        return sum(j.pending_tokens for j in self.queue if not j.cancelled)

    def _take_batch(self, lane: str) -> tuple[list[tuple[Job, int]], DecodeOptions, int] | None:
        # jobs with sentences not yet given to a batch (others wait for theirs to finish)
        jobs = [j for j in self.queue if not j.cancelled and j.pending_sentences]
        if not jobs:
            return None
        express = lane == "express"
        if self._capacity["express"] and not express and any(not self._is_light(j) for j in jobs):
            jobs = [j for j in jobs if not self._is_light(j)]  # light ones: the express lane
        if express:  # light jobs only, the fewest sentences left first (stable otherwise)
            jobs = sorted((j for j in jobs if self._is_light(j)), key=lambda j: j.pending_sentences)
            if not jobs:
                return None
        opts = jobs[0].options
        items = select_sentences(
            [j for j in jobs if j.options == opts],
            self.settings.max_batch_tokens,
            self.settings.express_batch_size if express else self.settings.resolved_max_batch_size,
            fair=self.settings.batch_policy == "fair" or express,
        )
        now = time.perf_counter()
        for job in dict.fromkeys(job for job, _ in items):
            if not job.started_at:
                job.started_at = now
                self.metrics.stage_latency.labels("queue_wait").observe(now - job.enqueued_at)
        self._prune()
        if not items:
            return None
        return items, opts, sum(len(job.sources[i]) for job, i in items)

    async def _run_batch(
        self, lane: str, items: list[tuple[Job, int]], opts: DecodeOptions, tokens: int
    ) -> None:
        jobs = list(dict.fromkeys(j for j, _ in items))
        try:
            results = await self._translate(lane, items, opts, tokens, len(jobs))
            self._deliver(items, results)
        except Exception as exc:
            if not isinstance(exc, EngineUnavailable):
                log.exception("batch failed on %s", self.key)
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(exc)
        finally:
            self._release_lane(lane)

    async def _translate(
        self, lane: str, items: list[tuple[Job, int]], opts: DecodeOptions, tokens: int, n_jobs: int
    ) -> list[TranslationResult]:
        loop = asyncio.get_running_loop()
        slot = await self.registry.acquire(self.served_route)
        twins = self.registry.twins
        documents = lane == "bulk" and any(self._is_document(job) for job, _ in items)
        if self._both_kinds(slot, lane, documents):
            twins.want(slot)
        translator = twins.for_documents(slot) if documents else slot.resident()
        try:
            sources = [job.sources[i] for job, i in items]
            t0 = time.perf_counter()
            results = await loop.run_in_executor(
                self.executor,
                run_translate_batch,
                translator,
                sources,
                opts,
                self.served_route.served.max_source_positions,
            )
        finally:
            if documents:
                twins.documents_done(slot, translator)
            self.registry.release(slot)
        self.metrics.stage_latency.labels("translate").observe(time.perf_counter() - t0)
        self.metrics.batch_size.observe(len(items))
        self.metrics.batch_tokens.observe(tokens)
        self.metrics.batch_requests.observe(n_jobs)
        self.metrics.tokens.labels("input").inc(tokens)
        self.batches_run += 1
        return results

    def _deliver(self, items: list[tuple[Job, int]], results: list[TranslationResult]) -> None:
        out_tokens = 0
        for (job, i), res in zip(items, results, strict=True):
            hyps = [
                Hypothesis(list(h), float(s))
                for h, s in zip(res.hypotheses, res.scores, strict=False)
            ]
            out_tokens += len(hyps[0].pieces) if hyps else 0
            job.results[i] = hyps
            job.done_count += 1
            if job.done_count == len(job.sources) and not job.future.done():
                job.finished_at = time.perf_counter()
                job.future.set_result([r for r in job.results if r is not None])  # all set
        self.metrics.tokens.labels("output").inc(out_tokens)
