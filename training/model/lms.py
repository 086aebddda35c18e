"""Language-specific Matrix Synthesis and Fuse Distillation (LMS paper, Xu et al. 2023).

A chosen linear computes ``(W + W_v W_f) x`` (eq. 1). The factors are attached to the existing
``nn.Linear`` as children (``fc1.lms_v.by_lang.<lang>.weight``...) and added by a forward hook,
so the dense names (``fc1.weight``) stay what the exporter and older checkpoints expect. The
low-rank matrix is formed first and then applied, as the paper does (Limitations): its cost,
O(d (r + c)), is small next to the O(r c) product.

Which factors a forward uses depends on the batch's route and on the path (``ls`` or, with Fuse
Distillation, ``shared``): the hook reads both from the :class:`Conditioning` the linear is
called with (batches are homogeneous in their route, paper section 5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lsmt_core.routes import Route

from .config import LMSConfig
from .layers import (
    LS_PATH,
    SHARED_PATH,
    AttentionBlock,
    Conditioning,
    FeedForwardBlock,
    LanguageSpecific,
)

__all__ = ["LS_PATH", "SHARED_PATH", "attach_lms", "factors", "lms_targets"]

FFN_LINEARS = ("fc1", "fc2")
ATTENTION_LINEARS = ("q_proj", "k_proj", "v_proj", "out_proj")


class Factor(nn.Module):
    """One low-rank factor (a module, so that :class:`LanguageSpecific` can hold one per
    language)."""

    def __init__(self, rows: int, cols: int, std: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, cols))
        if std > 0:
            nn.init.normal_(self.weight, std=std)
        else:
            nn.init.zeros_(self.weight)


def lms_targets(model: nn.Module, cfg: LMSConfig) -> list[str]:
    """Module paths of the linears that get LMS factors, in a fixed order."""
    names = []
    for path, module in model.named_modules():
        if cfg.ffn and isinstance(module, FeedForwardBlock):
            names += [f"{path}.{n}" for n in FFN_LINEARS]
        if cfg.attention and isinstance(module, AttentionBlock):
            names += [f"{path}.{n}" for n in ATTENTION_LINEARS]
    return names


def attach_lms(model: nn.Module, cfg: LMSConfig, languages: list[str]) -> list[str]:
    """Give every target linear its factors (initialised as section 2.2: W_v Gaussian, W_f
    zero, so the model starts as the dense one) and the hook that adds ``W_v W_f``."""
    if not cfg.rank:
        return []
    std = cfg.init_std if cfg.init_std is not None else cfg.rank**-0.5
    targets = lms_targets(model, cfg)
    for path in targets:
        linear = model.get_submodule(path)
        assert isinstance(linear, nn.Linear)
        rows, cols = linear.weight.shape
        # Pair-wise: vertical from the source, flat from the target. Language-wise: both from
        # the language of the side (source in the encoder, target in the decoder).
        side = "src" if path.startswith("encoder.") else "tgt"
        v_index, f_index = ("src", "tgt") if cfg.synthesis == "pair" else (side, side)
        linear.lms_v = LanguageSpecific(lambda r=rows: Factor(r, cfg.rank, std), languages, v_index)
        linear.lms_f = LanguageSpecific(lambda c=cols: Factor(cfg.rank, c, 0.0), languages, f_index)
        if cfg.fuse_distill:
            linear.lms_shared_v = Factor(rows, cfg.rank, std)
            linear.lms_shared_f = Factor(cfg.rank, cols, 0.0)
        linear.register_forward_hook(_hook(linear), with_kwargs=True)
    return targets


def factors(linear: nn.Module, route: Route, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_v, W_f) of ``linear`` for ``route`` on ``path``."""
    if path == SHARED_PATH:
        return linear.lms_shared_v.weight, linear.lms_shared_f.weight
    return linear.lms_v.select(route).weight, linear.lms_f.select(route).weight


def _hook(linear: nn.Module):
    def add_low_rank(module: nn.Module, args: tuple, kwargs: dict, out: torch.Tensor):
        cond: Conditioning | None = kwargs.get("cond")
        if cond is None:
            raise RuntimeError("LMS linear called without `cond`: use the model's encode/decode")
        v, f = factors(linear, cond.route, cond.lms_path)
        # (x f^T) v^T, not x (v f)^T: two thin products instead of a full-size matrix and a
        # second full-size product (the same sum; export fuses v f into W once per route).
        return out + F.linear(F.linear(args[0], f), v)

    return add_low_rank
