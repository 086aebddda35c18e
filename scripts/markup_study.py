"""How inline markup comes through translation (issue 48; ``server.markup``), measured on a
bundle served by a real server.

Held-out HTML is made from test pairs (NTREX-128, and with ``--data`` the held-out everyday
slice, Tatoeba): each sentence becomes ``<p>`` with one word wrapped in ``<b>``:

- a *copied* word: a name or number (capitalised and not first, or with a digit) written once,
  the same, in the source and the reference, so the right words are known. The element is
  *right* when it holds exactly that word in the output (edge punctuation aside), judged on
  the sentences whose plain translation has the word at all;
- a *translated* word: a word of 4 or more letters, not the first, chosen at random; no gold
  exists, so how each was placed is counted (``server.markup.Placement.method``).

For both, chrF of the HTML output with its tags taken out against chrF of the plain
translation of the same sentences: inline markup must cost no quality.

The server translates the documents' texts (``/v1/translate``); the documents are written
again here, with the server's own code (``server.markup``), to count how each element was
placed.

    python scripts/markup_study.py --bundle models/default --data data/default_mixed/corpus

Writes ``markup.json`` and ``markup.csv`` under ``--out``.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.results import write_results
from loadtests.server_process import ServerProcess
from lsmt_core.scoring import score
from lsmt_text.data.testsets import load_testset
from server.markup import HtmlDocument

WORD = re.compile(r"\w+")
CHUNK = 32  # texts per request (the server takes up to 64)


def copied_word(source: str, reference: str) -> tuple[int, int] | None:
    """The span in ``source`` of a name or number written once, the same, in both."""
    words = list(WORD.finditer(source))
    counts_src = Counter(m.group() for m in words)
    counts_ref = Counter(WORD.findall(reference))
    for k, m in enumerate(words):
        w = m.group()
        named = (w[0].isupper() and k > 0) or any(c.isdigit() for c in w)
        if named and len(w) > 1 and counts_src[w] == 1 and counts_ref[w] == 1:
            return m.span()
    return None


def translated_word(source: str, rng: random.Random) -> tuple[int, int] | None:
    words = [m for k, m in enumerate(WORD.finditer(source)) if k > 0 and len(m.group()) >= 4]
    return rng.choice(words).span() if words else None


def as_html(source: str, span: tuple[int, int]) -> str:
    a, b = span
    esc = html.escape
    return f"<p>{esc(source[:a])}<b>{esc(source[a:b])}</b>{esc(source[b:])}</p>"


def bold_text(out: str) -> str | None:
    found = re.search(r"<b>(.*?)</b>", out, re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))) if found else None


def untagged(out: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", out)).strip()


def translate(url: str, texts: list[str], src: str, tgt: str) -> list[str]:
    out: list[str] = []
    for i in range(0, len(texts), CHUNK):
        body = {"text": texts[i : i + CHUNK], "source": src, "target": tgt}
        r = httpx.post(f"{url}/v1/translate", json=body, timeout=600)
        r.raise_for_status()
        out += [t["text"] for t in r.json()["translations"]]
    return out


def study_direction(
    url: str, src: str, tgt: str, rows: list[tuple[str, str]], sentences: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    cases: dict[str, list[tuple[str, str, tuple[int, int]]]] = {"copied": [], "translated": []}
    for source, reference in rows:
        for kind, span in (("copied", copied_word(source, reference)),
                           ("translated", translated_word(source, rng))):  # fmt: skip
            if span is not None and len(cases[kind]) < sentences:
                cases[kind].append((source, reference, span))
    result: dict[str, Any] = {}
    for kind, items in cases.items():
        if not items:
            continue
        documents = [HtmlDocument(as_html(s, span)) for s, _, span in items]
        texts = [t for d in documents for t in d.texts]
        plain = translate(url, [s for s, _, _ in items], src, tgt)
        translated = iter(translate(url, texts, src, tgt))
        outputs, methods = [], Counter[str]()
        for d in documents:
            outputs.append(d.rebuild([next(translated) for _ in d.texts]).decode())
            methods.update(d.methods)
        refs = [r for _, r, _ in items]
        row: dict[str, Any] = {
            "sentences": len(items),
            "chrf_plain": score(plain, refs, tgt)["chrf"],
            "chrf_html": score([untagged(o) for o in outputs], refs, tgt)["chrf"],
            "methods": dict(methods),
        }
        if kind == "copied":
            judged = right = 0
            for (source, _, (a, b)), p, o in zip(items, plain, outputs, strict=True):
                word = source[a:b]
                if not re.search(rf"(?<!\w){re.escape(word)}(?!\w)", p):
                    continue  # the model did not write the word: no right place to judge
                judged += 1
                held = (bold_text(o) or "").strip(" \t\n.,;:!?¡¿\"'«»()")
                right += held == word
            row.update(judged=judged, right=right)
        result[kind] = row
    return result


def study_arguments(doc: str, out: str, argv: list[str] | None) -> argparse.Namespace:
    """The command line of a study on held-out sentences (this one, the glossary study)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=Path("models/default"))
    parser.add_argument("--data", type=Path, help="the corpus, for its held-out Tatoeba slice")
    parser.add_argument("--sentences", type=int, default=20, help="per direction and kind")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(out))
    return parser.parse_args(argv)


