"""The source language of an ``auto`` text, among the sources with a way into its target.

The language identifier (``lsmt_core.langid.LanguageDetector``) is loaded once, on first use,
by whichever thread asks first (the warm-up asks off the event loop). A text in a language
with no route into the target is refused with the kinds of ``server.failures``.
"""

from __future__ import annotations

import threading

from lsmt_core.langid import LanguageDetector, SourceGuess

from .bundles import language_name
from .catalogue import Catalogue
from .failures import InvalidRequest


class SourceDetection:
    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self._detector: LanguageDetector | None = None
        self._detector_lock = threading.Lock()  # loaded once, whichever thread asks first

    @property
    def detector(self) -> LanguageDetector:
        if self._detector is None:
            with self._detector_lock:
                if self._detector is None:
                    self._detector = LanguageDetector()
        return self._detector

    def detect(
        self, text: str, target: str, model: str | None, index: int | None = None
    ) -> SourceGuess:
        """The source language of ``text`` for ``target`` (``auto``), decided by
        ``LanguageDetector.guess_source`` over every language the identifier knows. A text
        in a language with no route into ``target`` is refused: ``unsupported_language`` when
        nothing here serves that language, ``unsupported_route`` when something does but not
        into ``target``. ``index``: the text's place in the request, named in the error."""
        candidates = self.catalogue.sources_into(target, model)
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
        raise self._refused(guess, target, model, index)

    def _refused(
        self, guess: SourceGuess, target: str, model: str | None, index: int | None
    ) -> InvalidRequest:
        """Why a text detected as ``guess`` (a language with no route into ``target``) is
        not translated."""
        detected = {"language": guess.language, "confidence": round(guess.confidence, 4)}
        where = {} if index is None else {"index": index}
        looks = (
            f"{'The text' if index is None else f'Text {index}'} looks like "
            f"{language_name(guess.language)} ({guess.language}, confidence "
            f"{guess.confidence:.2f})"
        )
        served = self.catalogue.served_languages(model)
        if guess.language in served:
            return self.catalogue.unsupported_route(
                guess.language, target, model, lead=f"{looks}. ", **where, detected=detected
            )
        return InvalidRequest(
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
