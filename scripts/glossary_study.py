"""How well a request's glossary is kept (issue 48; ``server.terms``), measured on a bundle
served by a real server.

Held-out sentences with injected terms, from test pairs (NTREX-128, and with ``--data`` the
held-out everyday slice, Tatoeba): for each sentence a source word of 4 or more letters (not
the first) is translated alone; when the reference has that translation as a word, the pair
(source word -> the reference's word) is the sentence's glossary, a term the reference
confirms. Each sentence is translated without the glossary and with it (``/v1/translate``,
``glossary``), and scored: the share of outputs that hold the target term as a word (as
written, and in any case: a term is capitalised at the start of a sentence), and chrF against
the references. A second set keeps names: a name or number written the same in
source and reference, sent as ``do_not_translate``.

    python scripts/glossary_study.py --bundle models/default --data data/default_mixed/corpus

Writes ``glossary.json`` and ``glossary.csv`` under ``--out``.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.results import write_results
from loadtests.server_process import ServerProcess
from lsmt_core.scoring import score
from scripts.markup_study import copied_word, held_out_testsets, study_arguments

WORD = re.compile(r"\w+")


def has_word(text: str, word: str, any_case: bool = False) -> bool:
    flags = re.IGNORECASE if any_case else 0
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, flags) is not None


def translate(client: httpx.Client, texts: list[str], src: str, tgt: str, **extra) -> list[str]:
    out: list[str] = []
    for i in range(0, len(texts), 32):
        body = {"text": texts[i : i + 32], "source": src, "target": tgt, **extra}
        r = client.post("/v1/translate", json=body)
        r.raise_for_status()
        out += [t["text"] for t in r.json()["translations"]]
    return out


def glossary_cases(client, src, tgt, rows, sentences, rng) -> list[tuple[str, str, str, str]]:
    """(source, reference, source term, target term) for up to ``sentences`` rows."""
    picks = []
    for source, reference in rows:
        words = [m.group() for k, m in enumerate(WORD.finditer(source))
                 if k > 0 and len(m.group()) >= 4 and m.group().isalpha()]  # fmt: skip
        if words:
            picks.append((source, reference, rng.choice(words)))
    alone = translate(client, [w for _, _, w in picks], src, tgt) if picks else []
    cases = []
    for (source, reference, word), rendering in zip(picks, alone, strict=True):
        found = re.search(rf"(?<!\w){re.escape(rendering.strip(' .!?'))}(?!\w)", reference,
                          re.IGNORECASE) if rendering.strip(" .!?") else None  # fmt: skip
        if found and len(cases) < sentences:
            cases.append((source, reference, word, found.group()))
    return cases


def study(client, src, tgt, rows, sentences, rng) -> dict[str, Any]:
    result: dict[str, Any] = {}
    cases = glossary_cases(client, src, tgt, rows, sentences, rng)
    names = [(s, r, s[a:b]) for s, r in rows if (span := copied_word(s, r)) for a, b in [span]]
    for kind, items, field in (
        ("glossary", [(s, r, w, t) for s, r, w, t in cases], "glossary"),
        ("do_not_translate", [(s, r, n, n) for s, r, n in names[:sentences]], "do_not_translate"),
    ):
        if not items:
            continue
        sources, refs = [s for s, *_ in items], [r for _, r, *_ in items]
        plain = translate(client, sources, src, tgt)
        kept = []
        for source, _, term, wanted in items:
            extra = {"glossary": {term: wanted}} if field == "glossary" else {field: [term]}
            kept += translate(client, [source], src, tgt, **extra)
        wanted = [w for *_, w in items]
        result[kind] = {
            "sentences": len(items),
            "present_plain": sum(has_word(o, w) for o, w in zip(plain, wanted, strict=True)),
            "present_kept": sum(has_word(o, w) for o, w in zip(kept, wanted, strict=True)),
            # a term capitalised at the start of a sentence is still the term
            "present_kept_any_case": sum(
                has_word(o, w, any_case=True) for o, w in zip(kept, wanted, strict=True)
            ),
            "chrf_plain": score(plain, refs, tgt)["chrf"],
            "chrf_kept": score(kept, refs, tgt)["chrf"],
        }
    return result


def main(argv: list[str] | None = None) -> int:
    args = study_arguments(__doc__, "runs/glossary_study", argv)
    testsets = held_out_testsets(args.bundle, args.data)
    rng = random.Random(args.seed)
    result: dict[str, Any] = {"bundle": str(args.bundle), "sentences": args.sentences}
    rows: list[dict[str, Any]] = []
    with ServerProcess([args.bundle]) as server, httpx.Client(base_url=server.url,
                                                               timeout=600) as client:  # fmt: skip
        for name, pairs in testsets.items():
            for (src, tgt), items in sorted(pairs.items()):
                found = study(client, src, tgt, items, args.sentences, rng)
                result.setdefault(name, {})[f"{src}-{tgt}"] = found
                rows += [{"testset": name, "direction": f"{src}-{tgt}", "kind": k, **v}
                         for k, v in found.items()]  # fmt: skip
                print(name, src, tgt, found, flush=True)
    result["summary"] = summarize(rows)
    print(json.dumps(result["summary"], indent=2))
    write_results(args.out, result, rows, "glossary")
    return 0


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per test set and kind: the share of outputs holding the term without and with the
    request's terms, and the mean chrF of each."""
    summary: dict[str, Any] = {}
    for row in rows:
        s = summary.setdefault(f"{row['testset']} {row['kind']}", {"directions": 0})
        s["directions"] += 1
        for key in ("sentences", "present_plain", "present_kept", "present_kept_any_case",
                    "chrf_plain", "chrf_kept"):  # fmt: skip
            s[key] = s.get(key, 0) + row[key]
    for s in summary.values():
        s["share_plain"] = round(s["present_plain"] / s["sentences"], 3)
        s["share_kept"] = round(s["present_kept"] / s["sentences"], 3)
        s["share_kept_any_case"] = round(s["present_kept_any_case"] / s["sentences"], 3)
        s["chrf_plain"] = round(s["chrf_plain"] / s["directions"], 2)
        s["chrf_kept"] = round(s["chrf_kept"] / s["directions"], 2)
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
