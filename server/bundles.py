"""A bundle as the server sees it: routes, engine keys, tokenizer, position limit.

Wraps an LSMT bundle (``lsmt_bundle.Bundle``) or a ready model (an Argos package or a
CTranslate2 model folder, ``lsmt_bundle.packages.ModelPackage``): both answer the same
questions, so the rest of the server serves their routes alike. Each route's engine key is
computed once, when the bundle is opened; a :class:`ServedRoute` carries it from the sentence
to the batcher and the engine registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from lsmt_bundle.packages import ModelKind, ServedModel, is_model_source, open_model_packages
from lsmt_core.languages import LANGUAGE_EDITIONS, language_name
from lsmt_core.routes import Route
from lsmt_core.tags import QUALITY_TAGS, lang_tag
from lsmt_core.text import normalize_text

__all__ = ["ServedBundle", "ServedRoute", "language_name", "load_served_bundle"]


class ServedBundle:
    def __init__(self, bundle: ServedModel) -> None:
        self.bundle = bundle
        self.name: str = bundle.name
        self.kind: ModelKind = bundle.kind
        self.path = Path(bundle.path)
        self.languages: list[str] = list(bundle.languages)
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
        self._served_routes = {r: ServedRoute(self, r, bundle.engine_key(r)) for r in self.routes}

    def served_route(self, route: Route) -> ServedRoute:
        """The route with its engine key (KeyError: a route the bundle does not offer)."""
        return self._served_routes[route]

    def routes_of_key(self, key: str) -> list[Route]:
        return [r for r, s in self._served_routes.items() if s.engine_key == key]

    def route_bytes(self, route: Route) -> int:
        """Bytes on disk of what the route's engine is made from: a bundle's module files,
        a ready model's model.bin."""
        return self.bundle.route_bytes(route)

    @property
    def engine_keys(self) -> list[str]:
        return list(dict.fromkeys(s.engine_key for s in self._served_routes.values()))

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

    def encode(self, sentence: str, route: Route) -> list[str]:
        """The engine's source: the pieces with the route's tags."""
        return list(self.bundle.source_pieces(self.pieces(sentence, route.src), route))

    def untagged(self, pieces: list[str]) -> list[str]:
        """Pieces without language and quality tags."""
        return [p for p in pieces if p not in self._tags]

    def decode(self, pieces: list[str], lang: str) -> str:
        """Text in ``lang`` from its pieces. The model may emit a tag: it is dropped; byte
        pieces <0x..> stay."""
        text: str = self.tokenizer(lang).decode_pieces(self.untagged(pieces))
        return text


@dataclass(frozen=True)
class ServedRoute:
    """A route of a served bundle and the key of the engine that translates it: what a
    sentence is decoded by, from the plan to the batcher and the engine registry."""

    served: ServedBundle
    route: Route
    engine_key: str


def load_served_bundle(path: Path) -> ServedBundle:
    """Validate and open a bundle directory; raises ``lsmt_bundle.BundleError``
    (or OSError) with a message saying what is wrong."""
    from lsmt_bundle import load_bundle

    return ServedBundle(load_bundle(Path(path)))


def open_bundle_dirs(
    paths: Iterable[Path],
    on_error: Callable[[Path, Exception], None],
    on_disabled: Callable[[Path, Exception], None],
) -> list[ServedBundle]:
    """Open each bundle directory in turn, in order (the first that offers a route serves it
    when a request names no model). One that cannot be opened goes to ``on_error`` with the
    exception: the app records it (readiness reports it) and goes on, ``python -m server``
    exits with the reason. A path of ready models (Argos packages, CTranslate2 model folders:
    ``lsmt_bundle.packages``) serves each model that opens; one that does not goes to
    ``on_disabled``: only its route is missing. A model named like one already served is
    disabled too (names are engine keys' prefixes and what requests pin)."""
    opened: list[ServedBundle] = []
    for path in map(Path, paths):
        try:
            if is_model_source(path):
                models = open_model_packages(path, on_disabled)
                if not models:
                    raise ValueError(f"{path} holds no Argos package or model folder that opens")
                fresh = [ServedBundle(m) for m in models]
            else:
                fresh = [load_served_bundle(path)]
        except Exception as exc:
            on_error(path, exc)
            continue
        for served in fresh:
            if any(b.name == served.name for b in opened):
                on_disabled(served.path, ValueError(f"a model named {served.name!r} is served"))
            else:
                opened.append(served)
    return opened
