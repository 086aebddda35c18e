"""The on-disk corpus layout (the contract with the trainer) and user-corpus import.

::

    DATA_DIR/
      stats.json                      build/import statistics (see docs/data.md)
      manifest.json                   sha256 and line count of every data file
      {train,dev,test}/{src}-{tgt}.{src}   one segment per line, UTF-8, "\\n" line ends
      {train,dev,test}/{src}-{tgt}.{tgt}   line-aligned with the .{src} file
      {train,dev,test}/{src}-{tgt}.ids     one id per line: Bible "book.chapter.verse" (and
                                      "...@edition"), package sources "source:document#key"
      mono/{lang}.txt                 deduplicated training-side text of each language
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from lsmt_core.languages import SPLITS
from lsmt_core.routes import route_key

Direction = tuple[str, str]

_LANG_RE = re.compile(r"^[a-z]{2,3}$")
_PAIR_FILE_RE = re.compile(r"^([a-z]{2,3})-([a-z]{2,3})\.ids$")


class CorpusFormatError(ValueError):
    """A corpus file is missing, malformed or not line-aligned."""


def check_lang(lang: str) -> str:
    if not _LANG_RE.match(lang):
        raise CorpusFormatError(f"invalid language code {lang!r}: expected 2-3 lowercase letters")
    return lang


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise CorpusFormatError(f"invalid split {split!r}: expected one of {', '.join(SPLITS)}")
    return split


def pair_paths(data_dir: Path | str, split: str, src: str, tgt: str) -> tuple[Path, Path, Path]:
    """(source file, target file, ids file) of one direction in one split."""
    base = Path(data_dir) / split / route_key((src, tgt))
    return base.with_suffix(f".{src}"), base.with_suffix(f".{tgt}"), base.with_suffix(".ids")


def mono_path(data_dir: Path | str, lang: str) -> Path:
    return Path(data_dir) / "mono" / f"{lang}.txt"


def check_segment(text: str) -> str:
    if "\n" in text or "\r" in text:
        raise CorpusFormatError(f"segment contains a line break: {text[:80]!r}")
    return text


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write lines as UTF-8 with "\\n" endings (byte-stable); returns the number of lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(check_segment(line))
            f.write("\n")
            n += 1
    return n


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="\n") as f:
        return [line[:-1] if line.endswith("\n") else line for line in f]


def write_pairs(
    data_dir: Path | str,
    split: str,
    src: str,
    tgt: str,
    pairs: Sequence[tuple[str, str]],
    ids: Sequence[str],
) -> None:
    """Write one direction of one split (three line-aligned files)."""
    if len(pairs) != len(ids):
        raise CorpusFormatError(f"{len(pairs)} pairs but {len(ids)} ids")
    ps, pt, pi = pair_paths(data_dir, split, src, tgt)
    write_lines(ps, (s for s, _ in pairs))
    write_lines(pt, (t for _, t in pairs))
    write_lines(pi, ids)


def directions(data_dir: Path | str, split: str) -> list[Direction]:
    """Directions (src, tgt) present in a split, sorted."""
    d = Path(data_dir) / check_split(split)
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = _PAIR_FILE_RE.match(p.name)
        if m:
            out.append((m.group(1), m.group(2)))
    return sorted(out)


def load_direction(
    data_dir: Path | str, split: str, src: str, tgt: str, with_ids: bool = False
) -> list[tuple[str, str]] | tuple[list[tuple[str, str]], list[str]]:
    """Pairs of one direction; with ``with_ids`` also the ids (same length)."""
    ps, pt, pi = pair_paths(data_dir, split, src, tgt)
    for p in (ps, pt, pi):
        if not p.is_file():
            raise CorpusFormatError(f"missing corpus file {p}")
    s, t, i = read_lines(ps), read_lines(pt), read_lines(pi)
    if not len(s) == len(t) == len(i):
        raise CorpusFormatError(
            f"{split} {src}-{tgt}: line counts differ ({ps.name}: {len(s)}, {pt.name}: {len(t)}, "
            f"{pi.name}: {len(i)})"
        )
    pairs = list(zip(s, t, strict=True))
    return (pairs, i) if with_ids else pairs


def load_split(data_dir: Path | str, split: str) -> dict[Direction, list[tuple[str, str]]]:
    """All directions of a split: ``{(src, tgt): [(src_text, tgt_text), ...]}``."""
    return {d: load_direction(data_dir, split, *d) for d in directions(data_dir, split)}  # type: ignore[misc]


def load_ids(data_dir: Path | str, split: str, src: str, tgt: str) -> list[str]:
    return load_direction(data_dir, split, src, tgt, with_ids=True)[1]  # type: ignore[index]


def source_of(pair_id: str) -> str:
    """The source a pair id names: ``libreoffice-help:text/...`` -> ``libreoffice-help``, an
    imported corpus's ``NAME:n`` -> ``NAME``; Bible ids (``book.chapter.verse``) have no
    prefix and count as ``bible``."""
    name, sep, _ = pair_id.partition(":")
    return name if sep else "bible"


def read_stats(data_dir: Path | str) -> dict:
    path = Path(data_dir) / "stats.json"
    if not path.is_file():
        raise CorpusFormatError(f"{path} not found: is {data_dir} a corpus directory?")
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def languages(data_dir: Path | str) -> list[str]:
    """Languages that have a mono file (i.e. training text)."""
    d = Path(data_dir) / "mono"
    return sorted(p.stem for p in d.glob("*.txt")) if d.is_dir() else []


def write_manifest(data_dir: Path | str) -> dict:
    """sha256 and line count of every data file (everything but stats/manifest)."""
    root = Path(data_dir)
    files = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in ("stats.json", "manifest.json"):
            continue
        data = p.read_bytes()
        files[p.relative_to(root).as_posix()] = {
            "sha256": hashlib.sha256(data).hexdigest(),
            "lines": data.count(b"\n"),
        }
    manifest = {"format": "lsmt-corpus/1", "files": files}
    write_json(root / "manifest.json", manifest)
    return manifest
