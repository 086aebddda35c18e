"""Ready translation models served as routes beside LSMT bundles: Argos Translate packages (what
LibreTranslate serves) and plain CTranslate2 model folders.

Each model is one route, served as a one-module bundle (:class:`ModelPackage` answers what the
server asks of a :class:`lsmt_bundle.Bundle`): nothing is assembled, the engine is the model
folder itself, opened when the route is first asked for and dropped under the same byte budget.

What is read, as argostranslate reads it (``argostranslate.package.Package``):

- an Argos package: a folder with ``metadata.json`` (``from_code``, ``to_code``, ``type``),
  ``model/`` (a CTranslate2 model) and ``sentencepiece.model``; or its ``.argosmodel`` zip,
  unpacked into a temporary folder for the life of the process. ``stanza``/``spacy`` folders
  are not used: the server splits sentences itself. A ``target_prefix`` or a ``bpe.model``
  tokenizer is refused with that reason.
- a CTranslate2 model folder (``model.bin``, e.g. from ``ct2-transformers-converter``) with a
  description of its pair, ``lsmt-model.json``: ``{"source": "en", "target": "de",
  "source_tokenizer": "source.spm", "target_tokenizer": "target.spm"}`` (the target tokenizer
  defaults to the source's; optional ``description``, ``license``, ``version``).

Integrity: every file the engine reads is hashed (XXH3-128) when the package is first opened,
and checked again whenever its engine is opened; a file changed or gone since fails that route
with the file's name (``BundleError``), never the server.
"""

from __future__ import annotations

import json
import mmap
import re
import struct
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lsmt_core.routes import Route

from .bundle import Bundle
from .errors import BundleError
from .store import XXH3, hexdigest

ARGOS_METADATA = "metadata.json"
MODEL_DESCRIPTION = "lsmt-model.json"
ARGOS_SUFFIX = ".argosmodel"
# A CTranslate2 model without a position table (sinusoidal positions computed at run time):
# CTranslate2's own default bound on a source (``max_input_length``).
UNBOUNDED_POSITIONS = 1024
MAX_UNPACKED_BYTES = 8 << 30  # a package zip that claims more is refused (zip bomb)
# opener(model_dir, **options) -> (engine, weights' bytes), as lsmt_bundle.engines.Opener
Opener = Callable[..., tuple[Any, int]]
# What a served model is: an LSMT bundle, an Argos package, a CTranslate2 model folder.
ModelKind = Literal["lsmt", "argos", "ctranslate2"]
_LANGUAGE = re.compile(r"^[a-z]{2,3}([_-][A-Za-z0-9]{2,8})*$")


@dataclass
class ModelPackage:
    """One ready model: a route ``source -> target`` and the files its engine is opened from."""

    name: str
    path: Path  # the package's folder (unpacked)
    kind: ModelKind  # "argos" or "ctranslate2"
    source: str
    target: str
    model_dir: Path
    source_tokenizer: Path
    target_tokenizer: Path
    max_source_positions: int
    source_extra_tokens: int  # tokens the model's config adds to a source itself (bos/eos)
    provenance: dict[str, str]
    digests: dict[str, str] = field(default_factory=dict)  # model file -> XXH3, when opened
    sizes: dict[str, int] = field(default_factory=dict)
    unpacked: tempfile.TemporaryDirectory[str] | None = None  # kept alive with the package

    # What the server asks of a bundle ----------------------------------------------------

    @property
    def languages(self) -> list[str]:
        return [self.source, self.target]

    @property
    def routes(self) -> list[Route]:
        return [Route(self.source, self.target)]

    @property
    def tokenizer_path(self) -> Path:
        return self.source_tokenizer

    def tokenizer_path_of(self, lang: str) -> Path:
        return self.target_tokenizer if lang == self.target else self.source_tokenizer

    def check_route(self, route: Route) -> None:
        if route != Route(self.source, self.target):
            raise BundleError(f"route {route.src}->{route.tgt} is not offered by model {self.name}")

    def engine_key(self, route: Route) -> str:
        self.check_route(route)
        return f"{self.name}:model"

    def source_pieces(self, pieces: list[str], route: Route) -> list[str]:
        """A package's source is its pieces as they are (argostranslate's contract): tags, if
        any, are the model config's business (``add_source_bos``)."""
        return list(pieces)

    def route_bytes(self, route: Route) -> int:
        return self.sizes.get("model.bin", 0)

    def check_sizes(self) -> dict[str, str]:
        """Model files missing or of another size than when first opened: file -> problem."""
        problems = {}
        for rel, size in self.sizes.items():
            path = self.model_dir / rel
            if not path.is_file():
                problems[f"model/{rel}"] = "missing"
            elif path.stat().st_size != size:
                problems[f"model/{rel}"] = f"{path.stat().st_size} bytes, {size} when opened"
        return problems

    def check_files(self) -> None:
        """Raise BundleError naming the first model file changed or gone since opened."""
        for rel, want in self.digests.items():
            try:
                got = _file_digest(self.model_dir / rel)
            except FileNotFoundError as exc:
                raise BundleError(f"model {self.name}: model/{rel} missing") from exc
            if got != want:
                raise BundleError(
                    f"model {self.name}: model/{rel} changed since the server opened it "
                    "(checksum mismatch)"
                )

    def open_engine(
        self, opener: Callable[..., tuple[Any, int]], **options: Any
    ) -> tuple[Any, int]:
        """The route's engine, opened by ``opener(model_dir, **options)`` after checking the
        model's files against their digests."""
        self.check_files()
        return opener(self.model_dir, **options)


