"""What an engine is to those who drive it (the server, the bundle evaluation, the benchmarks),
typed once: CTranslate2's ``Translator`` and :class:`lsmt_bundle.hybrid.HybridTranslator`
both satisfy :class:`Engine`; the server's express pair (two engines of one model) satisfies
:class:`Resident`, the part the engine registry drives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TranslationResult(Protocol):
    """One source's hypotheses (pieces), best first, and their scores."""

    @property
    def hypotheses(self) -> Sequence[Sequence[str]]: ...
    @property
    def scores(self) -> Sequence[float]: ...


class Resident(Protocol):
    """An engine as the registry moves it between memory tiers."""

    @property
    def model_is_loaded(self) -> bool: ...
    @property
    def num_active_batches(self) -> int:
        """Batches running now (an engine cannot move tiers under one)."""
        ...

    def unload_model(self, to_cpu: bool = False) -> None: ...
    def load_model(self) -> None: ...


class Engine(Resident, Protocol):
    """A route's engine: ``translate_batch`` with CTranslate2's arguments (those
    ``lsmt_bundle.ct2.translate_pieces`` passes)."""

    def translate_batch(
        self,
        source: list[list[str]],
        *,
        beam_size: int = ...,
        num_hypotheses: int = ...,
        max_decoding_length: int = ...,
        min_decoding_length: int = ...,
        max_input_length: int = ...,
        max_batch_size: int = ...,
        repetition_penalty: float = ...,
        no_repeat_ngram_size: int = ...,
        return_scores: bool = ...,
    ) -> Sequence[TranslationResult]: ...
