"""API keys with their own limits, and the usage counters the limits are checked against.

Stored in a real database (``LSMT_KEYS_DB``): a SQLite file by default (Python's own
``sqlite3``, no server to run), or PostgreSQL through a ``postgresql://`` URL where a
deployment has one (``psycopg``, the ``postgres`` extra). Keys only as SHA-256 digests (the
key is shown once, when it is added), each with optional limits: requests per minute,
characters per minute and per day, and the largest request in characters. Usage is counted
per subject (``key:<id>`` or ``addr:<address>`` for anonymous use) in fixed windows (the
current minute and the current UTC day).

Checking and counting is one transaction that holds the subject's lock (SQLite: the file's
write lock, ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-level advisory lock on the
subject), so concurrent requests, in one process or in several sharing the database, cannot
overshoot a limit; counters live in the database and survive a restart. A request over a
limit is not counted. A database that cannot be reached raises :class:`KeyStoreUnavailable`
(the server answers 503); PostgreSQL connections are opened on first use and opened again
after they break, so the server starts, and recovers, without it.

    python -m server keys add NAME [--requests-per-minute N] [--chars-per-minute N]
                                   [--chars-per-day N] [--max-request-chars N]
    python -m server keys list | remove NAME | set-limits NAME [limits...]
    python -m server keys glossary NAME [PAIR --file TERMS.tsv | PAIR --clear]

Each key may keep a glossary per language pair (``glossaries``): applied to its requests
with that pair (``server.terms``), under the terms the request itself gives.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import re
import secrets
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from lsmt_core.routes import parse_route

from .failures import InvalidRequest

if TYPE_CHECKING:
    from .settings import Settings

WINDOWS = {"minute": 60, "day": 86400}

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


@dataclass(frozen=True)
class Limits:
    """None: no limit of that kind."""

    requests_per_minute: int | None = None
    chars_per_minute: int | None = None
    chars_per_day: int | None = None
    max_request_chars: int | None = None

    def any(self) -> bool:
        return any(v is not None for v in asdict(self).values())


LIMIT_NAMES = tuple(f.name for f in fields(Limits))


@dataclass(frozen=True)
class KeyRecord:
    id: int
    name: str
    revoked: bool
    limits: Limits


@dataclass(frozen=True)
class LimitExceeded:
    """Which limit a request would pass, its value, and when its window resets (epoch s)."""

    limit: str
    allowed: int
    reset_at: float

    def retry_after_s(self, now: float | None = None) -> int:
        return max(1, math.ceil(self.reset_at - (time.time() if now is None else now)))


class KeyStoreUnavailable(Exception):
    """The keys database cannot be reached (or failed); the message never holds a password."""


def anonymous_limits(settings: Settings) -> Limits:
    """The limits of requests without a key (per client address)."""
    return Limits(
        settings.anonymous_requests_per_minute,
        settings.anonymous_chars_per_minute,
        settings.anonymous_chars_per_day,
        settings.anonymous_max_request_chars,
    )


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def is_database_url(location: str | Path) -> bool:
    return str(location).startswith(("postgresql://", "postgres://"))


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    return re.sub(r"^([a-z]+://[^:/@]*):[^@]*@", r"\1:***@", url)


# The two databases -----------------------------------------------------------------------------

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


class _Dialect:
    """What differs between the two databases: connecting, column types, locking, the
    placeholder style, which exceptions mean the database failed."""

    types: ClassVar[dict[str, str]]  # the SCHEMA's type slots
    errors: tuple[type[Exception], ...]  # the database failed or cannot be reached
    integrity_error: type[Exception]

    def connect(self) -> Connection:
        raise NotImplementedError

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


class _SQLite(_Dialect):
    """A SQLite file (or ``":memory:"``): the file's write lock serializes every writer."""

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
        db.execute("PRAGMA busy_timeout = 10000")  # other processes' transactions
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


class _Postgres(_Dialect):
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
        return self.psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    def lock(self, db: Connection, subject: str) -> None:
        db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (subject,))

    def sql(self, statement: str) -> str:
        return statement.replace("?", "%s")

    def broken(self, db: Connection) -> bool:
        return isinstance(db, self.psycopg.Connection) and bool(db.closed or db.broken)


