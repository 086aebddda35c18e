"""Built engines kept on disk, so that a route's next cold start loads instead of assembling.

An entry is an engine directory (CTranslate2's, or a hybrid engine's: ``lsmt_bundle.engines``)
named by the digest of everything it is built from: the SHA-256 the manifest records for each
module the route reads and for the tokenizers (and which one is the source's and the
target's; routes that share an engine share its entry), the manifest's architecture,
fusions and tag scheme, the quantization, the CTranslate2 (for a hybrid also ONNX Runtime)
version and the source of this package (assembly code that changes cannot serve engines
built by the old one). A module changed on disk has another digest, so an engine
built from the old one is never served. Bundles without recorded digests are not cached.

Entries are written into a temporary directory beside them and renamed into place, so a
reader (this process or another one on the host sharing the directory) sees a whole entry or
none. Each entry lists its files with their sizes and checksums (``contents.json``), checked on
every hit (by the server while the engine loads, :func:`load_route_engine`; the engine is
used only once the check passed): a corrupt or half-copied entry is removed and built again.
The checksum is XXH3-128 (``xxhash``): it guards against damage, not tampering (whoever can
write an entry can write its list), and at about 20 GB/s against SHA-256's 1.5 it costs a d512
engine's hit a few milliseconds instead of more than its load. Entries listed with SHA-256
(before 2026-11-25) are still checked with it.
The cache is bounded in bytes: after a write, the least recently used entries go (a hit marks
its entry used).

Crash-safe: a writer holds a lock on its temporary directory (``flock``; the kernel drops it
when the process dies, SIGKILL included), so each start removes the temporary directories
of writers that died mid-write and keeps those of live ones. A cache that cannot take an
entry (its disk full, its directory read-only or missing) is skipped, not fatal: the engine
is built apart and served all the same, and the cache says so (a warning, and its
``error_listeners``, which the server counts); a read-only cache still serves its entries.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsmt_core.routes import Route

from .bundle import Bundle
from .store import SHA256, XXH3, hexdigest

if TYPE_CHECKING:
    from .engines import Opener

CONTENTS = "contents.json"
CHECKSUM = XXH3
# The prefix of the directories entries are written in before they are renamed into place.
WRITING = ".writing-"
# Why an engine could not be stored: its disk full, or its directory not writable (read-only,
# not a directory, permissions).
FULL, UNWRITABLE = "full", "unwritable"
CACHE_ERRORS = (FULL, UNWRITABLE)

log = logging.getLogger(__name__)


@cache
def _code_digest() -> str:
    """The digest of this package's source: assembly, fusions and engine building."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        h.update(path.relative_to(Path(__file__).parent).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def engine_key(bundle: Bundle, route: Route, quantization: str | None) -> str | None:
    """The cache key of the route's engine; None when the bundle records no digests. Routes
    that share an engine (the same modules, and the same tokenizers in the same roles) share
    its entry: the key names what the engine is built from, not the route."""
    import ctranslate2

    manifest = bundle.manifest
    tokenizers = [manifest.tokenizer_of(lang).path for lang in route]
    files = list(dict.fromkeys([manifest.tokenizer.path, *tokenizers])) + [
        f"modules/{name}.safetensors" for name in bundle.modules_for(route)
    ]
    digests = [manifest.files.get(rel) for rel in files]
    if any(d is None for d in digests):
        return None
    parts = {
        "tokenizers": {"source": tokenizers[0], "target": tokenizers[1]},
        "files": {rel: d.sha256 for rel, d in zip(files, digests, strict=True) if d},
        "layout": manifest.model_dump(
            mode="json", include={"architecture", "fusions", "tag_scheme", "store_dtype"}
        ),
        "quantization": quantization,
        "ctranslate2": ctranslate2.__version__,
        "code": _code_digest(),
    }
    if manifest.architecture.decoder_kind == "lstm":  # a hybrid's decoder graphs: ONNX Runtime's
        parts["onnxruntime"] = _onnxruntime_version()
    blob = json.dumps(parts, sort_keys=True).encode()
    return f"{bundle.name}-{hashlib.sha256(blob).hexdigest()[:32]}"


def _onnxruntime_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


