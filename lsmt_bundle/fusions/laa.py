"""``laa`` (language-aware attention, LAA paper): the target module's d x d matrix added into
the projections of the chosen attention blocks. Exact up to float rounding."""

from __future__ import annotations

from lsmt_core.manifest import Fusion, Index, LanguageAwareAttention

from ..dense import DenseModel, Weights, take_input


def language_aware_attention(dense: DenseModel, rule: Fusion, extras: dict[Index, Weights]) -> None:
    """LAA eq. 3/5: q = Q(W^Q + M) is ``weight += M.T`` in the (out, in) layout; Z = z(W^O + M^T)
    is ``out_proj.weight += M``."""
    assert isinstance(rule, LanguageAwareAttention)
    m = take_input(dense, rule.matrix)
    w = dense.weights
    for p in rule.attentions:
        for proj in ("q_proj", "k_proj", "v_proj"):
            w[f"{p}.{proj}.weight"] = w[f"{p}.{proj}.weight"] + m.T
        w[f"{p}.out_proj.weight"] = w[f"{p}.out_proj.weight"] + m
