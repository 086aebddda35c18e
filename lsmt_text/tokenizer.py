"""One SentencePiece (unigram) model for all languages, plus a small torch-free wrapper.

ID conventions (the model and the server rely on them)::

    0 <pad>   1 <unk>   2 <s>   3 </s>
    4 ...     <2xx> for every language the corpus builder supports, in sorted code order
              (``SUPPORTED_LANGUAGES``), then <HQ>, <LQ>
    then      256 byte-fallback pieces <0x00>..<0xFF>, then the learned pieces

Normalisation is ``identity`` (no NFKC: it would turn Chinese/Japanese full-width punctuation
into ASCII in the model's *output*). Text is expected NFC with collapsed whitespace, which is
what the corpus contains and what :meth:`Tokenizer.normalize` produces for other text; for
such text ``decode(encode(text)) == text`` exactly (byte fallback covers unseen characters).

CLI::

    python -m lsmt_text.tokenizer train --data DATA_DIR --out TOK_DIR [--vocab-size 8000]
        [--character-coverage 0.9995] [--max-sentences-per-language N] [--languages ...]
        [--seed S]
    python -m lsmt_text.tokenizer recount --model TOK_DIR --data DATA_DIR --out TOK_DIR2
    python -m lsmt_text.tokenizer extend --model TOK_DIR --data DATA_DIR --out TOK_DIR2 \\
        --per-language 500 [--min-count 5] [--sources tatoeba,tico19,...|all]
    python -m lsmt_text.tokenizer encode TOK_DIR < text     # pieces, one line per input line
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path

import sentencepiece as spm

from lsmt_core.languages import SUPPORTED_LANGUAGES
from lsmt_core.tags import (
    BOS_ID,
    BOS_PIECE,
    EOS_ID,
    EOS_PIECE,
    PAD_ID,
    PAD_PIECE,
    QUALITY_TAGS,
    UNK_ID,
    UNK_PIECE,
    lang_tag,
)
from lsmt_core.text import normalize_text
from lsmt_text.data.formats import languages as corpus_languages
from lsmt_text.data.formats import mono_path, read_lines
from lsmt_text.spm_model import pieces as model_pieces
from lsmt_text.vocabulary_extension import GENERAL_SOURCES, extend_model, training_lines

FORMAT = "lsmt-spm/1"
MODEL_FILE, VOCAB_FILE = "spm.model", "spm.vocab"
FREQUENCIES_FILE, INFO_FILE = "frequencies.json", "tokenizer.json"


LANG_TAGS: tuple[str, ...] = tuple(lang_tag(lang) for lang in SUPPORTED_LANGUAGES)
USER_DEFINED_SYMBOLS: tuple[str, ...] = LANG_TAGS + QUALITY_TAGS
FIRST_TAG_ID = 4


def lang_tag_id(lang: str) -> int:
    """Id of ``<2xx>`` by the fixed convention (checked against the model by ``Tokenizer``)."""
    if lang not in SUPPORTED_LANGUAGES:
        raise KeyError(f"no language tag for {lang!r}; supported: {', '.join(SUPPORTED_LANGUAGES)}")
    return FIRST_TAG_ID + SUPPORTED_LANGUAGES.index(lang)


def quality_tag_id(tag: str) -> int:
    return FIRST_TAG_ID + len(LANG_TAGS) + QUALITY_TAGS.index(tag)


class Tokenizer:
    """Torch-free wrapper around the SentencePiece model (``TOK_DIR`` or ``.../spm.model``).

    Encoding adds no BOS/EOS and no tags: the caller (trainer, server) decides the layout.
    """

    def __init__(self, path: Path | str) -> None:
        path = Path(path)
        self.model_path = path / MODEL_FILE if path.is_dir() else path
        if not self.model_path.is_file():
            raise FileNotFoundError(f"SentencePiece model {self.model_path} not found")
        self.sp = spm.SentencePieceProcessor(model_file=str(self.model_path))
        self._check_conventions()

    def _check_conventions(self) -> None:
        expected = {PAD_ID: PAD_PIECE, UNK_ID: UNK_PIECE, BOS_ID: BOS_PIECE, EOS_ID: EOS_PIECE}
        for i, piece in enumerate(USER_DEFINED_SYMBOLS, FIRST_TAG_ID):
            expected[i] = piece
        for i, piece in expected.items():
            if i >= self.vocab_size or self.sp.id_to_piece(i) != piece:
                raise ValueError(
                    f"{self.model_path}: id {i} should be {piece!r} (LSMT tokenizer convention)"
                )

    # -- vocabulary -----------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def __len__(self) -> int:
        return self.vocab_size

    def pieces(self) -> list[str]:
        """All pieces in id order."""
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]

    def piece_to_id(self, piece: str) -> int:
        """Id of a piece (``UNK_ID`` for unknown pieces)."""
        return self.sp.piece_to_id(piece)

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def lang_tag_id(self, lang: str) -> int:
        return lang_tag_id(lang)

    # -- text -----------------------------------------------------------------------------
    @staticmethod
    def normalize(text: str, lang: str | None = None) -> str:
        """The corpus normalisation (NFC, invisible characters removed, whitespace collapsed;
        spaces between CJK characters removed for zh/ja). Apply it to text that does not come
        from the corpus before encoding."""
        return normalize_text(text, lang)

    def encode(self, text: str) -> list[str]:
        """Text -> pieces."""
        return self.sp.encode(text, out_type=str)

    def encode_ids(self, text: str) -> list[int]:
        """Text -> ids."""
        return self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: Sequence[str], out_type: type = int) -> list[list]:
        """Many texts at once (``out_type`` int for ids, str for pieces)."""
        return self.sp.encode(list(texts), out_type=out_type)

    def decode_pieces(self, pieces: Sequence[str]) -> str:
        return self.sp.decode_pieces(list(pieces))

    def decode_ids(self, ids: Sequence[int]) -> str:
        """Ids -> text; control ids (pad, bos, eos) are dropped, tags are kept as text."""
        return self.sp.decode_ids([int(i) for i in ids])


# --------------------------------------------------------------------------------------------
# Training


def sample_language(lines: list[str], cap: int | None, seed: int, lang: str) -> list[str]:
    """Deterministic sample of at most ``cap`` lines, in file order."""
    if cap is None or len(lines) <= cap:
        return lines
    rng = random.Random(f"{seed}:{lang}")
    return [lines[i] for i in sorted(rng.sample(range(len(lines)), cap))]


def piece_frequencies(tok: Tokenizer, lines: Sequence[str]) -> Counter[str]:
    """Piece counts over the encodings of ``lines`` (no BOS/EOS/tags)."""
    counts: Counter[str] = Counter()
    for pieces in tok.encode_batch(lines, out_type=str):
        counts.update(pieces)
    return counts


def train(
    data_dir: Path | str,
    out_dir: Path | str,
    vocab_size: int = 8000,
    character_coverage: float = 0.9995,
    max_sentences_per_language: int | None = 30000,
    languages: Sequence[str] | None = None,
    seed: int = 1,
    num_threads: int | None = None,
    quiet: bool = True,
) -> dict:
    """Train the shared model on a language-balanced sample of ``mono/{lang}.txt``.

    Writes spm.model, spm.vocab, frequencies.json and tokenizer.json into ``out_dir``;
    returns the tokenizer.json content."""
    # Long by nature: half of it is the tokenizer.json record, one field per line.
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    langs = _languages_to_train(data_dir, languages)
    mono = {lang: read_lines(mono_path(data_dir, lang)) for lang in langs}
    sample = {
        lang: sample_language(mono[lang], max_sentences_per_language, seed, lang) for lang in langs
    }
    sentences = [line for lang in langs for line in sample[lang] if line]

    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = _train_sentencepiece(
        sentences, vocab_size, character_coverage, seed, num_threads or os.cpu_count() or 1, quiet
    )
    train_seconds = time.perf_counter() - t0
    (out_dir / MODEL_FILE).write_bytes(model)

    tok = Tokenizer(out_dir)
    with open(out_dir / VOCAB_FILE, "w", encoding="utf-8", newline="\n") as f:
        for i, piece in enumerate(tok.pieces()):
            f.write(f"{piece}\t{tok.sp.get_score(i):g}\n")
    t1 = time.perf_counter()
    totals = write_frequencies(tok, mono, out_dir)
    freq_seconds = time.perf_counter() - t1

    manifest = data_dir / "manifest.json"
    info = {
        "format": FORMAT,
        "model": MODEL_FILE,
        "model_type": "unigram",
        "vocab_size": tok.vocab_size,
        "requested_vocab_size": vocab_size,
        "character_coverage": character_coverage,
        "normalization_rule_name": "identity",
        "byte_fallback": True,
        "split_digits": True,
        "languages": langs,
        "special_ids": {
            PAD_PIECE: PAD_ID,
            UNK_PIECE: UNK_ID,
            BOS_PIECE: BOS_ID,
            EOS_PIECE: EOS_ID,
        },
        "lang_tags": {lang: lang_tag_id(lang) for lang in SUPPORTED_LANGUAGES},
        "quality_tags": {tag: quality_tag_id(tag) for tag in QUALITY_TAGS},
        "max_sentences_per_language": max_sentences_per_language,
        "sample_sizes": {lang: len(sample[lang]) for lang in langs},
        "mono_sizes": {lang: len(mono[lang]) for lang in langs},
        "frequencies": {
            "file": FREQUENCIES_FILE,
            "keyed_by": "piece",
            "counted_on": "mono/{lang}.txt (all lines), no BOS/EOS/tags",
            "pieces_per_language": totals,
        },
        "seed": seed,
        "data_dir": str(data_dir),
        "corpus_manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest()
        if manifest.is_file()
        else None,
        "training_seconds": round(train_seconds, 2),
        "frequencies_seconds": round(freq_seconds, 2),
    }
    (out_dir / INFO_FILE).write_text(
        json.dumps(info, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    return info


def _languages_to_train(data_dir: Path, languages: Sequence[str] | None) -> list[str]:
    available = corpus_languages(data_dir)
    langs = sorted(languages) if languages else available
    missing = [lang for lang in langs if lang not in available]
    if missing:
        raise FileNotFoundError(f"no mono/{{lang}}.txt in {data_dir} for {', '.join(missing)}")
    if not langs:
        raise FileNotFoundError(f"{data_dir}/mono has no language files: build the corpus first")
    return langs


def _train_sentencepiece(
    sentences: list[str],
    vocab_size: int,
    character_coverage: float,
    seed: int,
    num_threads: int,
    quiet: bool,
) -> bytes:
    """The serialized unigram model with LSMT's reserved ids and pieces."""
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    # model_writer instead of model_prefix: the model then does not embed the output path, so
    # the same data and settings give the same spm.model bytes wherever it is written.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        normalization_rule_name="identity",
        byte_fallback=True,
        split_digits=True,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        pad_piece=PAD_PIECE,
        unk_piece=UNK_PIECE,
        bos_piece=BOS_PIECE,
        eos_piece=EOS_PIECE,
        user_defined_symbols=list(USER_DEFINED_SYMBOLS),
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentence_length=16384,
        num_threads=num_threads,
        minloglevel=2 if quiet else 0,
    )
    return model.getvalue()


