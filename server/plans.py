"""A request's texts prepared for decoding: each text's source language (given, or detected),
the served route it takes (into the target, or into a pivot language), its lines and its
tokenized sentences; then the sentences to decode, each with its served route.

Planning is synchronous (the service runs a large request's in a worker thread) and stops
between texts once its deadline passes or nobody waits for it any more.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from lsmt_core.routes import Route

from .batching import Hypothesis
from .bundles import ServedRoute
from .catalogue import Catalogue
from .detection import SourceDetection
from .failures import TooLarge
from .text import Line, sentences_of, split_text
from .validation import AUTO


@dataclass
class TextPlan:
    """One text, prepared: its source language (given, or detected with ``confidence``,
    ``uncertain`` when the identifier was not sure) and, unless it is already in the target
    language (``served_route`` None), its lines and tokenized sentences and the served route
    (bundle, route, engine key) that translates them: into the request's target, or into the
    ``pivot`` language where no route goes there directly (the second leg, pivot -> request's
    target, follows)."""

    source: str
    confidence: float | None
    uncertain: bool = False
    served_route: ServedRoute | None = None
    lines: list[Line] | None = None
    pieces: list[list[str]] | None = None
    pivot: str | None = None


@dataclass(frozen=True)
class Sentence:
    """One sentence to translate: its (text, sentence) index in the request, the served route
    that translates it (its engine key computed once, with the plan), its tagged source
    pieces."""

    index: tuple[int, int]
    served_route: ServedRoute
    pieces: list[str]


# The hypotheses of every translated sentence, by (text index, sentence index).
SentenceHypotheses = dict[tuple[int, int], list[Hypothesis]]


@dataclass(frozen=True)
class Planner:
    """Plans texts against the served bundles, detecting ``auto`` sources."""

    catalogue: Catalogue
    detection: SourceDetection

    def plan(
        self,
        texts: list[str],
        source: str,
        target: str,
        model: str | None,
        deadline: float | None = None,
        stop: threading.Event | None = None,
    ) -> list[TextPlan]:
        """Per text: source language (detected per text), lines, tokenized sentences. Past
        ``deadline``, or once ``stop`` is set (the client went away), it stops between texts
        with TimeoutError, so the work of an abandoned request does not go on in its thread."""
        plans = []
        for i, text in enumerate(texts):
            if (deadline is not None and time.monotonic() > deadline) or (
                stop is not None and stop.is_set()
            ):
                raise TimeoutError
            src, conf, uncertain = source, None, False
            if source == AUTO:
                # a text is named by its index only in a request of several
                where = i if len(texts) > 1 else None
                guess = self.detection.detect(text, target, model, index=where)
                src, conf, uncertain = guess.language, guess.confidence, guess.status != "served"
            if src == target:  # already in the target language
                plans.append(TextPlan(src, conf, uncertain))
                continue
            pivot = self.catalogue.pivot_for(src, target, model)
            served_route = self.catalogue.served_route(Route(src, pivot or target), model)
            lines = split_text(text, src)
            pieces = _tokenized(served_route, lines, i)
            plans.append(TextPlan(src, conf, uncertain, served_route, lines, pieces, pivot))
        return plans


def _tokenized(served_route: ServedRoute, lines: list[Line], index: int) -> list[list[str]]:
    """The tagged pieces of each sentence of text ``index``; a sentence longer than the model
    accepts is ``text_too_long``."""
    served = served_route.served
    pieces = [served.encode(s, served_route.route) for s in sentences_of(lines)]
    for j, p in enumerate(pieces):
        if len(p) > served.max_source_positions:
            raise TooLarge(
                "text_too_long",
                f"Sentence {j} of text {index} has {len(p)} tokens; the model accepts at "
                f"most {served.max_source_positions} tokens per sentence. Split it.",
                index=index,
                limit_tokens=served.max_source_positions,
            )
    return pieces


def plan_sentences(plans: list[TextPlan]) -> list[Sentence]:
    """Every sentence of the plans that has something to translate, in request order."""
    return [
        Sentence((i, j), plan.served_route, pieces)
        for i, plan in enumerate(plans)
        if plan.served_route is not None
        for j, pieces in enumerate(plan.pieces or [])
    ]
