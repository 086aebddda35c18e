"""The keys database's schema, and what differs between SQLite and PostgreSQL: connecting,
column types, locking a subject, the placeholder style, which exceptions mean the database
failed. The schema is the one every existing database was made with: change it only with a
migration."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, ClassVar, Protocol

from .records import LIMIT_NAMES, KeyStoreUnavailable, is_database_url

# One schema for both databases; the few types that differ are filled in per dialect.
# "window" is quoted: a reserved word in PostgreSQL.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS api_keys (
    id {id_column},
    name TEXT UNIQUE NOT NULL,
    key_sha256 TEXT UNIQUE NOT NULL,
    created {float} NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    {limit_columns}
)""",
    """CREATE TABLE IF NOT EXISTS usage (
    subject TEXT NOT NULL,
    "window" TEXT NOT NULL,
    window_start {int} NOT NULL,
    requests {int} NOT NULL,
    chars {int} NOT NULL,
    PRIMARY KEY (subject, "window", window_start)
)""",
    # A key's glossary for one language pair: each source term and what it becomes (itself:
    # a term not to translate).
    """CREATE TABLE IF NOT EXISTS glossaries (
    key_id {int} NOT NULL,
    source TEXT NOT NULL,
    target TEXT NOT NULL,
    term TEXT NOT NULL,
    rendering TEXT NOT NULL,
    PRIMARY KEY (key_id, source, target, term)
)""",
)

# How long a writer waits for another's lock (SQLite's busy timeout, PostgreSQL's
# lock_timeout), and how long PostgreSQL lets a transaction sit idle (ours take milliseconds
# between their statements) before it ends the session and releases its locks.
LOCK_TIMEOUT_MS = 10_000
IDLE_IN_TRANSACTION_MS = 5_000
# The other side of it: this server's connection to a PostgreSQL host that died (or a network
# that drops everything) is found dead in about 25 s idle (keepalives) or 30 s waiting for an
# answer (tcp_user_timeout), not after the kernel's two hours. A URL may set its own.
POSTGRES_TCP_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}

# A row as the driver returns it: sqlite3 and psycopg leave its values untyped.
Row = tuple[Any, ...]
Params = tuple[str | int | float | None, ...]


class Cursor(Protocol):
    """What is used of a DB-API cursor (sqlite3's, psycopg's)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Row | None: ...
    def fetchall(self) -> list[Row]: ...


class Connection(Protocol):
    """What is used of a DB-API connection (sqlite3's, psycopg's), in autocommit mode:
    transactions are the explicit BEGIN of each operation."""

    def execute(self, statement: str, params: Params = ..., /) -> Cursor: ...
    def close(self) -> None: ...


class Dialect:
    """What differs between the two databases (the defaults are PostgreSQL's and SQLite's
    common ground)."""

    types: ClassVar[dict[str, str]]  # the SCHEMA's type slots
    errors: tuple[type[Exception], ...]  # the database failed or cannot be reached
    integrity_error: type[Exception]

    def connect(self) -> Connection:
        raise NotImplementedError

    def schema(self) -> list[str]:
        """The CREATE TABLE statements, in this database's types."""
        limit_columns = ",\n    ".join(f"{n} {self.types['int']}" for n in LIMIT_NAMES)
        return [s.format(limit_columns=limit_columns, **self.types) for s in SCHEMA]

    def separate_reader(self) -> bool:
        return True

    def begin(self, db: Connection) -> None:
        db.execute("BEGIN")

    def lock(self, db: Connection, subject: str) -> None:
        """Hold ``subject``'s lock until the transaction ends."""

    def sql(self, statement: str) -> str:
        """``statement`` (``?`` placeholders) in the driver's placeholder style."""
        return statement

    def broken(self, db: Connection) -> bool:
        return False

    def after_failure(self, db: Connection | None) -> Connection | None:
        """The connection to go on with after ``db`` raised one of :attr:`errors`: None (a
        new one is opened when next needed), having closed it."""
        if db is not None:
            with contextlib.suppress(Exception):  # already gone
                db.close()
        return None


class SQLite(Dialect):
    """A SQLite file (or ``":memory:"``): the file's write lock serializes every writer, in
    this process and in every other one on the host (WAL: readers never wait for it)."""

    types: ClassVar[dict[str, str]] = {
        "id_column": "INTEGER PRIMARY KEY",
        "float": "REAL",
        "int": "INTEGER",
    }
    errors = (sqlite3.OperationalError,)
    integrity_error = sqlite3.IntegrityError

    def __init__(self, path: str) -> None:
        self.path = path
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def connect(self) -> Connection:
        # autocommit mode: transactions are the explicit BEGIN of each operation
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {LOCK_TIMEOUT_MS}")  # other processes' transactions
        if self.path != ":memory:":
            # readers never wait for a writer
            db.execute("PRAGMA journal_mode = WAL")
        return db

    def separate_reader(self) -> bool:
        return self.path != ":memory:"  # an in-memory database exists in one connection only

    def begin(self, db: Connection) -> None:
        # the file's write lock (waited for up to the busy timeout): every subject's lock
        db.execute("BEGIN IMMEDIATE")

    def after_failure(self, db: Connection | None) -> Connection | None:
        return db  # a busy or failing file, not a lost connection (":memory:" lives in it)


class Postgres(Dialect):
    """A PostgreSQL database by URL: a transaction-level advisory lock per subject serializes
    the writers of one subject (rows that do not exist yet cannot be locked)."""

    types: ClassVar[dict[str, str]] = {
        "id_column": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        "float": "DOUBLE PRECISION",
        "int": "BIGINT",
    }

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise KeyStoreUnavailable(
                "a PostgreSQL keys database needs psycopg: pip install 'lsmt[postgres]'"
            ) from exc
        self.psycopg = psycopg
        self.url = url
        self.errors = (psycopg.OperationalError, psycopg.InterfaceError)
        self.integrity_error = psycopg.IntegrityError

    def connect(self) -> Connection:
        given = self.psycopg.conninfo.conninfo_to_dict(self.url)
        tcp = {k: v for k, v in POSTGRES_TCP_DEFAULTS.items() if k not in given}
        conninfo = self.psycopg.conninfo.make_conninfo(self.url, connect_timeout=10, **tcp)
        db = self.psycopg.connect(conninfo, autocommit=True)
        # A subject's lock is waited for as long as SQLite's write lock, then 503. A client
        # that hangs in a transaction, or whose host died without closing its connection
        # (the server would notice only by TCP keepalive, hours later), holds the subject's
        # lock: the server ends its session after a while, so the others go on.
        db.execute(f"SET lock_timeout = {LOCK_TIMEOUT_MS}")
        db.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
        return db

    def lock(self, db: Connection, subject: str) -> None:
        db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (subject,))

    def sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    def broken(self, db: Connection) -> bool:
        return isinstance(db, self.psycopg.Connection) and bool(db.closed or db.broken)


def dialect_of(location: str) -> Dialect:
    """The dialect of a SQLite path or a PostgreSQL URL."""
    if is_database_url(location):
        return Postgres(location)
    return SQLite(location)
