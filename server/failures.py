"""What the translation service refuses or fails with, in its own terms: no HTTP here.

The service raises one of these kinds with the ``code``, ``message`` and details the client
will read; ``server.errors`` maps each kind to its HTTP status (and ``Retry-After``) in one
table, ``SERVICE_STATUS``, and its handler answers the usual JSON body. Kinds rather than
``ApiError``s built by the service: the service is also run outside any request (the warm-up),
which reads only ``message``, and every status code and header then sits in the HTTP layer,
in one place; the HTTP layer's own failures (API key, body parsing, size and time limits of
the connection, unknown path) stay ``ApiError``s, being HTTP by nature.
"""

from __future__ import annotations


class ServiceError(Exception):
    """A request the service refuses or cannot complete. ``code`` is stable and
    machine-readable, ``message`` says what was wrong and what is allowed, ``extra`` are the
    error body's other fields, in order; ``retry_after`` (seconds), when set, tells the client
    when to try again."""

    def __init__(
        self, code: str, message: str, *, retry_after: int | None = None, **extra: object
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.extra = extra


class InvalidRequest(ServiceError):
    """The request asks for what the service does not do: an unknown language, model or route,
    a parameter out of its range, an empty or invalid text."""


class TooLarge(ServiceError):
    """Over a size limit: texts per request, characters per text, tokens per sentence."""


class Busy(ServiceError):
    """The translation queue is full."""


class Unavailable(ServiceError):
    """The engine for the route cannot be loaded now, or the server is shutting down."""


class TimedOut(ServiceError):
    """The translation did not finish within the request's time."""


def shutting_down() -> Unavailable:
    return Unavailable(
        "shutting_down", "The server is shutting down; retry on another instance.", retry_after=1
    )
