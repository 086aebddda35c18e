"""Transformer building blocks, written so that language-conditioned variants plug in.

A block that depends on the language is wrapped in :class:`LanguageSpecific`; callers resolve
it for the batch's route with :func:`resolve`. Parameter names then read
``...<name>.by_lang.<lang>...``, which is how the exporter finds the per-language modules.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lsmt_core.routes import Index, Route

BY_LANG = ".by_lang."


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


class AttentionBlock(nn.Module):
    """Multi-head attention with its layer norm and residual connection.

    The norm lives inside the block so that a language-specific attention block (LS-attention)
    carries its own norm, as CTranslate2's attention spec does.
    """

    # Scores of the sparse model (``training.model.sparse`` installs them for a route; None =
    # dense): ``head_gate`` (heads,) weighs each head's output (Sparse eq. 5), ``layer_gate``
    # (scalar) the whole residual branch (eq. 7).
    head_gate: torch.Tensor | None = None
    layer_gate: torch.Tensor | None = None

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
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def attend(
        self,
        query: torch.Tensor,
        memory: torch.Tensor | None,
        mask: torch.Tensor | None,
        cache: KVCache | None,
        static_kv: bool,
    ) -> torch.Tensor:
        source = query if memory is None else memory
        q = self._split(self.q_proj(query))
        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k, v = self._split(self.k_proj(source)), self._split(self.v_proj(source))
            if cache is not None:
                if not static_kv and "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        p = self.attention_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        if self.head_gate is not None:
            out = out * self.head_gate.to(out.dtype)[None, :, None, None]
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        static_kv: bool = False,
    ) -> torch.Tensor:
        """Attention of ``x`` over ``memory`` (self-attention when memory is None).

        ``mask`` is boolean, broadcastable to (batch, heads, q_len, k_len), True = may attend.
        ``cache`` holds keys/values: appended to for incremental self-attention, computed once
        and reused when ``static_kv`` (cross-attention over the encoder output).
        """
        if self.pre_norm:
            out = self.attend(self.norm(x), memory, mask, cache, static_kv)
            return x + self.dropout(_gated(out, self.layer_gate))
        return self.norm(x + self.dropout(self.attend(x, memory, mask, cache, static_kv)))


class FeedForwardBlock(nn.Module):
    """Position-wise feed-forward network with its layer norm and residual connection."""

    # Sparse model scores (see AttentionBlock): ``block_gate`` (K,) for the K blocks of the
    # inner dimension (Sparse eq. 6), ``layer_gate`` for the residual branch (eq. 7).
    block_gate: torch.Tensor | None = None
    layer_gate: torch.Tensor | None = None

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
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.activation = F.relu if activation == "relu" else F.gelu
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.inner_dropout = nn.Dropout(dropout)
        self.dropout = nn.Dropout(dropout)

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        if self.block_gate is None:
            return self.fc2(self.inner_dropout(self.activation(self.fc1(x))))
        # eq. 6 as written: W1's columns and W2's rows scaled by the block scores, b1 not; a
        # block scored 0 then adds nothing, exactly as if sliced out of both matrices.
        beta = self.block_gate.to(x.dtype).repeat_interleave(
            self.fc1.out_features // len(self.block_gate)
        )
        h = self.activation(F.linear(x, self.fc1.weight) * beta + self.fc1.bias)
        return self.fc2(self.inner_dropout(h * beta))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(_gated(self.transform(self.norm(x)), self.layer_gate))
        return self.norm(x + self.dropout(self.transform(x)))


def _gated(branch: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return branch if gate is None else branch * gate.to(branch.dtype)
