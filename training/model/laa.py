"""Language-aware attention and language embedding embodiment (LAA paper, Jin & Xiong 2022):
the registrations :data:`LAA` and :data:`LEE`.

LAA: one d_model x d_model matrix ``W^lang`` per target language, shared by all layers and
places. Eq. 3-5 add it to W_Q, W_K, W_V and its transpose to W_O; Appendix A computes that for
a batch as ``q = Q W^Q + Q W̄`` and ``Z = z W^O + z W̄^T`` (eq. 6-7), never broadcasting W^Q. The
second terms are terms of the projections (:class:`LanguageMatrixTerm`), which read the target
language from the :class:`Conditioning` the projection is called with; in self-attention
Q = K = V, so ``Q W̄`` is computed once and reused (the paper's caching tip). Export: the target
module's matrix fused into the attention projections (``laa``).

LEE: the target language's embedding ``E^lang`` is added to the hidden states at switching
points (section 3, Figure 1), in every layer, by forward pre-hooks on the blocks (or a hook on
the encoder's output), which read the route from the block's ``cond`` keyword likewise: a
hook, because the point is a block's input, which no projection sees. Each LEE vector is a
parameter of its own, tgt-indexed and initialised at zero: the paper reuses the language tag's
embedding row, which would tie the model to tokenizer ids; this costs d_model numbers per
language and keeps the vector in the target's module. Export: the vector fused into the bias
feeding each switching point, or into a position table at a stack's input (``lee``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn

from lsmt_core.manifest import Fusion, LanguageAwareAttention, LanguageEmbedding

from .config import LAAConfig
from .layers import LS_PATH, AttentionBlock, Conditioning, LanguageSpecific
from .lms import ATTENTION_LINEARS, Factor
from .method import Method
from .transformer import Seq2SeqTransformer

# LAA place -> (side, attribute of the layer)
LAA_PLACES = {
    "encoder_self": ("encoder", "self_attn"),
    "decoder_self": ("decoder", "self_attn"),
    "decoder_cross": ("decoder", "cross_attn"),
}
# LEE switching point -> (side, block whose input receives E); 3 is the encoder's output.
LEE_POINTS = {
    1: ("encoder", "self_attn"),
    2: ("encoder", "ffn"),
    3: ("encoder", None),
    4: ("decoder", "self_attn"),
    5: ("decoder", "cross_attn"),
    6: ("decoder", "ffn"),
}


def laa_attentions(cfg: LAAConfig, n_enc: int, n_dec: int) -> list[str]:
    """Module paths of the attention blocks LAA modifies."""
    out = []
    for place in cfg.places:
        side, attr = LAA_PLACES[place]
        out += [f"{side}.layers.{i}.{attr}" for i in range(n_enc if side == "encoder" else n_dec)]
    return out


class LanguageAwareAttentionMethod(Method):
    name = "laa"
    kinds = ("laa",)
    rule = "laa"

    def active(self, cfg: Any) -> bool:
        return bool(cfg.laa.places)

    def attach(self, model: Seq2SeqTransformer) -> None:
        cfg = model.cfg
        d = cfg.d_model
        model.laa = LanguageSpecific(lambda: Factor(d, d, cfg.laa.init_std), model.languages, "tgt")
        for path in laa_attentions(cfg.laa, cfg.encoder_layers, cfg.decoder_layers):
            block = model.get_submodule(path)
            assert isinstance(block, AttentionBlock)
            _add_terms(block, model.laa)

    def kind_of(self, param_name: str) -> str | None:
        return "laa" if param_name.startswith("laa.") else None

    def fusion(self, model: Seq2SeqTransformer, lms_path: str = LS_PATH) -> Fusion:
        cfg = model.cfg
        attns = laa_attentions(cfg.laa, cfg.encoder_layers, cfg.decoder_layers)
        return LanguageAwareAttention(attentions=attns)

    def changes(self, fusion: Fusion) -> Callable[[str], bool]:
        assert isinstance(fusion, LanguageAwareAttention)
        names = {f"{p}.{x}.weight" for p in fusion.attentions for x in ATTENTION_LINEARS}
        return names.__contains__


class LanguageEmbeddingMethod(Method):
    name = "lee"
    kinds = ("lee",)
    rule = "lee"

    def active(self, cfg: Any) -> bool:
        return bool(cfg.laa.lee_points)

    def attach(self, model: Seq2SeqTransformer) -> None:
        cfg = model.cfg
        model.lee = LanguageSpecific(lambda: _Vector(cfg.d_model), model.languages, "tgt")
        for point in sorted(set(cfg.laa.lee_points)):
            side, attr = LEE_POINTS[point]
            if attr is None:
                encoder = model.get_submodule(side)
                encoder.register_forward_hook(_lee_output(model.lee), with_kwargs=True)
                continue
            n = cfg.encoder_layers if side == "encoder" else cfg.decoder_layers
            for i in range(n):
                block = model.get_submodule(f"{side}.layers.{i}.{attr}")
                block.register_forward_pre_hook(_lee_input(model.lee), with_kwargs=True)

    def kind_of(self, param_name: str) -> str | None:
        return "lee" if param_name.startswith("lee.") else None

    def fusion(self, model: Seq2SeqTransformer, lms_path: str = LS_PATH) -> Fusion:
        return lee_fusion(model.cfg)

    def changes(self, fusion: Fusion) -> Callable[[str], bool]:
        assert isinstance(fusion, LanguageEmbedding)
        return set(fusion.biases).__contains__


def lee_fusion(cfg: Any) -> LanguageEmbedding:
    """Where each switching point's vector goes. Pre-norm: the output bias of the sublayer
    before the point (its residual add is the stream). Post-norm: the bias of the layer norm
    that ends that sublayer (it is the stream). A stack's first input: its position table."""
    biases: list[str] = []
    positions: list[Literal["encoder", "decoder"]] = []
    pre = cfg.pre_norm

    def before(side: str, layer: int, block: str) -> str:
        last = {"self_attn": "out_proj", "cross_attn": "out_proj", "ffn": "fc2"}[block]
        return f"{side}.layers.{layer}.{block}." + (f"{last}.bias" if pre else "norm.bias")

    n = {"encoder": cfg.encoder_layers, "decoder": cfg.decoder_layers}
    for point in sorted(set(cfg.laa.lee_points)):
        if point in (1, 4):  # a layer's input: the previous layer's FFN, or the positions
            side: Literal["encoder", "decoder"] = "encoder" if point == 1 else "decoder"
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


