"""``python -m server keys``: the keys database from the command line.

    python -m server keys add NAME [--requests-per-minute N] [--chars-per-minute N]
                                   [--chars-per-day N] [--max-request-chars N]
    python -m server keys list | remove NAME | set-limits NAME [limits...]
    python -m server keys glossary NAME [PAIR --file TERMS.tsv | PAIR --clear]

Each key may keep a glossary per language pair: applied to its requests with that pair
(``server.terms``), under the terms the request itself gives. ``--db`` defaults to
``LSMT_KEYS_DB``: a SQLite file or a ``postgresql://`` URL.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from lsmt_core.routes import parse_route

from ..failures import InvalidRequest
from .records import LIMIT_NAMES, KeyStoreUnavailable, Limits
from .store import KeyStore


def _limit_options(p: argparse.ArgumentParser) -> None:
    for name in LIMIT_NAMES:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, metavar="N")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m server keys", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--db", help="a SQLite file or a postgresql:// URL (default: LSMT_KEYS_DB)")
    sub = p.add_subparsers(dest="command", required=True)
    _limit_options(sub.add_parser("add", help="add a key; prints it once"))
    sub.add_parser("list", help="every key with its limits and today's usage")
    sub.add_parser("remove", help="revoke a key (its requests get 403)")
    _limit_options(sub.add_parser("set-limits", help="change a key's limits (0: no limit)"))
    glossary = sub.add_parser(
        "glossary",
        help="show a key's glossaries, or set one pair's from a file (a line: term TAB "
        "rendering, or a term alone to keep it; --clear removes it)",
    )
    for name in ("add", "remove", "set-limits", "glossary"):
        sub.choices[name].add_argument("name")
    glossary.add_argument("pair", nargs="?", help="source-target, e.g. en-de")
    what = glossary.add_mutually_exclusive_group()
    what.add_argument("--file", type=Path, help="the pair's terms (UTF-8, one a line)")
    what.add_argument("--clear", action="store_true", help="remove the pair's glossary")
    return p


def main(argv: list[str]) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.db is None:
        from ..settings import Settings

        args.db = Settings().keys_db
    if args.db is None:
        p.error("no database: give --db or set LSMT_KEYS_DB")
    try:
        _run(p, args, KeyStore(args.db))
    except (KeyStoreUnavailable, ValueError, InvalidRequest) as exc:
        p.error(str(exc))
    return 0


def _run(p: argparse.ArgumentParser, args: argparse.Namespace, store: KeyStore) -> None:
    given = {n: getattr(args, n, None) for n in LIMIT_NAMES}
    if args.command == "add":
        print(store.add(args.name, Limits(**given)))
    elif args.command == "list":
        for record in store.list():
            used = store.usage(f"key:{record.id}")
            limits = ", ".join(f"{k}={v}" for k, v in asdict(record.limits).items() if v)
            state = "revoked" if record.revoked else "active"
            today = f"today: {used['day']['requests']} requests, {used['day']['chars']} chars"
            print(f"{record.name}\t{state}\t{limits or 'no limits'}\t{today}")
    elif args.command == "glossary":
        _glossary_command(p, args, store)
    elif args.command == "remove":
        if not store.revoke(args.name):
            p.error(f"no key named {args.name!r}")
    else:
        changes = {n: (v or None) for n, v in given.items() if v is not None}
        if not store.set_limits(args.name, **changes):
            p.error(f"no key named {args.name!r} (or no limit given)")


def _glossary_command(
    p: argparse.ArgumentParser, args: argparse.Namespace, store: KeyStore
) -> None:
    if args.pair is None:
        found = store.glossaries(args.name)
        if found is None:
            p.error(f"no key named {args.name!r}")
        for pair, pair_terms in (found or {}).items():
            for term, rendering in pair_terms.items():
                print(f"{pair}\t{term}\t{rendering}")
        return
    try:
        source, target = parse_route(args.pair)
    except ValueError as exc:
        p.error(str(exc))
    if not args.file and not args.clear:
        p.error("give --file with the pair's terms, or --clear")
    terms: dict[str, str] = {}
    if args.file:
        from ..validation import parse_terms  # the same rules as a request's terms

        glossary: dict[str, str] = {}
        keep: list[str] = []
        for line in args.file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                term, _, rendering = line.partition("\t")
                if rendering.strip():
                    glossary[term] = rendering
                else:
                    keep.append(term)
        terms = parse_terms(glossary, keep).required
    if not store.set_glossary(args.name, source, target, terms):
        p.error(f"no key named {args.name!r}")
    print(f"{args.name} {args.pair}: {len(terms)} terms")
