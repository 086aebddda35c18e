"""Per-language target vocabularies (Shallow paper 3.3): selection, restricted segmentation on
real sentences (de, en, ja, zh), the trainer's train-time filtering, and export's use of the
vocabularies saved in the checkpoint."""

from __future__ import annotations

import json
import math

import pytest
import sentencepiece as spm
import torch

from lsmt_core.tags import PAD_ID
from lsmt_core.target_vocab import character_counts, is_byte_piece, select_target_vocab
from lsmt_text.data import load_split
from lsmt_text.tokenizer import Tokenizer, load_frequencies
from training.batching import SourceEncoder, encode_corpus
from training.checkpoint import load_checkpoint
from training.model import Route
from training.recipe import load_recipe
from training.step import label_smoothed_nll
from training.trainer import Trainer
from training.vocab import (
    TargetVocabConfig,
    TargetVocabularies,
    encode_corpus_filtered,
    restrict_model,
    target_texts,
)
from training.vocab import main as vocab_main

K, N = 2, 60


pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def vocabs(lsl_tokenizer) -> TargetVocabularies:
    return TargetVocabularies.build(lsl_tokenizer, ["de", "en", "ja", "zh"], K, N)


@pytest.fixture(scope="module")
def texts(lsl_corpus) -> dict[str, list[str]]:
    return target_texts(lsl_corpus, "train", None)


def test_select_target_vocab_rules():
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "<2de>", "<2fr>", "<0x41>", "<0xE4>"]
    pieces += ["▁", "a", "b", "c", "q", "▁the", "▁and", "xyz", "▁a", "rare"]
    freqs = {"▁the": 50, "▁and": 40, "xyz": 30, "▁a": 20, "a": 10, "b": 3, "rare": 1, "q": 0}
    ids = select_target_vocab(freqs, pieces, min_count=2, max_size=2, keep=("<2de>",))
    kept = {pieces[i] for i in ids}
    # the 2 most frequent pieces seen >= K times
    assert {"▁the", "▁and"} <= kept and "rare" not in kept
    # specials, the given tags, byte pieces: always; other tags: never
    assert {"<pad>", "<unk>", "<s>", "</s>", "<2de>", "<0x41>", "<0xE4>"} <= kept
    assert "<2fr>" not in kept
    # every character of the language's text, counted inside all its pieces ("▁" only occurs
    # inside longer pieces); characters it never uses ("c"; "q", seen 0 times) are left out
    assert {"▁", "a", "b"} <= kept and "q" not in kept and "c" not in kept
    assert character_counts(freqs)["a"] == 10 + 40 + 20 + 1  # a, ▁and, ▁a, rare
    assert "xyz" not in kept and "▁a" in kept  # "▁a" is a character piece the language uses
    assert ids == sorted(ids)
    # a bigger N adds the next most frequent pieces
    more = {pieces[i] for i in select_target_vocab(freqs, pieces, 2, 3)}
    assert "xyz" in more


def test_vocabularies_from_tokenizer_frequencies(vocabs, lsl_tokenizer):
    tok = Tokenizer(lsl_tokenizer)
    freqs = load_frequencies(lsl_tokenizer)
    for lang, ids in vocabs.ids.items():
        pieces = [tok.id_to_piece(i) for i in ids]
        assert sum(is_byte_piece(p) for p in pieces) == 256
        assert tok.id_to_piece(tok.lang_tag_id(lang)) in pieces
        learned = [
            p
            for p in pieces
            if freqs[lang].get(p, 0) >= K and len(p.lstrip("▁")) > 1 and not is_byte_piece(p)
        ]
        assert len(learned) <= N
        # much smaller than the shared vocabulary, except for ja/zh's thousands of characters
        assert len(ids) < tok.vocab_size / (1 if lang in ("ja", "zh") else 4)
    assert set(vocabs.ids["ja"]) != set(vocabs.ids["zh"])


def test_restricted_model_with_every_piece_is_the_model(lsl_tokenizer, texts):
    blob = (lsl_tokenizer / "spm.model").read_bytes()
    sp = spm.SentencePieceProcessor(model_proto=blob)
    every = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    assert restrict_model(blob, every) == blob
    restricted = spm.SentencePieceProcessor(model_proto=restrict_model(blob, {"a"}))
    assert restricted.get_piece_size() == sp.get_piece_size()  # same ids, fewer usable
    assert restricted.is_unused(sp.piece_to_id("▁the"))


