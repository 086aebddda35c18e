"""Export of the language-conditioned methods: which fusion rules a model's bundle records and
which of its trained tensors the bundle leaves out (needs the PyTorch model).

- LMS: the factors go to the language modules (``src/<l>`` holds W_v, ``tgt/<l>`` W_f for
  pair-wise), the product is formed per route (``low_rank_sum``). With Fuse Distillation the
  user picks the path: ``ls`` (FD-LS; the shared pair is dropped) or ``shared`` (FD-share; the
  language factors are dropped, the shared pair lives in the shared module, and every route
  reads the same modules, so one engine serves them all).
- LAA: the target module's matrix fused into the attention projections (``laa``).
- LEE: the target module's vector fused into the bias feeding each switching point, or into
  a position table at a stack's input (``lee``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lsmt_core.manifest import (
    Fusion,
    LanguageAwareAttention,
    LanguageEmbedding,
    LowRankSum,
    SparseSubnetwork,
)

LMS_PATHS = ("ls", "shared")


class MethodExportError(ValueError):
    """A method's placement that cannot be fused exactly into a dense route."""


def lms_excluded(param_name: str, path: str) -> bool:
    """True for the LMS tensors the chosen path leaves out of the bundle."""
    if path == "shared":
        return ".lms_v.by_lang." in param_name or ".lms_f.by_lang." in param_name
    return ".lms_shared_" in param_name


def method_fusions(model: Any, lms_path: str = "ls") -> list[Fusion]:
    from training.model.laa import laa_attentions

    cfg = model.cfg
    fusions: list[Fusion] = []
    if lms_path not in LMS_PATHS:
        raise MethodExportError(f"lms path {lms_path!r} is not one of {LMS_PATHS}")
    if lms_path == "shared" and not cfg.lms.fuse_distill:
        raise MethodExportError("lms path 'shared' needs a model trained with fuse_distill")
    if cfg.lms.rank:
        if lms_path == "shared":
            names = {"vertical": "lms_shared_v.weight", "flat": "lms_shared_f.weight"}
        else:
            names = {}
        fusions.append(LowRankSum(linears=list(model.lms_linears), path=lms_path, **names))
    if cfg.laa.places:
        attns = laa_attentions(cfg.laa, cfg.encoder_layers, cfg.decoder_layers)
        fusions.append(LanguageAwareAttention(attentions=attns))
    if cfg.laa.lee_points:
        fusions.append(lee_fusion(cfg))
    return fusions


def lee_fusion(cfg: Any) -> LanguageEmbedding:
    """Where each switching point's vector goes. Pre-norm: the output bias of the sublayer
    before the point (its residual add is the stream). Post-norm: the bias of the layer norm
    that ends that sublayer (it is the stream). A stack's first input: its position table."""
    biases: list[str] = []
    positions: list[str] = []
    pre = cfg.pre_norm

    def before(side: str, layer: int, block: str) -> str:
        last = {"self_attn": "out_proj", "cross_attn": "out_proj", "ffn": "fc2"}[block]
        return f"{side}.layers.{layer}.{block}." + (f"{last}.bias" if pre else "norm.bias")

    n = {"encoder": cfg.encoder_layers, "decoder": cfg.decoder_layers}
    for point in sorted(set(cfg.laa.lee_points)):
        if point in (1, 4):  # a layer's input: the previous layer's FFN, or the positions
            side = "encoder" if point == 1 else "decoder"
            positions.append(side)
            biases += [before(side, i - 1, "ffn") for i in range(1, n[side])]
        elif point == 2:
            biases += [before("encoder", i, "self_attn") for i in range(n["encoder"])]
        elif point == 3:  # the encoder's output: its final norm (pre-norm) or last FFN norm
            last = n["encoder"] - 1
            biases.append("encoder.final_norm.bias" if pre else before("encoder", last, "ffn"))
        elif point == 5:
            biases += [before("decoder", i, "self_attn") for i in range(n["decoder"])]
        elif point == 6:
            biases += [before("decoder", i, "cross_attn") for i in range(n["decoder"])]
    return LanguageEmbedding(biases=biases, positions=positions)


def fused_weights(fusions: list[Fusion]) -> Callable[[str], bool]:
    """Whether a dense weight is one the fusions change (the exporter's check compares the
    others with the model as they are; the parity tests check the fused ones). A sparse
    sub-network changes every layer's weights (scores folded in, FFN blocks sliced out, layers
    renumbered: ``lsmt_bundle.fusions.sparse_subnetwork``), so only the weights outside the
    layers are compared for it."""
    names: set[str] = set()
    prefixes: tuple[str, ...] = ()
    for f in fusions:
        if isinstance(f, LowRankSum):
            names |= {f"{p}.weight" for p in f.linears}
        elif isinstance(f, LanguageAwareAttention):
            names |= {f"{p}.{x}.weight" for p in f.attentions for x in ATTN}
        elif isinstance(f, LanguageEmbedding):
            names |= set(f.biases)
        elif isinstance(f, SparseSubnetwork):
            prefixes = ("encoder.layers.", "decoder.layers.")
    return lambda name: name in names or name.startswith(prefixes)


SPARSE_SCORES = "sparse_scores."  # the selection logits, exported as masks


def is_method_tensor(param_name: str) -> bool:
    """A method's own tensor, which the bundle holds as a fusion's record rather than as a
    dense weight: LMS factors, LAA matrices, LEE vectors, the sparse selection logits."""
    return ".lms_" in param_name or param_name.startswith(("laa.", "lee.", SPARSE_SCORES))


ATTN = ("q_proj", "k_proj", "v_proj", "out_proj")
