"""Per-language target vocabularies in training (Shallow paper, Berard et al. 2021, 3.3).

For each target language, a vocabulary of the shared SentencePiece model is chosen from the
tokenizer's per-language piece frequencies (``frequencies.json``) by
:func:`lsmt_core.target_vocab.select_target_vocab`: pieces seen >= K times, at most N of them,
always with the specials, tags, the characters of the language and the byte-fallback pieces.

Train-time filtering ("train-time BPE filtering" in the paper): the target side of every
training pair in language L is segmented with L's vocabulary only, so the model never learns
to emit a piece that the filtered output layer of L (test-time slicing, done by the exporter)
will not have. The source side keeps the full vocabulary.

How the restricted segmentation is done: the Python binding of SentencePiece 0.2 has no
``SetVocabulary``, so we do what it does in C++: the pieces outside the vocabulary are marked
``UNUSED`` in a copy of the model proto, and a processor is loaded from that copy. The unigram
lattice skips unused pieces, so encoding is the best segmentation with the allowed pieces; a
character without an allowed piece falls back to bytes (which every vocabulary keeps), so
``decode(encode(text)) == text`` still holds.

The vocabularies (ids per language, K, N) travel with the checkpoint
(``extra["target_vocab"]``); ``python -m model_export`` slices with them.

CLI (sequence-length cost of train-time filtering on a corpus)::

    python -m training.vocab stats --tokenizer data/tokenizer --data data/corpus \\
        --min-count 10 --max-size 1000 [--json stats.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sentencepiece as spm
from pydantic import BaseModel, ConfigDict, Field, model_validator

from lsmt_core.tags import QUALITY_TAGS, lang_tag
from lsmt_core.target_vocab import select_target_vocab
from lsmt_text.spm_model import (
    NORMAL,
    PIECES,
    UNUSED,
    fields,
    length_delimited,
    read_piece,
    varint,
)


class TargetVocabConfig(BaseModel):
    """Recipe section ``data.target_vocab``: per-language target vocabularies."""

    model_config = ConfigDict(extra="forbid")

    min_count: int = Field(1, ge=1)
    """K: keep pieces seen at least K times in the language's training text."""
    max_size: int = Field(ge=1)
    """N: at most N pieces per language (unless its characters, bytes and tags need more)."""
    filter_training: bool = True
    """Segment each target language's training side with its vocabulary only (train-time
    filtering). False: only record the vocabularies (test-time filtering alone)."""
    restrict_output: bool = False
    """Compute the training softmax over the target language's vocabulary only: exactly what
    the exported, sliced model computes, faster, and no probability mass on other languages'
    pieces. Needs ``filter_training`` (every gold piece must be in the vocabulary)."""

    @model_validator(mode="after")
    def _restrict_needs_filter(self) -> TargetVocabConfig:
        if self.restrict_output and not self.filter_training:
            raise ValueError(
                "restrict_output needs filter_training: gold pieces outside a language's "
                "vocabulary would have no output row"
            )
        return self


# -- restricted SentencePiece models -------------------------------------------------------------


def restrict_model(model_proto: bytes, allowed: set[str]) -> bytes:
    """A copy of a serialized SentencePiece model in which every normal piece outside
    ``allowed`` is marked unused (what C++ ``SetVocabulary`` does). Control, unknown,
    user-defined (tags) and byte pieces are left as they are."""
    out = bytearray()
    for number, wire, value, raw in fields(model_proto):
        if number == PIECES and wire == 2:
            piece, _, kind = read_piece(value)
            if kind == NORMAL and piece not in allowed:
                sub = bytearray()
                for n, _, _, r in fields(value):
                    if n != 3:
                        sub += r
                sub += varint(3 << 3) + varint(UNUSED)
                out += length_delimited(PIECES, bytes(sub))
                continue
        out += raw
    return bytes(out)


# -- vocabularies --------------------------------------------------------------------------------


def tokenizer_dir(path: Path | str) -> Path:
    p = Path(path)
    return p if p.is_dir() else p.parent


