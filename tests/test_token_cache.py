"""The tokenized-pairs cache (training.token_cache) on the small real corpus: a hit gives the
same arrays as tokenizing, anything that changes the ids is another entry, a damaged entry is
built again, the directory stays inside its bound, and a resumed CLI run reads its pairs
from the cache."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from lsmt_text.data import load_split
from lsmt_text.tokenizer import Tokenizer
from training.batching import SourceEncoder, encode_corpus
from training.model import Route
from training.token_cache import TokenCache, default_dir, encode_cached, pairs_digest
from training.vocab import TargetVocabularies, encode_corpus_filtered

pytestmark = pytest.mark.usefixtures("one_thread")

FIELDS = ("src", "src_offsets", "tgt", "tgt_offsets")


@pytest.fixture(scope="module")
def pairs(lsl_corpus) -> dict[Route, list[tuple[str, str]]]:
    return {Route(s, t): rows[:60] for (s, t), rows in load_split(lsl_corpus, "train").items()}


@pytest.fixture(scope="module")
def encoder(lsl_tokenizer) -> SourceEncoder:
    return SourceEncoder(Tokenizer(lsl_tokenizer), "target_prefix")


def assert_same(a, b) -> None:
    (da, dropped_a), (db, dropped_b) = a, b
    assert dropped_a == dropped_b
    assert sorted(da) == sorted(db)
    for key in da:
        assert da[key].route == db[key].route
        for field in FIELDS:
            x, y = getattr(da[key], field), getattr(db[key], field)
            assert x.dtype == y.dtype and np.array_equal(x, y), (key, field)


def cached(cache, pairs, encoder, max_len, log=print):
    return encode_cached(
        cache, pairs, encoder, max_len, lambda: encode_corpus(pairs, encoder, max_len), log=log
    )


def cached_filtered(cache, pairs, encoder, vocabs, max_len, log=print):
    build = lambda: encode_corpus_filtered(pairs, encoder, vocabs, max_len)  # noqa: E731
    return encode_cached(cache, pairs, encoder, max_len, build, vocabs.fingerprint(), log)


class Log(list):
    def __call__(self, line: str) -> None:
        self.append(line)


def test_a_hit_gives_what_tokenizing_gives(tmp_path, pairs, encoder):
    cache, log = TokenCache(tmp_path), Log()
    fresh = encode_corpus(pairs, encoder, max_len=40)
    first = cached(cache, pairs, encoder, 40, log)
    assert_same(first, fresh)
    assert len(list(tmp_path.glob("*.npz"))) == 1 and not log  # built and stored
    second = cached(cache, pairs, encoder, 40, log)
    assert_same(second, fresh)
    assert len(log) == 1 and "from the cache" in log[0]
    assert sum(fresh[1].values()) > 0  # max_len did drop pairs, and the count came back


def test_what_changes_the_ids_is_another_entry(tmp_path, pairs, encoder, lsl_tokenizer):
    cache = TokenCache(tmp_path)
    cached(cache, pairs, encoder, 40)
    n = 1
    fewer = {r: rows[:-1] if i == 0 else rows for i, (r, rows) in enumerate(pairs.items())}
    edited = dict(pairs)
    first = next(iter(pairs))
    edited[first] = [(pairs[first][0][0] + " x", pairs[first][0][1]), *pairs[first][1:]]
    variants = [
        lambda: cached(cache, pairs, encoder, 41),
        lambda: cached(cache, fewer, encoder, 40),
        lambda: cached(cache, edited, encoder, 40),
        lambda: cached(cache, pairs, SourceEncoder(encoder.tokenizer, "lsl"), 40),  # the tags
    ]
    for variant in variants:
        fresh = variant()
        n += 1
        assert len(list(tmp_path.glob("*.npz"))) == n
        assert_same(variant(), fresh)
    # the target side's vocabularies: filtered, and with another size, are two more entries
    for max_size in (60, 120):
        vocabs = TargetVocabularies.build(lsl_tokenizer, ["de", "en", "ja", "zh"], 2, max_size)
        log = Log()
        got = cached_filtered(cache, pairs, encoder, vocabs, 40, log)
        n += 1
        assert len(list(tmp_path.glob("*.npz"))) == n and not log
        assert_same(got, encode_corpus_filtered(pairs, encoder, vocabs, 40))
        assert_same(cached_filtered(cache, pairs, encoder, vocabs, 40, log), got)
        assert "from the cache" in log[0]


def test_a_damaged_entry_is_built_again(tmp_path, pairs, encoder):
    cache = TokenCache(tmp_path)
    fresh = cached(cache, pairs, encoder, 40)
    (entry,) = tmp_path.glob("*.npz")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the arrays: zip's CRC-32 fails
    entry.write_bytes(bytes(data))
    log = Log()
    assert_same(cached(cache, pairs, encoder, 40, log), fresh)
    assert "unreadable" in log[0] and "building it again" in log[0]
    assert_same(cached(cache, pairs, encoder, 40, log), fresh)
    assert "from the cache" in log[-1]  # rewritten whole


def test_the_directory_keeps_inside_its_bound(tmp_path, pairs, encoder):
    probe = TokenCache(tmp_path / "probe")
    cached(probe, pairs, encoder, 40)
    (one,) = (tmp_path / "probe").glob("*.npz")
    cache = TokenCache(tmp_path / "c", max_bytes=int(2.5 * one.stat().st_size))
    for max_len in (40, 41, 42, 43):
        cached(cache, pairs, encoder, max_len)
    assert len(list((tmp_path / "c").glob("*.npz"))) == 2  # the two most recent
    log = Log()
    cached(cache, pairs, encoder, 43, log)
    assert "from the cache" in log[0]
    cached(cache, pairs, encoder, 40, log)
    assert len(log) == 1  # max_len 40 was evicted: tokenized again


def test_a_tokenizer_without_a_readable_model_is_not_cached(tmp_path, pairs, encoder):
    class Wrapped:  # a TokenizerLike that is not SentencePiece's
        def __init__(self, tok):
            self.tok = tok

        def encode_ids(self, text):
            return self.tok.encode_ids(text)

        def encode_batch(self, texts):
            return self.tok.encode_batch(texts)

        def decode_ids(self, ids):
            return self.tok.decode_ids(ids)

        def piece_to_id(self, piece):
            return self.tok.piece_to_id(piece)

    other = SourceEncoder(Wrapped(encoder.tokenizer), "target_prefix")
    assert other.fingerprint(pairs) is None
    assert_same(
        cached(TokenCache(tmp_path), pairs, other, 40),
        encode_corpus(pairs, encoder, max_len=40),
    )
    assert not list(tmp_path.glob("*.npz"))


def test_a_resumed_run_reads_its_pairs_from_the_cache(tmp_path, toy_data, capsys):
    from training.train import main as train_main

    data, tok = toy_data
    cache = tmp_path / "cache"
    args = ["--out", str(tmp_path / "run"), "--no-progress", "--token-cache", str(cache)]
    recipe = ["--config", "tiny", "--set", f"data.dir={data}", f"data.tokenizer={tok}",
              "training.eval_every=0", "training.save_every=0"]  # fmt: skip
    assert train_main([*args, *recipe, "--max-steps", "2"]) == 0
    assert len(list(cache.glob("*.npz"))) == 1
    assert "from the cache" not in capsys.readouterr().err  # the run's log
    assert train_main([*args, "--resume", "--max-steps", "4"]) == 0
    assert "tokenized pairs from the cache" in capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["step"] == 4


def test_the_default_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LSMT_TOKEN_CACHE", str(tmp_path / "a"))
    assert default_dir() == tmp_path / "a"
    monkeypatch.delenv("LSMT_TOKEN_CACHE")
    monkeypatch.setenv("LSMT_CACHE", str(tmp_path / "b"))
    assert default_dir() == tmp_path / "b" / "tokenized"


def test_the_key_tells_pairs_apart_that_join_alike():
    route = Route("de", "en")
    a = {route: [("eins\nzwei", "one"), ("drei", "three")]}
    b = {route: [("eins", "one"), ("zwei\ndrei", "three")]}
    assert pairs_digest(a) != pairs_digest(b)
    assert pairs_digest(a) == pairs_digest({route: list(a[route])})


def test_what_a_dead_writer_left_goes_after_a_day(tmp_path, pairs, encoder):
    stale, fresh = tmp_path / ".tmp-stale.part", tmp_path / ".tmp-writing.part"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    day_ago = time.time() - 2 * 86400
    os.utime(stale, (day_ago, day_ago))
    cached(TokenCache(tmp_path), pairs, encoder, 40)
    assert not stale.exists() and fresh.exists()  # another writer's file in progress stays
