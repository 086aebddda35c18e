"""Helpers for tests that wrap the server's engines (tests/server)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from server.express import LaneEngines


def each_translator(engine, wrap: Callable[[Any], Any]) -> Any:
    """``wrap(translator)`` for an engine of one translator, or a pair of ``wrap``s for the
    CPU's express-lane pair (server/express.py)."""
    if isinstance(engine, LaneEngines):
        return LaneEngines(wrap(engine.bulk), wrap(engine.express))
    return wrap(engine)