class EngineCache:
    def __init__(self, root: str | Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        # Called with the reason (FULL or UNWRITABLE) each time an engine could not be stored.
        self.error_listeners: list[Callable[[str], object]] = []
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.remove_abandoned()
        except OSError as error:  # tried again at each store: the disk may get room
            log.warning("engine cache %s cannot be used now: %s", self.root, error)

    def get(self, key: str, verify: bool = True) -> Path | None:
        """The entry's directory; None (the entry removed) when absent or damaged. Checked
        whole (every file's checksum), or with ``verify=False`` only its file list and sizes:
        the caller then checks it with :meth:`intact` before using what it loads."""
        entry = self.root / key
        if not entry.is_dir():
            return None
        if not (self.intact(entry) if verify else _sizes_listed(entry)):
            self.discard(key)
            return None
        # used: the last to be evicted (a read-only cache, an image's, serves without the order)
        with contextlib.suppress(OSError):
            os.utime(entry)
        return entry

    def discard(self, key: str) -> None:
        shutil.rmtree(self.root / key, ignore_errors=True)

    def store(self, key: str, write: Callable[[Path], object]) -> Path:
        """Store under ``key`` the engine that ``write`` writes into the directory it is given
        (a private one beside the entries, renamed into place once listed: atomically), then
        keep within the bound."""
        entry = self.root / key
        tmp, lock = self._writing_dir(key)
        try:
            write(tmp)
            contents = {
                p.name: {"bytes": p.stat().st_size, CHECKSUM: _checksum(p, CHECKSUM)}
                for p in sorted(tmp.iterdir())
                if p.is_file()
            }
            (tmp / CONTENTS).write_text(json.dumps(contents, indent=1))
            try:
                os.rename(tmp, entry)
            except OSError:  # another process stored it first (or a damaged one is there)
                if self.get(key) is None:
                    shutil.rmtree(entry, ignore_errors=True)
                    os.rename(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            os.close(lock)
        self.evict(keep=key)
        return entry

    def _writing_dir(self, key: str) -> tuple[Path, int]:
        """A new directory beside the entries to write ``key``'s in, and the descriptor that
        holds its lock while this process writes (:meth:`remove_abandoned`)."""
        while True:
            tmp = Path(tempfile.mkdtemp(prefix=f"{WRITING}{key}.", dir=self.root))
            try:
                lock = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue  # removed as abandoned by a process starting in the same instant
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _same_directory(tmp, lock):  # (and not in the instant before the lock)
                return tmp, lock
            os.close(lock)

    def remove_abandoned(self) -> list[str]:
        """Remove the directories that writers killed mid-write left (nobody holds their
        lock); their names. A live writer's, in this process or another, is kept."""
        removed = []
        for path in self.root.iterdir():
            if not path.name.startswith(WRITING):
                continue
            try:
                lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue  # gone meanwhile (its writer done)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
            except BlockingIOError:
                pass  # its writer is alive
            finally:
                os.close(lock)
        return removed

    def skipped(self, error: OSError) -> None:
        """Say that an engine could not be stored (a warning; the listeners get the reason)."""
        reason = FULL if error.errno in (errno.ENOSPC, errno.EDQUOT) else UNWRITABLE
        log.warning("engine cache %s skipped (%s): %s", self.root, reason, error)
        for listener in list(self.error_listeners):
            listener(reason)

    def size(self) -> int:
        return sum(_entry_bytes(e) for e in self._entries())

    def evict(self, keep: str | None = None) -> list[str]:
        """Remove the least recently used entries until the cache fits its bound (never
        ``keep``, the one just stored); the keys removed."""
        entries = sorted(self._entries(), key=lambda e: e.stat().st_mtime)
        total = sum(_entry_bytes(e) for e in entries)
        removed = []
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry.name == keep:
                continue
            total -= _entry_bytes(entry)
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        return removed

    def _entries(self) -> list[Path]:
        return [p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")]

    @staticmethod
    def intact(entry: Path) -> bool:
        """Whether every file the entry lists has its recorded size and checksum."""
        try:
            contents = json.loads((entry / CONTENTS).read_text())
            for name, want in contents.items():
                kind = CHECKSUM if CHECKSUM in want else SHA256
                if _checksum(entry / name, kind, want["bytes"]) != want[kind]:
                    return False
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return bool(contents)


def _checksum(path: Path, kind: str, size: int | None = None) -> str | None:
    """The file's checksum, ``kind`` XXH3-128 or SHA-256; None when ``size`` is given and the
    file has another. The file is mapped, not read: no copy of an engine's weights."""
    with open(path, "rb") as f:
        actual = os.fstat(f.fileno()).st_size
        if size is not None and actual != size:
            return None
        if actual == 0:
            return hexdigest(kind, b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return hexdigest(kind, view)


def _sizes_listed(entry: Path) -> bool:
    """Whether the entry lists its files and each has its recorded size (no reading)."""
    try:
        contents = json.loads((entry / CONTENTS).read_text())
        return bool(contents) and all(
            (entry / name).stat().st_size == want["bytes"] for name, want in contents.items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _same_directory(path: Path, descriptor: int) -> bool:
    try:
        return os.path.samestat(os.stat(path), os.fstat(descriptor))
    except FileNotFoundError:
        return False


def _entry_bytes(entry: Path) -> int:
    return sum(p.stat().st_size for p in entry.iterdir() if p.is_file())


def fill_entry(
    cache_: EngineCache, bundle: Bundle, route: Route, quantization: str | None
) -> tuple[Path, bool]:
    """The route's entry, checked whole, and whether it was there already (else it is built
    and stored now): what ``python -m model_export build-engines --cache`` does per route."""
    key = engine_key(bundle, route, quantization)
    if key is None:
        raise ValueError("the bundle records no file digests: its engines cannot be cached")
    entry = cache_.get(key)
    if entry is not None:
        return entry, True
    return _build_entry(cache_, key, bundle, route, quantization), False


def load_route_engine(
    cache_: EngineCache | None,
    bundle: Bundle,
    route: Route,
    quantization: str | None,
    *,
    opener: Opener | None = None,
    **options: Any,
) -> tuple[Any, int]:
    """The route's engine and its weights' bytes (what the server loads): from the cache when
    it holds it, else built straight into a new entry and opened from there (without a cache:
    from a temporary directory, as when the cache cannot take it: :meth:`EngineCache.skipped`).
    ``opener(directory, **options)`` opens it (default :func:`lsmt_bundle.engines.open_engine`:
    ``options`` are its)."""
    from .engines import open_engine, open_route_engine_on_disk, return_freed_memory

    opener = opener or open_engine
    key = None if cache_ is None else engine_key(bundle, route, quantization)
    if cache_ is None or key is None:
        return open_route_engine_on_disk(bundle, route, quantization, opener=opener, **options)
    entry = cache_.get(key, verify=False)
    if entry is not None:
        engine = _open_checked(entry, opener, options)
        if engine is not None:
            return engine
        cache_.discard(key)
    try:
        entry = _build_entry(cache_, key, bundle, route, quantization)
    except OSError as error:
        # The cache cannot take it (disk full, read-only): served all the same, built apart.
        # Skipped only once that worked: an error of the bundle's raises from there.
        engine = open_route_engine_on_disk(bundle, route, quantization, opener=opener, **options)
        cache_.skipped(error)
        return engine
    try:
        engine = opener(entry, **options)
        return_freed_memory()
        return engine
    except Exception:
        if entry.is_dir():
            raise  # the engine's own failure
        # the entry went in between (another process's eviction)
        return open_route_engine_on_disk(bundle, route, quantization, opener=opener, **options)


def _build_entry(
    cache_: EngineCache, key: str, bundle: Bundle, route: Route, quantization: str | None
) -> Path:
    from .engines import save_route_engine

    return cache_.store(key, lambda out: save_route_engine(bundle, route, quantization, out))


def _open_checked(entry: Path, opener: Opener, options: dict[str, Any]) -> tuple[Any, int] | None:
    """The entry's engine, loaded while its files' checksums are checked in another thread (both
    read the same files, and hashing and CTranslate2's loading release the GIL: a hit costs
    the longer of the two, not their sum); None, the engine dropped unused, when the check
    fails."""
    with ThreadPoolExecutor(1, thread_name_prefix="lsmt-cache-check") as pool:
        intact = pool.submit(EngineCache.intact, entry)
        try:
            engine = opener(entry, **options)
        except Exception:
            if intact.result():
                raise  # a whole entry that does not load: the load's own failure
            return None
        return engine if intact.result() else None
