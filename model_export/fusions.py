"""Fusion rules of the language-conditioned methods (numpy only): LMS, LAA and LEE become
plain dense weights of one route, so the existing engines serve them unchanged.

Each rule takes the route's assembled weights, pops the method's tensors (factors, matrix,
vector) and adds their contribution where the dense Transformer already has a weight for it.
All three are exact: the engine computes what the PyTorch model computes, up to float rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lsmt_core.manifest import LanguageAwareAttention, LanguageEmbedding, LowRankSum

if TYPE_CHECKING:
    from .bundle import DenseModel, Weights

# Optional dense weights: a stack's position table when a fusion changed it (else sinusoids).
ENCODER_POSITIONS = "encoder.positions"
DECODER_POSITIONS = "decoder.positions"


def _take(dense: DenseModel, name: str) -> np.ndarray:
    value = dense.weights.pop(name, None)
    if value is None:
        from .bundle import BundleError

        raise BundleError(f"fusion input {name} missing from the route's modules")
    return value


def low_rank_sum(dense: DenseModel, rule: LowRankSum, extras: dict[str, Weights]) -> None:
    """LMS eq. 1, once per route: W <- W + W_v W_f (or the shared pair, FD-share)."""
    for p in rule.linears:
        v, f = _take(dense, f"{p}.{rule.vertical}"), _take(dense, f"{p}.{rule.flat}")
        dense.weights[f"{p}.weight"] = dense.weights[f"{p}.weight"] + v @ f


def language_aware_attention(
    dense: DenseModel, rule: LanguageAwareAttention, extras: dict[str, Weights]
) -> None:
    """LAA eq. 3/5: q = Q(W^Q + M) is ``weight += M.T`` in the (out, in) layout; Z = z(W^O + M^T)
    is ``out_proj.weight += M``."""
    m = _take(dense, rule.matrix)
    w = dense.weights
    for p in rule.attentions:
        for proj in ("q_proj", "k_proj", "v_proj"):
            w[f"{p}.{proj}.weight"] = w[f"{p}.{proj}.weight"] + m.T
        w[f"{p}.out_proj.weight"] = w[f"{p}.out_proj.weight"] + m


def language_embedding(
    dense: DenseModel, rule: LanguageEmbedding, extras: dict[str, Weights]
) -> None:
    """LEE: E added to the stream = E added to the bias (or position table) that feeds it."""
    from lsmt_core.positions import sinusoid_table

    e = _take(dense, rule.vector)
    w = dense.weights
    for name in rule.biases:
        w[name] = w[name] + e
    a = dense.architecture
    for side in rule.positions:
        key = ENCODER_POSITIONS if side == "encoder" else DECODER_POSITIONS
        table = w.get(key, sinusoid_table(a.max_positions, a.d_model))
        w[key] = table + e


RULES = {
    "low_rank_sum": low_rank_sum,
    "laa": language_aware_attention,
    "lee": language_embedding,
}
