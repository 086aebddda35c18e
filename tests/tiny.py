"""Tiny models and a toy corpus for the tests: one definition, used by every test file
(fixtures built from these live in tests/conftest.py)."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from lsmt_core.routes import Route
from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID
from training.batching import Batch
from training.model import ModelConfig
from training.recipe import load_recipe


def random_batch(route: Route, vocab: int = 40, b: int = 4, seed: int = 0) -> Batch:
    """A batch of ``b`` random sentences of ``route`` (sources 6 ids with EOS, targets 5)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (b, 6), generator=g)
    src[:, -1] = EOS_ID
    tgt = torch.randint(4, vocab, (b, 5), generator=g)
    tgt_in = torch.cat([torch.full((b, 1), BOS_ID), tgt], dim=1)
    gold = torch.cat([tgt, torch.full((b, 1), EOS_ID)], dim=1)
    return Batch(route, src, tgt_in, gold, int((gold != PAD_ID).sum()), int(src.numel()))


def tiny_model_config(**kw) -> ModelConfig:
    """A model small enough for a unit test (d 32, 2-2 layers); ``kw`` overrides fields."""
    base = dict(
        d_model=32,
        heads=4,
        ffn_dim=64,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
        max_positions=64,
    )
    base.update(kw)
    return ModelConfig(**base)


# -- a synthetic word-for-word corpus in the documented layout ----------------------------------

WORDS = {
    "en": "the man woman child house water bread king city day night light god heart word "
    "land sea fire mountain tree book friend father mother brother sister good great small "
    "new old see give take go come speak love know and",
    "de": "der mann frau kind haus wasser brot könig stadt tag nacht licht gott herz wort "
    "land meer feuer berg baum buch freund vater mutter bruder schwester gut groß klein "
    "neu alt sehen geben nehmen gehen kommen sprechen lieben wissen und",
    "fr": "le homme femme enfant maison eau pain roi ville jour nuit lumière dieu cœur parole "
    "terre mer feu montagne arbre livre ami père mère frère sœur bon grand petit nouveau "
    "vieux voir donner prendre aller venir parler aimer savoir et",
}
LEXICON = {lang: words.split() for lang, words in WORDS.items()}
TOY_ROUTES = [("de", "en"), ("en", "de"), ("en", "fr"), ("fr", "en")]
SIZES = {"train": 400, "dev": 24, "test": 24}


def toy_sentences(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` aligned sentences: the same random concept sequence in every language."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        concepts = [rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(3, 8))]
        row = {}
        for lang, words in LEXICON.items():
            text = " ".join(words[c] for c in concepts)
            row[lang] = text[0].upper() + text[1:] + "."
        out.append(row)
    return out


def make_toy_corpus(root: Path) -> Path:
    from lsmt_text.data.formats import mono_path, write_lines, write_pairs

    data = root / "corpus"
    for i, (split, n) in enumerate(SIZES.items()):
        rows = toy_sentences(n, seed=i)
        for src, tgt in TOY_ROUTES:
            pairs = [(r[src], r[tgt]) for r in rows]
            write_pairs(data, split, src, tgt, pairs, [f"{split}.{k}" for k in range(n)])
        if split == "train":
            for lang in LEXICON:
                write_lines(mono_path(data, lang), [r[lang] for r in rows])
    return data


def make_toy_tokenizer(data: Path, out: Path) -> Path:
    from lsmt_text.tokenizer import train

    train(data, out, vocab_size=360, max_sentences_per_language=None, num_threads=1)
    return out


def tiny_overrides(data: Path, tok: Path, **training) -> dict:
    t = {"eval_every": 0, "save_every": 0, "log_every": 2}
    t.update(training)
    return {"data": {"dir": str(data), "tokenizer": str(tok)}, "training": t}


def tiny_recipe(data: Path, tok: Path, model: dict | None = None, **training):
    ov = tiny_overrides(data, tok, **training)
    if model:
        ov["model"] = model
    return load_recipe("tiny", ov)


LSL_TOY_MODEL = {"language_specific": {"encoder_src": [1], "encoder_tgt": [2]}}


def lsl_toy_recipe(
    data: Path, tok: Path, languages: list[str], steps: int, data_keys: dict | None = None, **top
):
    """The tiny recipe with LSL layers and per-target vocabularies, on ``languages`` of the
    toy corpus; ``data_keys``: more keys of its data section; ``top``: more top-level recipe
    keys (init_from, add_languages...)."""
    ov = tiny_overrides(data, tok, max_steps=steps, save_every=steps)
    ov["data"] |= {
        "languages": languages,
        "target_vocab": {"min_count": 1, "max_size": 200, "restrict_output": True},
        **(data_keys or {}),
    }
    return load_recipe("tiny", {**ov, "model": LSL_TOY_MODEL, **top})