class KeyStore:
    """The keys and counters of one database: a SQLite file (``":memory:"``: counters of
    this process only, for anonymous limits without a database) or a PostgreSQL URL. Safe to
    share between threads."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location)
        self._dialect: _Dialect = (
            _Postgres(self.location) if is_database_url(self.location) else _SQLite(self.location)
        )
        self.where = (
            redacted(self.location) if isinstance(self._dialect, _Postgres) else self.location
        )
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._db: Connection | None = None
        self._reader: Connection | None = None
        if isinstance(self._dialect, _SQLite):  # a file: fails now if it cannot be opened
            try:
                self._connect()
            except sqlite3.Error as exc:
                raise self._unavailable(exc) from exc

    def close(self) -> None:
        for db in (self._reader, self._db):  # never one connection twice (":memory:" has no reader)
            if db is not None:
                db.close()
        self._db = self._reader = None

    def _connect(self) -> Connection:
        """Open the writing connection and make sure the tables exist (under ``_lock``, or
        at construction)."""
        d = self._dialect
        if self._db is not None:
            self._db.close()
            self._db = None
        db = d.connect()
        d.begin(db)
        try:
            d.lock(db, "lsmt-keys-schema")  # concurrent CREATE TABLE IF NOT EXISTS can race
            limit_columns = ",\n    ".join(f"{n} {d.types['int']}" for n in LIMIT_NAMES)
            for statement in SCHEMA:
                db.execute(statement.format(limit_columns=limit_columns, **d.types))
        except BaseException:
            d.after_failure(db)  # closed: its transaction ends with it
            raise
        db.execute("COMMIT")
        self._db = db
        return db

    def _unavailable(self, exc: Exception) -> KeyStoreUnavailable:
        return KeyStoreUnavailable(f"keys database {self.where}: {exc}")

    def _transaction(self, subject: str | None = None) -> _Transaction:
        return _Transaction(self, subject)

    def _read(self, statement: str, params: Params) -> Row | None:
        """The first row of a read on its own connection, outside the writers' transactions:
        key lookups never wait for a writer."""
        d = self._dialect
        if not d.separate_reader():
            with self._transaction() as db:
                return db.execute(statement, params).fetchone()
        with self._read_lock:
            for last_try in (False, True):  # a connection that broke while idle: once more
                reader = self._reader
                fresh = reader is None or d.broken(reader)
                try:
                    if reader is None or fresh:
                        with self._lock:  # the tables may not exist before the first write
                            if self._db is None or d.broken(self._db):
                                self._connect()
                        reader = self._reader = d.connect()
                    return reader.execute(d.sql(statement), params).fetchone()
                except d.errors as exc:
                    self._reader = d.after_failure(self._reader)
                    if fresh or last_try:
                        raise self._unavailable(exc) from exc
        raise AssertionError("unreachable")

    def _begin(self, subject: str | None) -> Connection:
        """BEGIN on the writing connection (under ``_lock``), holding ``subject``'s lock; the
        connection. One that fails here is replaced once: one that broke while idle (the
        database restarted) is noticed only when used."""
        d = self._dialect
        for last_try in (False, True):
            db = self._db
            fresh = db is None or d.broken(db)
            try:
                if db is None or fresh:
                    db = self._connect()
                d.begin(db)
                if subject is not None:
                    d.lock(db, subject)
                return db
            except d.errors:
                self._db = d.after_failure(self._db)
                if fresh or last_try:
                    raise
        raise AssertionError("unreachable")

    # Keys ------------------------------------------------------------------------------

    def add(self, name: str, limits: Limits = Limits()) -> str:
        """A new key named ``name``: the key itself, returned once (only its digest is kept)."""
        key = "lsmt-" + secrets.token_urlsafe(24)
        try:
            with self._transaction() as db:
                if db.execute("SELECT 1 FROM api_keys WHERE name = ?", (name,)).fetchone():
                    raise ValueError(f"a key named {name!r} exists")
                db.execute(
                    "INSERT INTO api_keys (name, key_sha256, created, requests_per_minute, "
                    "chars_per_minute, chars_per_day, max_request_chars) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        name,
                        key_digest(key),
                        time.time(),
                        *(getattr(limits, n) for n in LIMIT_NAMES),
                    ),
                )
        except self._dialect.integrity_error as exc:  # added at the same time elsewhere
            raise ValueError(f"a key named {name!r} exists") from exc
        return key

    def find(self, key: str) -> KeyRecord | None:
        row = self._read(
            f"SELECT id, name, revoked, {', '.join(LIMIT_NAMES)} FROM api_keys "
            "WHERE key_sha256 = ?",
            (key_digest(key),),
        )
        return None if row is None else _record(row)

    def list(self) -> list[KeyRecord]:
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT id, name, revoked, {', '.join(LIMIT_NAMES)} FROM api_keys ORDER BY id"
            ).fetchall()
        return [_record(row) for row in rows]

    def revoke(self, name: str) -> bool:
        with self._transaction() as db:
            cursor = db.execute("UPDATE api_keys SET revoked = 1 WHERE name = ?", (name,))
            return bool(cursor.rowcount > 0)

    def set_limits(self, name: str, **limits: int | None) -> bool:
        """Set the given limits (None: no limit) of the key ``name``; the others stay."""
        unknown = sorted(set(limits) - set(LIMIT_NAMES))
        if unknown:
            raise ValueError(f"unknown limits {unknown}; known: {list(LIMIT_NAMES)}")
        if not limits:
            return False
        assignments = ", ".join(f"{n} = ?" for n in limits)
        with self._transaction() as db:
            cursor = db.execute(
                f"UPDATE api_keys SET {assignments} WHERE name = ?", (*limits.values(), name)
            )
            return bool(cursor.rowcount > 0)

    # Glossaries ------------------------------------------------------------------------

    def set_glossary(self, name: str, source: str, target: str, terms: dict[str, str]) -> bool:
        """Replace the glossary of the key ``name`` for ``source``-``target`` (empty:
        remove it); False when there is no such key."""
        with self._transaction() as db:
            row = db.execute("SELECT id FROM api_keys WHERE name = ?", (name,)).fetchone()
            if row is None:
                return False
            db.execute(
                "DELETE FROM glossaries WHERE key_id = ? AND source = ? AND target = ?",
                (row[0], source, target),
            )
            for term, rendering in terms.items():
                db.execute(
                    "INSERT INTO glossaries (key_id, source, target, term, rendering) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (row[0], source, target, term, rendering),
                )
            return True

    def glossary(self, key_id: int, source: str | None, target: str) -> dict[str, str]:
        """The glossary a key keeps for a language pair (each term: what it becomes); with
        ``source`` None (a text whose language is detected) those of every pair into
        ``target``, merged."""
        where = "key_id = ? AND target = ?"
        params: Params = (key_id, target)
        if source is not None:
            where, params = where + " AND source = ?", (*params, source)
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT term, rendering FROM glossaries WHERE {where} ORDER BY source, term",
                params,
            ).fetchall()
        return dict(rows)

    def glossaries(self, name: str) -> dict[str, dict[str, str]] | None:
        """Every glossary of the key ``name`` by pair (``"en-de"``); None: no such key."""
        with self._transaction() as db:
            row = db.execute("SELECT id FROM api_keys WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            rows = db.execute(
                "SELECT source, target, term, rendering FROM glossaries WHERE key_id = ? "
                "ORDER BY source, target, term",
                (row[0],),
            ).fetchall()
        out: dict[str, dict[str, str]] = {}
        for source, target, term, rendering in rows:
            out.setdefault(f"{source}-{target}", {})[term] = rendering
        return out

    # Usage -----------------------------------------------------------------------------

    def consume(
        self, subject: str, chars: int, limits: Limits, now: float | None = None
    ) -> LimitExceeded | None:
        """Count one request of ``chars`` characters for ``subject``, unless it would pass one
        of ``limits``: then nothing is counted and the first limit it would pass is returned."""
        now = time.time() if now is None else now
        if limits.max_request_chars is not None and chars > limits.max_request_chars:
            return LimitExceeded("max_request_chars", limits.max_request_chars, now)
        starts = {w: int(now // s * s) for w, s in WINDOWS.items()}
        checks = [
            ("requests_per_minute", "minute", 1, "requests"),
            ("chars_per_minute", "minute", chars, "chars"),
            ("chars_per_day", "day", chars, "chars"),
        ]
        with self._transaction(subject) as db:
            used = {
                w: db.execute(
                    'SELECT requests, chars FROM usage WHERE subject = ? AND "window" = ? '
                    "AND window_start = ?",
                    (subject, w, starts[w]),
                ).fetchone()
                or (0, 0)
                for w in WINDOWS
            }
            for limit, window, amount, column in checks:
                allowed = getattr(limits, limit)
                current = used[window][0 if column == "requests" else 1]
                if allowed is not None and current + amount > allowed:
                    return LimitExceeded(limit, allowed, starts[window] + WINDOWS[window])
            for w in WINDOWS:
                db.execute(
                    'INSERT INTO usage (subject, "window", window_start, requests, chars) '
                    'VALUES (?, ?, ?, 1, ?) ON CONFLICT (subject, "window", window_start) '
                    "DO UPDATE SET requests = usage.requests + 1, "
                    "chars = usage.chars + excluded.chars",
                    (subject, w, starts[w], chars),
                )
            # windows that are over are never read again (the previous day stays for `list`)
            db.execute(
                "DELETE FROM usage WHERE subject = ? AND ((\"window\" = 'minute' "
                "AND window_start < ?) OR (\"window\" = 'day' AND window_start < ?))",
                (subject, starts["minute"], starts["day"] - WINDOWS["day"]),
            )
        return None

    def usage(self, subject: str, now: float | None = None) -> dict[str, dict[str, int]]:
        """The subject's counters of the current minute and day."""
        now = time.time() if now is None else now
        out = {}
        with self._transaction() as db:
            for w, seconds in WINDOWS.items():
                row = db.execute(
                    'SELECT requests, chars FROM usage WHERE subject = ? AND "window" = ? '
                    "AND window_start = ?",
                    (subject, w, int(now // seconds * seconds)),
                ).fetchone() or (0, 0)
                out[w] = {"requests": row[0], "chars": row[1]}
        return out


class _Connection:
    """A connection whose ``execute`` takes ``?`` placeholders in either database."""

    def __init__(self, db: Connection, dialect: _Dialect) -> None:
        self.db, self.dialect = db, dialect

    def execute(self, statement: str, params: Params = ()) -> Cursor:
        return self.db.execute(self.dialect.sql(statement), params)


class _Transaction:
    """``with``: a transaction on the store's writing connection under this process's lock
    (and, given a subject, the database's lock of it); COMMIT on success, ROLLBACK on an
    exception. A connection found broken is opened again first; a database that cannot be
    reached raises :class:`KeyStoreUnavailable`."""

    def __init__(self, store: KeyStore, subject: str | None) -> None:
        self.store, self.subject = store, subject

    def __enter__(self) -> _Connection:
        store, d = self.store, self.store._dialect
        store._lock.acquire()
        try:
            self.db = store._begin(self.subject)
        except d.errors as exc:
            store._lock.release()
            raise store._unavailable(exc) from exc
        except BaseException:
            store._lock.release()
            raise
        return _Connection(self.db, d)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, *_: object
    ) -> None:
        store, d = self.store, self.store._dialect
        try:
            try:
                self.db.execute("ROLLBACK" if exc_type else "COMMIT")
            except d.errors as failed:
                store._db = d.after_failure(store._db)
                if exc_type is None:
                    raise store._unavailable(failed) from failed
            if isinstance(exc, d.errors):  # the connection failed inside the transaction
                store._db = d.after_failure(store._db)
                raise store._unavailable(exc) from exc
        finally:
            store._lock.release()


def _record(row: Row) -> KeyRecord:
    return KeyRecord(row[0], row[1], bool(row[2]), Limits(*row[3:]))


# The command line ----------------------------------------------------------------------------


def _limit_options(p: argparse.ArgumentParser) -> None:
    for name in LIMIT_NAMES:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, metavar="N")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m server keys", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--db", help="a SQLite file or a postgresql:// URL (default: LSMT_KEYS_DB)")
    sub = p.add_subparsers(dest="command", required=True)
    _limit_options(sub.add_parser("add", help="add a key; prints it once"))
    sub.add_parser("list", help="every key with its limits and today's usage")
    sub.add_parser("remove", help="revoke a key (its requests get 403)")
    _limit_options(sub.add_parser("set-limits", help="change a key's limits (0: no limit)"))
    glossary = sub.add_parser(
        "glossary",
        help="show a key's glossaries, or set one pair's from a file (a line: term TAB "
        "rendering, or a term alone to keep it; --clear removes it)",
    )
    for name in ("add", "remove", "set-limits", "glossary"):
        sub.choices[name].add_argument("name")
    glossary.add_argument("pair", nargs="?", help="source-target, e.g. en-de")
    what = glossary.add_mutually_exclusive_group()
    what.add_argument("--file", type=Path, help="the pair's terms (UTF-8, one a line)")
    what.add_argument("--clear", action="store_true", help="remove the pair's glossary")
    args = p.parse_args(argv)
    if args.db is None:
        from .settings import Settings

        args.db = Settings().keys_db
    if args.db is None:
        p.error("no database: give --db or set LSMT_KEYS_DB")
    try:
        _run(p, args, KeyStore(args.db))
    except (KeyStoreUnavailable, ValueError, InvalidRequest) as exc:
        p.error(str(exc))
    return 0


