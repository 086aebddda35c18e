"""``low_rank_sum`` (LMS, and the shared path of Fuse Distillation): the product of the route's
low-rank factors added to the linear it belongs to, once per route. Exact: the engine computes
what the PyTorch model computes, up to float rounding."""

from __future__ import annotations

from lsmt_core.manifest import Fusion, Index, LowRankSum

from ..dense import DenseModel, Weights, take_input


def low_rank_sum(dense: DenseModel, rule: Fusion, extras: dict[Index, Weights]) -> None:
    """LMS eq. 1, once per route: W <- W + W_v W_f (or the shared pair, FD-share)."""
    assert isinstance(rule, LowRankSum)
    for p in rule.linears:
        v, f = take_input(dense, f"{p}.{rule.vertical}"), take_input(dense, f"{p}.{rule.flat}")
        dense.weights[f"{p}.weight"] = dense.weights[f"{p}.weight"] + v @ f
