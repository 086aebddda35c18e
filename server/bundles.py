"""A bundle as the server sees it: routes, engine keys, tokenizer, position limit.

Wraps ``lsmt_bundle.Bundle`` (duck-typed, so tests may pass a stand-in with the same
attributes: ``name``, ``path``, ``manifest.languages``, ``routes``, ``engine_key(src, tgt)``,
``tokenizer_path``, ``source_pieces(pieces, src, tgt)``, ``assemble(src, tgt)`` and
``max_source_positions``; optionally ``tokenizer_path_of(lang)`` for languages with a
tokenizer of their own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import sentencepiece as spm

from lsmt_bundle import Bundle
from lsmt_core.languages import LANGUAGE_EDITIONS, language_name
from lsmt_core.routes import Route
from lsmt_core.tags import QUALITY_TAGS, lang_tag
from lsmt_core.text import normalize_text

__all__ = ["ServedBundle", "language_name", "load_served_bundle"]


class ServedBundle:
    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.name: str = bundle.name
        self.path = Path(bundle.path)
        self.languages: list[str] = list(bundle.manifest.languages)
        self.routes: list[Route] = [Route(s, t) for s, t in bundle.routes]
        self.route_set = set(self.routes)
        # One SentencePiece model per tokenizer file: a language with its own (an added
        # language, Manifest.language_tokenizers) is written and read with it.
        paths = {lang: bundle.tokenizer_path_of(lang) for lang in self.languages}
        processors = {
            path: spm.SentencePieceProcessor(model_file=str(path))
            for path in {bundle.tokenizer_path, *paths.values()}
        }
        self._sp = processors[bundle.tokenizer_path]
        self._sp_of = {lang: processors[path] for lang, path in paths.items()}
        self.max_source_positions = bundle.max_source_positions
        self._tags = {lang_tag(lang) for lang in LANGUAGE_EDITIONS} | set(QUALITY_TAGS)
        # Engine keys are global across bundles: "<bundle>:<modules>".
        self._keys = {r: bundle.engine_key(*r) for r in self.routes}

    def engine_key(self, src: str, tgt: str) -> str:
        return self._keys[Route(src, tgt)]

    def routes_of_key(self, key: str) -> list[Route]:
        return [r for r, k in self._keys.items() if k == key]

    def route_bytes(self, route: Route) -> int:
        """Bytes of the module files the route's engine is assembled from (0 for files the
        manifest does not record)."""
        files = self.bundle.manifest.files
        rels = [f"modules/{name}.safetensors" for name in self.bundle.modules_for(*route)]
        return sum(files[rel].bytes for rel in rels if rel in files)

    @property
    def engine_keys(self) -> list[str]:
        return list(dict.fromkeys(self._keys.values()))

    def sources_for(self, tgt: str) -> list[str]:
        return [s for s, t in self.routes if t == tgt]

    def targets_for(self, src: str) -> list[str]:
        return [t for s, t in self.routes if s == src]

    def tokenizer(self, lang: str) -> spm.SentencePieceProcessor:
        """The SentencePiece model that writes ``lang``."""
        return self._sp_of.get(lang, self._sp)

    def pieces(self, sentence: str, lang: str) -> list[str]:
        """SentencePiece pieces of a sentence in ``lang``, after the corpus normalisation the
        model was trained on (NFC, spacing, CJK spaces); no tags."""
        pieces: list[str] = self.tokenizer(lang).encode(
            normalize_text(sentence, lang), out_type=str
        )
        return pieces

    def encode(self, sentence: str, src: str, tgt: str) -> list[str]:
        """The engine's source: the pieces with the route's tags."""
        return list(self.bundle.source_pieces(self.pieces(sentence, src), src, tgt))

    def untagged(self, pieces: list[str]) -> list[str]:
        """Pieces without language and quality tags."""
        return [p for p in pieces if p not in self._tags]

    def decode(self, pieces: list[str], lang: str) -> str:
        """Text in ``lang`` from its pieces. The model may emit a tag: it is dropped; byte
        pieces <0x..> stay."""
        text: str = self.tokenizer(lang).decode_pieces(self.untagged(pieces))
        return text


def load_served_bundle(path: Path) -> ServedBundle:
    """Validate and open a bundle directory; raises ``lsmt_bundle.BundleError``
    (or OSError) with a message saying what is wrong."""
    from lsmt_bundle import load_bundle

    return ServedBundle(load_bundle(Path(path)))


def open_bundle_dirs(
    paths: Iterable[Path], on_error: Callable[[Path, Exception], None]
) -> list[ServedBundle]:
    """Open each bundle directory in turn. One that cannot be opened goes to ``on_error`` with
    the exception: the app records it (readiness reports it) and goes on, ``python -m server``
    exits with the reason."""
    opened = []
    for path in paths:
        try:
            opened.append(load_served_bundle(path))
        except Exception as exc:
            on_error(Path(path), exc)
    return opened
