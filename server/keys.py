"""API keys with their own limits, and the usage counters the limits are checked against.

Stored in SQLite (``LSMT_KEYS_DB``; Python's own ``sqlite3``, no server to run): keys only as
SHA-256 digests (the key is shown once, when it is added), each with optional limits:
requests per minute, characters per minute and per day, and the largest request in
characters. Usage is counted per subject (``key:<id>`` or ``addr:<address>`` for anonymous
use) in fixed windows (the current minute and the current UTC day).

Checking and counting is one ``BEGIN IMMEDIATE`` transaction, so concurrent requests, in one
process or in several sharing the file, cannot overshoot a limit; counters live in the file
and survive a restart. A request over a limit is not counted.

    python -m server keys add NAME [--requests-per-minute N] [--chars-per-minute N]
                                   [--chars-per-day N] [--max-request-chars N]
    python -m server keys list | remove NAME | set-limits NAME [limits...]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import secrets
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .settings import Settings

WINDOWS = {"minute": 60, "day": 86400}

SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id INTEGER PRIMARY KEY,
    name TEXT UNIQUE NOT NULL,
    key_sha256 TEXT UNIQUE NOT NULL,
    created REAL NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0,
    requests_per_minute INTEGER,
    chars_per_minute INTEGER,
    chars_per_day INTEGER,
    max_request_chars INTEGER
);
CREATE TABLE IF NOT EXISTS usage (
    subject TEXT NOT NULL,
    window TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    chars INTEGER NOT NULL,
    PRIMARY KEY (subject, window, window_start)
);
"""


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


class KeyStore:
    """The keys and counters of one SQLite file (``":memory:"``: counters of this process
    only, for anonymous limits without a database). Safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # autocommit mode: transactions are the explicit BEGIN IMMEDIATE of each operation
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 10000")  # other processes' transactions
        self._lock = threading.Lock()
        with self._lock:
            if self.path != ":memory:":
                # readers never wait for a writer (the key lookup runs on the event loop)
                self._db.execute("PRAGMA journal_mode = WAL")
            self._db.executescript(SCHEMA)
        # Key lookups read through their own connection, outside the writers' transactions
        # (an in-memory database exists in one connection only).
        self._reader = self._db
        self._read_lock = self._lock
        if self.path != ":memory:":
            self._reader = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._read_lock = threading.Lock()

    def close(self) -> None:
        if self._reader is not self._db:
            self._reader.close()
        self._db.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db, self._lock)

    # Keys ------------------------------------------------------------------------------

    def add(self, name: str, limits: Limits = Limits()) -> str:
        """A new key named ``name``: the key itself, returned once (only its digest is kept)."""
        key = "lsmt-" + secrets.token_urlsafe(24)
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM api_keys WHERE name = ?", (name,)).fetchone():
                raise ValueError(f"a key named {name!r} exists")
            db.execute(
                "INSERT INTO api_keys (name, key_sha256, created, requests_per_minute, "
                "chars_per_minute, chars_per_day, max_request_chars) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, key_digest(key), time.time(), *(getattr(limits, n) for n in LIMIT_NAMES)),
            )
        return key

    def find(self, key: str) -> KeyRecord | None:
        with self._read_lock:
            row = self._reader.execute(
                f"SELECT id, name, revoked, {', '.join(LIMIT_NAMES)} FROM api_keys "
                "WHERE key_sha256 = ?",
                (key_digest(key),),
            ).fetchone()
        return None if row is None else _record(row)

    def list(self) -> list[KeyRecord]:
        with self._transaction() as db:
            rows = db.execute(
                f"SELECT id, name, revoked, {', '.join(LIMIT_NAMES)} FROM api_keys ORDER BY id"
            ).fetchall()
        return [_record(row) for row in rows]

    def revoke(self, name: str) -> bool:
        with self._transaction() as db:
            return (
                db.execute("UPDATE api_keys SET revoked = 1 WHERE name = ?", (name,)).rowcount > 0
            )

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
            return cursor.rowcount > 0

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
        with self._transaction() as db:
            used = {
                w: db.execute(
                    "SELECT requests, chars FROM usage WHERE subject = ? AND window = ? "
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
                    "INSERT INTO usage (subject, window, window_start, requests, chars) "
                    "VALUES (?, ?, ?, 1, ?) ON CONFLICT (subject, window, window_start) "
                    "DO UPDATE SET requests = requests + 1, chars = chars + excluded.chars",
                    (subject, w, starts[w], chars),
                )
            # windows that are over are never read again (the previous day stays for `list`)
            db.execute(
                "DELETE FROM usage WHERE subject = ? AND ((window = 'minute' AND window_start < ?)"
                " OR (window = 'day' AND window_start < ?))",
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
                    "SELECT requests, chars FROM usage WHERE subject = ? AND window = ? "
                    "AND window_start = ?",
                    (subject, w, int(now // seconds * seconds)),
                ).fetchone() or (0, 0)
                out[w] = {"requests": row[0], "chars": row[1]}
        return out


class _Transaction:
    """``with``: BEGIN IMMEDIATE (the write lock of the file, waited for up to the busy
    timeout) under this process's lock; COMMIT on success, ROLLBACK on an exception."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self.db, self.lock = db, lock

    def __enter__(self) -> sqlite3.Connection:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise
        return self.db

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            self.lock.release()


def _record(row: tuple[Any, ...]) -> KeyRecord:
    return KeyRecord(row[0], row[1], bool(row[2]), Limits(*row[3:]))


# The command line ----------------------------------------------------------------------------


def _limit_options(p: argparse.ArgumentParser) -> None:
    for name in LIMIT_NAMES:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, metavar="N")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m server keys", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--db", type=Path, help="the keys database (default: LSMT_KEYS_DB)")
    sub = p.add_subparsers(dest="command", required=True)
    _limit_options(sub.add_parser("add", help="add a key; prints it once"))
    sub.add_parser("list", help="every key with its limits and today's usage")
    sub.add_parser("remove", help="revoke a key (its requests get 403)")
    _limit_options(sub.add_parser("set-limits", help="change a key's limits (0: no limit)"))
    for name in ("add", "remove", "set-limits"):
        sub.choices[name].add_argument("name")
    args = p.parse_args(argv)
    if args.db is None:
        from .settings import Settings

        args.db = Settings().keys_db
    if args.db is None:
        p.error("no database: give --db or set LSMT_KEYS_DB")
    store = KeyStore(args.db)
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
    elif args.command == "remove":
        if not store.revoke(args.name):
            p.error(f"no key named {args.name!r}")
    else:
        changes = {n: (v or None) for n, v in given.items() if v is not None}
        if not store.set_limits(args.name, **changes):
            p.error(f"no key named {args.name!r} (or no limit given)")
    return 0
