"""API keys with their own limits, and the usage counters the limits are checked against.

Stored in a real database (``LSMT_KEYS_DB``): a SQLite file by default (Python's own
``sqlite3``, no server to run), or PostgreSQL through a ``postgresql://`` URL where a
deployment has one (``psycopg``, the ``postgres`` extra). Keys only as SHA-256 digests (the
key is shown once, when it is added), each with optional limits: requests per minute,
characters per minute and per day, and the largest request in characters. Usage is counted
per subject (``key:<id>`` or ``addr:<address>`` for anonymous use) in fixed windows (the
current minute and the current UTC day).

Invariants: checking and counting is one transaction that holds the subject's lock (SQLite:
the file's write lock, ``BEGIN IMMEDIATE``; PostgreSQL: a transaction-level advisory lock on
the subject), and each counter moves by an upsert in SQL (``requests = usage.requests + 1``),
never by a value computed in Python; so concurrent requests, in one process or in several
sharing the database, cannot overshoot a limit, and a process killed mid-transaction leaves
its request uncounted (the transaction never commits). A lock is waited for at most
``dialects.LOCK_TIMEOUT_MS``; PostgreSQL ends a transaction left idle longer than
``dialects.IDLE_IN_TRANSACTION_MS``, so a peer that hangs, or whose host died, does not hold a
subject's lock for long. A request over a limit is not counted.
A database that cannot be reached raises :class:`KeyStoreUnavailable` (the server answers
503); PostgreSQL connections are opened on first use and opened again after they break.

The modules, one job each: ``records`` (limits, key records, the errors: plain values),
``dialects`` (the schema and what differs between SQLite and PostgreSQL), ``store``
(:class:`KeyStore`: its transactions, keys, glossaries and usage), ``cli`` (``python -m
server keys``).
"""

from .records import (
    LIMIT_NAMES,
    WINDOWS,
    KeyRecord,
    KeyStoreUnavailable,
    LimitExceeded,
    Limits,
    anonymous_limits,
    is_database_url,
    key_digest,
    redacted,
)
from .store import KeyStore

__all__ = [
    "LIMIT_NAMES",
    "WINDOWS",
    "KeyRecord",
    "KeyStore",
    "KeyStoreUnavailable",
    "LimitExceeded",
    "Limits",
    "anonymous_limits",
    "is_database_url",
    "key_digest",
    "redacted",
]
