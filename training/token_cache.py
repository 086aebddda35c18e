"""Tokenized training pairs kept on disk, so that a run's next start (``--resume``, the next
stage of a recipe, another arm of a study on the same corpus) loads its token ids instead of
segmenting millions of sentences again (44 s for the mixed corpus's 2.4M pairs on 2 cores).

An entry is the output of :func:`training.batching.encode_corpus`: every direction's
:class:`~training.batching.RouteData` and its count of pairs dropped as too long. It is named
by the digest of everything that output is made from:

- the pairs themselves, direction by direction, in order (so a different corpus, sampling,
  mixing or ``max_pairs_per_route`` is another entry);
- each tokenizer that writes a side (its SentencePiece model, byte for byte) and every
  direction's tag ids (the tag scheme and quality tag as they map);
- the target side's segmentation: the per-language vocabularies when the recipe filters with
  them (:meth:`training.vocab.TargetVocabularies.fingerprint`);
- ``max_len``, and the source of the modules that do the encoding (code that changes never
  reads entries written by the old code).

An entry is one ``.npz`` written beside the others under a temporary name and renamed into
place, so a reader (another rank, another run sharing the directory) sees a whole entry or
none; zip's CRC-32 of each array is checked as it is read, and an entry that fails to read is
removed and built again. The directory is bounded in bytes: after a write, the least recently
used entries go (a hit marks its entry used).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from lsmt_core.routes import Route, route_key
from lsmt_text.paths import cache_dir

GiB = 1 << 30
FORMAT = 1
# The modules whose code decides the token ids (besides the tokenizers' models, in the key).
_ENCODING_CODE = ("training/batching.py", "training/vocab.py", "lsmt_core/tags.py")

Encoded = tuple[dict[str, Any], dict[str, int]]  # (route key -> RouteData, route key -> dropped)
SAME_TOKENIZERS = "each language's tokenizer"  # the target side written as sources are


def default_dir() -> Path:
    """``$LSMT_TOKEN_CACHE``, else ``tokenized`` in LSMT's cache (``lsmt_text.paths``)."""
    if os.environ.get("LSMT_TOKEN_CACHE"):
        return Path(os.environ["LSMT_TOKEN_CACHE"])
    return cache_dir() / "tokenized"


@cache
def _code_digest() -> str:
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for rel in _ENCODING_CODE:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes())
    return h.hexdigest()


def pairs_digest(pairs: dict[Route, list[tuple[str, str]]]) -> str:
    """SHA-256 of the pairs, direction by direction in route-key order, each side's texts in
    order (joined in C: about a second for millions of pairs)."""
    h = hashlib.sha256()
    for route in sorted(pairs, key=route_key):
        rows = pairs[route]
        h.update(f"\0route {route_key(route)} {len(rows)}\0".encode())
        for side in (0, 1):
            texts = [row[side] for row in rows]
            h.update("\n".join(texts).encode())
            # the lengths too: a text holding a newline cannot pass for two
            h.update(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)).tobytes())
    return h.hexdigest()


