"""What `make image-check` asks a server in a container: translations compared with the host
install's, readiness, and requests kept in flight while the container is stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

# Compared between the host install and the container: a list, and two other routes.
REQUESTS: list[dict[str, Any]] = [
    {"text": ["The Lord is my shepherd.", "Love your enemies."], "source": "en", "target": "es"},
    {"text": "And the light shineth in darkness.", "source": "en", "target": "fr"},
    {"text": "Bienaventurados los mansos.", "source": "es", "target": "en"},
]
# Slow enough (a beam, 16 sentences) that all IN_FLIGHT are in flight together even on a busy
# machine: with 8 sentences, a check run under `nice -n 19` beside a training run polled the
# in-flight gauge until the requests were answered without ever seeing the 20 at once.
SLOW_REQUEST = {
    "text": ["And the light shineth in darkness.", "Bienaventurados los mansos."] * 8,
    "source": "en",
    "target": "it",
    "beam_size": 4,
}
IN_FLIGHT = 20


def answers(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The answer to one translation request, without its request id."""
    r = httpx.post(f"{url}/v1/translate", json=body, timeout=120)
    r.raise_for_status()
    answer: dict[str, Any] = r.json()
    answer.pop("request_id", None)
    return answer


def same_answers(url: str, expected: list[dict[str, Any]]) -> str:
    """Raises unless the server at `url` answers REQUESTS as `expected` records."""
    got = [answers(url, body) for body in REQUESTS]
    for want, have, body in zip(expected, got, REQUESTS, strict=True):
        if want != have:
            raise RuntimeError(f"{body}: the host answered {want}, the container {have}")
    return f"{len(got)} answers equal the host's (e.g. {got[0]['translations'][0]['text']!r})"


def wait_ready(url: str, timeout: float, started: float) -> float:
    """Seconds from `started` (time.monotonic) until /readyz answers 200."""
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url}/readyz not 200 within {timeout:.0f} s")


@dataclass
class StopUnderLoad:
    statuses: list[int]
    in_flight: int  # requests the server was handling when the stop began
    stop_s: float

    def verdict(self, exit_code: str) -> str:
        """Raises unless every request was in flight and answered 200, and the exit code 0."""
        if set(self.statuses) != {200} or exit_code != "0" or self.in_flight < IN_FLIGHT:
            raise RuntimeError(
                f"{self.in_flight} in flight at the stop; answers {self.statuses}; "
                f"exit code {exit_code}"
            )
        return (
            f"{self.in_flight} in flight at SIGTERM, all answered 200; "
            f"stopped in {self.stop_s:.1f} s, exit 0"
        )


def stop_under_load(url: str, stop: Callable[[], object]) -> StopUnderLoad:
    """IN_FLIGHT slow requests sent, `stop` called once the server handles them all."""
    return asyncio.run(_stop_under_load(url, stop))


async def _stop_under_load(url: str, stop: Callable[[], object]) -> StopUnderLoad:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def post() -> int:
            return (await client.post("/v1/translate", json=SLOW_REQUEST)).status_code

        tasks = [asyncio.create_task(post()) for _ in range(IN_FLIGHT)]
        in_flight = 0
        for _ in range(200):
            await asyncio.sleep(0.05)
            # the gauge counts this /metrics request too
            in_flight = int(await _metric(client, "lsmt_http_requests_in_flight")) - 1
            if in_flight >= IN_FLIGHT:
                break
        started = time.monotonic()
        stopping = asyncio.create_task(asyncio.to_thread(stop))
        statuses = await asyncio.gather(*tasks, return_exceptions=True)
        await stopping
        codes = [s if isinstance(s, int) else -1 for s in statuses]
        return StopUnderLoad(codes, in_flight, time.monotonic() - started)


async def _metric(client: httpx.AsyncClient, name: str) -> float:
    text = (await client.get("/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))
