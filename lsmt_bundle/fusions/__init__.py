"""The fusion rules: how a route's modules become one plain dense Transformer (numpy only).

One module per rule. ``select`` is the fusion of every weight group (the route's language copy
is the weight); the rules in :data:`FUSION_RULES` run after it, in the manifest's order, each
on the selected weights and the fusion inputs its modules carry (``extras``, by index), named
as in ``lsmt_core.manifest.Fusion``. A new method adds one module and one entry here (and a
parity test), not a new pipeline. The rules import only the dense model's definitions
(:mod:`lsmt_bundle.dense`), never the bundle reader.
"""

from __future__ import annotations

from collections.abc import Callable

from lsmt_core.manifest import Fusion, Index

from ..dense import DenseModel, Weights
from .laa import language_aware_attention
from .lee import language_embedding
from .low_rank_sum import low_rank_sum
from .select import select
from .sparse_subnetwork import sparse_subnetwork
from .vocab_slice import vocab_slice

# (route's dense model, the manifest's fusion entry, the extras by index); each rule asserts
# the entry's type, the table's key being that type's rule name.
FusionRule = Callable[[DenseModel, Fusion, dict[Index, Weights]], None]

FUSION_RULES: dict[str, FusionRule] = {
    "vocab_slice": vocab_slice,  # per-target vocabulary (Shallow paper)
    "low_rank_sum": low_rank_sum,  # LMS, Fuse Distillation's shared path
    "laa": language_aware_attention,  # LAA
    "lee": language_embedding,  # LEE
    "sparse_subnetwork": sparse_subnetwork,  # adaptive sparse Transformer
}

__all__ = ["FUSION_RULES", "FusionRule", "select"]
