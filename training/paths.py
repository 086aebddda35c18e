"""Where relative paths of recipes and command lines point."""

from __future__ import annotations

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
