"""How ``auto`` decides, measured on NTREX-128: the refusal threshold of
``lsmt_core.langid.LanguageDetector.guess_source``.

For every NTREX language the identifier knows, each sentence (and its first three words, a
short query) goes through ``guess_source`` with the served languages as candidates, at several
thresholds. For a served language the good outcome is ``served`` with the right language; for
any other language it is ``unsupported`` (refused with the language named), and the bad one a
confident ``served`` guess (fluent nonsense with a 200).

    python scripts/detection_study.py --ntrex /path/to/NTREX/NTREX-128 --out docs/measurements

``--ntrex`` defaults to the copy in the repository (served languages plus German and
Portuguese); the full set is https://github.com/MicrosoftTranslator/NTREX.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.results import write_results
from lsmt_core.langid import LanguageDetector
from lsmt_text.data.testsets import NTREX_DIR

SERVED = ("ar", "en", "es", "fr", "it", "ru")  # the default model's languages
THRESHOLDS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# NTREX file code -> the identifier's code, for the languages this study reads.
NTREX_CODES = {
    "arb": "ar", "eng": "en", "spa": "es", "fra": "fr", "ita": "it", "rus": "ru",
    "deu": "de", "por": "pt", "nld": "nl", "pol": "pl", "ces": "cs", "swe": "sv",
    "cat": "ca", "glg": "gl", "ukr": "uk", "tur": "tr", "fas": "fa", "heb": "he",
    "hin": "hi", "jpn": "ja", "kor": "ko", "zho-CN": "zh",
}  # fmt: skip


def read_ntrex(directory: Path, per_language: int) -> dict[str, list[str]]:
    texts = {}
    for code, lang in NTREX_CODES.items():
        name = "newstest2019-src.eng.txt" if code == "eng" else f"newstest2019-ref.{code}.txt"
        path = directory / name
        if path.is_file():
            lines = [x.strip() for x in path.read_text(encoding="utf-8").splitlines()]
            texts[lang] = [x for x in lines if x][:per_language]
    return texts


def short_query(text: str) -> str:
    """The first three words; the first eight characters of unspaced scripts."""
    words = text.split()
    return " ".join(words[:3]) if len(words) > 3 else text[:8]


def outcomes(detector: LanguageDetector, lang: str, texts: list[str], threshold: float) -> dict:
    counts = {"served_right": 0, "served_wrong": 0, "uncertain": 0, "unsupported": 0}
    for text in texts:
        guess = detector.guess_source(text, SERVED, refuse_at=threshold)
        if guess.status == "unsupported":
            counts["unsupported"] += 1
        elif guess.status == "uncertain":
            counts["uncertain"] += 1
        elif guess.language == lang:
            counts["served_right"] += 1
        else:
            counts["served_wrong"] += 1
    return {k: v / len(texts) for k, v in counts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ntrex", type=Path, default=NTREX_DIR, help="NTREX-128 directory")
    ap.add_argument("--per-language", type=int, default=1997, help="sentences per language")
    ap.add_argument("--out", type=Path, default=Path("docs/measurements"))
    args = ap.parse_args(argv)
    detector = LanguageDetector()
    texts = read_ntrex(args.ntrex, args.per_language)
    rows = []
    for length, make in (("sentence", str), ("3 words", short_query)):
        for lang, lines in texts.items():
            sample = [make(t) for t in lines]
            for threshold in THRESHOLDS:
                rate = outcomes(detector, lang, sample, threshold)
                rows.append(
                    {"input": length, "language": lang, "served": lang in SERVED,
                     "refuse_at": threshold, "n": len(sample), **rate}
                )  # fmt: skip
    write_results(args.out, rows, rows, "detection")
    print(
        "input     refuse_at  served: right wrong uncertain refused | others: refused "
        "uncertain served"
    )
    for length in ("sentence", "3 words"):
        for threshold in THRESHOLDS:
            sel = [r for r in rows if r["input"] == length and r["refuse_at"] == threshold]
            own = [r for r in sel if r["served"]]
            other = [r for r in sel if not r["served"]]

            def mean(rs, key):
                return 100 * sum(r[key] for r in rs) / max(len(rs), 1)

            print(
                f"{length:9} {threshold:9.1f}  {mean(own, 'served_right'):13.1f} "
                f"{mean(own, 'served_wrong'):5.1f} {mean(own, 'uncertain'):9.1f} "
                f"{mean(own, 'unsupported'):7.1f} | {mean(other, 'unsupported'):15.1f} "
                f"{mean(other, 'uncertain'):9.1f} "
                f"{mean(other, 'served_right') + mean(other, 'served_wrong'):6.1f}"
            )
    print(f"per language: {args.out / 'detection.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
