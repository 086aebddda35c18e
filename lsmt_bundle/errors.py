"""The one error a bundle raises: missing, corrupt or inconsistent files or weights."""

from __future__ import annotations


class BundleError(Exception):
    """A bundle (or one of its modules) is missing, corrupt or inconsistent."""
