"""The output checks of a request's translated sentences, and the one retry of those flagged.

Every sentence's best hypothesis is checked (``server.output_checks``); the flagged ones are
decoded once more with ``RETRY``'s settings, and the retry's hypotheses replace the first ones
when they carry fewer flags. A retry that cannot run (queue full, deadline, engine) leaves the
first ones: the request still gets its answer. More than ``INLINE_CHECK_SENTENCES`` sentences
are checked in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from . import timing
from .batching import DecodeOptions, Hypothesis, QueueFull, ShuttingDown
from .decoders import Decoders, decode_sentences
from .detection import SourceDetection
from .engine_slots import EngineUnavailable
from .metrics import Metrics
from .output_checks import RETRY, Flag, sentence_flags
from .plans import Sentence, SentenceHypotheses

# The outputs of more sentences than this are checked in a worker thread (0.1-0.3 ms a
# sentence): a document's 64 sentences checked on the event loop held it for 10-20 ms, which
# the short requests beside it waited (issue 27)
INLINE_CHECK_SENTENCES = 8

SentenceFlags = dict[tuple[int, int], set[Flag]]


@dataclass(frozen=True)
class OutputRetry:
    """Checks and retries on ``decoders``; ``detection`` holds the language identifier (for
    ``off_target``), ``metrics`` counts flags and retries."""

    decoders: Decoders
    detection: SourceDetection
    metrics: Metrics

    async def check(
        self,
        sentences: list[Sentence],
        hypotheses: SentenceHypotheses,
        decode: DecodeOptions,
        deadline: float,
        client: str,
    ) -> SentenceFlags:
        """The flags of every sentence's best hypothesis, after the retry of the flagged ones
        (``hypotheses`` updated in place where the retry did better). The checking (not the
        retry's decoding, which is in ``queue`` and ``decode``) is the request's ``check``
        stage."""
        checking = timing.Stopwatch()
        try:
            flags = await self._flags_of(sentences, hypotheses, checking)
            flagged = [s for s in sentences if flags[s.index]]
            for s in flagged:
                for flag in flags[s.index]:
                    self.metrics.output_flags.labels(flag).inc()
            if flagged:
                await self._retry(flagged, hypotheses, flags, decode, deadline, client, checking)
            return flags
        finally:
            timing.record("check", checking.seconds)
            self.metrics.stage_latency.labels("check").observe(checking.seconds)

    async def _retry(
        self,
        flagged: list[Sentence],
        hypotheses: SentenceHypotheses,
        flags: SentenceFlags,
        decode: DecodeOptions,
        deadline: float,
        client: str,
        checking: timing.Stopwatch,
    ) -> None:
        """Decode ``flagged`` again with ``RETRY``'s settings; keep, per sentence, whichever
        hypotheses carry fewer flags (in ``hypotheses`` and ``flags``)."""
        retry = replace(
            decode,
            beam_size=max(decode.beam_size, RETRY.min_beam_size),
            repetition_penalty=RETRY.repetition_penalty,
            no_repeat_ngram_size=RETRY.no_repeat_ngram_size,
        )
        try:
            again = await decode_sentences(self.decoders, flagged, retry, client, deadline)
        except (QueueFull, TimeoutError, EngineUnavailable, ShuttingDown):
            self.metrics.output_retries.labels("not_run").inc(len(flagged))
            return
        flags_again = await self._flags_of(flagged, again, checking)
        for s in flagged:
            after = flags_again[s.index]
            better = len(after) < len(flags[s.index])
            if better:
                hypotheses[s.index], flags[s.index] = again[s.index], after
            self.metrics.output_retries.labels("improved" if better else "kept").inc()

    async def _flags_of(
        self,
        members: list[Sentence],
        hypotheses: SentenceHypotheses,
        checking: timing.Stopwatch,
    ) -> SentenceFlags:
        """The flags of each member's best hypothesis, timed on ``checking``. More than a
        few members are checked in a worker thread, so the event loop keeps serving other
        requests meanwhile."""

        def check() -> SentenceFlags:
            return {s.index: self._flags(s, hypotheses[s.index][0]) for s in members}

        with checking:
            if len(members) > INLINE_CHECK_SENTENCES:
                return await asyncio.to_thread(check)
            return check()

    def _flags(self, sentence: Sentence, best: Hypothesis) -> set[Flag]:
        served, target = sentence.served_route.served, sentence.served_route.route.tgt
        return sentence_flags(
            served.untagged(sentence.pieces),
            served.untagged(best.pieces),
            served.decode(best.pieces, target),
            target,
            self.detection.detector,
        )
