"""State on disk through crashes and faulty disks (issue 43): ``model_export add-language`` and a
server reloading, each killed with SIGKILL at its worst moment in a real child process
(tests/kill_points.py), leave the old bundle or the new one, never half of one: a restarted
server answers on every route, and a rerun of the addition completes and cleans up after the
killed one. A server killed while its keys database counts usage under load (SQLite) leaves
the database whole, with exactly the requests committed before the kill. An engine cache
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
from pathlib import Path

import httpx
import pytest

from loadtests.server_process import metric_sum
from lsmt_bundle import load_bundle
from tests.kill_points import Pause, PausedChild

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

PAUSE_AT = 12  # the request whose usage transaction is killed before its COMMIT
CLIENTS = 4


def serve_pausing_in_a_usage_transaction(pause: Pause, bundle: Path, db: Path) -> None:
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


def send_until_the_server_dies(url: str, key: str, statuses: list[int]) -> None:
    body = {"text": TEXT, "source": "en", "target": "de", "beam_size": 1}
    with httpx.Client(base_url=url, timeout=60, headers={"X-API-Key": key}) as c:
        while True:
            try:
                statuses.append(c.post("/v1/translate", json=body).status_code)
            except httpx.TransportError:
                return


def test_a_server_killed_while_counting_usage_loses_no_committed_request(
    tiny_bundle, make_server, tmp_path
):
    """Clients send requests with a key, each one at a time, until the server is killed in a
    request's usage transaction: the database is whole, holds exactly the requests counted
    before (every one answered 200 among them), not the killed one, and counts on after a
    restart."""
    import contextlib
    import sqlite3

    from server.keys import KeyStore, Limits

    db = tmp_path / "keys.db"
    store = KeyStore(db)
    key = store.add("team", Limits(chars_per_day=10**9))  # a limit: usage is counted
    record = store.find(key)
    assert record is not None
    subject = f"key:{record.id}"
    store.close()
    statuses: list[int] = []
    with PausedChild(serve_pausing_in_a_usage_transaction, tiny_bundle, db) as child:
        url = f"http://127.0.0.1:{child.heard()}"
        wait_ready(url, child)
        clients = [
            threading.Thread(target=send_until_the_server_dies, args=(url, key, statuses))
            for _ in range(CLIENTS)
        ]
        for client in clients:
            client.start()
        child.wait_paused()
        child.kill()
        for client in clients:
            client.join(60)
    assert set(statuses) == {200}
    # counted and not answered: at most the other clients' one request in flight each
    assert PAUSE_AT - CLIENTS <= len(statuses) <= PAUSE_AT - 1
    with contextlib.closing(sqlite3.connect(db)) as check:
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = KeyStore(db)
    assert store.usage(subject)["day"]["requests"] == PAUSE_AT - 1
    store.close()
    server = make_server(keys_db=db)  # the restart
    with server.client(headers={"X-API-Key": key}) as c:
        body = {"text": TEXT, "source": "en", "target": "de"}
        assert c.post("/v1/translate", json=body).status_code == 200
    store = KeyStore(db)
    assert store.usage(subject)["day"]["requests"] == PAUSE_AT
    store.close()
