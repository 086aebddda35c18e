"""State on disk through crashes and faulty disks (issue 43): ``model_export add-language`` and a
server reloading, each killed with SIGKILL at its worst moment in a real child process
(tests/kill_points.py), leave the old bundle or the new one, never half of one: a restarted
server answers on every route, and a rerun of the addition completes and cleans up after the
killed one. A server killed while its keys database counts usage under load (a SQLite file;
PostgreSQL) leaves the database whole, with exactly the requests committed before the kill;
with two servers sharing the database, the survivor goes on and every answered request is
counted exactly once. An engine cache
whose disk is full or whose directory cannot be written is skipped with a warning and a
metric, and every request is still answered."""

from __future__ import annotations

import builtins
import errno
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from loadtests.server_process import metric_sum
from lsmt_bundle import load_bundle
from tests.kill_points import Pause, PausedChild
from tests.server.databases import integrity_problems

pytestmark = pytest.mark.integration

ADMIN_KEY = "admin-secret"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TEXT = "Bread and water."


def languages(client: httpx.Client) -> list[str]:
    return [lang["code"] for lang in client.get("/v1/languages").json()["languages"]]


def every_route_answers(client: httpx.Client) -> list[str]:
    """Translate on every route the server lists (each answers 200); the routes."""
    routes = client.get("/v1/languages").json()["routes"]
    for route in routes:
        source, target = route.split("-")
        r = client.post("/v1/translate", json={"text": TEXT, "source": source, "target": target})
        assert r.status_code == 200, (route, r.text)
        assert len(r.json()["translations"]) == 1
    return list(routes)


# -- killed mid-way: model_export add-language ---------------------------------------------------