@pytest.mark.parametrize("lang", ["de", "en", "ja", "zh"])
def test_filtered_segmentation_uses_only_allowed_pieces_and_round_trips(
    lang, vocabs, texts, lsl_tokenizer
):
    tok = Tokenizer(lsl_tokenizer)
    lines = texts[lang][:300]
    extra = ["Größenwahn 😀 — naïve café Ωmega ß", "中文と日本語、한국어 mixed 123.", "x"]
    allowed = set(vocabs.ids[lang])
    full = tok.encode_batch(lines + extra)
    filtered = vocabs.encode_batch(lang, lines + extra)
    for text, f_ids, u_ids in zip(lines + extra, filtered, full, strict=True):
        assert set(f_ids) <= allowed, (text, [tok.id_to_piece(i) for i in set(f_ids) - allowed])
        assert tok.decode_ids(f_ids) == text
        assert len(f_ids) >= len(u_ids)
    # the filter does something on real text: pieces outside the vocabulary were re-segmented
    outside = sum(1 for ids in full for i in ids if i not in allowed)
    assert outside > 0
    assert sum(map(len, filtered)) > sum(map(len, full))


def test_encode_corpus_filtered_matches_encode_corpus(lsl_corpus, lsl_tokenizer, vocabs):
    tok = Tokenizer(lsl_tokenizer)
    pairs = {Route(s, t): rows[:40] for (s, t), rows in load_split(lsl_corpus, "train").items()}
    enc = SourceEncoder(tok, "target_prefix")
    every = list(range(tok.vocab_size))
    full = TargetVocabularies(vocabs.model_proto, dict.fromkeys(vocabs.ids, every), 1, 10**6)
    a, da = encode_corpus(pairs, enc, max_len=40)
    b, db = encode_corpus_filtered(pairs, enc, full, max_len=40)
    assert da == db and sum(da.values()) > 0  # same length filter (and it drops something)
    for key in a:
        for field in ("src", "src_offsets", "tgt", "tgt_offsets"):
            assert (getattr(a[key], field) == getattr(b[key], field)).all(), (key, field)
    c, _ = encode_corpus_filtered(pairs, enc, vocabs, max_len=None)
    for key, data in c.items():
        route = data.route
        assert set(data.tgt.tolist()) <= set(vocabs.ids[route.tgt]), key
    # the source side keeps the full vocabulary
    src_ids = {i for d in c.values() for i in d.src.tolist()}
    assert not src_ids <= set(vocabs.ids["en"])


