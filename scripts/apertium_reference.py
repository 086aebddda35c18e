"""A reference point for the default model: the rule-based Apertium on NTREX, scored by the
same code as our bundles (``lsmt_core.scoring``).

    apt-get install apertium-eng-spa      # Debian; needs root once
    python scripts/apertium_reference.py [--out docs/default_model/apertium_ntrex.json]

Apertium marks words it does not know (``*word``), cannot generate (``#word``) or has no
translation for (``@word``); the marks are stripped, the words kept, as a user would read it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lsmt_core.scoring import score
from lsmt_text.data.testsets import ntrex_lines

ROOT = Path(__file__).resolve().parents[1]
# direction -> Apertium mode of the apertium-eng-spa package
MODES = {"en-es": "eng-spa", "es-en": "spa-eng"}
PACKAGE = "apertium-eng-spa"
_MARK = re.compile(r"(?<!\w)[*#@](?=\w)")


def translate(mode: str, lines: list[str]) -> list[str]:
    """Apertium over ``lines``, one output line per input line (Apertium keeps line breaks
    as formatting; the count is checked)."""
    text = "\n".join(line.replace("\n", " ") for line in lines) + "\n"
    r = subprocess.run(
        ["apertium", "-u", mode], input=text, capture_output=True, text=True, check=True
    )
    out = r.stdout.rstrip("\n").split("\n")
    if len(out) != len(lines):
        raise RuntimeError(f"apertium {mode}: {len(out)} outputs for {len(lines)} inputs")
    return [_MARK.sub("", line).strip() for line in out]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "default_model" / "apertium_ntrex.json"
    )
    args = p.parse_args()
    if shutil.which("apertium") is None:
        print(f"error: apertium is not installed: apt-get install {PACKAGE}", file=sys.stderr)
        return 2
    version = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", PACKAGE], capture_output=True, text=True
    ).stdout.strip()
    results = {}
    for direction, mode in MODES.items():
        src, tgt = direction.split("-")
        sources, refs = ntrex_lines(src), ntrex_lines(tgt)
        t0 = time.perf_counter()
        hyps = translate(mode, sources)
        seconds = time.perf_counter() - t0
        results[direction] = {
            **score(hyps, refs, tgt),
            "copy_chrf": score(sources, refs, tgt)["chrf"],
            "sentences": len(hyps),
            "seconds": round(seconds, 1),
        }
        print(f"{direction}: chrF {results[direction]['chrf']:.1f} in {seconds:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "package": f"{PACKAGE} {version}",
                "command": "python scripts/apertium_reference.py",
                "testset": "ntrex",
                "directions": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
