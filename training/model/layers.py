"""Transformer building blocks, written so that language-conditioned variants plug in.

A block that depends on the language is wrapped in :class:`LanguageSpecific`; callers resolve
it for the batch's route with :func:`resolve`. Parameter names then read
``...<name>.by_lang.<lang>...``, which is how the exporter finds the per-language modules.

What a forward pass is conditioned on travels as arguments, never as state set on modules:
the :class:`Conditioning` (route, LMS path) reaches every block and projection as the keyword
``cond`` (the :class:`Projection` terms of ``lms.py`` and ``laa.py`` read it from there), and
the sparse model's scores reach a block as its :class:`BlockGates`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from lsmt_core.routes import Index, Route

BY_LANG = ".by_lang."
LS_PATH, SHARED_PATH = "ls", "shared"


def check_lms_path(path: str) -> str:
    if path not in (LS_PATH, SHARED_PATH):
        raise ValueError(f"LMS path {path!r} is not {LS_PATH!r} or {SHARED_PATH!r}")
    return path


@dataclass(frozen=True)
class Conditioning:
    """What the language-conditioned parts of one forward pass read: the batch's route
    (batches are homogeneous in their route) and, for LMS with Fuse Distillation, the path:
    the language-specific factors (``ls``) or the shared pair (``shared``)."""

    route: Route
    lms_path: str = LS_PATH

    def __post_init__(self) -> None:
        check_lms_path(self.lms_path)


@dataclass(frozen=True)
class BlockGates:
    """Sparse-model scores of one block (Sparse paper): ``units`` weigh its attention heads
    (heads,) (eq. 5) or the blocks of its FFN's inner dimension (K,) (eq. 6), ``layer`` (a
    scalar) its whole residual branch (eq. 7); None leaves that part ungated."""

    units: torch.Tensor | None = None
    layer: torch.Tensor | None = None


@dataclass(frozen=True)
class LayerGates:
    """The :class:`BlockGates` of one layer's blocks (``cross_attn``: decoder layers only)."""

    self_attn: BlockGates
    ffn: BlockGates
    cross_attn: BlockGates | None = None


NO_GATES = BlockGates()


def split_language_specific(param_name: str) -> tuple[str, str, str] | None:
    """``P.by_lang.<lang>.rest`` -> (``P``, ``lang``, ``rest``): the one parser of the parameter
    names that :class:`LanguageSpecific` produces; None for a shared parameter."""
    if BY_LANG not in param_name:
        return None
    prefix, rest = param_name.split(BY_LANG, 1)
    lang, _, rest = rest.partition(".")
    return prefix, lang, rest


def shared_name(param_name: str) -> str:
    """The name without its language: ``P.by_lang.<lang>.rest`` -> ``P.rest``."""
    parts = split_language_specific(param_name)
    if parts is None:
        return param_name
    prefix, _, rest = parts
    return f"{prefix}.{rest}" if rest else prefix


def language_specific_name(prefix: str, lang: str, rest: str = "") -> str:
    """The name of ``rest`` in language ``lang``'s copy of the :class:`LanguageSpecific` module
    at ``prefix`` (the copy itself when ``rest`` is empty): the inverse of
    :func:`split_language_specific`, and the one naming rule the exporter relies on
    (public as ``training.model.language_specific_name``)."""
    return f"{prefix}{BY_LANG}{lang}.{rest}" if rest else f"{prefix}{BY_LANG}{lang}"


class LanguageSpecific(nn.Module):
    """One copy of a block per language, indexed by the route's source or target language."""

    def __init__(self, factory: Callable[[], nn.Module], languages: list[str], index: Index):
        super().__init__()
        self.index: Index = index
        self.by_lang = nn.ModuleDict({lang: factory() for lang in languages})

    @classmethod
    def of(cls, copies: dict[str, nn.Module], index: Index) -> LanguageSpecific:
        """Given copies (of different shapes, e.g. embeddings of each language's vocabulary)."""
        module = cls(lambda: nn.Identity(), [], index)
        module.by_lang.update(copies)
        return module

    def select(self, route: Route) -> nn.Module:
        lang = route.lang(self.index)
        if lang not in self.by_lang:
            raise KeyError(f"no {self.index}-indexed module for language {lang!r}")
        return self.by_lang[lang]

    def route_languages(self, route: Route) -> set[str]:
        """The languages whose copies ``route`` uses (parameter accounting)."""
        return {route.lang(self.index)}


def resolve(module: nn.Module, route: Route) -> nn.Module:
    return module.select(route) if isinstance(module, LanguageSpecific) else module


KVCache = dict[str, torch.Tensor]


class ProjectionTerm(Protocol):
    """A method's additive term of a projection's output (an LMS low-rank product, an LAA
    matrix), computed from the projection's input and the pass's :class:`Conditioning`."""

    def __call__(self, x: torch.Tensor, cond: Conditioning) -> torch.Tensor: ...


