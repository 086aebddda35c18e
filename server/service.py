"""Translation service: a request's texts validated, prepared, decoded, checked and rejoined.

The steps live in their own modules; this one runs them in order for ``/v1/translate``, the
LibreTranslate endpoints and the warm-up:

- ``server.validation`` and ``server.catalogue``: the options, texts and languages checked;
- ``server.plans`` (detection: ``server.detection``): each text's source, route, sentences;
- ``server.decoders``: every sentence decoded, one job per engine (this process's or the
  cluster's);
- ``server.output_retry``: the outputs checked, flagged sentences decoded once more;
- ``server.results``: the sentences rejoined into texts; a text with no direct route goes
  through a pivot language, its second leg translated like any other text.

It fails with the kinds of ``server.failures`` (no HTTP status here: ``server.errors`` maps
them).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from lsmt_core.routes import Route

from . import timing
from .batching import DecodeOptions, QueueFull, ShuttingDown
from .bundles import ServedBundle
from .catalogue import Catalogue
from .decoders import Decoders, decode_sentences
from .detection import SourceDetection
from .engine_slots import EngineUnavailable
from .failures import Busy, TimedOut, Unavailable, shutting_down
from .metrics import Metrics
from .output_checks import Flag
from .output_retry import OutputRetry
from .plans import Planner, Sentence, SentenceHypotheses, TextPlan, plan_sentences
from .results import TextResult, join_results, second_leg
from .settings import Settings
from .validation import AUTO, Options, validate_options, validate_texts

INLINE_PREP_CHARS = 2000  # larger requests are prepared in a worker thread


@dataclass(frozen=True)
class Call:
    """What every text of one translate call shares."""

    target: str
    opts: Options
    model: str | None
    deadline: float
    client: str


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
        self.catalogue = Catalogue(bundles, settings)
        self.detection = SourceDetection(self.catalogue)
        self._planner = Planner(self.catalogue, self.detection)
        self._output_retry = OutputRetry(decoders, self.detection, metrics)

    # Validation --------------------------------------------------------------------------

    def validate_options(
        self, beam_size: int | None, num_alternatives: int | None, max_length: int | None
    ) -> Options:
        return validate_options(self.settings, beam_size, num_alternatives, max_length)

    def validate_texts(
        self, texts: list[str], *, limit_count: bool = True, blank_ok: bool = False
    ) -> None:
        validate_texts(self.settings, texts, limit_count=limit_count, blank_ok=blank_ok)

    def validate_languages(self, source: str, target: str, model: str | None) -> None:
        self.catalogue.validate_languages(source, target, model)

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
            leg = self.catalogue.pivot_for(source, target, model) or target
            if self.decoders.is_full(self.catalogue.served_route(Route(source, leg), model)):
                raise self._queue_full()
        plans = await self._prepare(texts, source, target, model, deadline)
        decode = DecodeOptions(
            opts.beam_size,
            opts.num_alternatives + 1,
            opts.max_length,
            self.settings.repetition_penalty,
            self.settings.no_repeat_ngram_size,
        )
        sentences = plan_sentences(plans)
        hypotheses = await self._decode(sentences, decode, deadline, call.client)
        flags: dict[tuple[int, int], set[Flag]] = {}
        if self.settings.output_checks:
            flags = await self._output_retry.check(
                sentences, hypotheses, decode, deadline, call.client
            )
        return join_results(texts, plans, hypotheses, flags, opts.num_alternatives, self.metrics)

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
            for i, result in zip(members, second, strict=True):
                out[i] = second_leg(results[i], result)
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
                plan = self._planner.plan
                prep = asyncio.to_thread(plan, texts, source, target, model, deadline, stop)
                plans = await asyncio.wait_for(prep, max(deadline - time.monotonic(), 0.001))
            else:
                plans = self._planner.plan(texts, source, target, model, deadline)
        except TimeoutError:
            raise self._timeout() from None
        finally:
            stop.set()
        seconds = time.perf_counter() - t0
        timing.record("tokenize", seconds)
        self.metrics.stage_latency.labels("tokenize").observe(seconds)
        return plans

    async def _decode(
        self, sentences: list[Sentence], decode: DecodeOptions, deadline: float, client: str
    ) -> SentenceHypotheses:
        """Every sentence decoded, one job per engine, all within ``deadline``; failures
        become the service's errors."""
        try:
            return await decode_sentences(self.decoders, sentences, decode, client, deadline)
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

    # Failures ------------------------------------------------------------------------------

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