def held_out_testsets(bundle: Path, data: Path | None) -> dict[str, Any]:
    """NTREX-128 and, with the corpus, its held-out Tatoeba slice, for the bundle's routes."""
    routes = [tuple(r) for r in json.loads((bundle / "manifest.json").read_text())["routes"]]
    testsets = {"ntrex": load_testset("ntrex", None, routes)}
    if data is not None:
        testsets["tatoeba"] = load_testset("tatoeba-test", data, routes)
    return testsets


def main(argv: list[str] | None = None) -> int:
    args = study_arguments(__doc__, "runs/markup_study", argv)
    testsets = held_out_testsets(args.bundle, args.data)
    result: dict[str, Any] = {"bundle": str(args.bundle), "sentences": args.sentences}
    rows = []
    with ServerProcess([args.bundle]) as server:
        for name, pairs in testsets.items():
            for (src, tgt), items in sorted(pairs.items()):
                found = study_direction(server.url, src, tgt, items, args.sentences, args.seed)
                result.setdefault(name, {})[f"{src}-{tgt}"] = found
                for kind, row in found.items():
                    rows.append(csv_row(name, f"{src}-{tgt}", kind, row))
                print(name, src, tgt, found, flush=True)
    result["summary"] = summarize(rows)
    print(json.dumps(result["summary"], indent=2))
    write_results(args.out, result, rows, "markup")
    return 0


METHODS = ("whole", "source", "translated", "fuzzy", "position", "empty")


def csv_row(testset: str, direction: str, kind: str, row: dict[str, Any]) -> dict[str, Any]:
    """One direction and kind, in the CSV's fixed columns."""
    flat = {"testset": testset, "direction": direction, "kind": kind}
    flat.update(
        {k: row.get(k, 0) for k in ("sentences", "chrf_plain", "chrf_html", "judged", "right")}
    )
    flat.update({f"method_{m}": row["methods"].get(m, 0) for m in METHODS})
    return flat


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per test set and kind: sentences, the share placed right (copied words), the mean chrF
    with and without tags, and how the elements were placed."""
    summary: dict[str, Any] = {}
    for row in rows:
        s = summary.setdefault(f"{row['testset']} {row['kind']}", Counter())
        for key, value in row.items():
            if key not in ("testset", "direction", "kind"):
                s[key] += value
        s["directions"] += 1
    for s in summary.values():
        n = s["directions"]
        s["chrf_plain"] = round(s["chrf_plain"] / n, 2)
        s["chrf_html"] = round(s["chrf_html"] / n, 2)
        if s.get("judged"):
            s["right_share"] = round(s["right"] / s["judged"], 3)
    return {k: dict(v) for k, v in summary.items()}


if __name__ == "__main__":
    raise SystemExit(main())
