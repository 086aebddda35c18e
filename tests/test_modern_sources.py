"""The package sources of the corpus (LibreOffice help and UI, GNOME help, the Debian
handbook), the package cache, the named test sets and the tokenizer recount.

The sources read real excerpts of the Debian packages (tests/data/packages, see its README),
packed into real ``.deb`` files with ``dpkg-deb --build``; the corpus build then downloads
nothing: the packages are already in its cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lsmt_text.data import load_ids, load_split, read_stats
from lsmt_text.data.formats import CorpusFormatError
from lsmt_text.data.modern import ModernConfig, PairFilter, sentence_pairs, split_of
from lsmt_text.data.packages import PackageError, download_deb, unpacked
from lsmt_text.data.sources import SOURCES
from lsmt_text.data.testsets import NTREX_FILES, known_testsets, load_testset

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
PACKAGES = REPO / "tests" / "data" / "packages"
# the sources the corpus test builds: all those whose packages the excerpts hold entirely
BUILT = ("libreoffice-help", "libreoffice-ui", "gnome-docs", "debian-handbook")

needs_dpkg = pytest.mark.skipif(
    shutil.which("dpkg-deb") is None, reason="dpkg-deb (Debian) is needed to pack the excerpts"
)


def roots(source: str, lang: str) -> list[Path]:
    return [PACKAGES / p for p in SOURCES[source].packages(lang)]


@pytest.fixture(scope="module")
def package_cache(tmp_path_factory) -> Path:
    """A package cache holding a real .deb for every excerpt directory."""
    cache = tmp_path_factory.mktemp("lsmt-cache")
    (cache / "debs").mkdir()
    for tree in sorted(p for p in PACKAGES.iterdir() if p.is_dir()):
        pkg = tmp_path_factory.mktemp("pkg") / tree.name
        shutil.copytree(tree, pkg)
        (pkg / "DEBIAN").mkdir()
        (pkg / "DEBIAN" / "control").write_text(
            f"Package: {tree.name}\nVersion: 1.0-test\nArchitecture: all\n"
            "Maintainer: LSMT tests <tests@localhost>\nDescription: excerpt for tests\n"
        )
        deb = cache / "debs" / f"{tree.name}_1.0-test_all.deb"
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(deb)],
            check=True,
            capture_output=True,
        )
    return cache


# -- the sources -------------------------------------------------------------------------------


def test_help_pages_align_by_paragraph_id_and_drop_the_mac_wording():
    en = SOURCES["libreoffice-help"].read(roots("libreoffice-help", "en"), "en")
    fr = SOURCES["libreoffice-help"].read(roots("libreoffice-help", "fr"), "fr")
    assert en.keys() == fr.keys()
    key = "text/shared/find_toolbar.html#par_id3147762"
    assert en[key].text.startswith("The Find toolbar can be used")
    assert fr[key].text.startswith("La barre d'outils Rechercher peut être utilisée")
    assert en[key].doc == fr[key].doc == "text/shared/find_toolbar.html"
    # the tip "Use the shortcut Ctrl + F" has a hidden macOS variant "Command"
    tip = next(s.text for s in en.values() if s.text.startswith("Use the shortcut"))
    assert "Ctrl" in tip and "Command" not in tip


def test_ui_strings_key_on_context_and_english_and_lose_mnemonics():
    ui = SOURCES["libreoffice-ui"]
    en, ar = (
        ui.read(roots("libreoffice-ui", "en"), "en"),
        ui.read(roots("libreoffice-ui", "ar"), "ar"),
    )
    key = "avmedia/AVMEDIA_STR_ALL_FILES\x04All files"
    assert en[key].text == "All files" and ar[key].text == "كلّ الملفّات"
    assert en[key].doc == "avmedia/AVMEDIA_STR_ALL_FILES"
    assert not any("~" in s.text or "%PRODUCTNAME" in s.text for s in [*en.values(), *ar.values()])


def test_mallard_and_handbook_blocks_align_by_position():
    for source in ("gnome-docs", "debian-handbook"):
        en = SOURCES[source].read(roots(source, "en"), "en")
        fr = SOURCES[source].read(roots(source, "fr"), "fr")
        assert en.keys() == fr.keys() and len(en) >= 10, source
    en = SOURCES["gnome-docs"].read(roots("gnome-docs", "en"), "en")
    fr = SOURCES["gnome-docs"].read(roots("gnome-docs", "fr"), "fr")
    title = next(k for k, s in en.items() if s.text == "Online accounts")
    assert fr[title].text == "Comptes en ligne"
    # credits and licence blocks are not text to translate
    assert not any("Phil Bull" in s.text or "@" in s.text for s in en.values())


def test_wesnoth_catalogs_lose_markup_contexts_and_templates():
    wesnoth = SOURCES["wesnoth"]
    en, fr = (wesnoth.read(roots("wesnoth", lang), lang) for lang in ("en", "fr"))
    key = "wesnoth-anl/Comrades, avenge me!"
    assert en[key].text == "Comrades, avenge me!" and fr[key].text == "Vengez-moi, camarades !"
    assert en[key].doc == "wesnoth-anl"
    donate = next(k for k in en if "Donate Funds" in k)
    assert en[donate].text == "Donate Funds Give 20 gold to another player"  # no <span>
    assert not any("|" in s.text or "<span" in s.text for s in [*en.values(), *fr.values()])
    # whole campaigns are held out by name
    assert [wesnoth.split_of(d) for d in ("wesnoth-tsg", "wesnoth-ttb", "wesnoth-httt")] == [
        "test",
        "dev",
        "train",
    ]


# -- filters and splits -------------------------------------------------------------------------


def test_pair_filter_names_the_rule_that_drops_a_pair():
    f = PairFilter(ModernConfig(sources=(), languages=("en", "fr")), ("en", "fr"))
    en = "The format of the selected file is not supported by this program."
    fr = "Le format du fichier sélectionné n'est pas pris en charge par ce programme."
    assert f.reject(en, fr, "en", "fr") is None
    assert f.reject(en, en, "en", "fr") == "identical"
    assert f.reject("Next →", "→", "en", "fr") == "no_letters"
    assert f.reject("Row %1", "Ligne", "en", "fr") == "placeholders"
    assert f.reject("Page %1 of %2", "Page %2 sur %1", "en", "fr") is None  # order may change
    assert f.reject(en, "Ja", "en", "fr") is None  # too short to judge the ratio
    assert f.reject(en, "Ceci est une phrase française bien trop courte.", "en", "fr") is None
    assert f.reject(en * 4, fr, "en", "fr") == "length_ratio"
    assert f.reject(en, en.replace("supported", "handled well"), "en", "fr") == "wrong_language"


def test_long_paragraphs_become_sentence_pairs_only_when_both_sides_agree():
    en = "APT is a vast project. " * 9 + "It has many parts."  # over 200 characters
    fr = "APT est un vaste projet. " * 9 + "Il a de nombreuses parties."
    pairs = sentence_pairs(en.strip(), fr.strip(), "en", "fr")
    assert len(pairs) == 10 and pairs[-1] == ("It has many parts.", "Il a de nombreuses parties.")
    fr_merged = fr.replace("projet. APT", "projet, et APT", 1)
    assert sentence_pairs(en.strip(), fr_merged.strip(), "en", "fr") == [
        (en.strip(), fr_merged.strip())
    ]


def test_a_document_is_in_one_split_in_every_build():
    cfg = ModernConfig(sources=(), languages=("en", "fr"))
    splits = [split_of("libreoffice-help", f"text/page{i}.html", cfg) for i in range(3000)]
    assert splits == [split_of("libreoffice-help", f"text/page{i}.html", cfg) for i in range(3000)]
    share = {s: splits.count(s) / len(splits) for s in ("train", "dev", "test")}
    assert 0.02 < share["test"] < 0.04 and 0.01 < share["dev"] < 0.03


def test_unknown_source_names_the_known_ones(tmp_path):
    from lsmt_text.data.corpus import BuildConfig

    with pytest.raises(ValueError, match=r"unknown source.*known: bible, libreoffice-help"):
        BuildConfig(out=tmp_path, languages=("en", "fr"), sources=("bible", "wikipedia"))


def test_source_temperature_rebalances_sources_within_a_direction():
    from collections import Counter

    from training.datasets import mix_sources

    rows = [(f"verse {i}", f"vers {i}") for i in range(900)] + [
        (f"help {i}", f"aide {i}") for i in range(100)
    ]
    ids = [f"1.1.{i}" for i in range(900)] + [f"gnome-docs:page#{i}" for i in range(100)]
    assert sorted(mix_sources(rows, ids, 1.0, (1, 0))) == sorted(rows)  # T = 1: as built

    flat = mix_sources(rows, ids, 1e9, (1, 0))  # T -> infinity: equal shares
    assert len(flat) == 1000
    counts = Counter(flat)
    assert sum(n for (s, _), n in counts.items() if s.startswith("help")) == 500
    assert all(counts[r] == 5 for r in rows[900:])  # the small source repeated
    assert len({r for r in flat if r[0].startswith("verse")}) == 500  # the large one sampled
    assert mix_sources(rows, ids, 1e9, (1, 0)) == flat  # deterministic

    sqrt = mix_sources(rows, ids, 2.0, (1, 0))  # p ~ sqrt(0.9) : sqrt(0.1) = 0.75 : 0.25
    assert sum(s.startswith("help") for s, _ in sqrt) == 250
    # A weight multiplies the share: 0.75 : 3 * 0.25 = 1 : 1.
    weighted = mix_sources(rows, ids, 2.0, (1, 0), {"gnome-docs": 3.0})
    assert len(weighted) == 1000
    assert sum(s.startswith("help") for s, _ in weighted) == 500
    assert mix_sources(rows, ids, 2.0, (1, 0), {"wesnoth": 9.0}) == sqrt  # absent: no effect


def test_source_weights_are_checked_in_the_recipe():
    from training.recipe import DataConfig

    with pytest.raises(ValueError, match=r"needs data\.source_temperature"):
        DataConfig(dir="d", source_weights={"tatoeba": 2.0})
    with pytest.raises(ValueError, match="must be positive"):
        DataConfig(dir="d", source_temperature=5.0, source_weights={"tatoeba": 0})


# -- the package cache --------------------------------------------------------------------------


def test_missing_apt_get_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no apt-get, no dpkg-deb
    with pytest.raises(PackageError, match=r"'apt-get' is not installed.*--sources bible"):
        download_deb("libreoffice-help-fr", tmp_path / "cache")


@needs_dpkg
def test_cached_packages_are_unpacked_once(package_cache, monkeypatch):
    root = unpacked("gnome-user-docs", package_cache)
    assert (root / "usr/share/help/fr/gnome-help/accounts.page").is_file()
    page = root / "usr/share/help/C/gnome-help/accounts.page"
    stamp = page.stat().st_mtime_ns
    monkeypatch.setenv("PATH", "/nonexistent")  # a second call needs neither apt nor dpkg
    assert unpacked("gnome-user-docs", package_cache) == root
    assert page.stat().st_mtime_ns == stamp


# -- the corpus with package sources ------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_corpus(package_cache, tmp_path_factory) -> tuple[Path, str]:
    """Bible (Luke, Acts, Romans) + four package sources, en fr ar, every direction,
    built through the command line; returns (corpus dir, printed output)."""
    out = tmp_path_factory.mktemp("mixed") / "corpus"
    r = subprocess.run(
        [
            sys.executable, "-m", "lsmt_text.data", "build", "--out", str(out),
            "--languages", "ar,en,fr", "--directions", "all", "--books", "42,44,45",
            "--sources", f"bible,{','.join(BUILT)}", "--cache", str(package_cache),
            "--no-progress",
        ],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out, r.stdout


@needs_dpkg
def test_mixed_corpus_records_every_source_with_its_licence(mixed_corpus):
    out, printed = mixed_corpus
    stats = read_stats(out)
    assert set(stats["sources"]) == {"bible", *BUILT}
    assert stats["sources"]["libreoffice-help"]["licence"] == "MPL-2.0"
    assert stats["sources"]["gnome-docs"]["packages"] == {"gnome-user-docs": "1.0-test"}
    # the per-source table is printed, saved (stats.json, sources.csv), and counts what the
    # files hold
    assert "libreoffice-ui" in printed and "CC-BY-SA-3.0" in printed
    table = (out / "sources.csv").read_text().splitlines()
    assert table[0] == "source,language,train,dev,test,licence"
    assert any(r.startswith("gnome-docs,fr,") and r.endswith(",CC-BY-SA-3.0") for r in table)
    train = load_split(out, "train")
    for direction, per_source in stats["pairs_by_source"]["train"].items():
        src, tgt = direction.split("-")
        assert sum(per_source.values()) == len(train.get((src, tgt), []))
    # no Arabic in the help pages or GNOME's help; the handbook and UI strings have it
    assert "libreoffice-help" not in stats["pairs_by_source"]["train"]["ar-en"]
    assert stats["pairs_by_source"]["train"]["ar-en"]["libreoffice-ui"] > 0


@needs_dpkg
def test_mixed_corpus_pairs_are_real_translations(mixed_corpus):
    out, _ = mixed_corpus
    pairs = {
        (s, t)
        for split in ("train", "dev", "test")
        for s, t in load_split(out, split).get(("en", "fr"), [])
    }
    assert ("All files", "Tous les fichiers") in pairs
    assert ("Online accounts", "Comptes en ligne") in pairs
    for s, t in pairs:
        assert s != t and "\n" not in s + t
    ids = [i for split in ("train", "dev", "test") for i in load_ids(out, split, "en", "fr")]
    assert {i.partition(":")[0] for i in ids if ":" in i} == set(BUILT)


@needs_dpkg
def test_named_test_sets_of_a_mixed_corpus(mixed_corpus):
    out, _ = mixed_corpus
    acts = load_testset("acts", out)
    assert set(acts) == {(a, b) for a in ("ar", "en", "fr") for b in ("ar", "en", "fr") if a != b}
    everything = load_testset("test", out)
    assert all(len(acts[d]) <= len(everything[d]) for d in acts)
    names = known_testsets(out)
    assert {"acts", "ntrex"} <= set(names)
    # a source's slice is listed exactly when it holds pairs out (a source with none, here every
    # package source of these trimmed packages, is refused by name, not offered)
    for source in set(read_stats(out)["sources"]) - {"bible"}:
        for split in ("dev", "test"):
            name = f"{source}-{split}"
            if name in names:
                assert load_testset(name, out)
            else:
                with pytest.raises(CorpusFormatError, match="has no pairs"):
                    load_testset(name, out)
    with pytest.raises(CorpusFormatError, match="known: acts, ntrex"):
        load_testset("wmt14", out)


# -- NTREX ------------------------------------------------------------------------------------


def test_ntrex_is_line_aligned_in_every_committed_language():
    pairs = load_testset("ntrex", None, [("en", "fr"), ("ar", "ru"), ("en", "sw")])
    assert set(pairs) == {("en", "fr"), ("ar", "ru")}  # no Swahili committed
    assert len(pairs[("en", "fr")]) == 1997
    src, ref = pairs[("en", "fr")][0]
    assert src == "Welsh AMs worried about 'looking like muppets'"
    assert ref.startswith("Des membres de l’Assemblée du pays de Galles")
    assert not any(s.endswith("\r") or t.endswith("\r") for s, t in pairs[("ar", "ru")])
    assert set(NTREX_FILES) == {"ar", "de", "en", "es", "fr", "it", "pt", "ru"}
    assert (
        (REPO / "lsmt_text/data/ntrex128/LICENSE.md")
        .read_text()
        .startswith("Attribution-ShareAlike 4.0")
    )


# -- the tokenizer recount ----------------------------------------------------------------------


def test_recount_keeps_the_model_and_counts_the_new_corpus(small_corpus, small_tokenizer, tmp_path):
    from lsmt_text.tokenizer import load_frequencies, recount

    info = recount(small_tokenizer, small_corpus, tmp_path / "tok")
    assert (tmp_path / "tok/spm.model").read_bytes() == (small_tokenizer / "spm.model").read_bytes()
    assert load_frequencies(tmp_path / "tok") == load_frequencies(small_tokenizer)
    assert info["languages"] == ["de", "en", "zh"]
    assert json.loads((tmp_path / "tok/tokenizer.json").read_text())["recounted_from"]
