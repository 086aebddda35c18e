"""A translated text as the service returns it (``TextResult``), and how a request's decoded
sentences are rejoined into them.

A text's best translation and each alternative are its sentences' hypotheses detokenized and
put back into its lines (a sentence with fewer hypotheses repeats its best); its score is the
mean of its sentences'. A text translated into its pivot language is a first leg: ``pivot``
and ``pivot_engine`` set, ``engine`` None; ``second_leg`` merges the leg that follows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from . import timing
from .batching import Hypothesis
from .bundles import ServedRoute
from .metrics import Metrics
from .output_checks import Flag, ordered
from .plans import SentenceHypotheses, TextPlan
from .text import Line, join_text


@dataclass
class Alternative:
    text: str
    score: float


@dataclass
class TextResult:
    text: str
    source: str
    detected_confidence: float | None = None  # set when the source was detected
    score: float | None = None
    alternatives: list[Alternative] = field(default_factory=list)
    engine: str | None = None  # None: nothing to translate (text already in the target)
    warnings: list[Flag] = field(default_factory=list)  # server.output_checks.FLAGS
    pivot: str | None = None  # the language it went through (no direct route)
    pivot_engine: str | None = None  # the first leg's engine, into ``pivot``
    model: str | None = None  # the bundle of ``engine``
    pivot_model: str | None = None  # the bundle of ``pivot_engine``


def join_results(
    texts: list[str],
    plans: list[TextPlan],
    hypotheses: SentenceHypotheses,
    flags: dict[tuple[int, int], set[Flag]],
    num_alternatives: int,
    metrics: Metrics,
) -> list[TextResult]:
    """Every text's result (module doc). A text's warnings are its sentences' flags and
    ``uncertain_language`` from detection. Timed as the request's ``detokenize`` stage."""
    t1 = time.perf_counter()
    out: list[TextResult] = []
    for i, plan in enumerate(plans):
        text_flags: set[Flag] = {"uncertain_language"} if plan.uncertain else set()
        if plan.uncertain:
            metrics.output_flags.labels("uncertain_language").inc()
        served_route, lines = plan.served_route, plan.lines
        if served_route is None or lines is None or plan.pieces is None:
            out.append(
                TextResult(texts[i], plan.source, plan.confidence, warnings=ordered(text_flags))
            )
            continue
        count = len(plan.pieces)
        for j in range(count):
            text_flags |= flags.get((i, j), set())
        per_sentence = [hypotheses[(i, j)] for j in range(count)]
        result = _translated(plan, served_route, lines, per_sentence, num_alternatives)
        result.warnings = ordered(text_flags)
        if plan.pivot is not None:
            metrics.pivoted_sentences.labels(plan.pivot).inc(count)
        out.append(result)
    seconds = time.perf_counter() - t1
    timing.record("detokenize", seconds)
    metrics.stage_latency.labels("detokenize").observe(seconds)
    return out


def _translated(
    plan: TextPlan,
    served_route: ServedRoute,
    lines: list[Line],
    per_sentence: list[list[Hypothesis]],
    num_alternatives: int,
) -> TextResult:
    """The result of one translated text: its best variant and the alternatives."""
    served, target = served_route.served, served_route.route.tgt
    variants = []
    for k in range(num_alternatives + 1):
        sents, scores = [], []
        for hyps in per_sentence:
            h = hyps[k] if k < len(hyps) else hyps[0]
            sents.append(served.decode(h.pieces, target))
            scores.append(h.score)
        variants.append((join_text(lines, sents, target), sum(scores) / max(len(scores), 1)))
    best, score = variants[0]
    alternatives = [Alternative(t, s) for t, s in variants[1:]]
    engine = served_route.engine_key
    if plan.pivot is not None:  # a first leg, into the pivot language
        return TextResult(
            best, plan.source, plan.confidence, score, alternatives,
            pivot=plan.pivot, pivot_engine=engine, pivot_model=served.name,
        )  # fmt: skip
    return TextResult(
        best, plan.source, plan.confidence, score, alternatives, engine, model=served.name
    )


def second_leg(first: TextResult, second: TextResult) -> TextResult:
    """The result of a text that went through ``first.pivot``: the second leg's translation,
    with the first leg's source, detection and engine, and both legs' warnings."""
    return replace(
        second,
        source=first.source,
        detected_confidence=first.detected_confidence,
        warnings=ordered(set(first.warnings) | set(second.warnings)),
        pivot=first.pivot,
        pivot_engine=first.pivot_engine,
        pivot_model=first.pivot_model,
    )
