"""The values the keys store takes and returns: limits, key records, a passed limit, the error
of a database that cannot be reached; and the helpers on keys and locations."""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..settings import Settings

# The windows usage is counted in, with their lengths in seconds.
WINDOWS = {"minute": 60, "day": 86400}


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


def is_database_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    return re.sub(r"^([a-z]+://[^:/@]*):[^@]*@", r"\1:***@", url)
