"""API keys with limits and anonymous limits (server.keys, server.auth): each limit hits
exactly at its number, concurrent requests cannot overshoot it, counters survive a restart,
keys are stored hashed and managed from the command line; on a real server a limit answers
429 with Retry-After and a body naming it, and wrong, revoked or missing keys 401/403."""

from __future__ import annotations

import subprocess
import sys
import threading

import httpx
import pytest

from server.keys import KeyStore, Limits

NOW = 1_800_000_030.0  # 30 s into a minute


def test_each_limit_hits_exactly_at_its_number(tmp_path):
    store = KeyStore(tmp_path / "keys.db")
    per_minute = Limits(requests_per_minute=3)
    assert [store.consume("a", 10, per_minute, NOW) for _ in range(3)] == [None] * 3
    refused = store.consume("a", 10, per_minute, NOW)
    assert refused is not None and refused.limit == "requests_per_minute" and refused.allowed == 3
    assert refused.reset_at == NOW - 30 + 60 and refused.retry_after_s(NOW) == 30
    assert store.consume("a", 10, per_minute, NOW + 30) is None  # the next minute
    chars = Limits(chars_per_minute=100)
    assert store.consume("b", 60, chars, NOW) is None and store.consume("b", 40, chars, NOW) is None
    assert store.consume("b", 1, chars, NOW).limit == "chars_per_minute"
    day = Limits(chars_per_day=50)
    assert store.consume("c", 50, day, NOW) is None
    assert store.consume("c", 1, day, NOW + 3600).limit == "chars_per_day"
    size = Limits(max_request_chars=20)
    assert store.consume("d", 21, size, NOW).limit == "max_request_chars"
    assert store.consume("d", 20, size, NOW) is None
    assert store.usage("d", NOW)["minute"] == {"requests": 1, "chars": 20}  # refusals not counted


def test_concurrent_requests_cannot_overshoot(tmp_path):
    """Eight threads with their own connections to one file (as processes sharing it)."""
    path = tmp_path / "keys.db"
    limits = Limits(requests_per_minute=25)
    stores = [KeyStore(path) for _ in range(8)]
    admitted = []

    def hammer(store: KeyStore) -> None:
        admitted.extend(r is None for r in (store.consume("k", 1, limits, NOW) for _ in range(10)))

    threads = [threading.Thread(target=hammer, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 25 and len(admitted) == 80


def test_counters_and_keys_survive_a_restart_and_keys_are_stored_hashed(tmp_path):
    path = tmp_path / "keys.db"
    store = KeyStore(path)
    key = store.add("team-a", Limits(requests_per_minute=2))
    assert store.consume("key:1", 5, Limits(requests_per_minute=2), NOW) is None
    store.close()
    again = KeyStore(path)
    assert again.find(key).name == "team-a" and again.find(key).limits.requests_per_minute == 2
    assert again.usage("key:1", NOW)["minute"]["requests"] == 1
    assert key.encode() not in path.read_bytes()
    assert again.revoke("team-a") and again.find(key).revoked
    assert again.set_limits("team-a", chars_per_day=1000, requests_per_minute=None)
    assert again.find(key).limits == Limits(chars_per_day=1000)
    with pytest.raises(ValueError, match="exists"):
        again.add("team-a")


def test_keys_command_line(tmp_path):
    db = str(tmp_path / "keys.db")

    def keys(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "server", "keys", "--db", db, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    added = keys("add", "alice", "--requests-per-minute", "5")
    assert added.returncode == 0 and added.stdout.startswith("lsmt-"), added.stderr
    assert keys("set-limits", "alice", "--chars-per-day", "900").returncode == 0
    listed = keys("list").stdout
    assert "alice\tactive\trequests_per_minute=5, chars_per_day=900" in listed
    assert keys("remove", "alice").returncode == 0 and "alice\trevoked" in keys("list").stdout
    assert keys("remove", "bob").returncode != 0


@pytest.mark.integration
def test_limits_on_a_real_server(make_server, tmp_path):
    db = tmp_path / "keys.db"
    store = KeyStore(db)
    limited = store.add("limited", Limits(requests_per_minute=2, max_request_chars=30))
    revoked = store.add("gone")
    store.revoke("gone")
    store.close()
    srv = make_server(keys_db=db, api_keys=["static-key"])
    body = {"text": "Follow me.", "source": "en", "target": "de", "beam_size": 1}
    with srv.client() as c:
        auth = {"X-API-Key": limited}
        assert c.post("/v1/translate", json=body, headers=auth).status_code == 200
        too_long = {**body, "text": "x" * 31}
        r = c.post("/v1/translate", json=too_long, headers=auth)
        assert r.status_code == 429 and r.json()["error"]["limit"] == "max_request_chars"
        assert c.post("/translate", data={"q": "Follow me.", "source": "en", "target": "de",
                                          "api_key": limited}).status_code == 200  # fmt: skip
        r = c.post("/v1/translate", json=body, headers=auth)
        assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
        error = r.json()["error"]
        assert error["code"] == "rate_limited" and error["limit"] == "requests_per_minute"
        assert error["allowed"] == 2 and "resets_at" in error
        assert (
            c.post("/v1/translate", json=body, headers={"X-API-Key": "static-key"}).status_code
            == 200
        )
        assert c.post("/v1/translate", json=body, headers={"X-API-Key": revoked}).status_code == 403
        assert c.post("/v1/translate", json=body, headers={"X-API-Key": "nope"}).status_code == 403
        assert c.post("/v1/translate", json=body).status_code == 401
        metrics = c.get("/metrics").text
        assert 'lsmt_limit_rejections_total{limit="requests_per_minute"} 1.0' in metrics
        assert limited not in metrics


@pytest.mark.integration
def test_a_keys_database_alone_refuses_unknown_keys(make_server, tmp_path):
    store = KeyStore(tmp_path / "keys.db")
    key = store.add("only")
    store.close()
    srv = make_server(keys_db=tmp_path / "keys.db")
    body = {"text": "Follow me.", "source": "en", "target": "de", "beam_size": 1}
    with srv.client() as c:
        assert c.post("/v1/translate", json=body, headers={"X-API-Key": key}).status_code == 200
        assert c.post("/v1/translate", json=body, headers={"X-API-Key": "nope"}).status_code == 403
        assert c.post("/v1/translate", json=body).status_code == 401
        form = {"q": "Follow me.", "source": "en", "target": "de", "api_key": "nope"}
        assert c.post("/translate", data=form).status_code == 403


@pytest.mark.integration
def test_anonymous_limits_per_address(make_server):
    srv = make_server(anonymous_requests_per_minute=2)
    body = {"text": "Follow me.", "source": "en", "target": "de", "beam_size": 1}
    codes = [httpx.post(f"{srv.url}/v1/translate", json=body, timeout=60).status_code
             for _ in range(3)]  # fmt: skip
    assert codes == [200, 200, 429]
