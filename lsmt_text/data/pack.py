"""A built corpus in one small archive, unpacked byte for byte elsewhere.

A corpus is mostly the same sentences many times: the directions between six languages are
multi-way parallel (the same verse or help paragraph in every pair of a language), and the
mono files repeat the train text. So the pack stores each language's distinct lines once
(``text/<lang>``) and every text file as the indices of its lines (``lines/<path>``, uint32
deltas, which xz squeezes to little); everything else (ids, stats, the manifest) is stored as
it is. The default mixed corpus (659 MB) packs into a file small enough to travel with the
repository, e.g. to a machine that cannot reach the package mirrors (a lent GPU machine).

    python -m lsmt_text.data pack data/default_mixed/corpus --out corpus.lsmtpack
    python -m lsmt_text.data unpack corpus.lsmtpack --out data/default_mixed/corpus

Unpacking checks every file against the SHA-256 recorded when packing (and refuses a
non-empty target directory), so a damaged or truncated pack never yields a corpus.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np

from .formats import CorpusFormatError

FORMAT = "lsmt-corpus-pack/1"
# split/<src>-<tgt>.<lang> and mono/<lang>.txt hold text of one language, a line per segment
_TEXT = re.compile(
    r"^(?:[a-z]+/[a-z]{2,3}-[a-z]{2,3}\.(?P<pair>[a-z]{2,3})|mono/(?P<mono>[a-z]{2,3})\.txt)$"
)


def _language(rel: str, data: bytes) -> str | None:
    """The language whose lines ``rel`` holds, or None to store it as it is (not a text file
    of the corpus, or not plain lines: empty, or without a final line break)."""
    m = _TEXT.match(rel)
    if m is None or not data.endswith(b"\n"):
        return None
    return m.group("pair") or m.group("mono")


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def pack(corpus: Path | str, out: Path | str) -> dict:
    """Write ``corpus`` (a directory built by ``lsmt_text.data build``) into ``out`` (xz tar);
    returns the pack's index."""
    root = Path(corpus)
    if not (root / "manifest.json").is_file():
        raise CorpusFormatError(f"{root} is not a built corpus (no manifest.json)")
    tables: dict[str, dict[bytes, int]] = {}
    files: dict[str, dict] = {}
    encoded: dict[str, bytes] = {}
    # mono first: the distinct lines come out in the mono files' order, the deltas small
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    paths.sort(key=lambda p: not p.relative_to(root).as_posix().startswith("mono/"))
    for path in paths:
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        entry = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        lang = _language(rel, data)
        if lang is not None:
            table = tables.setdefault(lang, {})
            index = [table.setdefault(line, len(table)) for line in data[:-1].split(b"\n")]
            deltas = np.diff(np.asarray(index, dtype=np.int64), prepend=0).astype("<i4")
            encoded[f"lines/{rel}"] = deltas.tobytes()
            entry["language"] = lang
        else:
            encoded[f"raw/{rel}"] = data
        files[rel] = entry
    index = {"format": FORMAT, "files": files, "languages": sorted(tables)}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        _add(tar, "index.json", json.dumps(index, indent=1).encode())
        for lang, table in sorted(tables.items()):
            _add(tar, f"text/{lang}", b"\n".join(table) + b"\n")
        for name, data in encoded.items():
            _add(tar, name, data)
    tmp.replace(out)
    return index


def unpack(packed: Path | str, out: Path | str) -> dict:
    """Rebuild the corpus of ``packed`` in ``out`` (absent or empty), every file checked
    against its recorded SHA-256; returns the pack's index."""
    target = Path(out)
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} is not empty: unpack into a new directory")
    with tarfile.open(packed, "r:xz") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}

        def read(name: str) -> bytes:
            if name not in members:
                raise CorpusFormatError(f"{packed}: {name} is missing from the pack")
            f = tar.extractfile(members[name])
            assert f is not None
            return f.read()

        index = json.loads(read("index.json"))
        if index.get("format") != FORMAT:
            raise CorpusFormatError(f"{packed}: not a corpus pack ({index.get('format')!r})")
        texts = {lang: read(f"text/{lang}")[:-1].split(b"\n") for lang in index["languages"]}
        rebuilt: dict[str, bytes] = {}
        for rel, entry in index["files"].items():
            lang = entry.get("language")
            if lang is None:
                data = read(f"raw/{rel}")
            else:
                deltas = np.frombuffer(read(f"lines/{rel}"), dtype="<i4")
                lines = texts[lang]
                data = b"".join(lines[i] + b"\n" for i in np.cumsum(deltas, dtype=np.int64))
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise CorpusFormatError(f"{packed}: {rel} does not match its recorded SHA-256")
            rebuilt[rel] = data
    for rel, data in rebuilt.items():  # written only once every file checked
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return index
