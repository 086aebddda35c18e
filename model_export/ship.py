"""Whether a candidate bundle replaces the shipped default model: the shipping rule of the
everyday-text issue, applied to evaluations of both bundles as served.

    python -m model_export.ship --before runs/eval/shipped --after runs/eval/candidate
    python -m model_export.ship --before runs/dev/shipped --choose runs/dev/w0.2 runs/dev/w0.5 \
        --bible bible-dev

Each folder holds ``<testset>.json`` files written by ``python -m model_export.evaluate`` on
the same directions and sentences. The candidate ships when

- its chrF, averaged over the general test sets (NTREX and the held-out software and everyday
  slices: every file here but the Bible's; each set's mean over its directions, then the mean
  of the sets), is higher than the shipped model's, and
- its Bible chrF (``acts``, or the set named by ``--bible``; mean over directions) is at most
  ``BIBLE_TOLERANCE`` below the shipped one's.

``--after``: prints one row per test set and the verdict; writes it as JSON with ``--out``;
exits 0 when the candidate ships, 1 when it does not, 2 when the evaluations cannot be compared.

``--choose``: the same rule for each of several candidates (on dev slices, so that choosing
among them spends no test set); the chosen one is the best general mean among those that pass,
or, when none passes, among those that keep the Bible (the nearest to passing, which the test
sets then judge), or, when none keeps it, the best on the Bible. Its folder is the last line
printed; ``--out`` writes it with every verdict. Exits 0 when the chosen one
passes, 1 when none does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ACTS = "acts"
BIBLE_TOLERANCE = 1.0  # chrF the candidate may lose on the Bible's test set, on average


class NotComparable(ValueError):
    """The two evaluations did not score the same sentences."""


@dataclass
class Verdict:
    ships: bool
    general_before: float
    general_after: float
    acts_before: float | None
    acts_after: float | None
    # test set -> {"before": mean chrF, "after": mean chrF, "directions": n}
    testsets: dict[str, dict] = field(default_factory=dict)
    reason: str = ""


def mean_chrf(evaluation: dict, directions: list[str]) -> float:
    return sum(evaluation["directions"][d]["chrf"] for d in directions) / len(directions)


def _comparable(name: str, before: dict, after: dict) -> list[str]:
    """The directions both scored, checked to be the same sentences."""
    common = sorted(before["directions"].keys() & after["directions"].keys())
    if not common:
        raise NotComparable(f"{name}: no direction scored in both evaluations")
    for d in common:
        n_before = before["directions"][d]["sentences"]
        n_after = after["directions"][d]["sentences"]
        if n_before != n_after:
            raise NotComparable(f"{name} {d}: {n_before} sentences before, {n_after} after")
    for key in ("beam", "max_sentences"):
        if before.get(key) != after.get(key):
            raise NotComparable(f"{name}: {key} {before.get(key)} before, {after.get(key)} after")
    return common


def decide(before: dict[str, dict], after: dict[str, dict], bible: str = ACTS) -> Verdict:
    """The verdict on evaluations keyed by test set name, ``bible`` the Bible's (see the
    module docstring)."""
    general = sorted((before.keys() & after.keys()) - {bible})
    if not general:
        raise NotComparable("no general test set (NTREX or a held-out slice) in both folders")
    rows: dict[str, dict] = {}
    for name in sorted(before.keys() & after.keys()):
        dirs = _comparable(name, before[name], after[name])
        rows[name] = {
            "before": mean_chrf(before[name], dirs),
            "after": mean_chrf(after[name], dirs),
            "directions": len(dirs),
        }
    g_before = sum(rows[n]["before"] for n in general) / len(general)
    g_after = sum(rows[n]["after"] for n in general) / len(general)
    kept = rows.get(bible)  # the Bible's row: what the candidate must keep
    verdict = Verdict(
        ships=False,
        general_before=g_before,
        general_after=g_after,
        acts_before=kept["before"] if kept else None,
        acts_after=kept["after"] if kept else None,
        testsets=rows,
    )
    if kept is None:
        verdict.reason = f"no {bible} evaluation in both folders: the rule needs it"
    elif g_after <= g_before:
        verdict.reason = f"general mean {g_after:.2f} is not above the shipped {g_before:.2f}"
    elif not keeps_bible(verdict):
        verdict.reason = (
            f"{bible} {kept['after']:.2f} loses more than {BIBLE_TOLERANCE} against the "
            f"shipped {kept['before']:.2f}"
        )
    else:
        verdict.ships = True
        verdict.reason = (
            f"general mean {g_before:.2f} -> {g_after:.2f}, {bible} {kept['before']:.2f} -> "
            f"{kept['after']:.2f}"
        )
    return verdict


def choose(verdicts: dict[str, Verdict]) -> str:
    """The candidate to take (see the module docstring): the best general mean among those
    that pass the rule; when none passes, among those that keep the Bible (the test sets may
    still judge it better: the nearest to passing on general text); else the best on the
    Bible."""
    pool = [name for name, v in verdicts.items() if v.ships] or [
        name for name, v in verdicts.items() if keeps_bible(v)
    ]
    if pool:
        return max(pool, key=lambda name: verdicts[name].general_after)
    return max(verdicts, key=lambda name: verdicts[name].acts_after or 0.0)


def keeps_bible(v: Verdict) -> bool:
    return (
        v.acts_before is not None
        and v.acts_after is not None
        and v.acts_after >= v.acts_before - BIBLE_TOLERANCE
    )


def load_folder(folder: Path) -> dict[str, dict]:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise NotComparable(f"{folder}: no <testset>.json evaluation")
    return {f.stem: json.loads(f.read_text()) for f in files}


def format_verdict(v: Verdict) -> str:
    lines = [f"{'test set':<26}{'dirs':>5}{'shipped':>10}{'candidate':>11}{'change':>9}"]
    for name, r in v.testsets.items():
        change = r["after"] - r["before"]
        lines.append(
            f"{name:<26}{r['directions']:>5}{r['before']:>10.2f}{r['after']:>11.2f}{change:>+9.2f}"
        )
    lines.append(
        f"{'general mean':<31}{v.general_before:>10.2f}{v.general_after:>11.2f}"
        f"{v.general_after - v.general_before:>+9.2f}"
    )
    lines.append(("SHIP: " if v.ships else "KEEP the shipped model: ") + v.reason)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m model_export.ship",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--before", type=Path, required=True, help="the shipped bundle's evaluations")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--after", type=Path, help="the candidate's evaluations")
    which.add_argument("--choose", type=Path, nargs="+", help="several candidates' evaluations")
    p.add_argument("--bible", default=ACTS, help="the Bible's test set (default: %(default)s)")
    p.add_argument("--out", type=Path, help="write the verdict (or the choice) as JSON")
    args = p.parse_args(argv)
    candidates = [args.after] if args.after else args.choose
    try:
        before = load_folder(args.before)
        verdicts = {str(c): decide(before, load_folder(c), args.bible) for c in candidates}
    except NotComparable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.after:
        verdict = verdicts[str(args.after)]
        print(format_verdict(verdict))
        result: dict = asdict(verdict)
    else:
        for name, v in verdicts.items():
            print(f"{name}:\n{format_verdict(v)}\n")
        chosen = choose(verdicts)
        verdict = verdicts[chosen]
        result = {"chosen": chosen, "verdicts": {n: asdict(v) for n, v in verdicts.items()}}
        print(chosen)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if verdict.ships else 1


if __name__ == "__main__":
    sys.exit(main())
