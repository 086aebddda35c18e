"""Translation service: validation, detection, preparation, batching, rejoining.

Used by ``/v1/translate``, the LibreTranslate endpoints and the warm-up. It fails with the
kinds of ``server.failures`` (no HTTP status here: ``server.errors`` maps them).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lsmt_core.langid import LanguageDetector
from lsmt_core.routes import route_key

from .batching import Batcher, DecodeOptions, Hypothesis, Job, QueueFull, ShuttingDown
from .bundles import ServedBundle
from .engines import EngineRegistry, EngineUnavailable
from .failures import Busy, InvalidRequest, TimedOut, TooLarge, Unavailable, shutting_down
from .metrics import Metrics
from .settings import Settings
from .text import Line, join_text, sentences_of, split_text
from .validation import Options, validate_options, validate_texts

AUTO = "auto"
INLINE_PREP_CHARS = 2000  # larger requests are prepared in a worker thread


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


@dataclass
class TextPlan:
    """One text, prepared: its source language (given, or detected with ``confidence``) and,
    unless it is already in the target language (``served`` None), its bundle, lines and
    tokenized sentences."""

    source: str
    confidence: float | None
    served: ServedBundle | None = None
    lines: list[Line] | None = None
    pieces: list[list[str]] | None = None


# A job submitted to one engine's batcher: the (text, sentence) index of each of its
# sentences, and the engine key.
SubmittedJob = tuple[Job, list[tuple[int, int]], str]


class TranslationService:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        bundles: list[ServedBundle],
        registry: EngineRegistry,
        executor: ThreadPoolExecutor,
        requests_in_flight: Callable[[], int] | None = None,
    ) -> None:
        self.settings = settings
        self.requests_in_flight = requests_in_flight
        self.metrics = metrics
        self.bundles = bundles
        self.registry = registry
        self.executor = executor
        self.batchers: dict[str, Batcher] = {}
        self._detector: LanguageDetector | None = None

    # Catalogue ---------------------------------------------------------------------------

    @property
    def languages(self) -> list[str]:
        return sorted({lang for b in self.bundles for lang in b.languages})

    @property
    def routes(self) -> list[tuple[str, str]]:
        return sorted({r for b in self.bundles for r in b.routes})

    def targets_for(self, src: str) -> list[str]:
        return sorted({t for b in self.bundles for t in b.targets_for(src)})

    def sources_for(self, tgt: str) -> list[str]:
        return sorted({s for b in self.bundles for s in b.sources_for(tgt)})

    @property
    def detector(self) -> LanguageDetector:
        if self._detector is None:
            self._detector = LanguageDetector()
        return self._detector

    def bundle_for(self, src: str, tgt: str, model: str | None) -> ServedBundle:
        for b in self._candidates(model):
            if (src, tgt) in b.route_set:
                return b
        raise self._unsupported_route(src, tgt, model)

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

    def _unsupported_route(self, src: str, tgt: str, model: str | None) -> InvalidRequest:
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
        return InvalidRequest("unsupported_route", msg, allowed=[route_key(r) for r in routes])

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
            if not any(t == target for b in self._candidates(model) for _, t in b.routes):
                raise self._unsupported_route(AUTO, target, model)
        else:
            self.bundle_for(source, target, model)

    # Detection -----------------------------------------------------------------------------

    def detect(self, text: str, target: str, model: str | None) -> tuple[str, float]:
        cands = {s for b in self._candidates(model) for s, t in b.routes if t == target}
        cands.add(target)
        try:
            return self.detector.detect(text, cands)
        except ValueError:
            raise InvalidRequest(
                "detection_unavailable",
                "The source language cannot be detected for this target; name it.",
                allowed=sorted(cands - {target}),
            ) from None

    def detect_any(self, text: str) -> list[tuple[str, float]]:
        langs = {lang for lang in self.languages if lang in self.detector.known}
        if not langs:
            return []
        lang, conf = self.detector.detect(text, langs)
        return [(lang, conf)]

    # Translation -----------------------------------------------------------------------------

    def batcher(self, served: ServedBundle, route: tuple[str, str]) -> Batcher:
        key = served.engine_key(*route)
        b = self.batchers.get(key)
        if b is None:
            b = self.batchers[key] = Batcher(
                served,
                route,
                self.registry,
                self.settings,
                self.metrics,
                self.executor,
                self.requests_in_flight,
            )
        return b

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
    ) -> list[TextResult]:
        """Validate, prepare every text (detect, split, tokenize), decode every sentence in
        one job per engine, and join the translated sentences back into texts."""
        self.validate_texts(texts, limit_count=limit_count)
        self.validate_languages(source, target, model)
        if deadline is None:
            deadline = time.monotonic() + self.settings.request_timeout_s
        if source != AUTO:  # a full queue is refused before the expensive preparation
            served = self.bundle_for(source, target, model)
            if self.batcher(served, (source, target)).is_full():
                raise self._queue_full()
        plans = await self._prepare(texts, source, target, model, deadline)
        decode = DecodeOptions(opts.beam_size, opts.num_alternatives + 1, opts.max_length)
        jobs = await self._decode(plans, target, decode, deadline)
        return self._join(texts, plans, jobs, target, opts.num_alternatives)

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
        self.metrics.stage_latency.labels("tokenize").observe(time.perf_counter() - t0)
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
            conf = None
            src = source
            if source == AUTO:
                src, conf = self.detect(text, target, model)
            if src == target:  # already in the target language
                plans.append(TextPlan(src, conf))
                continue
            served = self.bundle_for(src, target, model)
            lines = split_text(text, src)
            pieces = [served.encode(s, src, target) for s in sentences_of(lines)]
            for j, p in enumerate(pieces):
                if len(p) > served.max_source_positions:
                    raise TooLarge(
                        "text_too_long",
                        f"Sentence {j} of text {i} has {len(p)} tokens; the model accepts at "
                        f"most {served.max_source_positions} tokens per sentence. Split it.",
                        index=i,
                        limit_tokens=served.max_source_positions,
                    )
            plans.append(TextPlan(src, conf, served, lines, pieces))
        return plans

    async def _decode(
        self, plans: list[TextPlan], target: str, decode: DecodeOptions, deadline: float
    ) -> list[SubmittedJob]:
        """One job per engine with every sentence of every text that goes there, all done
        within ``deadline``. On any failure, the client going away or the graceful-shutdown
        time running out (CancelledError) included, the queued sentences are dropped, not
        translated for nobody."""
        jobs: list[SubmittedJob] = []
        try:
            groups: dict[str, tuple[Batcher, list[tuple[int, int]], list[list[str]]]] = {}
            for i, plan in enumerate(plans):
                if plan.served is None:
                    continue
                route = (plan.source, target)
                self.registry.check(plan.served, route)  # a failed key answers 503 at once
                b = self.batcher(plan.served, route)
                entry = groups.setdefault(b.key, (b, [], []))
                for j, p in enumerate(plan.pieces or []):
                    entry[1].append((i, j))
                    entry[2].append(p)
            for key, (b, index, sources) in groups.items():
                jobs.append((b.submit(sources, decode), index, key))
            if jobs:
                await self._wait(jobs, deadline)
        except QueueFull:
            self._cancel(jobs)
            raise self._queue_full() from None
        except TimeoutError:
            self._cancel(jobs)
            raise self._timeout() from None
        except EngineUnavailable as exc:
            self._cancel(jobs)
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
            self._cancel(jobs)
            raise shutting_down() from None
        except BaseException:
            self._cancel(jobs)
            raise
        return jobs

    @staticmethod
    async def _wait(jobs: list[SubmittedJob], deadline: float) -> None:
        """Until every job is done; a job's failure is raised, and TimeoutError past
        ``deadline``."""
        done, pending = await asyncio.wait(
            [job.future for job, _, _ in jobs],
            timeout=max(deadline - time.monotonic(), 0.001),
            return_when=asyncio.FIRST_EXCEPTION,
        )
        failed = next((f.exception() for f in done if f.exception()), None)
        if failed is not None:
            raise failed
        if pending:
            raise TimeoutError

    def _join(
        self,
        texts: list[str],
        plans: list[TextPlan],
        jobs: list[SubmittedJob],
        target: str,
        num_alternatives: int,
    ) -> list[TextResult]:
        """Detokenize every sentence's hypotheses and rejoin them into texts: the best one,
        then each alternative (a sentence with fewer hypotheses repeats its best)."""
        t1 = time.perf_counter()
        sent_hyps: dict[tuple[int, int], list[Hypothesis]] = {}
        engine_of: dict[int, str] = {}
        for job, index, key in jobs:
            results = job.future.result()
            for (i, j), hyps in zip(index, results, strict=True):
                sent_hyps[(i, j)] = hyps
                engine_of[i] = key
        out: list[TextResult] = []
        for i, plan in enumerate(plans):
            served, lines = plan.served, plan.lines
            if served is None or lines is None or plan.pieces is None:
                out.append(TextResult(texts[i], plan.source, plan.confidence, None, [], None))
                continue
            per_sent = [sent_hyps[(i, j)] for j in range(len(plan.pieces))]
            variants = []
            for k in range(num_alternatives + 1):
                sents, scores = [], []
                for hyps in per_sent:
                    h = hyps[k] if k < len(hyps) else hyps[0]
                    sents.append(served.decode(h.pieces))
                    scores.append(h.score)
                variants.append(
                    (join_text(lines, sents, target), sum(scores) / max(len(scores), 1))
                )
            best, score = variants[0]
            alts = [Alternative(t, s) for t, s in variants[1:]]
            out.append(
                TextResult(best, plan.source, plan.confidence, score, alts, engine_of.get(i))
            )
        self.metrics.stage_latency.labels("detokenize").observe(time.perf_counter() - t1)
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

    @staticmethod
    def _cancel(jobs) -> None:
        """Drop the jobs' queued sentences; an exception a job already has is taken here, so
        none is logged as "never retrieved"."""
        for job, _, _ in jobs:
            job.cancelled = True
            if not job.future.done():
                job.future.cancel()
            elif not job.future.cancelled():
                job.future.exception()

    async def close(self) -> None:
        for b in self.batchers.values():
            with contextlib.suppress(Exception):
                await b.close()
