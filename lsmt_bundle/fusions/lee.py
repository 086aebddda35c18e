"""``lee`` (language embedding embodiment, LAA paper): the target module's vector added to the
bias (or position table) that feeds each switching point. Exact up to float rounding."""

from __future__ import annotations

from lsmt_core.manifest import Fusion, Index, LanguageEmbedding
from lsmt_core.positions import sinusoid_table

from ..dense import DECODER_POSITIONS, ENCODER_POSITIONS, DenseModel, Weights, take_input


def language_embedding(dense: DenseModel, rule: Fusion, extras: dict[Index, Weights]) -> None:
    """LEE: E added to the stream = E added to the bias (or position table) that feeds it."""
    assert isinstance(rule, LanguageEmbedding)
    e = take_input(dense, rule.vector)
    w = dense.weights
    for name in rule.biases:
        w[name] = w[name] + e
    a = dense.architecture
    for side in rule.positions:
        key = ENCODER_POSITIONS if side == "encoder" else DECODER_POSITIONS
        table = w.get(key, sinusoid_table(a.max_positions, a.d_model))
        w[key] = table + e