def is_model_source(path: Path) -> bool:
    """Whether ``path`` holds ready models rather than an LSMT bundle: a package or model
    folder, an ``.argosmodel`` file, or a folder of them (no bundle ``manifest.json``)."""
    if path.is_file():
        return path.suffix == ARGOS_SUFFIX
    if not path.is_dir() or (path / "manifest.json").is_file():
        return False
    return _is_one_model(path) or any(_is_one_model(p) or _is_zip(p) for p in path.iterdir())


def open_model_packages(
    path: Path, on_error: Callable[[Path, Exception], None]
) -> list[ModelPackage]:
    """Every model under ``path`` (one package, one zip, or a folder of them, sorted by name);
    one that cannot be opened goes to ``on_error`` and the rest are opened all the same."""
    if _is_one_model(path) or _is_zip(path):
        candidates = [path]
    else:
        candidates = sorted(p for p in path.iterdir() if _is_one_model(p) or _is_zip(p))
    opened = []
    for candidate in candidates:
        try:
            package = open_model_package(candidate)
        except (BundleError, OSError, ValueError, zipfile.BadZipFile) as exc:
            on_error(candidate, exc)
            continue
        if package is not None:
            opened.append(package)
    return opened


def open_model_package(path: Path) -> ModelPackage | None:
    """One package or model folder (or ``.argosmodel`` file); None for an Argos package that
    is not a translation model (e.g. the old sentence-boundary ``sbd`` packages)."""
    unpacked = None
    if _is_zip(path):
        unpacked = tempfile.TemporaryDirectory(prefix="lsmt-argos-")
        path = _unpack(path, Path(unpacked.name))
    argos = (path / ARGOS_METADATA).is_file()
    package = _argos_package(path) if argos else _described_model(path)
    if package is not None:
        package.unpacked = unpacked
        package.sizes, package.digests = _record(package.model_dir)
    return package


def _argos_package(path: Path) -> ModelPackage | None:
    meta = _read_json(path / ARGOS_METADATA)
    if meta.get("type", "translate") != "translate":
        return None
    if meta.get("target_prefix"):
        raise BundleError(
            f"{ARGOS_METADATA}: target_prefix {meta['target_prefix']!r} packages are not served"
        )
    tokenizer = path / "sentencepiece.model"
    if not tokenizer.is_file():
        other = " (a bpe.model: only SentencePiece packages are served)"
        raise BundleError(
            "sentencepiece.model missing" + (other if (path / "bpe.model").is_file() else "")
        )
    src, tgt = _language(meta, "from_code"), _language(meta, "to_code")
    provenance = {
        k: str(meta[k])
        for k in ("package_version", "argos_version", "license", "from_name", "to_name")
        if meta.get(k)
    }
    return _package(path, "argos", src, tgt, path / "model", tokenizer, tokenizer, provenance)


def _described_model(path: Path) -> ModelPackage:
    meta = _read_json(path / MODEL_DESCRIPTION)
    src, tgt = _language(meta, "source"), _language(meta, "target")
    source_tokenizer = path / str(meta.get("source_tokenizer", ""))
    target_tokenizer = path / str(meta.get("target_tokenizer", meta.get("source_tokenizer", "")))
    for key, tokenizer in (("source", source_tokenizer), ("target", target_tokenizer)):
        if not tokenizer.is_file() or tokenizer == path:
            raise BundleError(
                f"{MODEL_DESCRIPTION}: {key}_tokenizer must name a SentencePiece model in the "
                f"folder (got {tokenizer.name!r})"
            )
    provenance = {k: str(meta[k]) for k in ("description", "license", "version") if meta.get(k)}
    return _package(path, "ctranslate2", src, tgt, path, source_tokenizer, target_tokenizer,
                    provenance)  # fmt: skip