class _Vector(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))


def _selected(table: LanguageSpecific, cond: Conditioning | None) -> torch.Tensor:
    # W̄ of eq. 6: the target language's matrix. Batches are homogeneous in their route, so one
    # matrix serves the whole batch (it broadcasts over the batch dimension).
    if cond is None:
        raise RuntimeError("LEE called without `cond`: use the model's encode/decode")
    return table.select(cond.route).weight


class LanguageMatrixTerm:
    """``x W̄`` (q/k/v, eq. 6) or ``x W̄^T`` (out, eq. 7) of one attention block's projection.
    The block's q/k/v share one term, which computes ``x W̄`` once per input: Q, K and V are
    the same tensor in self-attention (and K = V in cross-attention, Appendix A)."""

    def __init__(self, table: LanguageSpecific, cache: dict[str, torch.Tensor]):
        self.table = table
        self.cache = cache

    def __call__(self, x: torch.Tensor, cond: Conditioning) -> torch.Tensor:
        if self.cache.get("x") is not x:
            self.cache["x"], self.cache["xw"] = x, x @ _selected(self.table, cond)
        return self.cache["xw"]


class TransposedLanguageMatrixTerm(LanguageMatrixTerm):
    def __call__(self, x: torch.Tensor, cond: Conditioning) -> torch.Tensor:
        self.cache.clear()  # drop the references: the next call brings new inputs
        return x @ _selected(self.table, cond).T


def _add_terms(block: AttentionBlock, table: LanguageSpecific) -> None:
    cache: dict[str, torch.Tensor] = {}
    shared = LanguageMatrixTerm(table, cache)
    for proj in (block.q_proj, block.k_proj, block.v_proj):
        proj.terms.append(shared)
    block.out_proj.terms.append(TransposedLanguageMatrixTerm(table, cache))


def _lee_input(table: LanguageSpecific):
    def add(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return (args[0] + _selected(table, kwargs.get("cond")), *args[1:]), kwargs

    return add


def _lee_output(table: LanguageSpecific):
    def add(module: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
        return out + _selected(table, kwargs.get("cond"))

    return add


LAA = LanguageAwareAttentionMethod()
LEE = LanguageEmbeddingMethod()
