"""What ``loadtests.peer``'s two modes share (``peer_steps`` holds the stepped one): the servers
a run measures side by side, a request through LibreTranslate's ``/translate`` (which both
servers answer), a step's best throughput within a latency target, and the memory a server
holds after the traffic."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from .server_process import ServiceProcess

SETTLE_S = 5.0  # after the traffic, before the memory a server at rest holds is read


@dataclass
class Peers:
    """What a run measures: the routes, their held-out sentences, and how to start and settle
    each server."""

    routes: list[tuple[str, str]]
    sentences: dict[str, list[str]]
    source: str  # where the sentences come from
    servers: dict[str, tuple[Callable[[], ServiceProcess], Callable[[ServiceProcess], dict]]]


def translate(url: str, text: str, src: str, tgt: str) -> tuple[str, float]:
    t0 = time.perf_counter()
    body = {"q": text, "source": src, "target": tgt, "format": "text"}
    r = httpx.post(f"{url}/translate", json=body, timeout=120)
    r.raise_for_status()
    return r.json()["translatedText"], time.perf_counter() - t0


def best_under_target(steps: list[dict], target_ms: float) -> float:
    """The most requests a second of a step whose p95 stayed within the target (0: none)."""
    ok = [s["requests_per_s"] or 0.0 for s in steps if (s["p95_ms"] or 0) <= target_ms]
    return max(ok, default=0.0)


def rss_after_traffic(server: ServiceProcess) -> tuple[int, int]:
    """Resident memory as the traffic ends and ``SETTLE_S`` later, when a server at rest
    holds it (LSMT gives freed memory back after its ``memory_trim_idle_s`` of quiet)."""
    end = server.rss_bytes()
    time.sleep(SETTLE_S)
    return end, server.rss_bytes()