def _package(
    path: Path,
    kind: ModelKind,
    src: str,
    tgt: str,
    model_dir: Path,
    source_tokenizer: Path,
    target_tokenizer: Path,
    provenance: dict[str, str],
) -> ModelPackage:
    if src == tgt:
        raise BundleError(f"source and target are both {src!r}")
    for name in ("model.bin", "config.json"):
        if not (model_dir / name).is_file():
            raise BundleError(f"{(model_dir / name).relative_to(path)} missing")
    config = _read_json(model_dir / "config.json")
    extra = int(bool(config.get("add_source_bos"))) + int(bool(config.get("add_source_eos")))
    return ModelPackage(
        name=path.name,
        path=path,
        kind=kind,
        source=src,
        target=tgt,
        model_dir=model_dir,
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        max_source_positions=position_rows(model_dir / "model.bin") - extra,
        source_extra_tokens=extra,
        provenance=provenance,
    )


def position_rows(model_bin: Path) -> int:
    """The rows of a CTranslate2 model's position tables (the fewest of encoder's and
    decoder's): the longest sequence it can take. Read from ``model.bin``'s variable index
    (``ctranslate2.specs.model_spec.ModelSpec._serialize``: version, spec name, revision, then
    per variable its name, shape, type and byte count); :data:`UNBOUNDED_POSITIONS` when it
    has none, or a format this reader does not know."""
    rows = []
    with model_bin.open("rb") as f:
        (version,) = struct.unpack("<I", f.read(4))
        if version < 5:
            return UNBOUNDED_POSITIONS
        _read_string(f)
        _revision, count = struct.unpack("<II", f.read(8))
        for _ in range(count):
            name = _read_string(f)
            (rank,) = struct.unpack("<B", f.read(1))
            shape = struct.unpack(f"<{rank}I", f.read(4 * rank))
            _dtype, nbytes = struct.unpack("<BI", f.read(5))
            if name.endswith("position_encodings/encodings") and rank == 2:
                rows.append(shape[0])
            f.seek(nbytes, 1)
    return min(rows) if rows else UNBOUNDED_POSITIONS


def _read_string(f: Any) -> str:
    (length,) = struct.unpack("<H", f.read(2))
    return str(f.read(length)[:-1].decode("utf-8"))  # null-terminated


def _record(model_dir: Path) -> tuple[dict[str, int], dict[str, str]]:
    """Sizes and digests of the model folder's files (what CTranslate2 reads)."""
    files = sorted(p for p in model_dir.iterdir() if p.is_file())
    return (
        {p.name: p.stat().st_size for p in files},
        {p.name: _file_digest(p) for p in files},
    )


def _file_digest(path: Path) -> str:
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return hexdigest(XXH3, b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return hexdigest(XXH3, data)


def _language(meta: dict[str, Any], key: str) -> str:
    code = meta.get(key)
    if not isinstance(code, str) or not _LANGUAGE.match(code):
        raise BundleError(f"{key} must be a language code such as 'en' or 'pt_BR' (got {code!r})")
    return code


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BundleError(f"{path.name} missing") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BundleError(f"{path.name} must hold a JSON object")
    return data


def _is_one_model(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in (ARGOS_METADATA, MODEL_DESCRIPTION))


def _is_zip(path: Path) -> bool:
    return path.is_file() and path.suffix == ARGOS_SUFFIX


def _unpack(archive: Path, into: Path) -> Path:
    """Unpack an ``.argosmodel`` (a zip of one folder) and return that folder. zipfile drops
    absolute paths and ``..`` from member names; the uncompressed total is bounded."""
    with zipfile.ZipFile(archive) as zf:
        members = zf.infolist()
        if sum(m.file_size for m in members) > MAX_UNPACKED_BYTES:
            raise BundleError(f"{archive.name}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        tops = {m.filename.split("/", 1)[0] for m in members}
        if len(tops) != 1:
            raise BundleError(f"{archive.name}: an Argos package is a zip of one folder")
        zf.extractall(into)
    return into / tops.pop()


# What the server serves routes from: an LSMT bundle, or a ready model.
ServedModel = Bundle | ModelPackage