class Projection(nn.Linear):
    """A block's linear map: ``W x + b`` plus the :attr:`terms` the model's methods added
    (``training.model.methods``), each reading the route from the call's ``cond``. Its own
    parameters are ``nn.Linear``'s, so the dense names (``fc1.weight``) stay what the exporter
    expects; a term's parameters live where its method put them, not in the term."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features)
        self.terms: list[ProjectionTerm] = []

    def forward(self, x: torch.Tensor, *, cond: Conditioning) -> torch.Tensor:
        out = super().forward(x)
        for term in self.terms:
            out = out + term(x, cond)
        return out


class AttentionBlock(nn.Module):
    """Multi-head attention with its layer norm and residual connection.

    The norm lives inside the block so that a language-specific attention block (LS-attention)
    carries its own norm, as CTranslate2's attention spec does.
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        pre_norm: bool,
        eps: float,
        dropout: float,
        attention_dropout: float,
    ):
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.pre_norm = pre_norm
        self.attention_dropout = attention_dropout
        self.q_proj = Projection(d_model, d_model)
        self.k_proj = Projection(d_model, d_model)
        self.v_proj = Projection(d_model, d_model)
        self.out_proj = Projection(d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def attend(
        self,
        query: torch.Tensor,
        cond: Conditioning,
        memory: torch.Tensor | None,
        mask: torch.Tensor | None,
        cache: KVCache | None,
        static_kv: bool,
        head_gate: torch.Tensor | None,
    ) -> torch.Tensor:
        source = query if memory is None else memory
        q = self._split(self.q_proj(query, cond=cond))
        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k = self._split(self.k_proj(source, cond=cond))
            v = self._split(self.v_proj(source, cond=cond))
            if cache is not None:
                if not static_kv and "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        p = self.attention_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        if head_gate is not None:
            out = out * head_gate.to(out.dtype)[None, :, None, None]
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1), cond=cond)

    def forward(
        self,
        x: torch.Tensor,
        *,
        cond: Conditioning,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        static_kv: bool = False,
        gates: BlockGates = NO_GATES,
    ) -> torch.Tensor:
        """Attention of ``x`` over ``memory`` (self-attention when memory is None).

        ``mask`` is boolean, broadcastable to (batch, heads, q_len, k_len), True = may attend.
        ``cache`` holds keys/values: appended to for incremental self-attention, computed once
        and reused when ``static_kv`` (cross-attention over the encoder output). ``gates``
        (sparse model) weigh the heads and, pre-norm, the residual branch.
        """
        if self.pre_norm:
            out = self.attend(self.norm(x), cond, memory, mask, cache, static_kv, gates.units)
            return x + self.dropout(_gated(out, gates.layer))
        out = self.attend(x, cond, memory, mask, cache, static_kv, gates.units)
        return self.norm(x + self.dropout(out))


class FeedForwardBlock(nn.Module):
    """Position-wise feed-forward network with its layer norm and residual connection."""

    def __init__(
        self,
        d_model: int,
        ffn_dim: int,
        activation: str,
        pre_norm: bool,
        eps: float,
        dropout: float,
    ):
        super().__init__()
        self.pre_norm = pre_norm
        self.fc1 = Projection(d_model, ffn_dim)
        self.fc2 = Projection(ffn_dim, d_model)
        self.activation = F.relu if activation == "relu" else F.gelu
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.inner_dropout = nn.Dropout(dropout)
        self.dropout = nn.Dropout(dropout)

    def transform(
        self, x: torch.Tensor, cond: Conditioning, block_gate: torch.Tensor | None = None
    ) -> torch.Tensor:
        if block_gate is None:
            h = self.activation(self.fc1(x, cond=cond))
            return self.fc2(self.inner_dropout(h), cond=cond)
        # eq. 6 as written: W1's columns and W2's rows scaled by the block scores, b1 not; a
        # block scored 0 then adds nothing, exactly as if sliced out of both matrices.
        beta = block_gate.to(x.dtype).repeat_interleave(self.fc1.out_features // len(block_gate))
        h = self.activation(F.linear(x, self.fc1.weight) * beta + self.fc1.bias)
        return self.fc2(self.inner_dropout(h * beta), cond=cond)

    def forward(
        self, x: torch.Tensor, *, cond: Conditioning, gates: BlockGates = NO_GATES
    ) -> torch.Tensor:
        if self.pre_norm:
            out = self.transform(self.norm(x), cond, gates.units)
            return x + self.dropout(_gated(out, gates.layer))
        return self.norm(x + self.dropout(self.transform(x, cond, gates.units)))


def _gated(branch: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return branch if gate is None else branch * gate.to(branch.dtype)