@dataclass
class TargetVocabularies:
    """One vocabulary (sorted piece ids) per target language, and restricted encoders."""

    model_proto: bytes = field(repr=False)
    ids: dict[str, list[int]]
    min_count: int
    max_size: int
    filter_training: bool = True
    _processors: dict[str, spm.SentencePieceProcessor] = field(default_factory=dict, repr=False)
    _own: dict[str, bytes] = field(default_factory=dict, repr=False)  # lang -> its own model

    def add_own(self, lang: str, model_proto: bytes) -> None:
        """``lang`` has a vocabulary of its own (its tokenizer): all of it is its target
        vocabulary, and its text is segmented with it unrestricted."""
        sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self.ids[lang] = list(range(sp.get_piece_size()))
        self._processors[lang] = sp
        self._own[lang] = model_proto

    @classmethod
    def build(
        cls,
        tokenizer: Path | str,
        languages: Sequence[str],
        min_count: int,
        max_size: int,
        filter_training: bool = True,
        frequencies: dict[str, dict[str, int]] | None = None,
    ) -> TargetVocabularies:
        """Vocabularies for ``languages`` from the tokenizer's ``frequencies.json`` (or the
        given ``frequencies``). ``tokenizer`` is the tokenizer directory or its ``spm.model``."""
        from lsmt_text.tokenizer import MODEL_FILE, load_frequencies

        tok = Path(tokenizer)
        model_file = tok / MODEL_FILE if tok.is_dir() else tok
        if frequencies is None:
            frequencies = load_frequencies(tokenizer_dir(tok))
        missing = [lang for lang in languages if lang not in frequencies]
        if missing:
            raise ValueError(
                f"no piece frequencies for {missing} in the tokenizer (it has "
                f"{sorted(frequencies)}): retrain the tokenizer with these languages"
            )
        proto = model_file.read_bytes()
        sp = spm.SentencePieceProcessor(model_proto=proto)
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        keep = (*QUALITY_TAGS, *(lang_tag(lang) for lang in languages))
        ids = {
            lang: select_target_vocab(frequencies[lang], pieces, min_count, max_size, keep)
            for lang in sorted(languages)
        }
        return cls(proto, ids, min_count, max_size, filter_training)

    @classmethod
    def from_config(
        cls, cfg: TargetVocabConfig, tokenizer: Path | str, languages: Sequence[str]
    ) -> TargetVocabularies:
        return cls.build(tokenizer, languages, cfg.min_count, cfg.max_size, cfg.filter_training)

    # -- checkpoint -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """What the checkpoint stores (``extra["target_vocab"]``)."""
        return {
            "min_count": self.min_count,
            "max_size": self.max_size,
            "filter_training": self.filter_training,
            "ids": {lang: list(map(int, ids)) for lang, ids in self.ids.items()},
        }

    def fingerprint(self) -> str:
        """Digest of what decides the target side's ids (``training.token_cache``): the
        tokenizer's model, every language's vocabulary, the languages' own models."""
        h = hashlib.sha256(hashlib.sha256(self.model_proto).digest())
        h.update(json.dumps(self.to_dict(), sort_keys=True).encode())
        for lang, proto in sorted(self._own.items()):
            h.update(f"own {lang}\0".encode() + hashlib.sha256(proto).digest())
        return h.hexdigest()

    # -- encoding -------------------------------------------------------------------------------
    def pieces(self, lang: str) -> set[str]:
        sp = self.processor(lang)
        return {sp.id_to_piece(i) for i in self.ids[lang]}

    def processor(self, lang: str) -> spm.SentencePieceProcessor:
        """A SentencePiece processor that segments with ``lang``'s vocabulary only."""
        if lang not in self.ids:
            raise KeyError(f"no target vocabulary for {lang!r}; have {sorted(self.ids)}")
        if lang not in self._processors:
            full = spm.SentencePieceProcessor(model_proto=self.model_proto)
            allowed = {full.id_to_piece(i) for i in self.ids[lang]}
            self._processors[lang] = spm.SentencePieceProcessor(
                model_proto=restrict_model(self.model_proto, allowed)
            )
        return self._processors[lang]

    def encode_batch(self, lang: str, texts: Sequence[str]) -> list[list[int]]:
        """Ids of ``texts`` segmented with ``lang``'s vocabulary (same ids as the full model)."""
        return self.processor(lang).encode(list(texts), out_type=int)

    def sizes(self) -> dict[str, int]:
        return {lang: len(ids) for lang, ids in self.ids.items()}


