"""A trained tokenizer extended with whole words, without training anew.

The default model's shared 8k-piece vocabulary was learnt from the Bible-era corpus: everyday
words come out in short pieces (``Thank`` -> ``▁Tha n k``, ``coffee`` -> ``▁co ff e e``) that a
d-256 model has to learn to assemble (docs/training.md, the twelfth slice). Learning the
vocabulary again means training anew; instead, the words that cost the most pieces in the text
that matters (by default the general-domain sources' training side) are appended to the
SentencePiece model as pieces of their own:

- each language's candidates are its words (letters only, two or more, punctuation around them
  stripped) that the model splits into two pieces or more, ranked by the pieces they would save
  (count x (pieces - 1)); the first ``per_language`` of each language are added, a word two
  languages share once;
- a new piece's score is its unigram log-probability in that text (count / pieces), raised
  where needed just above its old segmentation's score, so the unigram lattice prefers it;
  a word that still does not come out as its one piece is left out;
- every piece the model had keeps its id: the new ones take ids from the old size on, so a
  checkpoint grows by rows (``python -m training.checkpoint extend-vocabulary`` starts each new
  row as the mean of its old pieces' rows) and nothing else moves.

``lsmt_text.tokenizer.extend`` (``python -m lsmt_text.tokenizer extend``) writes the result as a
tokenizer directory like ``recount``'s (spm.model, frequencies.json counted on the corpus,
tokenizer.json) whose tokenizer.json also records what was added.
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable
from pathlib import Path

import sentencepiece as spm

from lsmt_text.data.formats import directions, pair_paths, read_lines, source_of
from lsmt_text.spm_model import add_pieces, pieces

WORD_START = "▁"
GENERAL_SOURCES = ("tatoeba", "tico19", "ud-pud", "xquad", "wiktionary-common")


def _strip_punctuation(token: str) -> str:
    start, end = 0, len(token)
    while start < end and unicodedata.category(token[start])[0] in "PS":
        start += 1
    while end > start and unicodedata.category(token[end - 1])[0] in "PS":
        end -= 1
    return token[start:end]


def word_counts(lines: Iterable[str]) -> Counter[str]:
    """How often each word (letters only, two or more) occurs in ``lines``."""
    counts: Counter[str] = Counter()
    for line in lines:
        for token in line.split():
            word = _strip_punctuation(token)
            if len(word) >= 2 and word.isalpha():
                counts[word] += 1
    return counts


def training_lines(data_dir: Path, lang: str, sources: Collection[str] | None) -> list[str]:
    """The distinct training segments of ``lang`` (every direction, either side), only those
    of ``sources`` when given (by their pair ids)."""
    seen: dict[str, None] = {}
    for src, tgt in directions(data_dir, "train"):
        if lang not in (src, tgt):
            continue
        src_file, tgt_file, ids_file = pair_paths(data_dir, "train", src, tgt)
        lines = read_lines(src_file if lang == src else tgt_file)
        if sources is not None:
            keep = [source_of(i) in sources for i in read_lines(ids_file)]
            lines = [line for line, k in zip(lines, keep, strict=True) if k]
        seen.update(dict.fromkeys(lines))
    return list(seen)


def candidates(
    sp: spm.SentencePieceProcessor, lines: list[str], min_count: int
) -> list[tuple[str, int, list[str], float]]:
    """(word, count, old pieces, unigram log-probability) of every word of ``lines`` seen at
    least ``min_count`` times that ``sp`` splits, most pieces saved first."""
    counts = {w: c for w, c in word_counts(lines).items() if c >= min_count}
    total = sum(len(p) for p in sp.encode(lines))
    words = sorted(counts)
    encoded = sp.encode(words, out_type=str)
    rows = [
        (w, counts[w], old, math.log(counts[w] / total))
        for w, old in zip(words, encoded, strict=True)
        if len(old) >= 2
    ]
    return sorted(rows, key=lambda r: (-r[1] * (len(r[2]) - 1), r[0]))


def extend_model(
    model_proto: bytes,
    lines_by_language: dict[str, list[str]],
    per_language: int,
    min_count: int = 5,
) -> tuple[bytes, dict[str, list[dict]]]:
    """The model with up to ``per_language`` words of each language added; and per language
    what was added: ``{"piece", "count", "was"}`` (its old pieces)."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    score = {p: s for p, s, _ in pieces(model_proto)}
    chosen: dict[str, list[dict]] = {}
    new: dict[str, float] = {}
    for lang in sorted(lines_by_language):
        rows = []
        for word, count, old, logp in candidates(sp, lines_by_language[lang], min_count):
            piece = WORD_START + word
            if piece in new or piece in score:
                continue
            if len(rows) == per_language:
                break
            # just above the old segmentation, so the lattice prefers the word where it occurs
            new[piece] = max(logp, sum(score[p] for p in old) + 0.1)
            rows.append({"piece": piece, "count": count, "was": old})
        chosen[lang] = rows
    extended = add_pieces(model_proto, list(new.items()))
    check = spm.SentencePieceProcessor(model_proto=extended)
    whole = {r["piece"] for rows in chosen.values() for r in rows}
    encoded = check.encode([p[len(WORD_START) :] for p in whole], out_type=str)
    missed = {p for p, got in zip(whole, encoded, strict=True) if got != [p]}
    if missed:  # cannot win the lattice (a longer old piece covers it): leave them out
        chosen = {
            lang: [r for r in rows if r["piece"] not in missed] for lang, rows in chosen.items()
        }
        extended = add_pieces(model_proto, [(p, s) for p, s in new.items() if p not in missed])
    return extended, chosen
