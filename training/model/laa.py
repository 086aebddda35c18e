"""Language-aware attention and language embedding embodiment (LAA paper, Jin & Xiong 2022).

LAA: one d_model x d_model matrix ``W^lang`` per target language, shared by all layers and
places. Eq. 3-5 add it to W_Q, W_K, W_V and its transpose to W_O; Appendix A computes that for
a batch as ``q = Q W^Q + Q W̄`` and ``Z = z W^O + z W̄^T`` (eq. 6-7), never broadcasting W^Q. The
second terms are added by forward hooks on the projections, which read the target language
from the :class:`Conditioning` the projection is called with; in self-attention Q = K = V, so
``Q W̄`` is computed once and reused (the paper's caching tip).

LEE: the target language's embedding ``E^lang`` is added to the hidden states at switching
points (section 3, Figure 1), in every layer, by forward pre-hooks on the blocks (or a hook on
the encoder's output), which read the route from the block's ``cond`` keyword likewise. Each
LEE vector is a parameter of its own, tgt-indexed and initialised at zero: the paper reuses the
language tag's embedding row, which would tie the model to tokenizer ids; this costs d_model
numbers per language and keeps the vector in the target's module.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import LAAConfig
from .layers import Conditioning, LanguageSpecific
from .lms import Factor

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


def attach(model: nn.Module, cfg: LAAConfig, languages: list[str]) -> None:
    d = model.cfg.d_model
    n_enc, n_dec = model.cfg.encoder_layers, model.cfg.decoder_layers
    if cfg.places:
        model.laa = LanguageSpecific(lambda: Factor(d, d, cfg.init_std), languages, "tgt")
        for path in laa_attentions(cfg, n_enc, n_dec):
            _attach_laa(model.get_submodule(path), model.laa)
    if cfg.lee_points:
        model.lee = LanguageSpecific(lambda: _Vector(d), languages, "tgt")
        for point in sorted(set(cfg.lee_points)):
            side, attr = LEE_POINTS[point]
            if attr is None:
                encoder = model.get_submodule(side)
                encoder.register_forward_hook(_lee_output(model.lee), with_kwargs=True)
                continue
            n = n_enc if side == "encoder" else n_dec
            for i in range(n):
                block = model.get_submodule(f"{side}.layers.{i}.{attr}")
                block.register_forward_pre_hook(_lee_input(model.lee), with_kwargs=True)


class _Vector(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))


def _selected(table: LanguageSpecific, kwargs: dict) -> torch.Tensor:
    # W̄ of eq. 6: the target language's matrix. Batches are homogeneous in their route, so one
    # matrix serves the whole batch (it broadcasts over the batch dimension).
    cond: Conditioning | None = kwargs.get("cond")
    if cond is None:
        raise RuntimeError("LAA/LEE called without `cond`: use the model's encode/decode")
    return table.select(cond.route).weight


def _attach_laa(block: nn.Module, table: LanguageSpecific) -> None:
    cache: dict[str, torch.Tensor] = {}

    def in_proj(module: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
        x = args[0]
        # Q, K and V are the same tensor in self-attention (and K = V in cross-attention):
        # compute x W̄ once per input (Appendix A).
        if cache.get("x") is not x:
            cache["x"], cache["xw"] = x, x @ _selected(table, kwargs)
        return out + cache["xw"]

    def out_proj(module: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
        cache.clear()  # drop the references: the next call brings new inputs
        return out + args[0] @ _selected(table, kwargs).T

    for name in ("q_proj", "k_proj", "v_proj"):
        getattr(block, name).register_forward_hook(in_proj, with_kwargs=True)
    block.out_proj.register_forward_hook(out_proj, with_kwargs=True)


def _lee_input(table: LanguageSpecific):
    def add(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return (args[0] + _selected(table, kwargs), *args[1:]), kwargs

    return add


def _lee_output(table: LanguageSpecific):
    def add(module: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor) -> torch.Tensor:
        return out + _selected(table, kwargs)

    return add
