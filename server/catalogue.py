"""What the served bundles offer: languages, routes, pivots, and the bundle a route takes.

- A pair is translated directly by the first bundle (in the served order) with its route, or,
  with ``pivot`` on in the settings, through a pivot language (English first, then any other
  served language) whose two legs each have a route in some bundle.
- ``model`` names one bundle; None means every bundle. An unknown name is ``unknown_model``.
- The bundle list is the app state's own list, read on every call: a reload
  (``server.reload``) is seen at once.

Refusals are the kinds of ``server.failures``; ``server.routes.catalogue`` answers
``/v1/languages`` from here.
"""

from __future__ import annotations

from lsmt_core.routes import Route, route_key

from .bundles import ServedBundle, ServedRoute
from .failures import InvalidRequest
from .settings import Settings
from .validation import AUTO

PIVOT_FIRST = "en"  # the pivot tried first: most models translate into and out of English


class Catalogue:
    def __init__(self, bundles: list[ServedBundle], settings: Settings) -> None:
        self.bundles = bundles
        self.settings = settings

    @property
    def languages(self) -> list[str]:
        return sorted({lang for b in self.bundles for lang in b.languages})

    @property
    def routes(self) -> list[Route]:
        return sorted({r for b in self.bundles for r in b.routes})

    def targets_for(self, src: str) -> list[str]:
        """Targets ``src`` translates into: directly, or through a pivot language."""
        direct = {t for b in self.bundles for t in b.targets_for(src)}
        return sorted(direct | set(self.pivot_targets(src)))

    def pivot_targets(self, src: str, model: str | None = None) -> dict[str, str]:
        """Target -> pivot language, for the targets ``src`` reaches only through a pivot."""
        out = {}
        for tgt in self.served_languages(model):
            pivot = self.pivot_for(src, tgt, model)
            if pivot is not None:
                out[tgt] = pivot
        return out

    def pivot_for(self, src: str, tgt: str, model: str | None = None) -> str | None:
        """The language a ``src`` -> ``tgt`` text is translated through when no bundle
        translates the pair directly: English first, then any other served language, the
        first with both routes (each leg in any bundle); None when there is a direct route,
        no such language, or ``pivot`` is off in the settings."""
        if not self.settings.pivot or src == tgt or self._has_route(src, tgt, model):
            return None
        order = dict.fromkeys([PIVOT_FIRST, *self.served_languages(model)])
        via = [
            p for p in order if self._has_route(src, p, model) and self._has_route(p, tgt, model)
        ]
        return via[0] if via else None

    def sources_into(self, target: str, model: str | None) -> set[str]:
        """Sources with a way into ``target``: a direct route or a pivot."""
        direct = {s for b in self.candidates(model) for s, t in b.routes if t == target}
        pivoted = {s for s in self.served_languages(model) if self.pivot_for(s, target, model)}
        return direct | pivoted

    def served_languages(self, model: str | None) -> list[str]:
        """The languages of ``model`` (None: of every bundle)."""
        return sorted({lang for b in self.candidates(model) for lang in b.languages})

    def bundle_for(self, route: Route, model: str | None) -> ServedBundle:
        for b in self.candidates(model):
            if route in b.route_set:
                return b
        raise self.unsupported_route(route.src, route.tgt, model)

    def served_route(self, route: Route, model: str | None) -> ServedRoute:
        return self.bundle_for(route, model).served_route(route)

    def candidates(self, model: str | None) -> list[ServedBundle]:
        """The bundles a request for ``model`` may use."""
        if model is None:
            return self.bundles
        named = [b for b in self.bundles if b.name == model]
        if not named:
            raise InvalidRequest(
                "unknown_model",
                f"Unknown model {model!r}.",
                allowed=[b.name for b in self.bundles],
            )
        return named

    def _has_route(self, src: str, tgt: str, model: str | None) -> bool:
        return any((src, tgt) in b.route_set for b in self.candidates(model))

    def validate_languages(self, source: str, target: str, model: str | None) -> None:
        """Both languages served by ``model``, and a way from ``source`` (or, for ``auto``,
        from some source) into ``target``."""
        langs = self.served_languages(model)
        if target not in langs:
            raise InvalidRequest(
                "unknown_language",
                f"Unknown target language {target!r}. Allowed: {', '.join(langs)}.",
                parameter="target",
                allowed=langs,
            )
        if source != AUTO and source not in langs:
            raise InvalidRequest(
                "unknown_language",
                f"Unknown source language {source!r}. Allowed: auto, {', '.join(langs)}.",
                parameter="source",
                allowed=[AUTO, *langs],
            )
        if source == AUTO:
            if not self.sources_into(target, model):
                raise self.unsupported_route(AUTO, target, model)
        elif self.pivot_for(source, target, model) is None:
            self.bundle_for(Route(source, target), model)

    def unsupported_route(
        self, src: str, tgt: str, model: str | None, lead: str = "", **extra: object
    ) -> InvalidRequest:
        """``unsupported_route``; ``lead`` goes before the message, ``extra`` into the body."""
        routes = sorted({r for b in self.candidates(model) for r in b.routes})
        sources = sorted({s for s, t in routes if t == tgt})
        if src == tgt:
            msg = f"Source and target are both {src!r}; nothing to translate."
        elif sources:
            msg = (
                f"No model translates {src}->{tgt}. Sources available for target {tgt!r}: "
                f"{', '.join(sources)}."
            )
        else:
            msg = f"No model translates into {tgt!r}."
        allowed = [route_key(r) for r in routes]  # after ``extra``: the body's order
        return InvalidRequest(
            "unsupported_route", lead + msg, retry_after=None, **extra, allowed=allowed
        )
