"""The general-domain sources committed under lsmt_text/data/general (Tatoeba, TICO-19, UD PUD,
XQuAD): the files and their licences, how each source keys its languages together, and a
corpus built with them (held-out slices, NTREX kept out)."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from lsmt_text.data import clean, load_ids, load_split, read_stats
from lsmt_text.data.modern import ModernConfig, PairFilter
from lsmt_text.data.sources import SOURCES
from lsmt_text.data.sources.general import GENERAL_DIR, common_english_words
from lsmt_text.data.testsets import known_testsets, load_testset, ntrex_lines

REPO = Path(__file__).resolve().parents[1]
GENERAL = ("tatoeba", "tico19", "ud-pud", "xquad", "wiktionary-common", "wiktionary")
FIELDS = {"tatoeba": 2, "tico19": 3, "ud_pud": 2, "xquad": 3, "wiktionary": 2}


def read(source: str, lang: str):
    return SOURCES[source].read([SOURCES[source].files], lang)


def test_every_committed_file_matches_its_record_and_carries_its_licence():
    record = json.loads((GENERAL_DIR / "extracted.json").read_text())
    for folder, fields in FIELDS.items():
        licence_files = list((GENERAL_DIR / folder).glob("LICENSE*"))
        assert licence_files and licence_files[0].stat().st_size > 500, folder
        files = sorted((GENERAL_DIR / folder).glob("*.tsv.xz"))
        assert {f.name.removesuffix(".tsv.xz") for f in files} == set(record[folder]["rows"])
        for path in files:
            lines = lzma.decompress(path.read_bytes()).decode().splitlines()
            assert len(lines) == record[folder]["rows"][path.name.removesuffix(".tsv.xz")]
            for line in lines:
                cells = line.split("\t")
                assert len(cells) == fields and all(c.strip() == c and c for c in cells), line
    assert "CC BY 2.0 FR" in (GENERAL_DIR / "tatoeba" / "LICENSE.md").read_text()
    assert "CC0 1.0" in (GENERAL_DIR / "tico19" / "LICENSE.md").read_text()
    readme = (GENERAL_DIR / "README.md").read_text()
    for folder in FIELDS:
        assert f"`{folder}/`" in readme


def test_tatoeba_pairs_join_only_within_their_file():
    en, fr, ar = read("tatoeba", "en"), read("tatoeba", "fr"), read("tatoeba", "ar")
    assert en["en-fr:0"].text == "80% of all English words come from other languages."
    assert (
        fr["en-fr:0"].text
        == "Quatre-vingt pour cent des mots anglais proviennent d'autres langues."
    )
    assert ar["ar-en:0"].text == "اني مديون له." and en["ar-en:0"].text == "I owe him a debt."
    # en-fr keys are not Arabic's, ar-fr keys not English's: no pair is made up across files
    assert not any(k.startswith("en-fr:") for k in ar)
    assert not any(k.startswith("ar-fr:") for k in en)
    assert (en.keys() & fr.keys()) == {k for k in en if k.startswith("en-fr:")}
    # a sentence and its other translations in the file are one document: one split
    same = [k for k in en if k.startswith("en-fr:") and en[k].text == en["en-fr:0"].text]
    assert {fr[k].doc for k in same} == {en["en-fr:0"].doc}


def test_the_lexicon_gives_each_word_its_main_sense_in_the_language_s_script():
    en, fr, ru, ar = (read("wiktionary", lang) for lang in ("en", "fr", "ru", "ar"))
    assert SOURCES["wiktionary"].languages == ("ar", "de", "en", "es", "fr", "it", "pt", "ru")

    def lexicon(target):
        return {(en[k].text, target[k].text) for k in en.keys() & target.keys()}

    french, russian, arabic = lexicon(fr), lexicon(ru), lexicon(ar)
    # the sense Wiktionary gives a pronunciation, not every sense ("station" -> "gare" only)
    assert {("Tuesday", "mardi"), ("government", "gouvernement"), ("station", "gare")} <= french
    assert not {t for s, t in french if s == "station"} - {"gare"}
    assert ("Tuesday", "вторник") in russian and ("government", "حكومة") in arabic
    # function words are left out: alone, their translation teaches the wrong thing
    assert not {s for s, _ in french} & {"of", "the", "a", "to"}
    # no English note stands in for a translation in another script ("Not used in Russian")
    assert not [t for _, t in russian | arabic if any("a" <= c.lower() <= "z" for c in t)]
    assert max(len(t.split()) for _, t in french) <= 6


def test_the_lexicon_is_train_only():
    for name in ("wiktionary", "wiktionary-common"):
        assert {SOURCES[name].split_of(doc) for doc in ("a", "b", "c")} == {"train"}


def test_the_common_lexicon_holds_the_entries_of_the_frequent_english_words():
    common = common_english_words()
    assert len(common) == 3000 and {"coffee", "tuesday", "phone", "weather"} <= common
    assert not [w for w in common if len(w) < 2]  # no letter names ("a" -> "إي")
    en, fr = read("wiktionary", "en"), read("wiktionary", "fr")
    en_common, fr_common = read("wiktionary-common", "en"), read("wiktionary-common", "fr")
    # the same entries, under the same keys, as in the whole lexicon: a subset of it
    assert en_common.keys() <= en.keys() and fr_common.keys() <= fr.keys()
    assert all(en_common[k].text == en[k].text for k in en_common)
    assert {en_common[k].text.lower() for k in en_common} <= common
    assert sum(1 for k in en if en[k].text.lower() in common) == len(en_common)
    french = {(en_common[k].text, fr_common[k].text) for k in en_common.keys() & fr_common.keys()}
    assert ("Tuesday", "mardi") in french and 2000 < len(french) < 5000
    assert all(s.lower() in common for s, _ in french)


def test_the_common_word_probe_goes_both_ways_in_a_fixed_order_of_every_rank():
    probe = load_testset("common-words", None, [("en", "fr"), ("fr", "en"), ("fr", "ru")])
    assert set(probe) == {("en", "fr"), ("fr", "en")}  # English on one side, always
    en_fr = probe[("en", "fr")]
    assert ("Tuesday", "mardi") in en_fr and [(b, a) for a, b in en_fr] == probe[("fr", "en")]
    assert load_testset("common-words", None, [("en", "fr")])[("en", "fr")] == en_fr  # fixed
    alphabetical = {w: i for i, w in enumerate(sorted(common_english_words()))}
    first = [alphabetical[a.lower()] for a, _ in en_fr[:200]]
    assert min(first) < 300 and max(first) > 2700  # a shuffle, not the alphabet's first words
    assert "common-words" in known_testsets()
    everything = load_testset("common-words", None)
    assert {("en", "ar"), ("ru", "en"), ("en", "de")} <= set(everything)
    assert all("en" in route for route in everything)


@pytest.mark.parametrize(
    ("source", "langs", "key", "doc"),
    [
        ("tico19", ("ar", "en", "es", "fr", "pt", "ru"), "CMU_1:1", None),
        ("ud-pud", ("ar", "de", "en", "es", "fr", "it", "pt", "ru"), "n01001011", "n01001"),
        ("xquad", ("ar", "de", "en", "es", "ru"), "56beb4343aeaaa14008c925b", "0.0"),
    ],
)
def test_multi_parallel_sources_share_their_keys_across_languages(source, langs, key, doc):
    assert SOURCES[source].languages == langs
    segments = {lang: read(source, lang) for lang in langs}
    keys = segments["en"].keys()
    for lang in langs:
        assert len(segments[lang].keys() & keys) >= 0.99 * len(keys), lang
        assert segments[lang][key].doc == segments["en"][key].doc
    if doc is not None:
        assert segments["en"][key].doc == doc
    texts = {segments[lang][key].text for lang in langs}
    assert len(texts) == len(langs)  # translated, not copied


def test_tico19_documents_are_runs_of_units_of_one_source_document():
    en = read("tico19", "en")
    assert en["CMU_1:1"].doc == en["CMU_1:19"].doc != en["CMU_1:20"].doc
    assert en["CMU_1:1"].doc.startswith("http://www.speech.cs.cmu.edu/")


def test_a_side_that_is_an_ntrex_sentence_is_filtered():
    pf = PairFilter(ModernConfig(sources=("tatoeba",), languages=("en", "fr")), ("en", "fr"))
    news = ntrex_lines("en")[5]
    assert pf.reject(news, "Une phrase en français, assez longue pour être jugée.", "en", "fr") == (
        "in_ntrex"
    )
    assert pf.reject("Where is the station?", "Où est la gare ?", "en", "fr") is None


@pytest.fixture(scope="module")
def general_corpus(tmp_path_factory) -> tuple[Path, str]:
    """Bible (Luke, Acts, Romans) and the five general sources, ar en fr, every direction,
    built through the command line; returns (corpus dir, printed output)."""
    out = tmp_path_factory.mktemp("general") / "corpus"
    r = subprocess.run(
        [
            sys.executable, "-m", "lsmt_text.data", "build", "--out", str(out),
            "--languages", "ar,en,fr", "--directions", "all", "--books", "42,44,45",
            "--sources", f"bible,{','.join(GENERAL)}", "--no-progress",
        ],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out, r.stdout


@pytest.mark.integration
def test_general_corpus_records_its_sources_and_holds_out_whole_slices(general_corpus):
    out, printed = general_corpus
    stats = read_stats(out)
    assert set(stats["sources"]) == {"bible", *GENERAL}
    tatoeba = stats["sources"]["tatoeba"]
    assert tatoeba["licence"] == "CC-BY-2.0-FR" and tatoeba["packages"] == {}
    assert tatoeba["files"] == "lsmt_text/data/general/tatoeba"
    assert "tatoeba" in printed and "CC0-1.0" in printed
    per_source = stats["pairs_by_source"]["train"]["en-fr"]
    assert per_source["tatoeba"] > 8000 and per_source["tico19"] > 2000
    assert "xquad" not in per_source  # XQuAD has no French
    assert stats["pairs_by_source"]["train"]["ar-en"]["xquad"] > 1000
    # the lexicon trains en-fr and ar-en both ways, never a pair without English, never held out
    assert per_source["wiktionary"] > 20000
    # its common words are their own source, counted once: not again in the rest
    assert 2000 < per_source["wiktionary-common"] < 5000
    train = load_split(out, "train")[("en", "fr")]
    ids = load_ids(out, "train", "en", "fr")
    by_id = list(zip(train, ids, strict=True))
    common = {pair for pair, i in by_id if i.startswith("wiktionary-common:")}
    rest = {pair for pair, i in by_id if i.startswith("wiktionary:")}
    assert ("Tuesday", "mardi") in common and not common & rest
    assert stats["pairs_by_source"]["train"]["ar-en"]["wiktionary"] > 5000
    assert "wiktionary" not in stats["pairs_by_source"]["train"].get("ar-fr", {})
    for split in ("dev", "test"):
        assert not any("wiktionary" in by for by in stats["pairs_by_source"][split].values())

    # the everyday slice is a named test set, in every direction Tatoeba has
    assert {"tatoeba-test", "tico19-test", "ud-pud-test"} <= set(known_testsets(out))
    assert "wiktionary-test" not in known_testsets(out)
    everyday = load_testset("tatoeba-test", out)
    assert set(everyday) == {("ar", "en"), ("en", "ar"), ("en", "fr"), ("fr", "en"),
                             ("ar", "fr"), ("fr", "ar")}  # fmt: skip
    assert 150 <= len(everyday[("en", "fr")]) <= 800

    # no training segment is a held-out one in its language, whatever its source or direction
    held: dict[str, set[str]] = {"ar": set(), "en": set(), "fr": set()}
    for split in ("dev", "test"):
        for (src, tgt), rows in load_split(out, split).items():
            for s, t in rows:
                held[src].add(clean.normalize_key(s))
                held[tgt].add(clean.normalize_key(t))
    for (src, tgt), rows in load_split(out, "train").items():
        for s, t in rows:
            assert clean.normalize_key(s) not in held[src], (src, s)
            assert clean.normalize_key(t) not in held[tgt], (tgt, t)
    # and none is an NTREX sentence
    ntrex_en = {clean.normalize_key(line) for line in ntrex_lines("en")}
    assert not any(
        clean.normalize_key(s) in ntrex_en for s, _ in load_split(out, "train")[("en", "fr")]
    )
    ids = load_ids(out, "train", "en", "fr")
    assert any(i.startswith("tico19:CMU_1:") for i in ids)
