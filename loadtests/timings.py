"""Latency figures the benchmarks share: a percentile, and where requests' time went by the
stages each answer's ``Server-Timing`` header gives (server/timing.py)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

STAGES = ("tokenize", "queue", "decode", "check", "detokenize")  # server.timing's, without total
SPLIT = (*STAGES, "between", "outside")  # a request's latency, whole


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values``, nearest rank."""
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile is between 0 and 1, not {q}")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Sample:
    """One request: its latency at the client, and its server's stage times
    (``Server-Timing``: tokenize, queue, decode, detokenize, total)."""

    seconds: float
    stages: dict[str, float]


def stage_split(samples: list[Sample]) -> dict[str, float]:
    """Where the requests' time went: each stage's median (``median_<stage>_s``), and its
    mean over the slowest 5 % of the requests (``tail_<stage>_s``); ``between`` is the
    server's total less its stages (validation, detection, waiting for the event loop between
    them), ``outside`` the client's latency less the server's total (HTTP, the event loop
    before the request is read, the answer's transfer)."""

    def stages(s: Sample) -> dict[str, float]:
        inside = {k: s.stages.get(k, 0.0) for k in STAGES}
        total = s.stages.get("total", 0.0)
        return {**inside, "between": total - sum(inside.values()), "outside": s.seconds - total}

    cut = percentile([s.seconds for s in samples], 0.95)
    tail = [stages(s) for s in samples if s.seconds >= cut]
    every = [stages(s) for s in samples]
    out = {}
    for k in SPLIT:
        out[f"median_{k}_s"] = statistics.median(x[k] for x in every)
        out[f"tail_{k}_s"] = statistics.fmean(x[k] for x in tail)
    return out
