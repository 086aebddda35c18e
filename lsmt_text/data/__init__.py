"""Corpus building and access.

Public API for the trainer (see docs/data.md)::

    from lsmt_text.data import load_split, directions, read_stats
    pairs = load_split("data/corpus", "train")   # {(src, tgt): [(src_text, tgt_text), ...]}
    directions("data/corpus", "dev")             # [(src, tgt), ...] sorted

Building (``python -m lsmt_text.data build ...``) lives in :mod:`lsmt_text.data.corpus`; it needs
tqdm, which this module does not import.
"""

from lsmt_core.languages import (
    DEFAULT_LANGUAGES,
    DEV_BOOK,
    LANGUAGE_EDITIONS,
    SPLITS,
    SUPPORTED_LANGUAGES,
    TEST_BOOK,
)
from lsmt_text.data.formats import (
    CorpusFormatError,
    directions,
    languages,
    load_direction,
    load_ids,
    load_split,
    mono_path,
    pair_paths,
    read_stats,
)

__all__ = [
    "DEFAULT_LANGUAGES",
    "DEV_BOOK",
    "LANGUAGE_EDITIONS",
    "SPLITS",
    "SUPPORTED_LANGUAGES",
    "TEST_BOOK",
    "CorpusFormatError",
    "directions",
    "languages",
    "load_direction",
    "load_ids",
    "load_split",
    "mono_path",
    "pair_paths",
    "read_stats",
]