# -- the trainer's data pipeline -----------------------------------------------------------------


def encode_corpus_filtered(
    pairs: dict,
    encoder: Any,
    vocabs: TargetVocabularies,
    max_len: int | None = None,
    progress: bool = False,
):
    """:func:`training.batching.encode_corpus` with the target side of every direction
    segmented with its target language's vocabulary (the source side with the full one)."""
    from .batching import encode_corpus

    return encode_corpus(pairs, encoder, max_len, progress, target_encoder=vocabs.encode_batch)


def decoding_vocab(recipe: Any, ids: dict[str, list[int]] | None) -> dict[str, list[int]] | None:
    """The per-language ids that decoding is restricted to: ``ids`` when the model was
    trained with a restricted output layer (``data.target_vocab.restrict_output``), else None
    (full softmax). One rule for dev evaluation in training and for ``training.evaluate``."""
    tv = recipe.data.target_vocab
    return ids if tv is not None and tv.restrict_output else None


def target_vocabularies(
    cfg: TargetVocabConfig,
    tokenizer_path: Path | str,
    languages: list[str],
    encoder: Any,
    *,
    log: Any,
    fixed: dict[str, list[int]] | None = None,
) -> TargetVocabularies:
    """With ``data.target_vocab``: each language's vocabulary. Languages in ``fixed`` keep
    those piece ids (a trained model's, when adding languages), a language with its own
    tokenizer (``encoder.language_tokenizers``) has all of it; the others are chosen from the
    tokenizer's frequencies."""
    own = encoder.language_tokenizers
    fixed = {lang: ids for lang, ids in (fixed or {}).items() if lang in languages}
    counted = [lang for lang in languages if lang not in fixed and lang not in own]
    vocabs = TargetVocabularies.from_config(cfg, tokenizer_path, counted)
    vocabs.ids.update(fixed)
    for lang, tok in own.items():
        vocabs.add_own(lang, tok.sp.serialized_model_proto())
    sizes = vocabs.sizes()
    log(
        f"target vocabularies (K={cfg.min_count}, N={cfg.max_size}"
        f"{', train-time filtering' if cfg.filter_training else ', recorded only'}): "
        + ", ".join(f"{lang} {n}" for lang, n in sorted(sizes.items()))
    )
    return vocabs


# -- statistics ----------------------------------------------------------------------------------


def length_stats(
    vocabs: TargetVocabularies, texts: dict[str, Sequence[str]], full: spm.SentencePieceProcessor
) -> dict[str, Any]:
    """Per language: sentences, pieces with the full and the filtered vocabulary, increase,
    pieces outside the vocabulary (must be 0), byte pieces, round-trip failures."""
    rows: dict[str, Any] = {}
    for lang in sorted(texts):
        lines = list(texts[lang])
        unfiltered = full.encode(lines, out_type=int)
        filtered = vocabs.encode_batch(lang, lines)
        allowed = set(vocabs.ids[lang])
        n_full = sum(map(len, unfiltered))
        n_filt = sum(map(len, filtered))
        outside_full = sum(1 for ids in unfiltered for i in ids if i not in allowed)
        rows[lang] = {
            "vocab_size": len(vocabs.ids[lang]),
            "sentences": len(lines),
            "tokens_full": n_full,
            "tokens_filtered": n_filt,
            "increase": n_filt / max(n_full, 1) - 1.0,
            "full_tokens_outside_vocab": outside_full,
            "filtered_tokens_outside_vocab": sum(
                1 for ids in filtered for i in ids if i not in allowed
            ),
            "byte_tokens_full": sum(1 for ids in unfiltered for i in ids if full.is_byte(i)),
            "byte_tokens_filtered": sum(1 for ids in filtered for i in ids if full.is_byte(i)),
            "roundtrip_failures": sum(
                1 for t, ids in zip(lines, filtered, strict=True) if full.decode(ids) != t
            ),
        }
    n_full = sum(r["tokens_full"] for r in rows.values())
    n_filt = sum(r["tokens_filtered"] for r in rows.values())
    return {
        "min_count": vocabs.min_count,
        "max_size": vocabs.max_size,
        "vocab_size_full": full.get_piece_size(),
        "languages": rows,
        "total": {
            "tokens_full": n_full,
            "tokens_filtered": n_filt,
            "increase": n_filt / max(n_full, 1) - 1.0,
            "mean_vocab_size": sum(r["vocab_size"] for r in rows.values()) / max(len(rows), 1),
        },
    }


