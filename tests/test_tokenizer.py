"""Tokenizer tests: trained on the small real corpus (conftest: small_corpus, small_tokenizer)."""

from __future__ import annotations

import json

import pytest

from lsmt_core.languages import SUPPORTED_LANGUAGES
from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID, QUALITY_TAGS, UNK_ID, lang_tag
from lsmt_text.data import load_split, mono_path
from lsmt_text.data.formats import read_lines
from lsmt_text.tokenizer import (
    Tokenizer,
    lang_tag_id,
    load_frequencies,
    piece_frequencies,
    quality_tag_id,
    train,
)

LANGS = ("de", "en", "zh")


@pytest.fixture(scope="module")
def tok(small_tokenizer) -> Tokenizer:
    return Tokenizer(small_tokenizer)


def test_special_ids(tok):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert [tok.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.sp.pad_id() == PAD_ID and tok.sp.unk_id() == UNK_ID
    assert tok.sp.bos_id() == BOS_ID and tok.sp.eos_id() == EOS_ID
    assert tok.vocab_size == 2000 == len(tok.pieces())
    assert tok.pieces()[5] == tok.id_to_piece(5)


def test_tags_are_single_pieces_with_fixed_ids(tok):
    # every supported language has a tag, not only the trained ones
    assert len(SUPPORTED_LANGUAGES) >= 22
    for i, lang in enumerate(SUPPORTED_LANGUAGES):
        tag = lang_tag(lang)
        assert tag == f"<2{lang}>"
        assert tok.piece_to_id(tag) == lang_tag_id(lang) == 4 + i
        assert tok.encode(tag) == [tag] or tok.encode(tag) == ["▁", tag]
        assert tag in tok.encode(f"{tag} Hallo")
    for tag in QUALITY_TAGS:
        assert tok.piece_to_id(tag) == quality_tag_id(tag)
        assert tag in tok.encode(f"{tag} text")
    assert quality_tag_id("<LQ>") == 4 + len(SUPPORTED_LANGUAGES) + 1
    ids = tok.encode_ids("<2de> Guten Tag")
    assert lang_tag_id("de") in ids
    with pytest.raises(KeyError):
        lang_tag_id("xx")


@pytest.mark.parametrize("split", ["dev", "test"])
def test_round_trip_every_language(tok, small_corpus, split):
    data = load_split(small_corpus, split)
    texts = {lang: [] for lang in LANGS}
    for (src, tgt), pairs in data.items():
        texts[src] += [s for s, _ in pairs]
        texts[tgt] += [t for _, t in pairs]
    for lang, lines in texts.items():
        assert lines
        for line in lines:
            # identity normalisation: corpus text (NFC, collapsed spaces) comes back unchanged
            assert tok.decode_ids(tok.encode_ids(line)) == line, (lang, line)
            assert tok.decode_pieces(tok.encode(line)) == line


def test_round_trip_unseen_characters_and_normalize(tok):
    # characters never seen in training (Korean, Devanagari, a rare CJK ideograph) go through
    # byte fallback, not <unk>
    for text in ["안녕하세요, 세계!", "नमस्ते दुनिया", "𠀀 㐀", "Größe – „Zitat“ «ça» ½"]:
        ids = tok.encode_ids(text)
        assert UNK_ID not in ids
        assert tok.decode_ids(ids) == text
    # full-width punctuation is kept (no NFKC)
    assert tok.decode_ids(tok.encode_ids("你好，世界！")) == "你好，世界！"
    raw = "  Hallo\u200e   Welt\t "
    assert tok.normalize(raw) == "Hallo Welt"
    assert tok.decode_ids(tok.encode_ids(tok.normalize(raw))) == "Hallo Welt"
    assert tok.normalize("你好， 世界", "zh") == "你好，世界"


def test_frequencies_sum_to_encoded_pieces(tok, small_tokenizer, small_corpus):
    freqs = load_frequencies(small_tokenizer)
    info = json.loads((small_tokenizer / "tokenizer.json").read_text())
    assert sorted(freqs) == list(LANGS) == info["languages"]
    for lang in LANGS:
        lines = read_lines(mono_path(small_corpus, lang))
        total = sum(len(tok.encode(line)) for line in lines)
        assert (
            sum(freqs[lang].values()) == total == info["frequencies"]["pieces_per_language"][lang]
        )
        assert freqs[lang] == dict(piece_frequencies(tok, lines))
        assert all(tok.piece_to_id(p) != UNK_ID or p == "<unk>" for p in freqs[lang])
    # Chinese characters are frequent in zh and absent from de
    zh_only = [p for p in freqs["zh"] if p.strip("▁") and "\u4e00" <= p.strip("▁")[0] <= "\u9fff"]
    assert zh_only and not any(p in freqs["de"] for p in zh_only[:50])


def test_tokenizer_json(small_tokenizer):
    info = json.loads((small_tokenizer / "tokenizer.json").read_text())
    assert info["vocab_size"] == 2000
    assert info["special_ids"] == {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3}
    assert info["lang_tags"]["de"] == lang_tag_id("de")
    assert info["normalization_rule_name"] == "identity"
    assert set(info["sample_sizes"]) == set(LANGS) and info["training_seconds"] >= 0
    assert (small_tokenizer / "spm.vocab").is_file()


def test_balanced_sample_and_determinism(small_corpus, small_tokenizer, tmp_path):
    info = train(
        small_corpus,
        tmp_path / "t",
        vocab_size=2000,
        character_coverage=0.995,
        max_sentences_per_language=300,
    )
    assert info["sample_sizes"] == {lang: 300 for lang in LANGS}
    assert info["mono_sizes"]["en"] > 300
    # same data and settings as the fixture -> the same model, byte for byte
    train(small_corpus, tmp_path / "u", vocab_size=2000, character_coverage=0.995)
    assert (tmp_path / "u" / "spm.model").read_bytes() == (
        small_tokenizer / "spm.model"
    ).read_bytes()


def test_wrong_model_is_rejected(tmp_path, small_corpus):
    import sentencepiece as spm

    lines = read_lines(mono_path(small_corpus, "en"))
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(tmp_path / "plain"),
        vocab_size=500,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="convention"):
        Tokenizer(tmp_path / "plain.model")
    with pytest.raises(FileNotFoundError):
        Tokenizer(tmp_path / "missing")
