"""Import user parallel corpora (Moses-style file pairs or TSV) into the corpus layout."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from lsmt_core.languages import SPLITS, SUPPORTED_LANGUAGES
from lsmt_core.text import normalize_text
from lsmt_text.data import clean
from lsmt_text.data.corpus import FORMAT
from lsmt_text.data.formats import (
    CorpusFormatError,
    check_lang,
    check_split,
    directions,
    load_direction,
    mono_path,
    pair_paths,
    read_lines,
    read_stats,
    write_json,
    write_lines,
    write_manifest,
    write_pairs,
)
from lsmt_text.data.report import text_stats


def _read_text(path: Path) -> list[str]:
    if not path.is_file():
        raise CorpusFormatError(f"input file {path} not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusFormatError(f"{path} is not valid UTF-8: {e}") from e
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def read_moses(src_file: Path | str, tgt_file: Path | str) -> list[tuple[str, str]]:
    """Two line-aligned plain-text files -> pairs. Line counts must match."""
    s, t = _read_text(Path(src_file)), _read_text(Path(tgt_file))
    if len(s) != len(t):
        raise CorpusFormatError(
            f"line counts differ: {src_file} has {len(s)} lines, {tgt_file} has {len(t)} lines"
        )
    return list(zip(s, t, strict=True))


def read_tsv(tsv_file: Path | str) -> list[tuple[str, str]]:
    """``source<TAB>target`` per line. Every line must have exactly two fields."""
    pairs = []
    for n, line in enumerate(_read_text(Path(tsv_file)), 1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusFormatError(
                f"{tsv_file}:{n}: expected 2 tab-separated fields (source, target), "
                f"got {len(fields)}"
            )
        pairs.append((fields[0], fields[1]))
    return pairs


def import_pairs(
    pairs: list[tuple[str, str]],
    data_dir: Path | str,
    src_lang: str,
    tgt_lang: str,
    split: str,
    name: str,
    append: bool = False,
    max_chars: int | None = None,
) -> dict:
    """Clean (Unicode/whitespace normalisation, empty and over-long lines dropped), remove pairs
    whose normalised text occurs in another split, and write the direction ``src_lang-tgt_lang``
    of ``split``. Ids are ``{name}:{line number}``. Updates mono/ (train only), stats.json and
    manifest.json. Returns the import record added to stats.json."""
    t0 = time.perf_counter()
    check_lang(src_lang)
    check_lang(tgt_lang)
    check_split(split)
    if src_lang == tgt_lang:
        raise CorpusFormatError("source and target language must differ")
    for lang in (src_lang, tgt_lang):
        if lang not in SUPPORTED_LANGUAGES:
            print(
                f"warning: {lang!r} is not a builder language; the tokenizer has no <2{lang}> tag",
                file=sys.stderr,
            )
    root = Path(data_dir)
    counts = {"input": len(pairs), "empty": 0, "too_long": 0, "split_overlap": 0, "duplicate": 0}

    # Normalised texts of the other splits, per language (test > dev > train precedence is not
    # needed here: imported pairs simply must not collide with any other split).
    other: dict[str, set[str]] = {src_lang: set(), tgt_lang: set()}
    for other_split in SPLITS:
        if other_split == split:
            continue
        for s_l, t_l in directions(root, other_split):
            if s_l not in other and t_l not in other:
                continue
            for s, t in load_direction(root, other_split, s_l, t_l):  # type: ignore[misc]
                if s_l in other:
                    other[s_l].add(clean.normalize_key(s))
                if t_l in other:
                    other[t_l].add(clean.normalize_key(t))

    kept: list[tuple[str, str]] = []
    ids: list[str] = []
    seen: set[tuple[str, str]] = set()
    for n, (s, t) in enumerate(pairs, 1):
        s, t = normalize_text(s, src_lang), normalize_text(t, tgt_lang)
        if not clean.has_content(s) or not clean.has_content(t):
            counts["empty"] += 1
        elif max_chars is not None and (len(s) > max_chars or len(t) > max_chars):
            counts["too_long"] += 1
        elif clean.normalize_key(s) in other[src_lang] or clean.normalize_key(t) in other[tgt_lang]:
            counts["split_overlap"] += 1
        elif (s, t) in seen:
            counts["duplicate"] += 1
        else:
            seen.add((s, t))
            kept.append((s, t))
            ids.append(f"{name}:{n}")

    counts["kept"] = len(kept)
    ps, _, _ = pair_paths(root, split, src_lang, tgt_lang)
    if ps.exists():
        if not append:
            raise CorpusFormatError(
                f"{split}/{src_lang}-{tgt_lang} already exists in {root}; use --append to add to it"
            )
        old_pairs, old_ids = load_direction(root, split, src_lang, tgt_lang, with_ids=True)  # type: ignore[misc]
        kept, ids = list(old_pairs) + kept, list(old_ids) + ids
    write_pairs(root, split, src_lang, tgt_lang, kept, ids)

    if split == "train":
        for lang, side in ((src_lang, 0), (tgt_lang, 1)):
            path = mono_path(root, lang)
            existing = read_lines(path) if path.is_file() else []
            write_lines(path, dict.fromkeys(existing + [p[side] for p in kept]))

    record = {
        "name": name,
        "split": split,
        "direction": f"{src_lang}-{tgt_lang}",
        "append": append,
        "counts": counts,
        "pairs_in_file": len(kept),
        "source": text_stats(s for s, _ in kept),
        "target": text_stats(t for _, t in kept),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    stats_path = root / "stats.json"
    if stats_path.is_file():
        stats = read_stats(root)
    else:
        stats = {"format": FORMAT, "languages": [], "pairs": {s: {} for s in SPLITS}}
    stats.setdefault("imports", []).append(record)
    direction = f"{src_lang}-{tgt_lang}"
    stats.setdefault("pairs", {}).setdefault(split, {})[direction] = len(kept)
    split_dirs = stats.setdefault("directions", {}).setdefault(split, [])
    if direction not in split_dirs:
        split_dirs.append(direction)
        split_dirs.sort()
    langs = set(stats.get("languages", [])) | {src_lang, tgt_lang}
    stats["languages"] = sorted(langs)
    write_json(stats_path, stats)
    write_manifest(root)
    return record
