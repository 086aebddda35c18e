"""Engine kinds behind one interface: a route's dense model -> the engine that serves it.

A Transformer route becomes a CTranslate2 ``Translator`` (``lsmt_bundle.ct2``); a hybrid route
(LSTM decoder, ``architecture.decoder_kind == "lstm"``) a ``HybridTranslator``
(``lsmt_bundle.hybrid``). Both are a directory of files (so the engine cache stores either) and
both answer ``translate_batch``, so the server, the evaluation and the benchmarks call these
functions and never ask which kind a route has.
"""

from __future__ import annotations

import ctypes
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsmt_core.routes import Route

from . import ct2, hybrid
from .bundle import Bundle
from .dense import DenseModel


def engine_files(dense: DenseModel, quantization: str | None = "int8") -> dict[str, bytes]:
    """The files of the route's engine, as bytes."""
    if dense.architecture.decoder_kind == "lstm":
        return hybrid.hybrid_files(dense, quantization)
    return ct2.translator_files(dense, quantization)


def save_engine(dense: DenseModel, out_dir: str | Path, quantization: str | None = "int8") -> Path:
    """Write a ready engine directory (what :func:`open_engine` opens)."""
    if dense.architecture.decoder_kind != "lstm":
        return ct2.save_translator(dense, out_dir, quantization)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in hybrid.hybrid_files(dense, quantization).items():
        (out / name).write_bytes(data)
    return out


def save_route_engine(
    bundle: Bundle, route: Route, quantization: str | None, out_dir: str | Path
) -> Path:
    """Assemble the route and write its engine directory: in the bundle's stored int8 where the
    engine's quantization allows it (no float32 round trip: ``lsmt_bundle.ct2.INT8_AS_STORED``)."""
    keep_int8 = quantization in ct2.INT8_AS_STORED
    return save_engine(bundle.assemble(route, keep_int8=keep_int8), out_dir, quantization)


def open_engine(model: Path | dict[str, bytes], **options: Any) -> tuple[Any, int]:
    """The engine of a directory or of its files in memory, and its weights' bytes;
    ``options`` are :func:`lsmt_bundle.ct2.open_translator`'s."""
    if hybrid.is_hybrid(model):
        options.pop("name", None)
        return hybrid.open_hybrid(model, **options)
    return ct2.open_translator(model, **options)


# opener(directory, **options) -> (engine, weights' bytes): open_engine, or the server's
# pair of translators (server/express.py)
Opener = Callable[..., tuple[Any, int]]


def open_route_engine_on_disk(
    bundle: Bundle,
    route: Route,
    quantization: str | None,
    *,
    opener: Opener | None = None,
    **options: Any,
) -> tuple[Any, int]:
    """The route's engine, written to a temporary directory and opened from there (by
    ``opener``, default :func:`open_engine`). A CTranslate2 model loaded from memory keeps a
    copy of its files for as long as it lives (measured: 23.9 MiB resident for an 11.1 MiB
    engine, 12.6 MiB from a directory), so a server that holds many engines reads them from
    disk."""
    opener = opener or open_engine
    with tempfile.TemporaryDirectory(prefix="lsmt-engine-") as tmp:
        engine = opener(save_route_engine(bundle, route, quantization, tmp), **options)
    return_freed_memory()
    return engine


def return_freed_memory() -> None:
    """Give the memory an assembly freed back to the system; called after a route was built.
    glibc keeps it otherwise: once a large block is freed, its mmap threshold rises (up to 32
    MiB), so the next assembly's arrays come from the heap, and the heap keeps what they leave
    behind. Measured on the default model (engines of 11.1 MiB): 16.5 MiB resident per engine
    without, 12.7 with. Not after loading a built engine: the next load would fault the pages
    back in (a d512 engine's load, 66 -> 85 ms)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc
    except (OSError, AttributeError):
        return None


def load_engine(dense: DenseModel, compute_type: str = "int8", **options: Any) -> tuple[Any, int]:
    """The route's engine built in memory, and its weights' bytes."""
    files = engine_files(dense, ct2.saved_quantization(compute_type))
    return open_engine(files, compute_type=compute_type, **options)
