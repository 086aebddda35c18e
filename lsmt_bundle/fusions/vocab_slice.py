"""``vocab_slice`` (per-target vocabulary filtering, Shallow paper): the decoder embedding and
the output projection become the rows of the (tied) decoder embedding at the target's
vocabulary ids, and the engine's target vocabulary the matching pieces of the target
language's vocabulary. Whole rows: int8 rows stay int8."""

from __future__ import annotations

import numpy as np

from lsmt_core.manifest import Fusion, Index, VocabSlice

from ..dense import DECODER_EMBEDDING, OUTPUT_PROJECTION, DenseModel, Weights
from ..errors import BundleError


def vocab_slice(dense: DenseModel, rule: Fusion, extras: dict[Index, Weights]) -> None:
    assert isinstance(rule, VocabSlice)
    ids = extras.get("tgt", {}).get(rule.ids)
    if ids is None:
        raise BundleError(f"target module lacks {rule.ids}")
    ids = ids.astype(np.int64)
    if ids.min() < 0 or ids.max() >= len(dense.target_vocab):
        raise BundleError("target vocabulary ids out of range")
    rows = dense.weights[DECODER_EMBEDDING][ids]
    dense.weights[DECODER_EMBEDDING] = rows
    dense.weights[OUTPUT_PROJECTION] = rows
    scale = dense.row_scales.get(DECODER_EMBEDDING)
    if scale is not None:  # int8 rows keep their scales
        dense.row_scales[DECODER_EMBEDDING] = dense.row_scales[OUTPUT_PROJECTION] = scale[ids]
    dense.target_vocab = [dense.target_vocab[i] for i in ids]
