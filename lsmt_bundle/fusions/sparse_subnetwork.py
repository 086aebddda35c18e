"""``sparse_subnetwork`` (adaptive sparse Transformer, Sparse paper): the route's selected
layers, FFN blocks and heads as a smaller dense model, with the component scores folded into
the weights (docs/sparse.md)."""

from __future__ import annotations

import numpy as np

from lsmt_core.manifest import Architecture, Fusion, Index, SparseSubnetwork

from ..dense import DenseModel, Weights
from ..errors import BundleError

HEAD_PROJECTIONS = {"heads": "self_attn", "self_heads": "self_attn", "cross_heads": "cross_attn"}
LAYER_BRANCHES = {
    "encoder": ("self_attn.out_proj",),
    "decoder": ("self_attn.out_proj", "cross_attn.out_proj"),
}


def sparse_subnetwork(dense: DenseModel, rule: Fusion, extras: dict[Index, Weights]) -> None:
    """The route's sub-network (Sparse paper) as a smaller dense model computing exactly what
    the PyTorch model computes in eval mode. The gates (0 = dropped, else the component's score;
    bundles written before scores were exported hold 0/1) fold into the weights:

    - layers: dropped ones removed (the rest renumbered); a kept layer's score scales both
      residual branches, i.e. every out_proj and fc2 weight and bias of the layer (eq. 7);
    - FFN blocks: dropped ones sliced out of fc1 (rows, bias) and fc2 (columns); a kept block's
      score scales its fc1 rows (not b1) and its fc2 columns (eq. 6);
    - heads: a head's score scales its out_proj columns (eq. 5); dropped heads are zeroed (q/k/v
      rows and biases, out_proj columns) and still computed by the engine."""
    assert isinstance(rule, SparseSubnetwork)
    a, w = dense.architecture, dict(dense.weights)
    sizes: dict[str, int] = {}
    ffn_dims: set[int] = set()
    sides: tuple[tuple[str, Index, int], ...] = (
        ("encoder", "src", a.encoder_layers),
        ("decoder", "tgt", a.decoder_layers),
    )
    for side, index, n in sides:
        gates = {
            k[len(rule.prefix) + len(side) + 2 :]: v.astype(np.float32)
            for k, v in extras.get(index, {}).items()
            if k.startswith(f"{rule.prefix}.{side}_")
        }
        if not gates:
            raise BundleError(f"{index} module lacks the {side}'s sparse selection")
        _fold_heads(w, side, gates, a, n)
        ffn_dims |= _fold_ffn_blocks(w, side, gates, a, n)
        sizes[f"{side}_layers"] = _fold_layers(w, side, gates, n)
    if len(ffn_dims) > 1:
        raise BundleError(f"sparse FFN widths differ between layers: {sorted(ffn_dims)}")
    dense.weights = w
    dense.architecture = a.model_copy(
        update={**sizes, "ffn_dim": ffn_dims.pop() if ffn_dims else a.ffn_dim}
    )


def _fold_heads(w: Weights, side: str, gates: Weights, a: Architecture, n: int) -> None:
    """Eq. 5: each head's score scales its out_proj columns; dropped heads are zeroed."""
    head_dim = a.d_model // a.heads
    for kind, proj in HEAD_PROJECTIONS.items():
        heads = gates.get(kind)
        if heads is None:
            continue
        if heads.shape != (n, a.heads):
            raise BundleError(f"sparse {side} {kind} mask {heads.shape} does not fit the model")
        for i in range(n):
            p, score = f"{side}.layers.{i}.{proj}", np.repeat(heads[i], head_dim)
            keep = (score != 0).astype(np.float32)
            for name in ("q_proj", "k_proj", "v_proj"):
                w[f"{p}.{name}.weight"] = w[f"{p}.{name}.weight"] * keep[:, None]
                w[f"{p}.{name}.bias"] = w[f"{p}.{name}.bias"] * keep
            w[f"{p}.out_proj.weight"] = w[f"{p}.out_proj.weight"] * score[None, :]


def _fold_ffn_blocks(w: Weights, side: str, gates: Weights, a: Architecture, n: int) -> set[int]:
    """Eq. 6: dropped blocks sliced out, kept ones scaled; the FFN widths that result."""
    blocks = gates.get("ffn")
    if blocks is None:
        return set()
    if blocks.shape[0] != n or a.ffn_dim % blocks.shape[1]:
        raise BundleError(f"sparse {side} FFN mask {blocks.shape} does not fit the model")
    widths = set()
    for i in range(n):
        p = f"{side}.layers.{i}.ffn"
        score = np.repeat(blocks[i], a.ffn_dim // blocks.shape[1])
        keep = score != 0
        w[f"{p}.fc1.weight"] = w[f"{p}.fc1.weight"][keep] * score[keep, None]
        w[f"{p}.fc1.bias"] = w[f"{p}.fc1.bias"][keep]
        w[f"{p}.fc2.weight"] = w[f"{p}.fc2.weight"][:, keep] * score[None, keep]
        widths.add(int(keep.sum()))
    return widths


def _fold_layers(w: Weights, side: str, gates: Weights, n: int) -> int:
    """Eq. 7: a kept layer's score scales its residual branches; dropped layers are removed
    and the rest renumbered. The number of layers kept."""
    layers = gates.get("layers", np.ones(n, dtype=np.float32))
    if layers.shape != (n,) or not layers.any():
        raise BundleError(f"sparse {side} layer mask {layers.shape} does not fit the model")
    for layer in np.flatnonzero(layers):
        for branch in (*LAYER_BRANCHES[side], "ffn.fc2"):
            for part in ("weight", "bias"):
                name = f"{side}.layers.{layer}.{branch}.{part}"
                w[name] = w[name] * layers[layer]
    renumber = {int(i): j for j, i in enumerate(np.flatnonzero(layers))}
    head, renamed = f"{side}.layers.", {}
    for name in [k for k in w if k.startswith(head)]:
        number, rest = name[len(head) :].split(".", 1)
        value = w.pop(name)
        if int(number) in renumber:
            renamed[f"{head}{renumber[int(number)]}.{rest}"] = value
    w.update(renamed)
    return len(renumber)
