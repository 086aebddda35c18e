"""Language identification (py3langid), one wrapper for the server's ``auto`` source and for
the off-target rate of evaluations."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Sequence


class LanguageDetector:
    """py3langid restricted to candidate languages, one restricted copy per candidate set."""

    def __init__(self) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self._full = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.known = frozenset(self._full.labels)
        self._by_set: dict[frozenset[str], object] = {}
        self._lock = threading.Lock()

    def _identifier(self, langs: frozenset[str]):
        with self._lock:
            ident = self._by_set.get(langs)
            if ident is None:
                ident = copy.copy(self._full)
                ident.set_languages(sorted(langs))
                self._by_set[langs] = ident
            return ident

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
