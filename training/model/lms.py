"""Language-specific Matrix Synthesis and Fuse Distillation (LMS paper, Xu et al. 2023): the
method's one registration, :data:`LMS`.

A chosen linear computes ``(W + W_v W_f) x`` (eq. 1). The factors are attached to the existing
:class:`Projection` as children (``fc1.lms_v.by_lang.<lang>.weight``...) and added by a term
of its forward (:class:`LowRankTerm`), so the dense names (``fc1.weight``) stay what the
exporter and older checkpoints expect. The low-rank matrix is formed first and then applied,
as the paper does (Limitations): its cost, O(d (r + c)), is small next to the O(r c) product.

Which factors a forward uses depends on the batch's route and on the path (``ls`` or, with Fuse
Distillation, ``shared``): the term reads both from the :class:`Conditioning` the projection is
called with (batches are homogeneous in their route, paper section 5). Export: the factors go
to the language modules (``src/<l>`` holds W_v, ``tgt/<l>`` W_f pair-wise) and the product is
formed per route (``low_rank_sum``); with Fuse Distillation the user picks the path: ``ls``
(FD-LS; the shared pair is dropped) or ``shared`` (FD-share; the language factors are dropped,
the shared pair lives in the shared module, and one engine serves every route).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lsmt_core.manifest import Fusion, LowRankSum
from lsmt_core.routes import Route

from .config import LMSConfig
from .layers import (
    LS_PATH,
    SHARED_PATH,
    AttentionBlock,
    Conditioning,
    FeedForwardBlock,
    LanguageSpecific,
    Projection,
    check_lms_path,
)
from .method import Method, MethodExportError
from .transformer import Seq2SeqTransformer

__all__ = ["LMS", "LS_PATH", "SHARED_PATH", "factors", "lms_targets"]

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


def factors(linear: nn.Module, route: Route, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_v, W_f) of ``linear`` for ``route`` on ``path``."""
    if path == SHARED_PATH:
        return linear.lms_shared_v.weight, linear.lms_shared_f.weight
    return linear.lms_v.select(route).weight, linear.lms_f.select(route).weight


class LowRankTerm:
    """``W_v W_f x`` of one projection (eq. 1), with the factors it holds for the route."""

    def __init__(self, linear: Projection):
        self.linear = linear

    def __call__(self, x: torch.Tensor, cond: Conditioning) -> torch.Tensor:
        v, f = factors(self.linear, cond.route, cond.lms_path)
        # (x f^T) v^T, not x (v f)^T: two thin products instead of a full-size matrix and a
        # second full-size product (the same sum; export fuses v f into W once per route).
        return F.linear(F.linear(x, f), v)


class LowRankMethod(Method):
    """LMS, with Fuse Distillation's shared pair when ``lms.fuse_distill``."""

    name = "lms"
    kinds = ("lms", "lms_shared")
    rule = "low_rank_sum"

    def active(self, cfg: Any) -> bool:
        return bool(cfg.lms.rank)

    def attach(self, model: Seq2SeqTransformer) -> None:
        """Give every target linear its factors (initialised as section 2.2: W_v Gaussian,
        W_f zero, so the model starts as the dense one) and the term that adds ``W_v W_f``."""
        cfg = model.cfg.lms
        std = cfg.init_std if cfg.init_std is not None else cfg.rank**-0.5
        for path in lms_targets(model, cfg):
            linear = model.get_submodule(path)
            assert isinstance(linear, Projection)
            rows, cols = linear.weight.shape
            # Pair-wise: vertical from the source, flat from the target. Language-wise: both
            # from the language of the side (source in the encoder, target in the decoder).
            side = "src" if path.startswith("encoder.") else "tgt"
            v_index, f_index = ("src", "tgt") if cfg.synthesis == "pair" else (side, side)
            languages = model.languages
            linear.lms_v = LanguageSpecific(
                lambda r=rows: Factor(r, cfg.rank, std), languages, v_index
            )
            linear.lms_f = LanguageSpecific(
                lambda c=cols: Factor(cfg.rank, c, 0.0), languages, f_index
            )
            if cfg.fuse_distill:
                linear.lms_shared_v = Factor(rows, cfg.rank, std)
                linear.lms_shared_f = Factor(cfg.rank, cols, 0.0)
            linear.terms.append(LowRankTerm(linear))

    def kind_of(self, param_name: str) -> str | None:
        if ".lms_shared_" in param_name:
            return "lms_shared"
        return "lms" if ".lms_" in param_name else None

    def stored(self, kind: str, lms_path: str) -> bool:
        return kind == ("lms_shared" if lms_path == SHARED_PATH else "lms")

    @staticmethod
    def check_path(cfg: Any, lms_path: str) -> None:
        """The export path of a model of ``cfg``: ``shared`` needs Fuse Distillation."""
        try:
            check_lms_path(lms_path)
        except ValueError as e:
            raise MethodExportError(str(e)) from None
        if lms_path == SHARED_PATH and not cfg.lms.fuse_distill:
            raise MethodExportError("lms path 'shared' needs a model trained with fuse_distill")

    def fusion(self, model: Seq2SeqTransformer, lms_path: str = LS_PATH) -> Fusion:
        linears = lms_targets(model, model.cfg.lms)
        if lms_path == SHARED_PATH:
            shared = {"vertical": "lms_shared_v.weight", "flat": "lms_shared_f.weight"}
            return LowRankSum(linears=linears, path=lms_path, **shared)
        return LowRankSum(linears=linears, path=lms_path)

    def changes(self, fusion: Fusion) -> Callable[[str], bool]:
        assert isinstance(fusion, LowRankSum)
        return {f"{p}.weight" for p in fusion.linears}.__contains__


LMS = LowRankMethod()
