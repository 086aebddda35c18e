"""Language identification (py3langid), one wrapper for the server's ``auto`` source, its
output checks and the off-target rate of evaluations."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

# Chosen by measurement on NTREX-128 (docs/server.md, scripts/detection_study.py): the
# identifier's probability at which a text in a language nobody serves is refused rather than
# forced onto a served one, and below which a served guess is flagged as uncertain.
REFUSE_AT = 0.5
CERTAIN_AT = 0.5


@dataclass(frozen=True)
class SourceGuess:
    """What ``auto`` makes of one text.

    ``status``: ``served`` (translate from ``language``), ``uncertain`` (translate from
    ``language``, the best candidate, but the identifier is not sure) or ``unsupported``
    (``language`` is what the identifier found, and it is not a candidate). ``confidence`` is the
    identifier's probability of ``language`` over every language it knows, not renormalised
    over the candidates."""

    language: str
    confidence: float
    status: Literal["served", "uncertain", "unsupported"]


class LanguageDetector:
    """py3langid restricted to candidate languages, one restricted copy per candidate set."""

    def __init__(self) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self._full = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.known = frozenset(self._full.labels)
        self._by_set: dict[frozenset[str], object] = {}
        self._lock = threading.Lock()

    def _identifier(self, langs: frozenset[str]) -> Any:  # py3langid has no types
        with self._lock:
            ident = self._by_set.get(langs)
            if ident is None:
                ident = copy.copy(self._full)
                ident.set_languages(sorted(langs))
                self._by_set[langs] = ident
            return ident

    def rank(self, text: str) -> list[tuple[str, float]]:
        """Every language the identifier knows with its probability, most likely first."""
        return [(lang, float(p)) for lang, p in self._full.rank(text)]

    def guess_source(
        self,
        text: str,
        candidates: Iterable[str],
        refuse_at: float = REFUSE_AT,
        certain_at: float = CERTAIN_AT,
    ) -> SourceGuess:
        """Identify ``text`` over every language the identifier knows, then decide: its most
        likely language when that is a candidate; ``unsupported`` when another language is at
        least ``refuse_at`` likely; else the most likely candidate, flagged ``uncertain``."""
        langs = {c for c in candidates if c in self.known}
        if not langs:
            raise ValueError("none of the candidate languages is known to the detector")
        ranking = self.rank(text)
        top, p = ranking[0]
        if top in langs:
            return SourceGuess(top, p, "served" if p >= certain_at else "uncertain")
        if p >= refuse_at:
            return SourceGuess(top, p, "unsupported")
        best, p_best = next((lang, q) for lang, q in ranking if lang in langs)
        return SourceGuess(best, p_best, "uncertain")

    def detect(self, text: str, candidates: frozenset[str] | set[str]) -> tuple[str, float]:
        """Most likely language among ``candidates`` (those py3langid knows) and its
        probability. With one candidate it is returned with confidence 1."""
        langs = frozenset(c for c in candidates if c in self.known)
        if not langs:
            raise ValueError("none of the candidate languages is known to the detector")
        if len(langs) == 1:
            return next(iter(langs)), 1.0
        lang, conf = self._identifier(langs).classify(text)
        return lang, float(conf)


class LanguageIdentifier:
    """The detector restricted to a fixed set of languages (evaluation): ``classify`` and the
    off-target rate of hypotheses. Languages py3langid does not know are listed in
    ``unsupported`` and never predicted."""

    def __init__(self, languages: Iterable[str], detector: LanguageDetector | None = None):
        self.detector = detector or LanguageDetector()
        wanted = set(languages)
        self.languages = sorted(wanted & self.detector.known)
        self.unsupported = sorted(wanted - self.detector.known)
        self._set = frozenset(self.languages)

    def classify(self, text: str) -> str | None:
        if not text.strip() or not self._set:
            return None
        return self.detector.detect(text, self._set)[0]

    def off_target_rate(self, hyps: Sequence[str], tgt_lang: str) -> float | None:
        if tgt_lang not in self._set or not hyps:
            return None
        return sum(self.classify(h) != tgt_lang for h in hyps) / len(hyps)
