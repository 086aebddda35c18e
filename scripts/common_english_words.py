"""Write the English words most frequent in everyday and news text, one per line, most frequent
first (single letters left out), to ``lsmt_text/data/general/wiktionary/common-en.txt``: the
lexicon entries whose English side is one of them form the source ``wiktionary-common``
(``lsmt_text.data.sources.general``), which the default model's recipe weighs up so that a
slice on the CPU sees each of them a few times (an entry of the whole lexicon comes about once
in twenty-five slices). Run once; the list is committed, so corpus builds need neither wordfreq
nor the network::

    pip install wordfreq==3.1.1
    python scripts/common_english_words.py --top 3000

The ranking is wordfreq's (Robyn Speer; Apache-2.0 code, word lists CC BY-SA 4.0), which
merges subtitles, news, Wikipedia, books, web and social-media text: a frequency list of
written and spoken everyday English rather than of any one domain, and independent of the
test sets this repository scores on.
"""

from __future__ import annotations

import argparse
from importlib.metadata import version
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "lsmt_text/data/general/wiktionary/common-en.txt"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--top", type=int, default=3000, help="how many words (default 3000)")
    args = p.parse_args()
    from wordfreq import top_n_list  # only this script needs it

    # single letters out: their lexicon entries are the letters' names ("a" -> "إي")
    words = [w for w in top_n_list("en", 2 * args.top) if len(w) > 1][: args.top]
    header = (
        f"# the {args.top} most frequent English words of two letters or more, "
        f"wordfreq {version('wordfreq')}"
    )
    OUT.write_text("\n".join([header, *words]) + "\n", encoding="utf-8")
    print(f"{len(words)} words -> {OUT}")


if __name__ == "__main__":
    main()
