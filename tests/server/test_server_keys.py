"""API keys with limits and anonymous limits (server.keys, server.auth): each limit hits
exactly at its number, concurrent requests cannot overshoot it, counters survive a restart,
keys are stored hashed and managed from the command line, in a SQLite file and in a real
PostgreSQL server (pgserver: PostgreSQL's own binaries, on a Unix socket); on a real server a
limit answers 429 with Retry-After and a body naming it, wrong, revoked or missing keys
401/403, and a keys database that goes away 503 until it is back."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import closing

import httpx
import pytest

from server.keys import KeyStore, KeyStoreUnavailable, Limits, redacted
from tests.kill_points import Pause, PausedChild
from tests.server.databases import database_dump, new_database, start_postgres

NOW = 1_800_000_030.0  # 30 s into a minute


def test_each_limit_hits_exactly_at_its_number(keys_db):
    store = KeyStore(keys_db)
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


def test_concurrent_requests_cannot_overshoot(keys_db):
    """Eight threads with their own connections to one database (as processes sharing it)."""
    limits = Limits(requests_per_minute=25)
    stores = [KeyStore(keys_db) for _ in range(8)]
    admitted = []

    def hammer(store: KeyStore) -> None:
        admitted.extend(r is None for r in (store.consume("k", 1, limits, NOW) for _ in range(10)))

    threads = [threading.Thread(target=hammer, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(admitted) == 25 and len(admitted) == 80


def test_counters_and_keys_survive_a_restart_and_keys_are_stored_hashed(keys_db):
    store = KeyStore(keys_db)
    key = store.add("team-a", Limits(requests_per_minute=2))
    assert store.consume("key:1", 5, Limits(requests_per_minute=2), NOW) is None
    store.close()
    again = KeyStore(keys_db)
    assert again.find(key).name == "team-a" and again.find(key).limits.requests_per_minute == 2
    assert again.usage("key:1", NOW)["minute"]["requests"] == 1
    assert key.encode() not in database_dump(keys_db)
    assert again.revoke("team-a") and again.find(key).revoked
    assert again.set_limits("team-a", chars_per_day=1000, requests_per_minute=None)
    assert again.find(key).limits == Limits(chars_per_day=1000)
    with pytest.raises(ValueError, match="exists"):
        again.add("team-a")


def test_keys_command_line(keys_db):
    db = keys_db

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
    again = keys("add", "alice")
    assert again.returncode == 2 and "a key named 'alice' exists" in again.stderr


def test_glossaries_per_key_and_pair_from_the_command_line(keys_db, tmp_path):
    db = keys_db

    def keys(*args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "server", "keys", "--db", db, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    assert keys("add", "alice").returncode == 0
    terms = tmp_path / "terms.tsv"
    terms.write_text("Save\tEnregistrer\nLSMT\n\n", encoding="utf-8")
    done = keys("glossary", "alice", "en-fr", "--file", str(terms))
    assert done.returncode == 0 and "2 terms" in done.stdout, done.stderr
    assert keys("glossary", "alice").stdout == "en-fr\tLSMT\tLSMT\nen-fr\tSave\tEnregistrer\n"
    store = KeyStore(db)
    (record,) = store.list()
    assert store.glossary(record.id, "en", "fr") == {"LSMT": "LSMT", "Save": "Enregistrer"}
    assert store.glossary(record.id, None, "fr") == store.glossary(record.id, "en", "fr")
    assert store.glossary(record.id, "de", "fr") == {}
    store.close()
    terms.write_text("Save\tEnregistrer\nsave\tSauver\n", encoding="utf-8")
    refused = keys("glossary", "alice", "en-fr", "--file", str(terms))
    assert refused.returncode == 2 and "two renderings" in refused.stderr
    assert keys("glossary", "alice", "en-fr", "--clear").returncode == 0
    assert keys("glossary", "alice").stdout == ""
    assert keys("glossary", "bob", "en-fr", "--clear").returncode == 2
    assert keys("glossary", "alice", "enfr", "--clear").returncode == 2


def test_a_keys_glossary_reaches_its_requests_and_the_admin_manages_it(make_server, tmp_path):
    store = KeyStore(tmp_path / "keys.db")
    key, other = store.add("alice"), store.add("bob")
    store.close()
    srv = make_server(keys_db=tmp_path / "keys.db", admin_keys=["admin"])
    text = "And Jesus said unto them, Follow me."
    body = {"text": text, "source": "en", "target": "de"}
    admin = {"X-API-Key": "admin"}
    with srv.client() as c:
        plain = c.post("/v1/translate", json=body, headers={"X-API-Key": key}).json()
        r = c.put("/v1/admin/glossaries/alice/en-de", json={"do_not_translate": ["Jesus"],
                  "glossary": {"Follow": "Folgt"}}, headers=admin)  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["glossaries"] == {"en-de": {"Follow": "Folgt", "Jesus": "Jesus"}}
        kept = c.post("/v1/translate", json=body, headers={"X-API-Key": key}).json()
        out = kept["translations"][0]["text"]
        assert "Jesus" in out and "Folgt" in out, (plain, out)
        auto = c.post("/v1/translate", json={**body, "source": "auto"}, headers={"X-API-Key": key})
        assert "Folgt" in auto.json()["translations"][0]["text"]
        # a request's own terms go over the key's; another key has none
        own = {**body, "glossary": {"follow": "Komm"}}
        out = c.post("/v1/translate", json=own, headers={"X-API-Key": key}).json()
        assert (
            "Komm" in out["translations"][0]["text"]
            and "Folgt" not in out["translations"][0]["text"]
        )
        bob = c.post("/v1/translate", json=body, headers={"X-API-Key": other}).json()
        assert bob["translations"][0]["text"] == plain["translations"][0]["text"]
        assert c.get("/v1/admin/glossaries/alice", headers={"X-API-Key": key}).status_code == 403
        assert c.get("/v1/admin/glossaries/carol", headers=admin).status_code == 404
        bad = c.put("/v1/admin/glossaries/alice/ende", json={}, headers=admin)
        assert bad.status_code == 400 and bad.json()["error"]["parameter"] == "pair"
        r = c.delete("/v1/admin/glossaries/alice/en-de", headers=admin)
        assert r.status_code == 200 and r.json()["glossaries"] == {}
        again = c.post("/v1/translate", json=body, headers={"X-API-Key": key}).json()
        assert again["translations"][0]["text"] == plain["translations"][0]["text"]


def test_an_unreachable_database_is_an_error_that_passes(postgres_dir):
    """A PostgreSQL server that stops: KeyStoreUnavailable (no password in it), then the
    same store works again once the server is back (its connections are opened anew)."""
    server = start_postgres(postgres_dir)
    url = new_database(server)
    store = KeyStore(url)
    key = store.add("a", Limits(requests_per_minute=5))
    assert store.consume("key:1", 3, Limits(requests_per_minute=5), NOW) is None
    server.cleanup()  # stops it
    try:
        with pytest.raises(KeyStoreUnavailable, match="keys database"):
            store.find(key)
        with pytest.raises(KeyStoreUnavailable):
            store.consume("key:1", 3, Limits(requests_per_minute=5), NOW)
    finally:
        server = start_postgres(postgres_dir)
    assert store.find(key).name == "a"
    assert store.consume("key:1", 3, Limits(requests_per_minute=5), NOW) is None
    assert store.usage("key:1", NOW)["minute"]["requests"] == 2  # the refused one not counted
    store.close()
    server.cleanup()
    assert redacted("postgresql://lsmt:s3cret@db:5432/keys") == "postgresql://lsmt:***@db:5432/keys"


def hold_a_subjects_lock(pause: Pause, url: str) -> None:
    """In the child: count a request for ``key:1`` and pause before COMMIT, its transaction
    open and the subject's lock held, its connection open and silent: what the database sees
    of a process that hangs, or of one whose host died."""
    from server.keys.store import Transaction

    commit = Transaction.__exit__

    def pause_then_commit(self, exc_type, *rest):  # type: ignore[no-untyped-def]
        if self.subject is not None:
            pause()
        return commit(self, exc_type, *rest)

    Transaction.__exit__ = pause_then_commit  # type: ignore[method-assign]
    KeyStore(url).consume("key:1", 10, Limits(requests_per_minute=5), NOW)


@pytest.mark.integration
def test_a_process_that_hangs_holding_a_subjects_lock_holds_the_others_up_only_briefly(
    postgres,
):
    """PostgreSQL ends the hung transaction's session after IDLE_IN_TRANSACTION_MS (the
    connection of a dead host would otherwise hold the lock until TCP keepalive notices,
    hours later): the other process's request for the subject is then counted, and the hung
    one never is. (SQLite needs no such thing: its lock is the file's, released by the kernel
    with the process; a hung process holds it, and the others answer 503 after the busy
    timeout, as PostgreSQL's lock_timeout does when the holder is alive and slow.)"""
    from server.keys.dialects import IDLE_IN_TRANSACTION_MS

    url = new_database(postgres)
    store = KeyStore(url)
    answers: list[object] = []
    with PausedChild(hold_a_subjects_lock, url) as hung:
        hung.wait_paused()
        counting = threading.Thread(
            target=lambda: answers.append(store.consume("key:1", 10, Limits(), NOW)), daemon=True
        )
        began = time.monotonic()
        counting.start()
        counting.join(120)  # a budget, far over the server's timeout: a hang fails here
        waited = time.monotonic() - began
    assert answers == [None], "the request waited for the hung process's lock"
    assert waited >= IDLE_IN_TRANSACTION_MS / 1000 * 0.9  # it was the lock it waited for
    assert store.usage("key:1", NOW)["minute"] == {"requests": 1, "chars": 10}
    store.close()


@pytest.mark.integration
def test_a_postgres_connection_finds_a_dead_host_in_seconds(postgres):
    """Keepalives and a TCP user timeout on every connection (POSTGRES_TCP_DEFAULTS), unless
    the URL sets its own."""
    from server.keys.dialects import POSTGRES_TCP_DEFAULTS, Postgres

    url = new_database(postgres)
    db = Postgres(url).connect()
    assert {k: db.info.get_parameters().get(k) for k in POSTGRES_TCP_DEFAULTS} == (
        POSTGRES_TCP_DEFAULTS
    )
    db.close()
    own = Postgres(f"{url}{'&' if '?' in url else '?'}keepalives_idle=60").connect()
    assert own.info.get_parameters()["keepalives_idle"] == "60"
    assert own.info.get_parameters()["tcp_user_timeout"] == "30000"
    own.close()


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


@pytest.mark.integration
def test_a_key_lookup_waiting_for_the_database_holds_up_no_other_request(make_server, postgres):
    """A key is looked up off the event loop: while a LibreTranslate request's lookup waits
    for a lock on the keys table (as it would for a slow database), the server answers
    others, and the waiting request is answered once the lock is gone."""
    from server.keys.dialects import Postgres

    url = new_database(postgres)
    store = KeyStore(url)
    key = store.add("team")
    store.close()
    srv = make_server(keys_db=url)
    form = {"q": "Follow me.", "source": "en", "target": "de", "api_key": key}
    assert httpx.post(f"{srv.url}/translate", data=form, timeout=60).status_code == 200
    answers: list[int] = []
    with closing(Postgres(url).connect()) as locker, closing(Postgres(url).connect()) as watcher:
        locker.execute("SET idle_in_transaction_session_timeout = 0")  # hold it until released
        with locker.transaction():
            locker.execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
            waiting = threading.Thread(
                target=lambda: answers.append(
                    httpx.post(f"{srv.url}/translate", data=form, timeout=60).status_code
                ),
                daemon=True,
            )
            waiting.start()
            deadline = time.monotonic() + 30
            ungranted = "SELECT count(*) FROM pg_locks WHERE NOT granted"
            while not watcher.execute(ungranted).fetchone()[0]:
                assert time.monotonic() < deadline, "the request never waited for the lock"
                time.sleep(0.05)
            # the lookup waits up to LOCK_TIMEOUT_MS (10 s); a blocked event loop would not
            # answer this before then
            assert httpx.get(f"{srv.url}/healthz", timeout=5).status_code == 200
            assert waiting.is_alive() and answers == []
        waiting.join(60)
    assert answers == [200]


@pytest.mark.integration
def test_a_server_on_postgresql_answers_503_while_the_database_is_away(make_server, postgres_dir):
    server = start_postgres(postgres_dir)
    url = new_database(server)
    store = KeyStore(url)
    key = store.add("team", Limits(requests_per_minute=3))
    store.close()
    srv = make_server(keys_db=url)
    body = {"text": "Follow me.", "source": "en", "target": "de", "beam_size": 1}
    auth = {"Authorization": f"Bearer {key}"}
    with srv.client() as c:
        assert c.post("/v1/translate", json=body, headers=auth).status_code == 200
        server.cleanup()  # the database goes away
        try:
            r = c.post("/v1/translate", json=body, headers=auth)
            assert r.status_code == 503 and r.headers["Retry-After"] == "5"
            assert r.json()["error"]["code"] == "keys_database_unavailable"
            assert "s3cret" not in r.text and url not in r.text
        finally:
            server = start_postgres(postgres_dir)
        assert c.post("/v1/translate", json=body, headers=auth).status_code == 200
        r = c.post("/v1/translate", json=body, headers=auth)  # the third counted request
        assert r.status_code == 200
        r = c.post("/v1/translate", json=body, headers=auth)
        assert r.status_code == 429 and r.json()["error"]["limit"] == "requests_per_minute"
    server.cleanup()
