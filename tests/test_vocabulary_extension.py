"""A trained tokenizer extended with whole words (lsmt_text/vocabulary_extension.py) and a
checkpoint's weights extended to it (``training.checkpoint.extend_vocabulary``): every old id
and row unchanged, each new word one piece, each new row the mean of its old pieces' rows, a
model that reads old text exactly as before and trains on from there."""

from __future__ import annotations

import hashlib

import pytest
import sentencepiece as spm
import torch

from lsmt_core.routes import Route
from lsmt_text import spm_model
from lsmt_text.data.formats import languages, mono_path, read_lines
from lsmt_text.tokenizer import Tokenizer, extend, load_frequencies
from lsmt_text.tokenizer import main as tokenizer_main
from tests.tiny import random_batch, tiny_overrides
from training.checkpoint import (
    EMBEDDING_WEIGHT,
    extend_vocabulary,
    load_checkpoint,
    model_from_checkpoint,
)
from training.checkpoint import main as checkpoint_main
from training.recipe import load_recipe
from training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


def _trainer_spec_vocab_size(proto: bytes) -> int:
    spec = next(v for n, _, v, _ in spm_model.fields(proto) if n == spm_model.TRAINER_SPEC)
    assert isinstance(spec, bytes)
    return next(v for n, _, v, _ in spm_model.fields(spec) if n == spm_model.VOCAB_SIZE)


def test_appended_pieces_take_the_next_ids_and_every_old_piece_keeps_its_own(small_tokenizer):
    proto = (small_tokenizer / "spm.model").read_bytes()
    old = spm_model.pieces(proto)
    new = spm_model.add_pieces(proto, [("▁coffee", -5.0), ("▁telephone", -6.0)])
    sp = spm.SentencePieceProcessor(model_proto=new)
    assert sp.get_piece_size() == len(old) + 2 == _trainer_spec_vocab_size(new)
    assert spm_model.pieces(new)[: len(old)] == old
    assert spm_model.pieces(new)[len(old) :] == [("▁coffee", -5.0, 1), ("▁telephone", -6.0, 1)]
    assert sp.encode("a coffee telephone", out_type=str)[-2:] == ["▁coffee", "▁telephone"]
    with pytest.raises(ValueError, match="already in the model"):
        spm_model.add_pieces(proto, [(old[-1][0], 0.0)])
    with pytest.raises(ValueError, match="given twice"):
        spm_model.add_pieces(proto, [("▁coffee", -5.0), ("▁coffee", -4.0)])


@pytest.fixture(scope="module")
def extended(toy_data, tmp_path_factory):
    """(corpus, old tokenizer, extended tokenizer, its tokenizer.json) on the toy corpus."""
    data, tok = toy_data
    out = tmp_path_factory.mktemp("extended") / "tokenizer"
    return data, tok, out, extend(tok, data, out, per_language=4, sources=None, min_count=2)


def test_the_words_that_cost_the_most_pieces_become_pieces_and_text_stays_exact(extended):
    data, tok, out, info = extended
    old, new = Tokenizer(tok), Tokenizer(out)
    added = info["extension"]["added"]
    assert sorted(added) == languages(data)
    pieces = [row["piece"] for rows in added.values() for row in rows]
    assert 0 < len(pieces) <= 4 * len(added) and len(set(pieces)) == len(pieces)
    assert new.vocab_size == old.vocab_size + len(pieces) == info["vocab_size"]
    assert new.pieces()[: old.vocab_size] == old.pieces()
    frequencies = load_frequencies(out)
    for lang, rows in added.items():
        saved = [row["count"] * (len(row["was"]) - 1) for row in rows]
        assert saved == sorted(saved, reverse=True)
        for row in rows:
            word = row["piece"].removeprefix("▁")
            assert old.encode(word) == row["was"] and len(row["was"]) >= 2
            assert new.encode(word) == [row["piece"]] and row["count"] >= 2
        lines = read_lines(mono_path(data, lang))
        assert all(new.decode_ids(new.encode_ids(line)) == line for line in lines)
        assert sum(map(len, new.encode_batch(lines))) < sum(map(len, old.encode_batch(lines)))
        assert {row["piece"] for row in rows} <= set(frequencies[lang])


def test_the_command_line_extends_and_reports(toy_data, tmp_path, capsys):
    data, tok = toy_data
    out = tmp_path / "tokenizer"
    argv = ["extend", "--model", str(tok), "--data", str(data), "--out", str(out)]
    assert tokenizer_main([*argv, "--per-language", "2", "--sources", "all"]) == 0
    assert Tokenizer(out).vocab_size > Tokenizer(tok).vocab_size
    assert "->" in capsys.readouterr().out


def test_extended_weights_read_old_text_as_before_and_train_on(extended, tiny_run, tmp_path):
    data, tok, out, _ = extended
    ckpt = load_checkpoint(tiny_run)  # best.pt, as the command line reads a run
    ext = extend_vocabulary(ckpt, out)
    old_rows, rows = ckpt["model"][EMBEDDING_WEIGHT], ext["model"][EMBEDDING_WEIGHT]
    n_old, new = old_rows.shape[0], Tokenizer(out)
    assert rows.shape[0] == new.vocab_size == ext["vocab_size"] > n_old
    assert torch.equal(rows[:n_old], old_rows)
    for i, piece in enumerate(new.pieces()[n_old:], n_old):
        was = Tokenizer(tok).encode_ids(piece.removeprefix("▁"))
        assert torch.allclose(rows[i], old_rows[was].mean(0))
    assert "optimizer" not in ext and "target_vocab" not in ext["extra"]
    digest = hashlib.sha256((out / "spm.model").read_bytes()).hexdigest()
    assert ext["tokenizer"]["sha256"] == digest

    # on old pieces the extended model computes what the old one did: its new rows only add
    # output logits (tied embedding) and are never read
    before, after = model_from_checkpoint(ckpt).eval(), model_from_checkpoint(ext).eval()
    route = Route(*ckpt["routes"][0].split("-"))
    batch = random_batch(route, vocab=n_old)
    with torch.no_grad():
        a = before(batch.src, batch.tgt_in, route).logits
        b = after(batch.src, batch.tgt_in, route).logits
    assert torch.allclose(a, b[..., :n_old], atol=1e-5)

    # a tokenizer that is not the checkpoint's with pieces appended is refused
    with pytest.raises(ValueError, match="pieces appended"):
        extend_vocabulary(ckpt, tok)
    without = {k: v for k, v in ckpt.items() if k != "tokenizer"}
    with pytest.raises(ValueError, match="does not carry its tokenizer"):
        extend_vocabulary(without, out)

    # the command line writes the same weights, and training starts from them
    weights = tmp_path / "extended.pt"
    assert checkpoint_main(["extend-vocabulary", str(tiny_run), str(out), str(weights)]) == 0
    assert torch.equal(load_checkpoint(weights)["model"][EMBEDDING_WEIGHT], rows)
    # with per-target vocabularies chosen from the extended tokenizer's frequencies, as the
    # default model trains
    overrides = tiny_overrides(data, out, max_steps=4, save_every=4)
    overrides["data"]["target_vocab"] = {"min_count": 1, "max_size": 200, "restrict_output": True}
    recipe = load_recipe("tiny", {**overrides, "init_from": str(weights)})
    Trainer(recipe, tmp_path / "run", progress=False).run()
    trained = load_checkpoint(tmp_path / "run", "last")
    assert trained["vocab_size"] == new.vocab_size and trained["step"] == 4