def write_frequencies(tok: Tokenizer, mono: dict[str, list[str]], out_dir: Path) -> dict[str, int]:
    """``frequencies.json``: each language's piece counts over its lines (the per-target
    vocabularies are chosen from them); returns the pieces counted per language."""
    freqs: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    for lang in sorted(mono):
        counts = piece_frequencies(tok, mono[lang])
        freqs[lang] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], tok.piece_to_id(kv[0]))))
        totals[lang] = sum(counts.values())
    (out_dir / FREQUENCIES_FILE).write_text(
        json.dumps(freqs, ensure_ascii=False, indent=0) + "\n", encoding="utf-8"
    )
    return totals


def recount(model: Path | str, data_dir: Path | str, out_dir: Path | str) -> dict:
    """An existing SentencePiece model with piece frequencies counted on another corpus: to
    train a model further on new data with the tokenizer it was trained with (its per-target
    vocabularies then follow the new data). Writes spm.model, frequencies.json and
    tokenizer.json into ``out_dir``."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = Path(model) / MODEL_FILE if Path(model).is_dir() else Path(model)
    (out_dir / MODEL_FILE).write_bytes(src.read_bytes())
    tok = Tokenizer(out_dir)
    langs = corpus_languages(data_dir)
    if not langs:
        raise FileNotFoundError(f"{data_dir}/mono has no language files: build the corpus first")
    mono = {lang: read_lines(mono_path(data_dir, lang)) for lang in langs}
    totals = write_frequencies(tok, mono, out_dir)
    info = {
        "format": FORMAT,
        "model": MODEL_FILE,
        "vocab_size": tok.vocab_size,
        "languages": langs,
        "recounted_from": str(src),
        "model_sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
        "mono_sizes": {lang: len(lines) for lang, lines in mono.items()},
        "frequencies": {
            "file": FREQUENCIES_FILE,
            "keyed_by": "piece",
            "counted_on": "mono/{lang}.txt (all lines), no BOS/EOS/tags",
            "pieces_per_language": totals,
        },
        "data_dir": str(data_dir),
    }
    (out_dir / INFO_FILE).write_text(
        json.dumps(info, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    return info


def extend(
    model: Path | str,
    data_dir: Path | str,
    out_dir: Path | str,
    per_language: int,
    sources: Collection[str] | None = GENERAL_SOURCES,
    min_count: int = 5,
) -> dict:
    """Extend ``model`` (spm.model or its directory) with the words of ``data_dir``'s training
    text (of ``sources``; None: all of it; :mod:`lsmt_text.vocabulary_extension`), write a
    tokenizer directory to ``out_dir`` with frequencies counted on the corpus; returns its
    tokenizer.json content."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    src = Path(model) / MODEL_FILE if Path(model).is_dir() else Path(model)
    lines = {lang: training_lines(data_dir, lang, sources) for lang in corpus_languages(data_dir)}
    original = src.read_bytes()
    extended, chosen = extend_model(original, lines, per_language, min_count)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MODEL_FILE).write_bytes(extended)
    info = recount(out_dir / MODEL_FILE, data_dir, out_dir)
    info["extension"] = {
        "from": str(src),
        "from_vocab_size": len(model_pieces(original)),
        "sources": sorted(sources) if sources is not None else "all",
        "per_language": per_language,
        "min_count": min_count,
        "lines": {lang: len(v) for lang, v in lines.items()},
        "added": chosen,
    }
    (out_dir / INFO_FILE).write_text(
        json.dumps(info, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
    )
    return info


def load_frequencies(tok_dir: Path | str) -> dict[str, dict[str, int]]:
    """``{lang: {piece: count}}`` as written by :func:`train`."""
    return json.loads((Path(tok_dir) / FREQUENCIES_FILE).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------
# CLI


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lsmt_text.tokenizer")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train the shared SentencePiece model")
    t.add_argument("--data", type=Path, required=True, help="corpus directory (DATA_DIR)")
    t.add_argument("--out", type=Path, required=True, help="output directory (TOK_DIR)")
    t.add_argument("--vocab-size", type=int, default=8000)
    t.add_argument("--character-coverage", type=float, default=0.9995)
    t.add_argument(
        "--max-sentences-per-language",
        type=int,
        default=30000,
        help="cap per language for the training sample (0 = no cap)",
    )
    t.add_argument("--languages", type=_csv, default=None, help="default: all in DATA_DIR/mono")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--threads", type=int, default=None)
    t.add_argument("--verbose", action="store_true", help="show SentencePiece's log")
    r = sub.add_parser(
        "recount", help="an existing model with piece frequencies counted on another corpus"
    )
    r.add_argument("--model", type=Path, required=True, help="spm.model or its directory")
    r.add_argument("--data", type=Path, required=True, help="corpus directory (DATA_DIR)")
    r.add_argument("--out", type=Path, required=True, help="output directory (TOK_DIR)")
    x = sub.add_parser(
        "extend",
        help="an existing model with whole words added (lsmt_text/vocabulary_extension.py)",
    )
    x.add_argument("--model", type=Path, required=True, help="spm.model or its directory")
    x.add_argument("--data", type=Path, required=True, help="corpus directory (DATA_DIR)")
    x.add_argument("--out", type=Path, required=True, help="output directory (TOK_DIR)")
    x.add_argument("--per-language", type=int, required=True, help="words added per language")
    x.add_argument("--min-count", type=int, default=5)
    x.add_argument(
        "--sources",
        type=_csv,
        default=None,
        help="whose training text the words come from (default: the general-domain sources; "
        "'all': every line)",
    )
    e = sub.add_parser("encode", help="encode stdin to pieces, one line per line")
    e.add_argument("tok_dir", type=Path)
    e.add_argument("--ids", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    if args.command == "encode":
        tok = Tokenizer(args.tok_dir)
        for line in sys.stdin:
            text = tok.normalize(line)
            out = tok.encode_ids(text) if args.ids else tok.encode(text)
            print(" ".join(map(str, out)))
        return 0

    if args.command == "extend":
        sources = args.sources or GENERAL_SOURCES
        info = extend(
            args.model,
            args.data,
            args.out,
            args.per_language,
            None if sources == ["all"] else sources,
            args.min_count,
        )
        ext = info["extension"]
        added = {lang: len(rows) for lang, rows in ext["added"].items()}
        before, after = ext["from_vocab_size"], info["vocab_size"]
        print(f"{args.model} ({before}) + {added} -> {args.out} ({after})")
        return 0

    if args.command == "recount":
        info = recount(args.model, args.data, args.out)
        print(f"{args.model} with frequencies of {args.data} -> {args.out}: {info['mono_sizes']}")
        return 0

    try:
        info = train(
            args.data,
            args.out,
            vocab_size=args.vocab_size,
            character_coverage=args.character_coverage,
            max_sentences_per_language=args.max_sentences_per_language or None,
            languages=args.languages,
            seed=args.seed,
            num_threads=args.threads,
            quiet=not args.verbose,
        )
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    _print_training_report(info, args.out)
    return 0


def _print_training_report(info: dict, out: Path) -> None:
    tok = Tokenizer(out)
    print(f"{'lang':<5}{'sample':>9}{'mono lines':>12}{'pieces':>12}{'pieces/line':>13}")
    for lang in info["languages"]:
        n = info["mono_sizes"][lang]
        pieces = info["frequencies"]["pieces_per_language"][lang]
        sample = info["sample_sizes"][lang]
        print(f"{lang:<5}{sample:>9,}{n:>12,}{pieces:>12,}{pieces / max(n, 1):>13.1f}")
    print(
        f"vocab {tok.vocab_size} -> {out}; trained in {info['training_seconds']:.1f} s, "
        f"frequencies in {info['frequencies_seconds']:.1f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