def add_language_pausing_at(pause: Pause, point: str, bundle: Path, run: Path) -> None:
    """In the child: add ``run``'s languages to ``bundle``, pausing halfway through copying
    the first new module file in ("module copy"), or with the new manifest written beside
    the old one, not yet renamed into place ("manifest")."""
    from model_export.add_language import add_languages

    if point == "module copy":
        copyfile = shutil.copyfile

        def copy_half_then_pause(src: str, dst: str, **kwargs: bool) -> str:
            if Path(dst).is_relative_to(bundle / "modules"):
                data = Path(src).read_bytes()
                Path(dst).write_bytes(data[: len(data) // 2])
                pause()
            return copyfile(src, dst, **kwargs)

        shutil.copyfile = copy_half_then_pause  # type: ignore[assignment]
    else:
        replace = os.replace

        def pause_then_replace(src: str, dst: str, **kwargs: int) -> None:
            if Path(dst) == bundle / "manifest.json":
                pause()
            replace(src, dst, **kwargs)

        os.replace = pause_then_replace  # type: ignore[assignment]
    add_languages(bundle, run, which="last")


@pytest.mark.slow
@pytest.mark.parametrize("point", ["module copy", "manifest"])
def test_an_addition_killed_mid_way_leaves_the_old_bundle_and_a_rerun_completes(
    point, added_language, make_server, tmp_path
):
    from model_export.__main__ import main as model_export_main

    _, add, exported = added_language
    bundle = tmp_path / "bundle"
    shutil.copytree(exported, bundle)
    old_manifest = (bundle / "manifest.json").read_bytes()
    with PausedChild(add_language_pausing_at, point, bundle, add) as child:
        child.wait_paused()
        child.kill()
    # killed where meant: a torn module file no manifest names, or a manifest not in place
    if point == "module copy":
        torn = list(bundle.glob("modules/*/de.safetensors"))
        assert len(torn) == 1 and list(tmp_path.glob(".bundle.adding-*"))  # and the scratch
    else:
        assert len(list(bundle.glob(".manifest-*"))) == 1
    assert (bundle / "manifest.json").read_bytes() == old_manifest
    assert set(load_bundle(bundle).verify().values()) == {"ok"}

    server = make_server(bundle_dirs=[bundle], admin_keys=[ADMIN_KEY])  # the restart
    with server.client() as c:
        assert languages(c) == ["en", "fr"]
        assert every_route_answers(c) == ["en-fr", "fr-en"]
        model_export_main(["add-language", str(bundle), "--from", str(add), "--which", "last"])
        r = c.post("/v1/admin/reload", headers=ADMIN)
        assert r.status_code == 200 and r.json()["bundles"][0]["added_languages"] == ["de"]
        assert languages(c) == ["de", "en", "fr"]
        assert len(every_route_answers(c)) == 6
    assert set(load_bundle(bundle).verify().values()) == {"ok"}
    # the rerun removed what the killed addition left
    assert not list(bundle.glob(".manifest-*")) and not list(tmp_path.glob(".bundle.adding-*"))


@pytest.mark.slow
def test_a_second_addition_to_a_bundle_is_refused_while_one_runs(added_language, tmp_path):
    """Two at once would each write a manifest without the other's languages."""
    from model_export.add_language import AddLanguageError, add_languages

    _, add, exported = added_language
    bundle = tmp_path / "bundle"
    shutil.copytree(exported, bundle)
    with PausedChild(add_language_pausing_at, "manifest", bundle, add) as child:
        child.wait_paused()
        with pytest.raises(AddLanguageError, match="another addition"):
            add_languages(bundle, add, which="last")
        assert len(list(bundle.glob(".manifest-*"))) == 1  # the running one's, kept
        child.go_on()
    assert load_bundle(bundle).manifest.languages == ["de", "en", "fr"]


# -- killed mid-way: POST /v1/admin/reload -------------------------------------------------------


def serve_pausing_in_reload(pause: Pause, bundle: Path) -> None:
    """In the child: the real server on ``bundle`` (it tells its port), pausing in a reload
    once the bundle on disk is checked, before it is served."""
    from server import reload

    checked_bundle = reload._checked_bundle

    def checked_then_pause(served):  # type: ignore[no-untyped-def]
        fresh = checked_bundle(served)
        pause()
        return fresh

    reload._checked_bundle = checked_then_pause
    serve_telling_the_port(pause, bundles=[bundle], admin_keys=[ADMIN_KEY])


def serve_telling_the_port(pause: Pause, **settings: object) -> None:
    """In the child: the real server with ``settings`` on a port it tells the parent."""
    import socket

    from server.__main__ import block_torch, serve
    from server.app import create_app
    from server.settings import Settings

    block_torch()
    defaults = {"device": "cpu", "warmup_routes": [], "output_checks": False}
    served = Settings(**{**defaults, "log_level": "warning", **settings})  # type: ignore[arg-type]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    pause.tell(sock.getsockname()[1])
    serve(create_app(served), "127.0.0.1", 0, served, sockets=[sock])


def wait_ready(url: str, child: PausedChild, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert child.process.is_alive(), "the server died at start"
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not get ready"
        time.sleep(0.05)  # polling, not synchronisation: the deadline is what bounds it


def post_reload(url: str, answers: list[object]) -> None:
    try:
        answers.append(httpx.post(f"{url}/v1/admin/reload", headers=ADMIN, timeout=120))
    except httpx.TransportError as exc:  # the server was killed under it
        answers.append(exc)


@pytest.mark.slow
def test_a_server_killed_mid_reload_restarts_on_the_whole_bundle(
    added_language, make_server, tmp_path
):
    from model_export.__main__ import main as model_export_main

    _, add, exported = added_language
    bundle = tmp_path / "bundle"
    shutil.copytree(exported, bundle)
    with PausedChild(serve_pausing_in_reload, bundle) as child:
        url = f"http://127.0.0.1:{child.heard()}"
        wait_ready(url, child)
        with httpx.Client(base_url=url, timeout=60) as c:
            assert every_route_answers(c) == ["en-fr", "fr-en"]
        model_export_main(["add-language", str(bundle), "--from", str(add), "--which", "last"])
        added = {p: p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()}
        answers: list[object] = []
        reloading = threading.Thread(target=post_reload, args=(url, answers))
        reloading.start()
        child.wait_paused()
        child.kill()
        reloading.join(60)
    assert len(answers) == 1 and isinstance(answers[0], httpx.TransportError)  # not answered
    assert {p: p.read_bytes() for p in sorted(bundle.rglob("*")) if p.is_file()} == added
    assert set(load_bundle(bundle).verify().values()) == {"ok"}
    with make_server(bundle_dirs=[bundle]).client() as c:  # the restart
        assert languages(c) == ["de", "en", "fr"]
        assert len(every_route_answers(c)) == 6


# -- an engine cache that cannot be written ------------------------------------------------------


def served_without_the_cache(server, reason: str, caplog) -> None:
    """Every route answers 200; every engine load skipped the cache, each counted under
    ``reason`` and warned about."""
    with server.client() as c:
        every_route_answers(c)
    loads = metric_sum(server.url, "lsmt_engine_loads_total")
    errors = metric_sum(server.url, "lsmt_engine_cache_errors_total", reason=reason)
    assert loads > 0 and errors == loads
    assert metric_sum(server.url, "lsmt_engine_cache_errors_total") == loads  # no other reason
    assert metric_sum(server.url, "lsmt_engine_load_failures_total") == 0
    warnings = [
        r
        for r in caplog.records
        if r.name == "lsmt_bundle.engine_cache"
        and r.levelno == logging.WARNING
        and f"skipped ({reason})" in r.getMessage()
    ]
    assert len(warnings) == loads


def test_a_full_engine_cache_is_skipped_with_a_warning_and_a_metric(
    make_server, tmp_path, monkeypatch, caplog
):
    """A full disk cannot be made here (no loop devices, no mounts), so every file opened
    for writing under the cache directory fails as on a full disk (ENOSPC); its directories
    can still be made, as a full disk's often can."""
    cache_dir = tmp_path / "cache"
    real_open = builtins.open

    def open_on_a_full_disk(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        a_path = isinstance(file, str | os.PathLike)
        in_cache = a_path and Path(os.path.abspath(file)).is_relative_to(cache_dir)
        if in_cache and any(m in mode for m in "wax+"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_on_a_full_disk)
    # (the background fill would count an error of its own: tests/server/test_server_cache_fill.py)
    server = make_server(engine_cache_dir=cache_dir, engine_cache_fill=False)
    served_without_the_cache(server, "full", caplog)
    assert list(cache_dir.iterdir()) == []  # what was begun, removed


def test_an_unwritable_engine_cache_is_skipped_with_a_warning_and_a_metric(
    make_server, tmp_path, caplog
):
    """A read-only cache directory (mode 0o555). As root, whom permissions do not stop, the
    cache directory is a path under a regular file instead: no one can make it."""
    if os.geteuid() == 0:
        (tmp_path / "a-file").write_text("")
        cache_dir = tmp_path / "a-file" / "cache"
    else:
        cache_dir = tmp_path / "cache"
        cache_dir.mkdir(mode=0o555)
    server = make_server(engine_cache_dir=cache_dir, engine_cache_fill=False)
    served_without_the_cache(server, "unwritable", caplog)


# -- killed mid-way: the keys database counting usage under load -------------------------------
# Every request below is counted (its key has a limit) before it is translated, so a request is
# answered only after its usage transaction committed: a request answered 200 must be in the
# database exactly once, and the one whose transaction is killed must not be.

PAUSE_AT = 12  # the killed server's request whose usage transaction is killed before its COMMIT
CLIENTS = 4  # on each server, each sending one request at a time
AFTER_KILL = 5  # requests each client of the surviving server sends once the other is killed
BODY = {"text": TEXT, "source": "en", "target": "de", "beam_size": 1}


def serve_pausing_in_a_usage_transaction(pause: Pause, bundle: Path, db: str) -> None:
    """In the child: the real server with the keys database ``db``, pausing in the PAUSE_AT-th
    request's usage transaction, its counters written and not yet committed."""
    import itertools

    from server.keys.store import Transaction

    commit = Transaction.__exit__
    counted = itertools.count(1)

    def pause_then_commit(self, exc_type, *rest):  # type: ignore[no-untyped-def]
        if self.subject is not None and exc_type is None and next(counted) == PAUSE_AT:
            pause()
        return commit(self, exc_type, *rest)

    Transaction.__exit__ = pause_then_commit  # type: ignore[method-assign]
    serve_telling_the_port(pause, bundles=[bundle], keys_db=db)


def serve_counting_usage(pause: Pause, bundle: Path, db: str) -> None:
    """In the child: the real server with the keys database ``db``; it never pauses."""
    serve_telling_the_port(pause, bundles=[bundle], keys_db=db)


def started(child: PausedChild) -> str:
    url = f"http://127.0.0.1:{child.heard()}"
    wait_ready(url, child)
    return url


def a_key_with_a_limit(db: str) -> tuple[str, str]:
    """A new key whose usage is counted (it has a limit no test reaches): the key and its
    subject in the usage table."""
    from server.keys import KeyStore, Limits

    store = KeyStore(db)
    key = store.add("team", Limits(chars_per_day=10**9))
    record = store.find(key)
    store.close()
    assert record is not None
    return key, f"key:{record.id}"


def counted(db: str, subject: str) -> dict[str, int]:
    """The subject's usage of the day, as the database holds it."""
    from server.keys import KeyStore

    store = KeyStore(db)
    try:
        return store.usage(subject)["day"]
    finally:
        store.close()


def send_until_the_server_dies(url: str, key: str, statuses: list[int]) -> None:
    with httpx.Client(base_url=url, timeout=120, headers={"X-API-Key": key}) as c:
        while True:
            try:
                statuses.append(c.post("/v1/translate", json=BODY).status_code)
            except httpx.TransportError:
                return


def send_until_after(killed: threading.Event, url: str, key: str, statuses: list[int]) -> None:
    """Send requests one at a time until AFTER_KILL of them were sent after ``killed`` is set
    (the server is never to die: a transport error fails the test)."""
    after = 0
    with httpx.Client(base_url=url, timeout=120, headers={"X-API-Key": key}) as c:
        while after < AFTER_KILL:
            after += killed.is_set()
            statuses.append(c.post("/v1/translate", json=BODY).status_code)


def clients(target: Callable[..., None], *args: object) -> list[threading.Thread]:
    threads = [threading.Thread(target=target, args=args) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    return threads


def joined(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(300)
        assert not thread.is_alive(), "a client is still waiting for an answer"


def test_a_server_killed_while_counting_usage_loses_no_committed_request(
    keys_db, tiny_bundle, make_server
):
    """Clients send requests with a key, each one at a time, until the server is killed in a
    request's usage transaction: the database (a SQLite file; PostgreSQL) is whole, holds
    exactly the requests counted before (every one answered 200 among them), not the killed
    one, and counts on after a restart."""
    key, subject = a_key_with_a_limit(keys_db)
    statuses: list[int] = []
    with PausedChild(serve_pausing_in_a_usage_transaction, tiny_bundle, keys_db) as child:
        sending = clients(send_until_the_server_dies, started(child), key, statuses)
        child.wait_paused()
        child.kill()
        joined(sending)
    assert set(statuses) == {200}
    # counted and not answered: at most the other clients' one request in flight each
    assert PAUSE_AT - CLIENTS <= len(statuses) <= PAUSE_AT - 1
    assert integrity_problems(keys_db) == []
    assert counted(keys_db, subject) == {
        "requests": PAUSE_AT - 1,
        "chars": (PAUSE_AT - 1) * len(TEXT),
    }
    server = make_server(keys_db=keys_db)  # the restart
    with server.client(headers={"X-API-Key": key}) as c:
        assert c.post("/v1/translate", json=BODY).status_code == 200
    assert counted(keys_db, subject)["requests"] == PAUSE_AT


def test_two_servers_sharing_a_database_count_each_answered_request_once_when_one_is_killed(
    keys_db, tiny_bundle
):
    """Two server processes share one keys database (a SQLite file; PostgreSQL), clients on
    both send requests with one key (so both count one subject's rows, under its one lock),
    and one server is killed in a usage transaction, holding that lock. The survivor goes on
    answering (every request 200), and the database holds exactly the killed server's
    committed requests (PAUSE_AT - 1) and every request the survivor answered: none lost,
    none twice, the killed one not at all; and it passes its integrity check, while the
    survivor still has it open and after."""
    key, subject = a_key_with_a_limit(keys_db)
    killed_statuses: list[int] = []
    survivor_statuses: list[int] = []
    killed = threading.Event()
    with (
        PausedChild(serve_counting_usage, tiny_bundle, keys_db) as survivor,
        PausedChild(serve_pausing_in_a_usage_transaction, tiny_bundle, keys_db) as child,
    ):
        survivor_url, url = started(survivor), started(child)
        sending = clients(send_until_the_server_dies, url, key, killed_statuses)
        surviving = clients(send_until_after, killed, survivor_url, key, survivor_statuses)
        child.wait_paused()
        child.kill()
        killed.set()
        joined(sending)
        joined(surviving)
        assert integrity_problems(keys_db) == []  # the survivor still has it open
        survivor_counted = metric_sum(survivor_url, "lsmt_caller_requests_total", kind="key")
    assert set(killed_statuses) == {200} and set(survivor_statuses) == {200}
    assert PAUSE_AT - CLIENTS <= len(killed_statuses) <= PAUSE_AT - 1
    assert len(survivor_statuses) >= CLIENTS * AFTER_KILL  # it went on serving
    assert survivor_counted == len(survivor_statuses)  # it counted each of its requests once
    requests = PAUSE_AT - 1 + len(survivor_statuses)
    assert counted(keys_db, subject) == {"requests": requests, "chars": requests * len(TEXT)}
    assert integrity_problems(keys_db) == []
