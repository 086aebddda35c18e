"""Translation service: validation, detection, preparation, decoding, rejoining.

Decoding goes through ``server.decoders`` (this process's engines, or the cluster's). Used by
``/v1/translate``, the LibreTranslate endpoints and the warm-up. It fails with the
kinds of ``server.failures`` (no HTTP status here: ``server.errors`` maps them).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field, replace

from lsmt_core.langid import LanguageDetector, SourceGuess
from lsmt_core.routes import Route, route_key

from . import timing
from .batching import DecodeOptions, Hypothesis, QueueFull, ShuttingDown
from .bundles import ServedBundle, ServedRoute, language_name
from .decoders import Decoders, decode_all
from .engine_slots import EngineUnavailable
from .failures import Busy, InvalidRequest, TimedOut, TooLarge, Unavailable, shutting_down
from .metrics import Metrics
from .output_checks import RETRY, Flag, ordered, sentence_flags
from .settings import Settings
from .text import Line, join_text, sentences_of, split_text
from .validation import Options, validate_options, validate_texts

AUTO = "auto"
PIVOT_FIRST = "en"  # the pivot tried first: most models translate into and out of English
INLINE_PREP_CHARS = 2000  # larger requests are prepared in a worker thread
# and the outputs of more sentences than this are checked in one (0.1-0.3 ms a sentence): a
# document's 64 sentences checked on the event loop held it for 10-20 ms, which the short
# requests beside it waited (issue 27)
INLINE_CHECK_SENTENCES = 8


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


# The hypotheses of every translated sentence, by (text index, sentence index).
SentenceHypotheses = dict[tuple[int, int], list[Hypothesis]]


@dataclass(frozen=True)
class Call:
    """What every text of one translate call shares."""

    target: str
    opts: Options
    model: str | None
    deadline: float
    client: str


@dataclass(frozen=True)
class Sentence:
    """One sentence to translate: its (text, sentence) index in the request, the served route
    that translates it (its engine key computed once, with the plan), its tagged source
    pieces."""

    index: tuple[int, int]
    served_route: ServedRoute
    pieces: list[str]


class TranslationService:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        bundles: list[ServedBundle],
        decoders: Decoders,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.bundles = bundles
        self.decoders = decoders
        self._detector: LanguageDetector | None = None
        self._detector_lock = threading.Lock()  # loaded once, whichever thread asks first

    # Catalogue ---------------------------------------------------------------------------

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
        for tgt in self._languages(model):
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
        order = dict.fromkeys([PIVOT_FIRST, *self._languages(model)])
        via = [
            p for p in order if self._has_route(src, p, model) and self._has_route(p, tgt, model)
        ]
        return via[0] if via else None

    def _has_route(self, src: str, tgt: str, model: str | None) -> bool:
        return any((src, tgt) in b.route_set for b in self._candidates(model))

    def _languages(self, model: str | None) -> list[str]:
        return sorted({lang for b in self._candidates(model) for lang in b.languages})

    def _sources_into(self, target: str, model: str | None) -> set[str]:
        """Sources with a way into ``target``: a direct route or a pivot."""
        direct = {s for b in self._candidates(model) for s, t in b.routes if t == target}
        pivoted = {s for s in self._languages(model) if self.pivot_for(s, target, model)}
        return direct | pivoted

    def sources_for(self, tgt: str) -> list[str]:
        return sorted({s for b in self.bundles for s in b.sources_for(tgt)})

    @property
    def detector(self) -> LanguageDetector:
        if self._detector is None:
            with self._detector_lock:
                if self._detector is None:
                    self._detector = LanguageDetector()
        return self._detector

    def bundle_for(self, route: Route, model: str | None) -> ServedBundle:
        for b in self._candidates(model):
            if route in b.route_set:
                return b
        raise self._unsupported_route(route.src, route.tgt, model)

    def _served_route(self, route: Route, model: str | None) -> ServedRoute:
        return self.bundle_for(route, model).served_route(route)

    def _candidates(self, model: str | None) -> list[ServedBundle]:
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

    def _unsupported_route(
        self, src: str, tgt: str, model: str | None, lead: str = "", **extra: object
    ) -> InvalidRequest:
        """``unsupported_route``; ``lead`` goes before the message, ``extra`` into the body."""
        routes = sorted({r for b in self._candidates(model) for r in b.routes})
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

    # Validation --------------------------------------------------------------------------

    def validate_options(
        self, beam_size: int | None, num_alternatives: int | None, max_length: int | None
    ) -> Options:
        return validate_options(self.settings, beam_size, num_alternatives, max_length)

    def validate_texts(self, texts: list[str], *, limit_count: bool = True) -> None:
        validate_texts(self.settings, texts, limit_count=limit_count)

    def validate_languages(self, source: str, target: str, model: str | None) -> None:
        langs = sorted({lang for b in self._candidates(model) for lang in b.languages})
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
            if not self._sources_into(target, model):
                raise self._unsupported_route(AUTO, target, model)
        elif self.pivot_for(source, target, model) is None:
            self.bundle_for(Route(source, target), model)

    # Detection -----------------------------------------------------------------------------

    def detect(
        self, text: str, target: str, model: str | None, index: int | None = None
    ) -> SourceGuess:
        """The source language of ``text`` for ``target`` (``auto``), decided by
        ``LanguageDetector.guess_source`` over every language the identifier knows. A text
        in a language with no route into ``target`` is refused: ``unsupported_language`` when
        nothing here serves that language, ``unsupported_route`` when something does but not
        into ``target``. ``index``: the text's place in the request, named in the error."""
        candidates = self._sources_into(target, model)
        candidates.add(target)
        try:
            guess = self.detector.guess_source(text, candidates)
        except ValueError:
            raise InvalidRequest(
                "detection_unavailable",
                "The source language cannot be detected for this target; name it.",
                allowed=sorted(candidates - {target}),
            ) from None
        if guess.status != "unsupported":
            return guess
        detected = {"language": guess.language, "confidence": round(guess.confidence, 4)}
        where = {} if index is None else {"index": index}
        looks = (
            f"{'The text' if index is None else f'Text {index}'} looks like "
            f"{language_name(guess.language)} ({guess.language}, confidence "
            f"{guess.confidence:.2f})"
        )
        served = sorted({lang for b in self._candidates(model) for lang in b.languages})
        if guess.language in served:
            raise self._unsupported_route(
                guess.language, target, model, lead=f"{looks}. ", **where, detected=detected
            )
        raise InvalidRequest(
            "unsupported_language",
            f"{looks}, which this server does not translate. Languages served: "
            f"{', '.join(served)}; if the text is in one of them, name it as the source.",
            parameter="source",
            **where,
            detected=detected,
            allowed=served,
        )

    def detect_any(self, text: str, top: int = 3) -> list[tuple[str, float]]:
        """The identifier's most likely languages over every language it knows (served or
        not), with their probabilities: what ``/detect`` reports."""
        return self.detector.rank(text)[:top]

    # Translation -----------------------------------------------------------------------------

    async def translate(
        self,
        texts: list[str],
        source: str,
        target: str,
        opts: Options,
        model: str | None = None,
        *,
        limit_count: bool = True,
        deadline: float | None = None,
        client: str = "",
    ) -> list[TextResult]:
        """Validate, prepare every text (detect, split, tokenize), decode every sentence in
        one job per engine, and join the translated sentences back into texts. ``client``
        (``server.auth.Caller.subject``) is who the batchers share the engines fairly
        between."""
        self.validate_texts(texts, limit_count=limit_count)
        self.validate_languages(source, target, model)
        if deadline is None:
            deadline = time.monotonic() + self.settings.request_timeout_s
        call = Call(target, opts, model, deadline, client)
        return await self._second_legs(await self._translate(texts, source, call), call)

    async def _translate(self, texts: list[str], source: str, call: Call) -> list[TextResult]:
        """Translate checked texts; a text whose pair has no direct route comes back
        translated into its pivot language (``pivot`` set, ``engine`` None)."""
        target, opts, model, deadline = call.target, call.opts, call.model, call.deadline
        if source != AUTO:  # a full queue is refused before the expensive preparation
            leg = self.pivot_for(source, target, model) or target
            if self.decoders.is_full(self._served_route(Route(source, leg), model)):
                raise self._queue_full()
        plans = await self._prepare(texts, source, target, model, deadline)
        decode = DecodeOptions(
            opts.beam_size,
            opts.num_alternatives + 1,
            opts.max_length,
            self.settings.repetition_penalty,
            self.settings.no_repeat_ngram_size,
        )
        sentences = self._sentences(plans)
        hypotheses = await self._decode(sentences, decode, deadline, call.client)
        flags: dict[tuple[int, int], set[Flag]] = {}
        if self.settings.output_checks:
            flags = await self._check_outputs(sentences, hypotheses, decode, deadline, call.client)
        return self._join(texts, plans, hypotheses, flags, opts.num_alternatives)

    async def _second_legs(self, results: list[TextResult], call: Call) -> list[TextResult]:
        """The texts that went into a pivot language translated on into ``target``, one
        call per pivot language (their sentences batched like any others); each result keeps
        its source and detection, and names both engines and the pivot."""
        out = list(results)
        by_pivot: dict[str, list[int]] = {}
        for i, r in enumerate(results):
            if r.pivot is not None:
                by_pivot.setdefault(r.pivot, []).append(i)
        for pivot, members in sorted(by_pivot.items()):
            texts = [results[i].text for i in members]
            second = await self._translate(texts, pivot, call)
            for i, s in zip(members, second, strict=True):
                first = results[i]
                out[i] = replace(
                    s,
                    source=first.source,
                    detected_confidence=first.detected_confidence,
                    warnings=ordered(set(first.warnings) | set(s.warnings)),
                    pivot=pivot,
                    pivot_engine=first.pivot_engine,
                    pivot_model=first.pivot_model,
                )
        return out

    async def _prepare(
        self, texts: list[str], source: str, target: str, model: str | None, deadline: float
    ) -> list[TextPlan]:
        t0 = time.perf_counter()
        stop = threading.Event()  # set when nobody waits for the preparation any more
        try:
            if sum(len(t) for t in texts) > INLINE_PREP_CHARS:
                # Splitting and tokenizing a large request takes a while: do it in a thread so
                # the event loop keeps serving other requests, within the request's deadline.
                prep = asyncio.to_thread(self._plan, texts, source, target, model, deadline, stop)
                plans = await asyncio.wait_for(prep, max(deadline - time.monotonic(), 0.001))
            else:
                plans = self._plan(texts, source, target, model, deadline)
        except TimeoutError:
            raise self._timeout() from None
        finally:
            stop.set()
        seconds = time.perf_counter() - t0
        timing.record("tokenize", seconds)
        self.metrics.stage_latency.labels("tokenize").observe(seconds)
        return plans

    def _plan(
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
                guess = self.detect(text, target, model, index=i if len(texts) > 1 else None)
                src, conf, uncertain = guess.language, guess.confidence, guess.status != "served"
            if src == target:  # already in the target language
                plans.append(TextPlan(src, conf, uncertain))
                continue
            pivot = self.pivot_for(src, target, model)
            served_route = self._served_route(Route(src, pivot or target), model)
            served = served_route.served
            lines = split_text(text, src)
            pieces = [served.encode(s, served_route.route) for s in sentences_of(lines)]
            for j, p in enumerate(pieces):
                if len(p) > served.max_source_positions:
                    raise TooLarge(
                        "text_too_long",
                        f"Sentence {j} of text {i} has {len(p)} tokens; the model accepts at "
                        f"most {served.max_source_positions} tokens per sentence. Split it.",
                        index=i,
                        limit_tokens=served.max_source_positions,
                    )
            plans.append(TextPlan(src, conf, uncertain, served_route, lines, pieces, pivot))
        return plans

    @staticmethod
    def _sentences(plans: list[TextPlan]) -> list[Sentence]:
        return [
            Sentence((i, j), plan.served_route, pieces)
            for i, plan in enumerate(plans)
            if plan.served_route is not None
            for j, pieces in enumerate(plan.pieces or [])
        ]

    async def _decode(
        self, sentences: list[Sentence], decode: DecodeOptions, deadline: float, client: str
    ) -> SentenceHypotheses:
        """Every sentence decoded, one job per engine, all within ``deadline``; failures
        become the service's errors."""
        try:
            return await self._run(sentences, decode, deadline, client)
        except QueueFull:
            raise self._queue_full() from None
        except TimeoutError:
            raise self._timeout() from None
        except EngineUnavailable as exc:
            self.metrics.rejected.labels("engine_unavailable").inc()
            retry = max(1, round(exc.retry_after))
            raise Unavailable(
                "engine_unavailable",
                f"The model for this route is unavailable: {exc.reason}",
                retry_after=retry,
                engine=exc.key,
                retry_after_s=retry,
            ) from None
        except ShuttingDown:
            raise shutting_down() from None

    async def _run(
        self, sentences: list[Sentence], decode: DecodeOptions, deadline: float, client: str
    ) -> SentenceHypotheses:
        """Decode the sentences, one group per engine, all within ``deadline``. On any
        failure, the client going away or the graceful-shutdown time running out
        (CancelledError) included, the queued sentences are dropped, not translated for
        nobody, and the failure raised as is (QueueFull, TimeoutError past ``deadline``,
        EngineUnavailable, ShuttingDown)."""
        groups: dict[str, tuple[ServedRoute, list[Sentence]]] = {}
        for sentence in sentences:
            served_route = sentence.served_route
            self.decoders.check(served_route)  # a failed key: 503 at once
            groups.setdefault(served_route.engine_key, (served_route, []))[1].append(sentence)
        if not groups:
            return {}
        calls = [(served_route, [m.pieces for m in ms]) for served_route, ms in groups.values()]
        results = await decode_all(
            self.decoders, calls, decode, client, deadline - time.monotonic()
        )
        hypotheses: SentenceHypotheses = {}
        for (_, members), found in zip(groups.values(), results, strict=True):
            hypotheses.update(zip([m.index for m in members], found, strict=True))
        return hypotheses

    # Output checks ---------------------------------------------------------------------------

    def _flags(self, sentence: Sentence, best: Hypothesis) -> set[Flag]:
        served, target = sentence.served_route.served, sentence.served_route.route.tgt
        return sentence_flags(
            served.untagged(sentence.pieces),
            served.untagged(best.pieces),
            served.decode(best.pieces, target),
            target,
            self.detector,
        )

    async def _check_outputs(
        self,
        sentences: list[Sentence],
        hypotheses: SentenceHypotheses,
        decode: DecodeOptions,
        deadline: float,
        client: str,
    ) -> dict[tuple[int, int], set[Flag]]:
        """The flags of every sentence's best hypothesis (``server.output_checks``). Flagged
        sentences are decoded once more with the retry settings; the retry's hypotheses
        replace the first ones when they carry fewer flags. A retry that cannot run (queue
        full, deadline, engine) leaves the first ones: the request still gets its answer.
        The checking (not the retry's decoding, which is in ``queue`` and ``decode``) is the
        request's ``check`` stage."""
        checking = timing.Stopwatch()
        try:
            flags = await self._flags_of(sentences, hypotheses, checking)
            flagged = [s for s in sentences if flags[s.index]]
            for s in flagged:
                for flag in flags[s.index]:
                    self.metrics.output_flags.labels(flag).inc()
            if not flagged:
                return flags
            retry = replace(
                decode,
                beam_size=max(decode.beam_size, RETRY.min_beam_size),
                repetition_penalty=RETRY.repetition_penalty,
                no_repeat_ngram_size=RETRY.no_repeat_ngram_size,
            )
            try:
                again = await self._run(flagged, retry, deadline, client)
            except (QueueFull, TimeoutError, EngineUnavailable, ShuttingDown):
                self.metrics.output_retries.labels("not_run").inc(len(flagged))
                return flags
            flags_again = await self._flags_of(flagged, again, checking)
            for s in flagged:
                after = flags_again[s.index]
                better = len(after) < len(flags[s.index])
                if better:
                    hypotheses[s.index], flags[s.index] = again[s.index], after
                self.metrics.output_retries.labels("improved" if better else "kept").inc()
            return flags
        finally:
            timing.record("check", checking.seconds)
            self.metrics.stage_latency.labels("check").observe(checking.seconds)

    async def _flags_of(
        self,
        members: list[Sentence],
        hypotheses: SentenceHypotheses,
        checking: timing.Stopwatch,
    ) -> dict[tuple[int, int], set[Flag]]:
        """The flags of each member's best hypothesis, timed on ``checking``. More than a
        few members are checked in a worker thread, so the event loop keeps serving other
        requests meanwhile."""

        def check() -> dict[tuple[int, int], set[Flag]]:
            return {s.index: self._flags(s, hypotheses[s.index][0]) for s in members}

        with checking:
            if len(members) > INLINE_CHECK_SENTENCES:
                return await asyncio.to_thread(check)
            return check()

    # Rejoining -------------------------------------------------------------------------------

    def _join(
        self,
        texts: list[str],
        plans: list[TextPlan],
        hypotheses: SentenceHypotheses,
        flags: dict[tuple[int, int], set[Flag]],
        num_alternatives: int,
    ) -> list[TextResult]:
        """Detokenize every sentence's hypotheses and rejoin them into texts: the best one,
        then each alternative (a sentence with fewer hypotheses repeats its best). A text's
        warnings are its sentences' flags and ``uncertain_language`` from detection. A text
        translated into its pivot language is a first leg: ``pivot`` and ``pivot_engine``
        set, for ``_second_legs``."""
        t1 = time.perf_counter()
        out: list[TextResult] = []
        for i, plan in enumerate(plans):
            text_flags: set[Flag] = {"uncertain_language"} if plan.uncertain else set()
            if plan.uncertain:
                self.metrics.output_flags.labels("uncertain_language").inc()
            served_route, lines = plan.served_route, plan.lines
            if served_route is None or lines is None or plan.pieces is None:
                out.append(
                    TextResult(texts[i], plan.source, plan.confidence, warnings=ordered(text_flags))
                )
                continue
            served, target = served_route.served, served_route.route.tgt
            per_sentence = [hypotheses[(i, j)] for j in range(len(plan.pieces))]
            for j in range(len(plan.pieces)):
                text_flags |= flags.get((i, j), set())
            variants = []
            for k in range(num_alternatives + 1):
                sents, scores = [], []
                for hyps in per_sentence:
                    h = hyps[k] if k < len(hyps) else hyps[0]
                    sents.append(served.decode(h.pieces, target))
                    scores.append(h.score)
                variants.append(
                    (join_text(lines, sents, target), sum(scores) / max(len(scores), 1))
                )
            best, score = variants[0]
            engine = served_route.engine_key
            result = TextResult(
                best,
                plan.source,
                plan.confidence,
                score,
                [Alternative(t, s) for t, s in variants[1:]],
                engine,
                ordered(text_flags),
                model=served.name,
            )
            if plan.pivot is not None:
                result = replace(
                    result, engine=None, model=None,
                    pivot=plan.pivot, pivot_engine=engine, pivot_model=served.name,
                )  # fmt: skip
                self.metrics.pivoted_sentences.labels(plan.pivot).inc(len(plan.pieces))
            out.append(result)
        seconds = time.perf_counter() - t1
        timing.record("detokenize", seconds)
        self.metrics.stage_latency.labels("detokenize").observe(seconds)
        return out

    def _queue_full(self) -> Busy:
        self.metrics.rejected.labels("queue_full").inc()
        return Busy(
            "queue_full",
            "The server is busy (translation queue full); retry after the indicated delay.",
            retry_after=self.settings.retry_after_s,
            limit=self.settings.queue_size,
        )

    def _timeout(self) -> TimedOut:
        self.metrics.rejected.labels("timeout").inc()
        return TimedOut(
            "timeout",
            f"The translation did not finish within {self.settings.request_timeout_s:g} s.",
            limit_s=self.settings.request_timeout_s,
        )

    async def close(self) -> None:
        await self.decoders.close()