def entry_key(
    pairs: dict[Route, list[tuple[str, str]]],
    encoder_fingerprint: str,
    target_fingerprint: str,
    max_len: int | None,
) -> str:
    parts = {
        "format": FORMAT,
        "pairs": pairs_digest(pairs),
        "encoder": encoder_fingerprint,
        "target": target_fingerprint,
        "max_len": max_len,
        "code": _code_digest(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]


def encode_cached(
    cache: TokenCache | None,
    pairs: dict[Route, list[tuple[str, str]]],
    encoder: Any,
    max_len: int | None,
    build: Callable[[], Encoded],
    target_fingerprint: str | None = SAME_TOKENIZERS,
    log: Callable[[str], None] = print,
) -> Encoded:
    """``build()`` (an :func:`~training.batching.encode_corpus` of ``pairs`` with ``encoder``
    and ``max_len``), from ``cache`` or stored in it. ``target_fingerprint``: what segments the
    target side (the default: each target language's tokenizer, as for sources); None, or a
    tokenizer whose model cannot be read, and nothing is cached."""
    if cache is None:
        return build()
    source = encoder.fingerprint(pairs)
    key = None
    if source is not None and target_fingerprint is not None:
        key = entry_key(pairs, source, target_fingerprint, max_len)
    return cache.get_or_build(key, build, log)


class TokenCache:
    """A directory of tokenized corpora (module docstring), at most ``max_bytes`` in all."""

    def __init__(self, root: Path | str, max_bytes: int = 8 * GiB) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def path(self, key: str) -> Path:
        return self.root / f"{key}.npz"

    def load(self, key: str, log: Callable[[str], None] = print) -> Encoded | None:
        """The entry, or None when there is none or it cannot be read (then it is removed)."""
        from .batching import RouteData

        path = self.path(key)
        try:
            with np.load(path, allow_pickle=False) as npz:
                meta = json.loads(bytes(npz["meta"]).decode())
                if meta.get("format") != FORMAT:
                    raise ValueError(f"format {meta.get('format')}")
                datasets = {}
                for i, (key_, src, tgt) in enumerate(meta["routes"]):
                    datasets[key_] = RouteData(
                        Route(src, tgt),
                        npz[f"{i}.src"].astype(np.int32, copy=False),
                        npz[f"{i}.src_offsets"],
                        npz[f"{i}.tgt"].astype(np.int32, copy=False),
                        npz[f"{i}.tgt_offsets"],
                    )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            log(f"token cache: {path.name} unreadable ({exc}); building it again")
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # used: last to go
        return datasets, dict(meta["dropped"])

    def save(self, key: str, encoded: Encoded) -> None:
        datasets, dropped = encoded
        arrays: dict[str, np.ndarray] = {}
        routes = []
        for i, (key_, data) in enumerate(sorted(datasets.items())):
            routes.append([key_, data.route.src, data.route.tgt])
            arrays[f"{i}.src"] = _narrow(data.src)
            arrays[f"{i}.src_offsets"] = data.src_offsets
            arrays[f"{i}.tgt"] = _narrow(data.tgt)
            arrays[f"{i}.tgt_offsets"] = data.tgt_offsets
        meta = {"format": FORMAT, "routes": routes, "dropped": dropped}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)  # type: ignore[arg-type]
            os.replace(tmp, self.path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._evict()

    def get_or_build(
        self, key: str | None, build: Callable[[], Encoded], log: Callable[[str], None] = print
    ) -> Encoded:
        """The entry for ``key``, else ``build()`` stored under it (``key`` None: not cached)."""
        if key is None:
            return build()
        hit = self.load(key, log)
        if hit is not None:
            log(f"tokenized pairs from the cache ({self.path(key)})")
            return hit
        encoded = build()
        try:
            self.save(key, encoded)
        except OSError as exc:  # a full or read-only disk costs the next start, not this one
            log(f"token cache: could not write {self.path(key)} ({exc})")
        return encoded

    def _evict(self) -> None:
        """The least recently used entries beyond the bound, and what writers that died left
        (a day old)."""
        entries = []
        for p in self.root.iterdir():
            try:
                st = p.stat()
            except FileNotFoundError:  # another process's eviction or rename
                continue
            if p.suffix == ".npz":
                entries.append((st.st_mtime, st.st_size, p))
            elif p.name.startswith(".tmp-") and time.time() - st.st_mtime > 86400:
                p.unlink(missing_ok=True)
        total = 0
        for _, size, p in sorted(entries, reverse=True):
            total += size
            if total > self.max_bytes:
                p.unlink(missing_ok=True)


def _narrow(ids: np.ndarray) -> np.ndarray:
    """Piece ids as uint16 when they fit (every LSMT tokenizer so far): half the bytes."""
    if ids.size == 0 or (int(ids.min()) >= 0 and int(ids.max()) <= np.iinfo(np.uint16).max):
        return ids.astype(np.uint16)
    return ids
