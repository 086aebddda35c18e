"""``select`` (LSL, LS-FFN, LS-attention, separate decoders): the fusion of every weight group.

A route reads one module per index it uses (``shared``, ``src/<lang>``, ``tgt/<lang>``); each
dense weight is taken as it is from the module its group names (longest prefix wins).
"""

from __future__ import annotations

from lsmt_core.manifest import Index, Manifest

from ..dense import Weights
from ..store import module_index


def select(manifest: Manifest, modules: dict[str, Weights]) -> tuple[Weights, dict[Index, Weights]]:
    """The route's dense weights from its ``modules`` (name -> weights, read in order), and
    by index the tensors that are no dense weight of their module's groups: the inputs of the
    fusion rules (e.g. the target vocabulary ids, a sparse model's gates)."""
    weights: Weights = {}
    extras: dict[Index, Weights] = {}
    for name, module in modules.items():
        index = module_index(name)
        for key, value in module.items():
            if manifest.group_of(key).index != index:
                extras.setdefault(index, {})[key] = value
                continue
            weights[key] = value
    return weights, extras
