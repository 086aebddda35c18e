"""The keys store: :class:`KeyStore` over one database (``dialects``), its transactions, and
what it keeps: keys, their glossaries, usage counters.

Every write is a :class:`Transaction` on the store's one writing connection, under this
process's lock and (given a subject) the database's lock of the subject; COMMIT or ROLLBACK
as it ends. Key lookups read on a separate connection and never wait for a writer.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from pathlib import Path

from .dialects import Connection, Cursor, Dialect, Params, Postgres, Row, SQLite, dialect_of
from .records import (
    LIMIT_NAMES,
    WINDOWS,
    KeyRecord,
    KeyStoreUnavailable,
    LimitExceeded,
    Limits,
    key_digest,
    redacted,
)


class KeyStore:
    """The keys and counters of one database: a SQLite file (``":memory:"``: counters of
    this process only, for anonymous limits without a database) or a PostgreSQL URL. Safe to
    share between threads."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location)
        self._dialect: Dialect = dialect_of(self.location)
        self.where = (
            redacted(self.location) if isinstance(self._dialect, Postgres) else self.location
        )
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._db: Connection | None = None
        self._reader: Connection | None = None
        if isinstance(self._dialect, SQLite):  # a file: fails now if it cannot be opened
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
            for statement in d.schema():
                db.execute(statement)
        except BaseException:
            d.after_failure(db)  # closed: its transaction ends with it
            raise
        db.execute("COMMIT")
        self._db = db
        return db

    def _unavailable(self, exc: Exception) -> KeyStoreUnavailable:
        return KeyStoreUnavailable(f"keys database {self.where}: {exc}")

    def _transaction(self, subject: str | None = None) -> Transaction:
        return Transaction(self, subject)

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

    def add(self, name: str, limits: Limits = Limits()) -> str:  # noqa: B008 (frozen)
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


class Placeholders:
    """A connection whose ``execute`` takes ``?`` placeholders in either database."""

    def __init__(self, db: Connection, dialect: Dialect) -> None:
        self.db, self.dialect = db, dialect

    def execute(self, statement: str, params: Params = ()) -> Cursor:
        return self.db.execute(self.dialect.sql(statement), params)


class Transaction:
    """``with``: a transaction on the store's writing connection under this process's lock
    (and, given a subject, the database's lock of it); COMMIT on success, ROLLBACK on an
    exception. A connection found broken is opened again first; a database that cannot be
    reached raises :class:`KeyStoreUnavailable`."""

    def __init__(self, store: KeyStore, subject: str | None) -> None:
        self.store, self.subject = store, subject

    def __enter__(self) -> Placeholders:
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
        return Placeholders(self.db, d)

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
