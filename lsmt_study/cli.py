"""The study driver's command line (``python -m lsmt_study run|report``): :mod:`.study` runs
the arms, :mod:`.report` writes the tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import study as study_module
from .report import load_results, write_report
from .study import load_study, run_arm


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lsmt_study",
        description=study_module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train, export and evaluate arms")
    r.add_argument("study", help="a study file, or a name in lsmt_study/studies/")
    r.add_argument("--out", type=Path, default=Path("runs/study"))
    r.add_argument("--arms", help="comma-separated arms (default: all, in the file's order)")
    r.add_argument("--minutes", type=float, help="each arm's training time (default: the study's)")
    r.add_argument("--max-sentences", type=int, help="per direction and test set")
    r.add_argument("--device", default="auto", help="auto | cpu | cuda")
    r.add_argument("--set", nargs="*", action="extend", default=[], metavar="KEY=VALUE",
                   help="more overrides for every stage")  # fmt: skip
    g = sub.add_parser("report", help="tables, CSV and curves from result directories")
    g.add_argument("results", type=Path, nargs="+")
    g.add_argument("--study", help="the study file (default: the one the results name)")
    g.add_argument("--out", type=Path, help="where to write (default: the first results dir)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        try:
            study = load_study(args.study)
        except (FileNotFoundError, ValueError) as exc:  # pydantic's ValidationError is one
            print(f"error: {exc}")
            return 2
        if args.minutes is not None:
            study.minutes = args.minutes
        if args.max_sentences is not None:
            study.max_sentences = args.max_sentences
        arms = args.arms.split(",") if args.arms else list(study.arms)
        unknown = [a for a in arms if a not in study.arms]
        if unknown:
            print(f"error: unknown arms {unknown}; the study has {list(study.arms)}")
            return 2
        for name in arms:
            res = run_arm(study, name, args.out, args.device, args.set, str(args.study))
            ev = res["evaluations"]
            print(f"{name}: " + ", ".join(
                f"{t} chrF {ev[t]['averages']['all']['chrf']:.1f}" for t in ev
            ) + f" ({res['wall_seconds']:.0f} s)", flush=True)  # fmt: skip
        return 0
    results = load_results(args.results)
    if not results:
        print(f"error: no result.json under {', '.join(map(str, args.results))}")
        return 2
    study_file = args.study or next(iter(results.values()))["study_file"]
    path = write_report(load_study(study_file), results, args.out or args.results[0])
    print(path.read_text(encoding="utf-8"))
    return 0
