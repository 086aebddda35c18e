"""Where relative paths of recipes and command lines point, and where caches live."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def resolve_path(path: Path | str) -> Path:
    """Absolute path: as is, else relative to the current directory if it exists there, else
    relative to the repository root."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    if p.exists():
        return p.resolve()
    return (REPO_ROOT / p).resolve()


def cache_dir() -> Path:
    """LSMT's cache on this machine: ``$LSMT_CACHE``, else ``~/.cache/lsmt`` (downloaded
    packages, tokenized training pairs)."""
    return Path(os.environ.get("LSMT_CACHE") or Path.home() / ".cache" / "lsmt")


# Folders that moved: bundles built before record the old place in their provenance
# (``corpus.sources.<name>.files``: ``training/data/general/tatoeba``).
_MOVED = {"training/data/": "lsmt_text/data/"}


def committed_folder(recorded: str) -> str:
    """Where a committed folder recorded in a bundle's provenance (relative to the repository)
    is now: the corpus code left ``training`` for ``lsmt_text`` in issue 44."""
    for old, new in _MOVED.items():
        if recorded.startswith(old):
            return new + recorded.removeprefix(old)
    return recorded