def _run(p: argparse.ArgumentParser, args: argparse.Namespace, store: KeyStore) -> None:
    given = {n: getattr(args, n, None) for n in LIMIT_NAMES}
    if args.command == "add":
        print(store.add(args.name, Limits(**given)))
    elif args.command == "list":
        for record in store.list():
            used = store.usage(f"key:{record.id}")
            limits = ", ".join(f"{k}={v}" for k, v in asdict(record.limits).items() if v)
            state = "revoked" if record.revoked else "active"
            today = f"today: {used['day']['requests']} requests, {used['day']['chars']} chars"
            print(f"{record.name}\t{state}\t{limits or 'no limits'}\t{today}")
    elif args.command == "glossary":
        _glossary_command(p, args, store)
    elif args.command == "remove":
        if not store.revoke(args.name):
            p.error(f"no key named {args.name!r}")
    else:
        changes = {n: (v or None) for n, v in given.items() if v is not None}
        if not store.set_limits(args.name, **changes):
            p.error(f"no key named {args.name!r} (or no limit given)")


def _glossary_command(
    p: argparse.ArgumentParser, args: argparse.Namespace, store: KeyStore
) -> None:
    if args.pair is None:
        found = store.glossaries(args.name)
        if found is None:
            p.error(f"no key named {args.name!r}")
        for pair, pair_terms in (found or {}).items():
            for term, rendering in pair_terms.items():
                print(f"{pair}\t{term}\t{rendering}")
        return
    try:
        source, target = parse_route(args.pair)
    except ValueError as exc:
        p.error(str(exc))
    if not args.file and not args.clear:
        p.error("give --file with the pair's terms, or --clear")
    terms: dict[str, str] = {}
    if args.file:
        from .validation import parse_terms  # the same rules as a request's terms

        glossary: dict[str, str] = {}
        keep: list[str] = []
        for line in args.file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                term, _, rendering = line.partition("\t")
                if rendering.strip():
                    glossary[term] = rendering
                else:
                    keep.append(term)
        terms = parse_terms(glossary, keep).required
    if not store.set_glossary(args.name, source, target, terms):
        p.error(f"no key named {args.name!r}")
    print(f"{args.name} {args.pair}: {len(terms)} terms")
