"""Keys databases for the tests: a real PostgreSQL server (pgserver: PostgreSQL's own
binaries in a wheel, on a Unix socket) and a new database on it per test, and what a test
reads of a database afterwards (its integrity check, every byte it holds). The fixtures over
these are in conftest.py (``postgres``, ``keys_db``)."""

from __future__ import annotations

import contextlib
import itertools
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_DATABASES = itertools.count()


@contextlib.contextmanager
def postgres_data_dir() -> Iterator[Path]:
    """A folder for a PostgreSQL server's data, removed afterwards; not under pytest's
    temporary folder: as root, pgserver runs PostgreSQL as a user of its own, which must be
    let through every folder above the data (pgserver opens them to others), and each pytest
    session that starts, on this machine, closes pytest's root folder again (0700), so a
    server there failed to start whenever another session had started meanwhile."""
    path = Path(tempfile.mkdtemp(prefix="lsmt-test-pg-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def start_postgres(data_dir: Path) -> Any:
    """A PostgreSQL server on ``data_dir`` (started if it is not running); ``.cleanup()``
    stops it."""
    import pgserver

    return pgserver.get_server(data_dir, cleanup_mode="stop")


def new_database(server: Any) -> str:
    """The URL of a new, empty database on ``server``."""
    name = f"keys_{next(_DATABASES)}"
    server.psql(f"CREATE DATABASE {name};")
    return server.get_uri(name)


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith("postgresql://")


def database_dump(location: str) -> bytes:
    """Every byte the database holds: the SQLite file, or PostgreSQL's dump."""
    if not is_postgres(location):
        return Path(location).read_bytes()
    import pgserver

    pg_dump = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump"
    out = subprocess.run([str(pg_dump), location], capture_output=True, check=True)
    assert b"api_keys" in out.stdout  # the dump holds the tables it should
    return out.stdout


def integrity_problems(location: str | Path) -> list[str]:
    """What is wrong with the keys database (empty: nothing). SQLite: its own
    ``PRAGMA integrity_check`` (pages, indexes, constraints). PostgreSQL (whose server was not
    killed, only its clients; pgserver has no amcheck): the usage table's primary key holds
    (no two rows of one subject and window, by a sequential scan) and its index finds the
    same rows as the table does."""
    if not is_postgres(location):
        with contextlib.closing(sqlite3.connect(location)) as db:
            found = [row[0] for row in db.execute("PRAGMA integrity_check").fetchall()]
        return [] if found == ["ok"] else found
    import psycopg

    columns = 'subject, "window", window_start, requests, chars'
    with psycopg.connect(str(location), autocommit=True) as db:
        db.execute("SET enable_indexscan = off; SET enable_bitmapscan = off")
        twice = db.execute(
            'SELECT subject, "window", window_start FROM usage '
            'GROUP BY subject, "window", window_start HAVING count(*) > 1'
        ).fetchall()
        scanned = db.execute(f"SELECT {columns} FROM usage ORDER BY 1, 2, 3").fetchall()
        db.execute("RESET enable_indexscan; RESET enable_bitmapscan; SET enable_seqscan = off")
        indexed = [
            db.execute(
                f'SELECT {columns} FROM usage WHERE subject = %s AND "window" = %s '
                "AND window_start = %s",
                row[:3],
            ).fetchone()
            for row in scanned
        ]
    problems = [f"two rows for {row}" for row in twice]
    pairs = zip(scanned, indexed, strict=True)
    problems += [f"the index misses {row}" for row, found in pairs if row != found]
    return problems
