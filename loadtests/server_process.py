"""A real ``python -m server`` (or another HTTP service) in a subprocess, for the load tests
and benchmarks."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    """``with ServiceProcess(cmd, port, ready_path, env) as service: ... service.url``:
    started at once; on entry, waits until ``ready_path`` answers 200 (``startup_s``: the
    seconds from the start until then); stops the process (SIGTERM, then SIGKILL) on exit."""

    def __init__(
        self,
        cmd: list[str],
        port: int,
        ready_path: str,
        env: dict[str, str] | None = None,
        name: str = "server",
    ) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.ready_path = ready_path
        self.name = name
        self.startup_s = 0.0
        self._started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})})

    def __enter__(self) -> ServiceProcess:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    self.startup_s = time.perf_counter() - self._started
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not become ready")

    def rss_bytes(self) -> int:
        """Resident memory of the process and its children."""
        import psutil

        root = psutil.Process(self.proc.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ServerProcess(ServiceProcess):
    """``with ServerProcess([bundle], env) as server: ...``: LSMT's server on the bundles, on
    the CPU; ready when /readyz says so (warm-up done)."""

    def __init__(self, bundles: list[Path], env: dict[str, str] | None = None) -> None:
        port = free_port()
        cmd = [sys.executable, "-m", "server", *map(str, bundles), "--port", str(port)]
        base = {"LSMT_DEVICE": "cpu", "LSMT_LOG_LEVEL": "warning"}
        super().__init__(cmd, port, "/readyz", {**base, **(env or {})})


def metric_sum(url: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if not (line.startswith(name + " ") or line.startswith(name + "{")):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.split()[-1])
    return total


def _request_bytes(port: int, path: str, body: dict) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def _read_response(reader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(int(x.split(":", 1)[1]) for x in lines if x.lower().startswith("content-length"))
    return status, await reader.readexactly(length)


async def _concurrent(url: str, bodies: list[dict], path: str) -> tuple[float, list[dict]]:
    port = int(url.rsplit(":", 1)[1])
    conns = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in bodies))
    reqs = [_request_bytes(port, path, b) for b in bodies]
    t0 = time.perf_counter()
    for (_, writer), req in zip(conns, reqs, strict=True):
        writer.write(req)
    results = await asyncio.gather(*(_read_response(reader) for reader, _ in conns))
    dt = time.perf_counter() - t0
    for _, writer in conns:
        writer.close()
    bad = [(status, body[:200]) for status, body in results if status != 200]
    if bad:
        raise RuntimeError(f"server answered {bad[:3]}")
    return dt, [json.loads(body) for _, body in results]


def concurrent_requests(
    url: str, bodies: list[dict], path: str = "/v1/translate"
) -> tuple[float, list[dict]]:
    """All requests at once over as many open keep-alive connections: (seconds, answers).
    A minimal raw HTTP/1.1 client: httpx costs milliseconds of CPU per request, which on two
    cores would measure the client rather than the server."""
    return asyncio.run(_concurrent(url, bodies, path))
