"""The module store on disk: where each file lives, how it is written, how it is checked.

    bundle/
      manifest.json                    (lsmt_core.manifest.Manifest)
      tokenizer/spm.model
      tokenizers/<lang>/spm.model      (a language with its own tokenizer, if any)
      modules/shared.safetensors
      modules/src/<lang>.safetensors   (only when some weights are source-indexed)
      modules/tgt/<lang>.safetensors   (target-indexed weights, target vocabulary ids)

Every file the manifest lists carries its size, SHA-256 and XXH3-128 (``Manifest.files``;
reads check the XXH3, or the SHA-256 where a bundle written before 2026-11-25 has no XXH3);
bundles written before checksums existed list none and are read unchecked.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import xxhash
from pydantic import ValidationError
from safetensors.numpy import save_file

from lsmt_core.manifest import FileDigest, Index, Manifest

from .dense import Weights
from .errors import BundleError

MANIFEST = "manifest.json"


def module_name(index: Index, lang: str | None = None) -> str:
    return "shared" if index == "shared" else f"{index}/{lang}"


def module_index(name: str) -> Index:
    """The index of a module name: ``shared``, ``src/de`` -> ``src``, ``tgt/fr`` -> ``tgt``."""
    # module names are written by module_name, so the part before "/" is "src" or "tgt"
    return "shared" if name == "shared" else name.split("/")[0]  # type: ignore[return-value]


def module_path(root: Path, name: str) -> Path:
    return root / "modules" / f"{name}.safetensors"


def write_bundle(
    out: Path,
    manifest: Manifest,
    modules: dict[str, Weights],
    tokenizer_model: Path,
    language_tokenizer_models: dict[str, Path] | None = None,
) -> None:
    """Write a bundle; ``modules`` maps module names (``shared``, ``src/de``...) to weights,
    ``language_tokenizer_models`` the languages of ``manifest.language_tokenizers`` to their
    SentencePiece models."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizers = {manifest.tokenizer.path: tokenizer_model}
    for lang, model in (language_tokenizer_models or {}).items():
        tokenizers[manifest.language_tokenizers[lang].path] = model
    for rel, model in tokenizers.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model, out / rel)
    for name, weights in modules.items():
        path = module_path(out, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(path))
        path.chmod(0o644)  # safetensors writes 0600: a server running as another user must read it
    written = [*tokenizers] + [
        module_path(out, name).relative_to(out).as_posix() for name in modules
    ]
    manifest.files = {rel: digest((out / rel).read_bytes()) for rel in sorted(written)}
    (out / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")


def read_manifest(root: Path) -> Manifest:
    """The bundle's validated manifest; BundleError if it is missing or invalid."""
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(f"no manifest.json in {root}")
    try:
        return Manifest.model_validate(json.loads(manifest_path.read_text()))
    except (ValueError, ValidationError) as exc:
        raise BundleError(f"invalid manifest {manifest_path}: {exc}") from exc


XXH3, SHA256 = "xxh3_128", "sha256"


def hexdigest(kind: str, data: Any) -> str:
    """``data``'s checksum (bytes or any buffer, e.g. a memory map) of ``kind``: XXH3-128,
    what reads check, or SHA-256, what bundles and cache entries written before it list."""
    if kind == XXH3:
        return xxhash.xxh3_128_hexdigest(data)
    return hashlib.sha256(data).hexdigest()


def digest(data: bytes) -> FileDigest:
    return FileDigest(
        bytes=len(data),
        sha256=hexdigest(SHA256, data),
        xxh3_128=hexdigest(XXH3, data),
    )


def check_digest(manifest: Manifest, rel: str, data: bytes) -> None:
    """Raise BundleError if ``data`` is not the file ``rel`` the manifest recorded (bundles
    without recorded digests are not checked)."""
    want = manifest.files.get(rel)
    if want is None:
        return
    if len(data) != want.bytes:
        raise BundleError(f"{rel}: {len(data)} bytes, the manifest recorded {want.bytes}")
    kind = XXH3 if want.xxh3_128 is not None else SHA256
    if hexdigest(kind, data) != (want.xxh3_128 if kind == XXH3 else want.sha256):
        raise BundleError(f"{rel}: checksum mismatch (corrupted or modified since export)")
