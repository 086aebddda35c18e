"""The server as a process: graceful shutdown with requests in flight, and the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TEXTS = [
    "And Jesus said unto them, Follow me.",
    "And they left their nets.",
    "And he went up into a mountain.",
    "Blessed are the meek.",
    "And he taught them, saying.",
    "Ye are the salt of the earth.",
]


def _metric(url: str, series: str) -> float:
    """The value of one series of /metrics (``name`` or ``name{labels}``); 0 when absent."""
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def _in_flight(url: str) -> float:
    return _metric(url, "lsmt_http_requests_in_flight")


def _start_real_server(tiny_bundle, delay_s: str = "0", **env: str):
    """``serve_slow.py`` in its own process (settings may come from LSMT_* ``env``), once
    /readyz answers 200: (process, url). A process that does not get ready is killed."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "serve_slow.py"), str(tiny_bundle), delay_s],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    try:
        port = int(proc.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120  # start-up on two busy cores
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    return proc, url
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def test_sigterm_finishes_in_flight_requests(tiny_bundle):
    proc, url = _start_real_server(tiny_bundle, delay_s="0.6")
    try:
        results: dict[int, tuple[int, str]] = {}

        def call(i: int) -> None:
            try:
                r = httpx.post(
                    f"{url}/v1/translate",
                    timeout=30,
                    json={"text": TEXTS[i], "source": "en", "target": "de"},
                )
                results[i] = (r.status_code, r.json()["translations"][0]["text"])
            except Exception as exc:
                results[i] = (0, repr(exc))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(TEXTS))]
        for t in threads:
            t.start()
        # Every request is inside the server (6 + this metrics request) before SIGTERM;
        # at 2 sentences per 0.6 s batch they need ~1.8 s to finish.
        deadline = time.monotonic() + 60  # an event, within a budget a busy machine meets
        while _in_flight(url) < len(TEXTS) + 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # New connections are refused while the in-flight ones still run (by events: not
        # within a wall-clock second, which a loaded machine may not keep).
        refused_while_running = False
        while any(t.is_alive() for t in threads):
            try:
                httpx.get(f"{url}/healthz", timeout=5)
                time.sleep(0.05)
            except httpx.TransportError:
                refused_while_running = any(t.is_alive() for t in threads)
                break
        for t in threads:
            t.join(timeout=30)
        assert refused_while_running
        assert [results[i][0] for i in range(len(TEXTS))] == [200] * len(TEXTS), results
        assert all(results[i][1].strip() for i in range(len(TEXTS)))
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - t_term > 0.6  # it did wait for the batches
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "server", *args],
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_cli_without_default_model_says_what_is_missing(tmp_path):
    missing = tmp_path / "models" / "default"
    r = _run_cli(env={"LSMT_DEFAULT_BUNDLE_DIR": str(missing)})
    assert r.returncode != 0
    assert str(missing) in r.stderr and "does not exist" in r.stderr
    assert "python -m server BUNDLE_DIR" in r.stderr


def test_cli_with_invalid_bundle(tmp_path):
    (tmp_path / "b").mkdir()
    r = _run_cli(str(tmp_path / "b"))
    assert r.returncode != 0 and "not valid" in r.stderr and "manifest.json" in r.stderr
    r = _run_cli(str(tmp_path / "nope"))
    assert r.returncode != 0 and "does not exist" in r.stderr


def test_cli_help():
    r = _run_cli("--help")
    assert r.returncode == 0 and "--port" in r.stdout and "BUNDLE" in r.stdout.upper()


def test_server_process_never_imports_torch(tiny_bundle):
    # As `python -m server` does: block torch, then assemble, load and run an engine.
    code = f"""
import sys
from server.__main__ import block_torch
block_torch()
from server.bundles import load_served_bundle
from server.engine_loader import default_loader
from server.settings import Settings
from lsmt_core.routes import Route
b = load_served_bundle({str(tiny_bundle)!r})
t, n = default_loader(b.bundle, Route("en", "de"), Settings(device="cpu"))
out = t.translate_batch([b.encode("Follow me.", Route("en", "de"))], beam_size=1)
assert n > 0 and out[0].hypotheses[0]
print(sys.modules.get("torch") is not None)
"""
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def _raw(port: int, data: bytes, wait_s: float) -> tuple[bytes, float]:
    """Send ``data`` on a fresh connection; the response that comes back within ``wait_s``
    (empty if none), and when it was complete."""

    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(data)  # the server may answer and close before it has read everything
        reply = b""
        try:
            while True:  # one whole response: headers, then content-length bytes of body
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
                head, sep, body = reply.partition(b"\r\n\r\n")
                length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                if sep and length and len(body) >= int(length.group(1)):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
        return reply, time.monotonic() - t0


