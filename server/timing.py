"""Where one request's time went, answered in its ``Server-Timing`` header (W3C Server Timing;
browsers' developer tools show it): ``tokenize`` (splitting and SentencePiece),
``queue`` (until its first sentence was in a batch), ``decode`` (from then until its last
sentence was translated, an engine load included), ``check`` (the output checks, when on),
``detokenize``, and ``total`` (the request inside the server, until its answer starts). A
request decoded on several engines at once counts the longest ``queue`` and ``decode`` of
them; decodings one after another (the output checks' retry after the first) add up. On the
cluster's ingress ``decode`` is the call to the translator replica (its queue included).
The Prometheus stage histograms hold the same stages over all requests; this says which stage
a slow request lost its time in.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from types import TracebackType

# The current request's stage seconds: the request middleware gives each request its own dict
# (tasks started for the request, such as one decode per engine, share it).
STAGE_SECONDS: ContextVar[dict[str, float] | None] = ContextVar("lsmt_stage_seconds", default=None)


def record(stage: str, seconds: float) -> None:
    """Add ``seconds`` to ``stage`` of the current request (outside a request: nothing)."""
    times = STAGE_SECONDS.get()
    if times is not None:
        times[stage] = times.get(stage, 0.0) + seconds


def record_longest(stage: str, seconds: float) -> None:
    """``stage`` of the current request is the longest of the values recorded (stages that
    run at once, one per engine; see :func:`concurrent_stages`)."""
    times = STAGE_SECONDS.get()
    if times is not None:
        times[stage] = max(times.get(stage, 0.0), seconds)


@contextlib.contextmanager
def concurrent_stages() -> Iterator[None]:
    """Stages recorded inside the block (by it and the tasks it starts) run at once: on leaving
    it, each adds its longest to the request's stage, so that a block run after another one
    (the output checks' retry) adds its time instead of hiding behind the longer of the two."""
    outer = STAGE_SECONDS.get()
    if outer is None:
        yield
        return
    inner: dict[str, float] = {}
    token = STAGE_SECONDS.set(inner)
    try:
        yield
    finally:
        STAGE_SECONDS.reset(token)
        for stage, seconds in inner.items():
            outer[stage] = outer.get(stage, 0.0) + seconds


class Stopwatch:
    """Adds up the time spent inside its ``with`` blocks (a stage run in several parts)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.seconds += time.perf_counter() - self._start


def server_timing(times: dict[str, float], total_s: float) -> bytes:
    """The header's value: each stage, then ``total``, in milliseconds."""
    stages = [*times.items(), ("total", total_s)]
    return ", ".join(f"{name};dur={s * 1000:.1f}" for name, s in stages).encode()


def parse_server_timing(header: str) -> dict[str, float]:
    """Seconds per stage of a ``Server-Timing`` value (what clients and benchmarks read)."""
    stages = {}
    for part in header.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            stages[name] = float(dur) / 1000
    return stages