def test_trainer_filters_targets_saves_vocab_and_export_uses_it(
    lsl_corpus, lsl_tokenizer, tmp_path
):
    recipe = load_recipe(
        "tiny_lsl_vocab",
        {
            "data": {"dir": str(lsl_corpus), "tokenizer": str(lsl_tokenizer), "max_len": 48},
            "training": {"max_steps": 2, "eval_every": 0, "save_every": 0, "log_every": 1},
        },
    )
    assert (recipe.data.target_vocab.min_count, recipe.data.target_vocab.max_size) == (2, 60)
    trainer = Trainer(recipe, tmp_path / "run", progress=False)
    vocab = trainer.data.target_vocab
    for key, data in trainer.data.datasets.items():
        assert set(data.tgt.tolist()) <= set(vocab.ids[data.route.tgt]), key
    trainer.run()
    ckpt = load_checkpoint(tmp_path / "run", "last")
    saved = ckpt["extra"]["target_vocab"]
    assert saved["ids"] == vocab.ids and (saved["min_count"], saved["max_size"]) == (2, 60)
    from model_export.__main__ import main as export_main

    out = tmp_path / "bundle"
    assert (
        export_main(["--checkpoint", str(tmp_path / "run"), "--which", "last", "--out", str(out)])
        == 0
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target_vocab"]["sizes"] == {k: len(v) for k, v in vocab.ids.items()}
    assert (manifest["target_vocab"]["min_count"], manifest["target_vocab"]["max_size"]) == (2, 60)


def test_stats_cli(lsl_corpus, lsl_tokenizer, tmp_path, capsys):
    out = tmp_path / "stats.json"
    args = ["stats", "--tokenizer", str(lsl_tokenizer), "--data", str(lsl_corpus)]
    assert vocab_main([*args, "--min-count", "2", "--max-size", "200", "--json", str(out)]) == 0
    stats = json.loads(out.read_text())
    assert set(stats["languages"]) == {"de", "en", "ja", "zh"}
    for row in stats["languages"].values():
        assert row["filtered_tokens_outside_vocab"] == 0 and row["roundtrip_failures"] == 0
        assert row["tokens_filtered"] >= row["tokens_full"]
    assert stats["total"]["increase"] > 0
    assert "increase" in capsys.readouterr().out


# -- the training softmax restricted to the target language's vocabulary ---------------------------


def _restricted_trainer(lsl_corpus, lsl_tokenizer, tmp_path, **training) -> Trainer:
    recipe = load_recipe(
        "tiny_lsl_vocab",
        {
            "data": {
                "dir": str(lsl_corpus),
                "tokenizer": str(lsl_tokenizer),
                "max_len": 48,
                "target_vocab": {"min_count": 2, "max_size": 60, "restrict_output": True},
            },
            "training": {"max_steps": 2, "eval_every": 0, "save_every": 0, **training},
        },
    )
    return Trainer(recipe, tmp_path / "run", progress=False)


def test_restrict_output_needs_train_time_filtering():
    with pytest.raises(ValueError, match="restrict_output needs filter_training"):
        TargetVocabConfig(max_size=10, filter_training=False, restrict_output=True)


def test_restricted_softmax_equals_full_softmax_masked_to_the_vocabulary(
    lsl_corpus, lsl_tokenizer, tmp_path
):
    """Same loss and same gradients as the full output layer with every piece outside the
    target language's vocabulary masked out: the fast path changes no training maths."""
    trainer = _restricted_trainer(lsl_corpus, lsl_tokenizer, tmp_path)
    model, vocab = trainer.model.eval(), trainer.output_vocab
    batch = trainer.data.sampler.next_batch()
    keep = batch.gold != PAD_ID
    rows, gold = vocab.restrict(batch.route, batch.gold)
    assert torch.equal(rows[gold[keep]], batch.gold[keep])  # positions map back to the pieces
    assert len(rows) < model.vocab_size

    def loss_and_grads(restricted: bool):
        model.zero_grad()
        if restricted:
            logits = model(batch.src, batch.tgt_in, batch.route, rows).logits
            _, nll = label_smoothed_nll(logits, gold, 0.0, keep=keep)
        else:
            logits = model(batch.src, batch.tgt_in, batch.route).logits
            allowed = torch.zeros(model.vocab_size, dtype=torch.bool)
            allowed[rows] = True
            logits = logits.masked_fill(~allowed, float("-inf"))
            _, nll = label_smoothed_nll(logits, batch.gold, 0.0)
        nll.backward()  # (label smoothing over a masked vocabulary would average -inf)
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return nll.item(), grads

    (fast_nll, fast_grads), (full_nll, full_grads) = loss_and_grads(True), loss_and_grads(False)
    assert math.isfinite(fast_nll) and fast_nll == pytest.approx(full_nll, rel=1e-5)
    assert fast_grads.keys() == full_grads.keys()
    for name in fast_grads:
        torch.testing.assert_close(fast_grads[name], full_grads[name], rtol=1e-4, atol=1e-6)


def test_restricted_training_runs_and_decodes_inside_the_vocabulary(
    lsl_corpus, lsl_tokenizer, tmp_path
):
    from training.evaluate import translate_ids

    trainer = _restricted_trainer(lsl_corpus, lsl_tokenizer, tmp_path, max_steps=3)
    summary = trainer.run()
    assert summary["step"] == 3 and math.isfinite(summary["last_train"]["loss"])
    model = trainer.model.eval()
    route = trainer.data.routes[0]
    data = trainer.data.datasets[f"{route.src}-{route.tgt}"]
    sources = [data.src[data.src_offsets[i] : data.src_offsets[i + 1]].tolist() for i in range(4)]
    allowed = set(trainer.data.target_vocab.ids[route.tgt])
    outputs = translate_ids(
        model, sources, route, output_ids=trainer.data.target_vocab.ids[route.tgt], batch_size=4
    )
    assert all(set(ids) <= allowed for ids in outputs)
