"""Extract the general-domain sources (docs/data.md) from their public repositories into the
compact files committed under ``lsmt_text/data/general/``.

Run once, with each repository fetched as a bare git mirror (the search tool's ``fetch``, or
``git clone --mirror``); the files it writes are committed, so corpus builds never need the
network. Every file is read at the commit it names, so a rerun at the same commits writes the
same bytes::

    python scripts/extract_general_sources.py --mirrors /work/.mirror

What it writes (our language codes; one xz-compressed TSV per file, UTF-8, no header):

- ``tatoeba/<a>-<b>.tsv.xz``: ``text_a<TAB>text_b`` for each Tatoeba pair of the Tatoeba
  Challenge test sets (v2021-08-07) of the two languages;
- ``tico19/<lang>.tsv.xz``: ``tuid<TAB>document<TAB>text``, the TICO-19 translation memory
  units (multi-parallel by ``tuid``);
- ``ud_pud/<lang>.tsv.xz``: ``sent_id<TAB>text``, the PUD treebank's sentences (multi-parallel
  by ``sent_id``);
- ``xquad/<lang>.tsv.xz``: ``question id<TAB>paragraph number<TAB>question``, XQuAD's
  questions (multi-parallel by id);
- ``wiktionary/en-<lang>.tsv.xz``: ``English<TAB>translation``, a lexicon from the English
  Wiktionary's translation tables (open-dsl-dict/wiktionary-dict's one-way DSL files): per
  headword and part of speech its main sense (the one Wiktionary gives a pronunciation, else
  every sense), the first translation of each.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import lzma
import re
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from lsmt_core.languages import LANGUAGE_EDITIONS

OUT = Path(__file__).resolve().parents[1] / "lsmt_text" / "data" / "general"
ISO3 = {
    "ar": "ara",
    "de": "deu",
    "en": "eng",
    "es": "spa",
    "fr": "fra",
    "it": "ita",
    "pt": "por",
    "ru": "rus",
}
TATOEBA_REPO = "Helsinki-NLP+OPUS-MT-testsets"
TATOEBA_DIR = "datasets/helsinki_nlp/tatoeba/testsets"
TATOEBA_VERSION = "tatoeba-test-v2021-08-07"
TICO_REPO = "tico-19+tico-19.github.io"
# our code -> the language tag of TICO-19's English-centred memory (Latin-American Spanish,
# Brazilian Portuguese)
TICO_LANGS = {"ar": "ar", "es": "es-LA", "fr": "fr", "pt": "pt-BR", "ru": "ru"}
XQUAD_LANGS = ("ar", "de", "en", "es", "ru")
WIKTIONARY_REPO = "open-dsl-dict+wiktionary-dict"
# our code -> the dictionary's (Standard Arabic is ``arb``)
WIKTIONARY_LANGS = {
    "ar": "arb",
    "de": "de",
    "es": "es",
    "fr": "fr",
    "it": "it",
    "pt": "pt",
    "ru": "ru",
}
# a sense whose gloss carries one of these labels is not what a translation should say
WIKTIONARY_SKIP = re.compile(
    r"\b(archaic|obsolete|dated|rare|dialect(al)?|slang|vulgar|offensive|derogatory|pejorative)\b",
    re.IGNORECASE,
)
WIKTIONARY_MAX_WORDS = 6
# words whose translation depends on the sentence (function words, affixes, abbreviations):
# alone they teach the wrong thing ("of" -> "moins")
WIKTIONARY_KEEP_POS = {"n", "adj", "v", "prop", "adv", "phrase", "interj", "proverb", "num"}
_SPACE = re.compile(r"\s+")


class Mirror:
    """One bare repository, read at its HEAD commit."""

    def __init__(self, root: Path, name: str):
        self.git_dir = root / name / "repo"
        self.commit = self._git("rev-parse", "HEAD").decode().strip()

    def _git(self, *args: str) -> bytes:
        return subprocess.run(
            ["git", "--git-dir", str(self.git_dir), *args], capture_output=True, check=True
        ).stdout

    def read(self, path: str) -> bytes:
        return self._git("show", f"{self.commit}:{path}")

    def exists(self, path: str) -> bool:
        return bool(self._git("ls-tree", "--name-only", self.commit, path).strip())


def one_line(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def write_rows(path: Path, rows: list[tuple[str, ...]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join("\t".join(one_line(c) for c in row) + "\n" for row in rows)
    # preset 9 with no timestamp in the container: the same rows give the same bytes
    path.write_bytes(lzma.compress(body.encode(), preset=9))
    return len(rows)


def tatoeba(mirror: Mirror) -> dict[str, int]:
    counts = {}
    langs = sorted(ISO3)
    for i, a in enumerate(langs):
        for b in langs[i + 1 :]:
            # folders are named in the order of the ISO 639-3 codes (spa-fra is fra-spa)
            x, y = sorted((ISO3[a], ISO3[b]))
            folder = f"{TATOEBA_DIR}/{x}-{y}"
            if not mirror.exists(f"{folder}/{TATOEBA_VERSION}.{ISO3[a]}"):
                continue
            side_a = mirror.read(f"{folder}/{TATOEBA_VERSION}.{ISO3[a]}").decode().splitlines()
            side_b = mirror.read(f"{folder}/{TATOEBA_VERSION}.{ISO3[b]}").decode().splitlines()
            if len(side_a) != len(side_b):
                raise RuntimeError(f"{folder}: {len(side_a)} vs {len(side_b)} lines")
            rows = [(s, t) for s, t in zip(side_a, side_b, strict=True) if s.strip() and t.strip()]
            counts[f"{a}-{b}"] = write_rows(OUT / "tatoeba" / f"{a}-{b}.tsv.xz", rows)
    return counts


def _tmx_bytes(mirror: Mirror, tag: str) -> bytes:
    name = f"data/TM/all.en-{tag}.tmx"
    if mirror.exists(name):
        return mirror.read(name)
    with zipfile.ZipFile(io.BytesIO(mirror.read(name + ".zip"))) as z:
        (member,) = [n for n in z.namelist() if n.endswith(".tmx")]
        return z.read(member)


def tico19(mirror: Mirror) -> dict[str, int]:
    xml_lang = "{http://www.w3.org/XML/1998/namespace}lang"
    by_lang: dict[str, dict[str, tuple[str, str]]] = {"en": {}}
    for ours, tag in TICO_LANGS.items():
        by_lang.setdefault(ours, {})
        for tu in ET.fromstring(_tmx_bytes(mirror, tag)).iter("tu"):
            tuid = tu.get("tuid", "")
            note = tu.find("prop")
            doc = note.text if note is not None and note.text else tuid.split(":")[0]
            for tuv in tu.iter("tuv"):
                seg = tuv.find("seg")
                text = "".join(seg.itertext()) if seg is not None else ""
                lang = "en" if tuv.get(xml_lang) == "en" else ours
                # Each memory repeats the English; 7 units of the es-LA and pt-BR ones lost a
                # leading apostrophe ("'cause" -> "cause"): the first memory's English is kept.
                if text.strip():
                    by_lang[lang].setdefault(tuid, (doc, text))
    return {
        lang: write_rows(
            OUT / "tico19" / f"{lang}.tsv.xz", [(k, d, t) for k, (d, t) in sorted(units.items())]
        )
        for lang, units in sorted(by_lang.items())
    }


def ud_pud(root: Path) -> tuple[dict[str, int], dict[str, str]]:
    counts, commits = {}, {}
    for lang in sorted(ISO3):  # UD names its repositories by the language's English name
        mirror = Mirror(root, f"UniversalDependencies+UD_{LANGUAGE_EDITIONS[lang].name}-PUD")
        commits[lang] = mirror.commit
        text = mirror.read(f"{lang}_pud-ud-test.conllu").decode()
        rows, sent_id = [], None
        for line in text.splitlines():
            if line.startswith("# sent_id = "):
                sent_id = line.split("=", 1)[1].strip()
            elif line.startswith("# text = ") and sent_id is not None:
                rows.append((sent_id, line.split("=", 1)[1]))
                sent_id = None
        counts[lang] = write_rows(OUT / "ud_pud" / f"{lang}.tsv.xz", rows)
    return counts, commits


def xquad(mirror: Mirror) -> dict[str, int]:
    counts = {}
    for lang in XQUAD_LANGS:
        data = json.loads(mirror.read(f"xquad.{lang}.json"))["data"]
        rows = [
            (qa["id"], f"{d}.{p}", qa["question"])
            for d, article in enumerate(data)
            for p, para in enumerate(article["paragraphs"])
            for qa in para["qas"]
        ]
        counts[lang] = write_rows(OUT / "xquad" / f"{lang}.tsv.xz", rows)
    return counts


def _dsl_translation(line: str) -> str:
    """The first translation of a DSL ``[m1]...[/m]`` line, without gender and part-of-speech
    tags, transliterations, qualifiers or notes; "" when none is left."""
    body = line.strip().removeprefix("[m1]").removesuffix("[/m]")
    body = re.sub(r"\[c gray\].*?\[/c\]|\[p\].*?\[/p\]|\[i\].*?\[/i\]", " ", body)
    body = re.sub(r"\\\[.*?\\\]|\(.*?\)|/[^/]*/", " ", body)  # \[qualifier\], (note), /translit/
    first = one_line(body.split(",")[0])
    # markup left over, a grammar note ("le + comp.", "...") or nothing but punctuation
    return "" if re.search(r"[\[\]<>{}=/\\+…]|\.\.|^\W*$", first) else first


def _dsl_senses(text: str) -> list[tuple[str, str, bool, str, str]]:
    """(headword, part of speech, has a pronunciation, gloss, first translation) per sense of a
    one-way DSL dictionary; senses that only point elsewhere (``SEE:``) are left out."""
    senses = []
    for entry in text.split("\n\n"):
        lines = entry.strip("\n").split("\n")
        if (
            len(lines) < 3
            or lines[0].startswith(("#", "\t"))
            or not lines[2].strip().startswith("[m1]")
        ):
            continue
        head, sense = lines[0].strip(), lines[1]
        pos = re.search(r"\[p\]<([^>]*)>\[/p\]", sense)
        gloss = re.search(r"\((.*)\)", sense)
        senses.append(
            (
                head,
                pos.group(1) if pos else "",
                "[c gray]/" in sense,
                gloss.group(1) if gloss else "",
                _dsl_translation(lines[2]),
            )
        )
    return senses


def wiktionary(mirror: Mirror) -> dict[str, int]:
    counts = {}
    for ours, theirs in WIKTIONARY_LANGS.items():
        raw = mirror.read(f"dsl/oneway/en-{theirs}-enwiktionary.dsl.dz")
        senses = _dsl_senses(gzip.decompress(raw).decode("utf-16"))
        # the main sense of a headword and part of speech is the one with a pronunciation
        # (Wiktionary lists it first); where none has one, every sense is kept
        main = {(h, p) for h, p, spoken, _, _ in senses if spoken}
        rows, seen = [], set()
        for head, pos, spoken, gloss, target in senses:
            pair = (head, target)
            if (
                not target
                or pos not in WIKTIONARY_KEEP_POS
                # an English note where the language writes in another script ("Not used in
                # Russian")
                or (LANGUAGE_EDITIONS[ours].script != "Latin" and re.search("[A-Za-z]", target))
                or ((head, pos) in main and not spoken)
                or WIKTIONARY_SKIP.search(gloss)
                or max(len(head.split()), len(target.split())) > WIKTIONARY_MAX_WORDS
                or pair in seen
            ):
                continue
            seen.add(pair)
            rows.append(pair)
        counts[f"en-{ours}"] = write_rows(OUT / "wiktionary" / f"en-{ours}.tsv.xz", rows)
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mirrors", type=Path, required=True, help="folder of owner+name/repo mirrors")
    args = p.parse_args()
    tatoeba_mirror = Mirror(args.mirrors, TATOEBA_REPO)
    tico_mirror = Mirror(args.mirrors, TICO_REPO)
    xquad_mirror = Mirror(args.mirrors, "deepmind+xquad")
    wiktionary_mirror = Mirror(args.mirrors, WIKTIONARY_REPO)
    pud_counts, pud_commits = ud_pud(args.mirrors)
    record = {
        "tatoeba": {"commit": tatoeba_mirror.commit, "rows": tatoeba(tatoeba_mirror)},
        "tico19": {"commit": tico_mirror.commit, "rows": tico19(tico_mirror)},
        "ud_pud": {"commits": pud_commits, "rows": pud_counts},
        "xquad": {"commit": xquad_mirror.commit, "rows": xquad(xquad_mirror)},
        "wiktionary": {"commit": wiktionary_mirror.commit, "rows": wiktionary(wiktionary_mirror)},
    }
    (OUT / "extracted.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