def test_header_size_and_body_read_limits(tiny_bundle):
    """64 KB of headers (limit 16 KB) is refused; a client dripping its body gets 408 after
    the body read timeout instead of holding the connection; normal requests are unaffected."""
    proc, url = _start_real_server(
        tiny_bundle, LSMT_BODY_READ_TIMEOUT_S="0.5", LSMT_MAX_HEADER_BYTES="16384"
    )
    port = int(url.rsplit(":", 1)[1])
    try:
        big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 65_536 + b"\r\n\r\n"
        reply, _ = _raw(port, big, 5)  # arrives in one read: refused by the app, in JSON
        assert reply.startswith(b"HTTP/1.1 431") and b'"headers_too_large"' in reply, reply[:80]
        huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1_000_000 + b"\r\n\r\n"
        reply, _ = _raw(port, huge, 5)  # refused by h11 while it is still arriving
        assert reply.startswith(b"HTTP/1.1 400") or reply == b"", reply[:80]
        start = (
            b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b'{"text": "Follow'
        )
        reply, seconds = _raw(port, start, 15)
        assert reply.startswith(b"HTTP/1.1 408"), reply[:80]
        # after the 0.5 s timeout; the upper bound a hang's (a client left holding the
        # connection would get no reply at all), not a latency a loaded machine might miss
        assert b'"body_timeout"' in reply and 0.4 < seconds < 10, seconds
        r = httpx.post(
            f"{url}/v1/translate", json={"text": TEXTS[0], "source": "en", "target": "de"}
        )
        assert r.status_code == 200, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_shutdown_timeout_answers_json_503(tiny_bundle):
    """Requests still running when the graceful-shutdown time is over get the documented JSON
    503 shutting_down (not uvicorn's plain-text 500), and their abandoned futures leave no
    "exception was never retrieved" in the log."""
    proc, url = _start_real_server(tiny_bundle, delay_s="8", LSMT_GRACEFUL_TIMEOUT_S="0.5")
    try:
        results: dict[int, httpx.Response | Exception] = {}

        def call(i: int) -> None:
            try:
                results[i] = httpx.post(
                    f"{url}/v1/translate",
                    timeout=30,
                    json={"text": TEXTS[i], "source": "en", "target": "de"},
                )
            except Exception as exc:
                results[i] = exc

        threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while _in_flight(url) < 3 + 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=30)
        answered_s = time.monotonic() - t_term
        for i in range(3):
            r = results[i]
            assert isinstance(r, httpx.Response), r
            assert r.status_code == 503, r.text
            assert r.headers["content-type"] == "application/json"
            assert r.json()["error"]["code"] == "shutting_down"
            assert r.headers["retry-after"] == "1"
        assert answered_s < 5  # the 0.5 s grace, not the 8 s batch (margin: a loaded machine)
        assert proc.wait(timeout=30) == 0
        log = proc.stderr.read()
        assert "never retrieved" not in log and "Exception in ASGI application" not in log, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_disconnected_client_work_is_dropped(tiny_bundle):
    """A client that goes away while its long request is queued: the sentences not yet in a
    batch are not translated, the request is counted as 499, and the server serves the next
    client at once."""
    proc, url = _start_real_server(tiny_bundle, delay_s="0.4")
    port = int(url.rsplit(":", 1)[1])
    batches = "lsmt_batch_size_count"
    try:
        body = json.dumps({"text": TEXTS * 3, "source": "en", "target": "de"}).encode()
        request = (
            b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # 18 sentences, 2 per 0.4 s batch: 3.6 s of work
        before = _metric(url, batches)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(request)
            deadline = time.monotonic() + 60
            while _metric(url, batches) < before + 1:  # the work has started
                assert time.monotonic() < deadline
                time.sleep(0.02)
            at_disconnect = _metric(url, batches)
        # The request ends as a 499 once the server sees the client gone (a poll, not a fixed
        # wait: a loaded machine may take longer to notice, and the bound below still holds).
        dropped = 'lsmt_http_requests_total{endpoint="/v1/translate",status="499"}'
        deadline = time.monotonic() + 30
        while _metric(url, dropped) < 1:
            assert time.monotonic() < deadline, "the disconnected request was never counted"
            time.sleep(0.05)
        at_answer = _metric(url, batches)
        time.sleep(1.0)  # 2.5 more batches if the work went on behind the answer
        assert _metric(url, batches) <= at_answer + 1  # at most the batch then in flight
        assert _metric(url, batches) <= at_disconnect + 2  # of the 9, only the batches begun
        assert _metric(url, dropped) == 1
        assert _in_flight(url) == 1  # only this /metrics request
        r = httpx.post(
            f"{url}/v1/translate",
            timeout=10,
            json={"text": TEXTS[0], "source": "en", "target": "de"},
        )
        # served, not held behind the dropped work (the batch count above shows it dropped;
        # the bound is a hang's, not a latency a loaded machine might miss)
        assert r.status_code == 200 and r.elapsed.total_seconds() < 8, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
