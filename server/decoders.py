"""Where tokenized sentences are decoded: ``Decoders``, what the translation service needs
from the engines, ``LocalDecoders``, the engines of this process (one batcher per engine key
over the process's ``EngineRegistry``), and ``decode_sentences``, a request's sentences
decoded one job per engine.

The cluster application (``server.cluster``) gives the same service another implementation,
which sends each engine's sentences to the Ray Serve replica that holds that engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Protocol

from .batching import Batcher, DecodeOptions, Hypothesis
from .bundles import ServedRoute
from .engine_registry import EngineRegistry
from .metrics import Metrics
from .plans import Sentence, SentenceHypotheses
from .settings import Settings
from .timing import concurrent_stages, record_longest

# The replicas that decoded the current request's sentences (cluster decoders add theirs): the
# request middleware gives each request its own set and answers it in ``X-LSMT-Replica``.
SERVED_BY: ContextVar[set[str] | None] = ContextVar("lsmt_served_by", default=None)


class Decoders(Protocol):
    """Decoding on the engine of a served route (``ServedRoute``: its bundle, route and
    engine key). ``decode`` raises the batching failures (``QueueFull``, ``EngineUnavailable``,
    ``ShuttingDown``) as they are; when it is cancelled, the sentences still queued are
    dropped."""

    def check(self, served_route: ServedRoute) -> None:
        """Raise ``EngineUnavailable`` at once when the route's engine is known to be down."""

    def is_full(self, served_route: ServedRoute) -> bool:
        """Whether a new request for the route would be refused (queue full)."""

    async def decode(
        self,
        served_route: ServedRoute,
        sources: list[list[str]],
        options: DecodeOptions,
        client: str,
    ) -> list[list[Hypothesis]]:
        """The hypotheses of every source sentence, in order."""

    async def close(self) -> None:
        """Finish running batches; fail what is still queued with ``ShuttingDown``."""


class LocalDecoders:
    """The engines of this process: one ``Batcher`` per engine key, made on first use."""

    def __init__(
        self,
        registry: EngineRegistry,
        settings: Settings,
        metrics: Metrics,
        executor: ThreadPoolExecutor,
        requests_in_flight: Callable[[], int] | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.metrics = metrics
        self.executor = executor
        self.requests_in_flight = requests_in_flight
        self.batchers: dict[str, Batcher] = {}

    def batcher(self, served_route: ServedRoute) -> Batcher:
        key = served_route.engine_key
        b = self.batchers.get(key)
        if b is None:
            b = self.batchers[key] = Batcher(
                served_route,
                self.registry,
                self.settings,
                self.metrics,
                self.executor,
                self.requests_in_flight,
            )
        return b

    def check(self, served_route: ServedRoute) -> None:
        self.registry.check(served_route)

    def is_full(self, served_route: ServedRoute) -> bool:
        return self.batcher(served_route).is_full()

    async def decode(
        self,
        served_route: ServedRoute,
        sources: list[list[str]],
        options: DecodeOptions,
        client: str,
    ) -> list[list[Hypothesis]]:
        job = self.batcher(served_route).submit(sources, options, client)
        try:
            hypotheses = await job.future
        except BaseException:
            # Cancelled (the request failed elsewhere, timed out or went away): its queued
            # sentences are skipped, not translated for nobody.
            job.cancelled = True
            if not job.future.done():
                job.future.cancel()
            raise
        record_longest("queue", job.started_at - job.enqueued_at)
        record_longest("decode", job.finished_at - job.started_at)
        return hypotheses

    async def close(self) -> None:
        for b in self.batchers.values():
            with contextlib.suppress(Exception):
                await b.close()


async def decode_all(
    decoders: Decoders,
    groups: list[tuple[ServedRoute, list[list[str]]]],
    options: DecodeOptions,
    client: str,
    timeout: float,
) -> list[list[list[Hypothesis]]]:
    """Decode each (served route, sources) group at once, one call per engine; the first
    failure is raised and the other groups cancelled, and ``TimeoutError`` after
    ``timeout`` seconds (everything cancelled too). The request's ``queue`` and ``decode``
    stages grow by the longest of the groups'."""
    with concurrent_stages():
        tasks = [
            asyncio.ensure_future(decoders.decode(served_route, sources, options, client))
            for served_route, sources in groups
        ]
        try:
            done, pending = await asyncio.wait(
                tasks, timeout=max(timeout, 0.001), return_when=asyncio.FIRST_EXCEPTION
            )
            failed = next((t.exception() for t in done if t.exception()), None)
            if failed is not None:
                raise failed
            if pending:
                raise TimeoutError
            return [t.result() for t in tasks]
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            # Wait for the cancellations, so that every job is marked cancelled before the
            # caller answers; their exceptions are taken here (none logged as never retrieved).
            await asyncio.gather(*tasks, return_exceptions=True)


async def decode_sentences(
    decoders: Decoders,
    sentences: list[Sentence],
    options: DecodeOptions,
    client: str,
    deadline: float,
) -> SentenceHypotheses:
    """Decode the sentences, one group per engine, all within ``deadline``. On any
    failure, the client going away or the graceful-shutdown time running out
    (CancelledError) included, the queued sentences are dropped, not translated for
    nobody, and the failure raised as is (QueueFull, TimeoutError past ``deadline``,
    EngineUnavailable, ShuttingDown)."""
    groups: dict[str, tuple[ServedRoute, list[Sentence]]] = {}
    for sentence in sentences:
        served_route = sentence.served_route
        decoders.check(served_route)  # a failed key: 503 at once
        groups.setdefault(served_route.engine_key, (served_route, []))[1].append(sentence)
    if not groups:
        return {}
    calls = [(served_route, [m.pieces for m in ms]) for served_route, ms in groups.values()]
    results = await decode_all(decoders, calls, options, client, deadline - time.monotonic())
    hypotheses: SentenceHypotheses = {}
    for (_, members), found in zip(groups.values(), results, strict=True):
        hypotheses.update(zip([m.index for m in members], found, strict=True))
    return hypotheses