def target_texts(data_dir: Path, split: str, languages: Sequence[str] | None) -> dict:
    """Unique target-side sentences per language of a corpus split."""
    from lsmt_text.data import load_split

    out: dict[str, set[str]] = {}
    for (_, tgt), rows in load_split(data_dir, split).items():
        if languages is None or tgt in languages:
            out.setdefault(tgt, set()).update(t for _, t in rows)
    return {lang: sorted(v) for lang, v in out.items()}


def _stats_main(args: argparse.Namespace) -> int:
    from lsmt_text.paths import resolve_path

    tok = resolve_path(args.tokenizer)
    texts = target_texts(resolve_path(args.data), args.split, args.languages)
    if not texts:
        print(f"error: no {args.split} pairs in {args.data}", file=sys.stderr)
        return 2
    vocabs = TargetVocabularies.build(tok, sorted(texts), args.min_count, args.max_size)
    full = spm.SentencePieceProcessor(model_proto=vocabs.model_proto)
    stats = length_stats(vocabs, texts, full)
    stats.update(tokenizer=str(tok), data=str(args.data), split=args.split)
    print(
        f"target vocabularies K={args.min_count} N={args.max_size} on {args.data} "
        f"({args.split}, target sides), shared vocabulary {full.get_piece_size()}"
    )
    head = (
        f"{'lang':<5}{'vocab':>7}{'sentences':>11}{'pieces full':>13}{'filtered':>11}"
        f"{'increase':>10}{'bytes':>8}{'outside':>9}{'roundtrip':>11}"
    )
    print(head)
    for lang, r in stats["languages"].items():
        print(
            f"{lang:<5}{r['vocab_size']:>7}{r['sentences']:>11,}{r['tokens_full']:>13,}"
            f"{r['tokens_filtered']:>11,}{r['increase']:>+10.2%}{r['byte_tokens_filtered']:>8}"
            f"{r['filtered_tokens_outside_vocab']:>9}"
            f"{'ok' if not r['roundtrip_failures'] else r['roundtrip_failures']:>11}"
        )
    t = stats["total"]
    print(
        f"{'all':<5}{t['mean_vocab_size']:>7.0f}{'':>11}{t['tokens_full']:>13,}"
        f"{t['tokens_filtered']:>11,}{t['increase']:>+10.2%}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
        print(f"-> {args.json}")
    else:
        print(json.dumps({"total": t}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m training.vocab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stats", help="sequence-length increase caused by train-time filtering")
    s.add_argument("--tokenizer", default="data/tokenizer", help="tokenizer directory")
    s.add_argument("--data", default="data/corpus", help="corpus directory")
    s.add_argument("--split", default="train")
    s.add_argument("--min-count", type=int, default=1, help="K")
    s.add_argument("--max-size", type=int, required=True, help="N")
    s.add_argument("--languages", type=lambda v: v.split(","), default=None)
    s.add_argument("--json", help="write the statistics as JSON here")
    args = ap.parse_args(argv)
    return _stats_main(args)


if __name__ == "__main__":
    sys.exit(main())
