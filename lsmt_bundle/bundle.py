"""A bundle opened for reading: its manifest, tokenizer pieces and lazily read modules.

Numpy only: the server imports this without torch. Opening checks the manifest and the
tokenizer; each module is checked against its recorded size and checksum when it is read, so a
corrupted module fails its routes (``BundleError`` naming the file), never serves garbage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from safetensors.numpy import load

from lsmt_core.manifest import Manifest, TokenizerInfo
from lsmt_core.routes import Route
from lsmt_core.tags import tag_source

from .assembly import assemble, keeps_int8
from .dense import DenseModel, Weights
from .errors import BundleError
from .storage import decode
from .store import check_digest, module_name, module_path, read_manifest


class Bundle:
    def __init__(
        self,
        path: Path,
        manifest: Manifest,
        pieces: list[str],
        language_pieces: dict[str, list[str]] | None = None,
    ):
        self.path = path
        self.manifest = manifest
        self.name = manifest.name
        self.pieces = pieces  # the bundle tokenizer's pieces in id order: its vocabulary
        # the vocabularies of the languages with their own tokenizer
        self.language_pieces = language_pieces or {}
        self._indices = manifest.indices_used()

    kind: Final = "lsmt"  # beside ready models (lsmt_bundle.packages.ModelPackage)

    @property
    def languages(self) -> list[str]:
        return list(self.manifest.languages)

    @property
    def routes(self) -> list[Route]:
        return list(self.manifest.routes)

    @property
    def provenance(self) -> dict[str, str]:
        """What the catalogue shows of where the weights come from."""
        recorded = self.manifest.provenance
        shown = {"step": str(recorded["step"])} if "step" in recorded else {}
        if isinstance(recorded.get("best_dev_chrf"), float):
            shown["best_dev_chrf"] = f"{recorded['best_dev_chrf']:.2f}"
        return shown

    @property
    def tokenizer_path(self) -> Path:
        """The bundle's tokenizer (every language without one of its own)."""
        return self.path / self.manifest.tokenizer.path

    def tokenizer_path_of(self, lang: str) -> Path:
        """The tokenizer that writes ``lang``."""
        return self.path / self.manifest.tokenizer_of(lang).path

    def pieces_of(self, lang: str) -> list[str]:
        """``lang``'s vocabulary: its own tokenizer's pieces, else the bundle's."""
        return self.language_pieces.get(lang, self.pieces)

    @property
    def max_source_positions(self) -> int:
        return self.manifest.architecture.max_positions

    def check_route(self, route: Route) -> None:
        if route not in self.routes:
            raise BundleError(
                f"route {route.src}->{route.tgt} is not offered by bundle {self.name}"
            )

    def modules_for(self, route: Route) -> list[str]:
        """The modules a route reads, in a fixed order."""
        own = self.manifest.language_tokenizers  # their modules hold their embeddings
        decoders = self.manifest.language_decoders  # theirs, their decoders
        src, tgt = route
        names = [module_name("shared")]
        if "src" in self._indices or src in own:
            names.append(module_name("src", src))
        if "tgt" in self._indices or tgt in own or tgt in decoders:
            names.append(module_name("tgt", tgt))
        return names

    def engine_key(self, route: Route) -> str:
        """Routes with equal keys read the same modules, so they share one engine."""
        return f"{self.name}:" + "+".join(self.modules_for(route))

    def route_bytes(self, route: Route) -> int:
        """Bytes of the module files the route's engine is assembled from (0 for files the
        manifest does not record)."""
        rels = [f"modules/{name}.safetensors" for name in self.modules_for(route)]
        return sum(self.manifest.files[rel].bytes for rel in rels if rel in self.manifest.files)

    def source_pieces(self, pieces: list[str], route: Route) -> list[str]:
        return tag_source(self.manifest.tag_scheme, pieces, route.src, route.tgt)

    def read_module(self, name: str, keep_int8: bool = False) -> Weights:
        """A module's weights (float32, decoded; int8 ones kept with their scales if
        ``keep_int8``), after checking its recorded size and checksum: a corrupted module
        fails loudly instead of serving garbage."""
        path = module_path(self.path, name)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise BundleError(f"module {name} missing: {path}") from exc
        check_digest(self.manifest, path.relative_to(self.path).as_posix(), data)
        try:
            return decode(load(data), keep_int8)
        except Exception as exc:  # safetensors raises several types for corrupt files
            raise BundleError(f"module {name} unreadable ({path}): {exc}") from exc

    def check_sizes(self) -> dict[str, str]:
        """Files the manifest records that are missing or of another size: path -> problem.
        Cheap (no reading), for a server's start-up; :meth:`verify` also checks contents."""
        problems: dict[str, str] = {}
        for rel, want in self.manifest.files.items():
            path = self.path / rel
            if not path.is_file():
                problems[rel] = "missing"
            elif path.stat().st_size != want.bytes:
                problems[rel] = f"{path.stat().st_size} bytes, the manifest recorded {want.bytes}"
        return problems

    def verify(self) -> dict[str, str]:
        """Every file the manifest records, checked: path -> "ok" or what is wrong."""
        return {rel: self.verify_file(rel) for rel in self.manifest.files}

    def verify_file(self, rel: str) -> str:
        """One recorded file against its size and checksum: "ok" or what is wrong."""
        try:
            check_digest(self.manifest, rel, (self.path / rel).read_bytes())
        except FileNotFoundError:
            return "missing"
        except BundleError as exc:
            return str(exc).split(": ", 1)[1]
        return "ok"

    def assemble(self, route: Route, keep_int8: bool = False) -> DenseModel:
        """Dense weights for one route: read its modules, select, apply fusions
        (:func:`lsmt_bundle.assembly.assemble`). float32, unless ``keep_int8`` and the
        route can keep the bundle's int8 weights as they are (:func:`keeps_int8`): an int8
        engine is then built without a float32 round trip."""
        self.check_route(route)
        keep = keep_int8 and keeps_int8(self.manifest)
        names = self.modules_for(route)
        modules = {name: self.read_module(name, keep) for name in names}
        return assemble(
            self.manifest, modules, self.pieces_of(route.src), self.pieces_of(route.tgt)
        )


def read_pieces(model_path: Path) -> list[str]:
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=str(model_path))
    except (OSError, RuntimeError) as exc:
        raise BundleError(f"tokenizer unreadable: {model_path}: {exc}") from exc
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def load_bundle(path: str | Path) -> Bundle:
    """Read and validate a bundle's manifest and tokenizers; modules are read lazily."""
    root = Path(path)
    manifest = read_manifest(root)
    pieces = _read_tokenizer(root, manifest, manifest.tokenizer)
    language_pieces = {
        lang: _read_tokenizer(root, manifest, info)
        for lang, info in manifest.language_tokenizers.items()
    }
    return Bundle(root, manifest, pieces, language_pieces)


def _read_tokenizer(root: Path, manifest: Manifest, info: TokenizerInfo) -> list[str]:
    """A tokenizer's pieces, after checking its digest and its recorded size."""
    model = root / info.path
    if model.is_file():
        check_digest(manifest, info.path, model.read_bytes())
    pieces = read_pieces(model)
    if len(pieces) != info.vocab_size:
        raise BundleError(
            f"tokenizer {info.path} has {len(pieces)} pieces, manifest says {info.vocab_size}"
        )
    return pieces
