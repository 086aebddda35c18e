"""The hybrid model of the Shallow paper (Berard et al. 2021, section 3.2 and Appendix A.2): the
route-aware Transformer encoder with a shallow LSTM decoder.

The decoder is the paper's variant of RNMT+ (Chen et al. 2018):

- layer 1 reads the target embedding; its output queries a single-head additive attention
  (Bahdanau et al. 2015) over the encoder states;
- every further layer reads [previous layer's output; attention context], with a residual
  connection around it;
- the attention context is *summed* with the last layer's output before the (tied) vocabulary
  projection;
- layer normalisation is applied to each LSTM's input (not inside its gates);
- dropout on the target embeddings and on every LSTM's output but the first's.

Layer 1 does not read the previous step's context (no input feeding), so teacher-forced
training runs each LSTM over the whole sequence at once and attends for all steps together.
With ``lstm_hidden_size`` other than d_model, ``out_proj`` maps the last output to d_model
before the sum. Everything on the source side (LSL encoders, tags, tied embeddings) is the
Transformer's; ``decoder_sharing: separate`` gives each target language its own LSTM decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .config import ModelConfig
from .layers import Conditioning, resolve
from .method import Method
from .transformer import Seq2SeqTransformer, SideGates, _Blocks


class AdditiveAttention(nn.Module):
    """score(q, m_j) = v . tanh(W_q q + W_k m_j + b_k), softmax over the source positions,
    context = the weighted sum of the encoder states m_j."""

    def __init__(self, query_dim: int, memory_dim: int):
        super().__init__()
        self.query = nn.Linear(query_dim, memory_dim, bias=False)
        self.key = nn.Linear(memory_dim, memory_dim)
        self.energy = nn.Linear(memory_dim, 1, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        """W_k m + b_k (B, S, D): computed once per source, reused at every step."""
        return self.key(memory)

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Contexts (B, T, D) for queries (B, T, H); ``mask`` (B, 1, 1, S) is True where a
        source position may be attended."""
        hidden = torch.tanh(self.query(query)[:, :, None, :] + keys[:, None, :, :])
        scores = self.energy(hidden).squeeze(-1)  # (B, T, S)
        scores = scores.masked_fill(~mask[:, 0], float("-inf"))
        return torch.softmax(scores.float(), dim=-1).to(memory.dtype) @ memory


class LSTMLayer(nn.Module):
    """One LSTM with layer normalisation on its input."""

    def __init__(self, input_dim: int, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(input_dim, eps=eps)
        self.lstm = nn.LSTM(input_dim, hidden, batch_first=True)

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        y, new_state = self.lstm(self.norm(x), state)
        return y, new_state


@dataclass
class LSTMCache:
    """Incremental decoding state: each layer's (h, c) and the attention keys of the source."""

    states: list[tuple[torch.Tensor, torch.Tensor] | None] = field(default_factory=list)
    keys: torch.Tensor | None = None

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (batch first for the keys, second for LSTM states)."""
        self.states = [
            None if s is None else (s[0].index_select(1, index), s[1].index_select(1, index))
            for s in self.states
        ]
        if self.keys is not None:
            self.keys = self.keys.index_select(0, index)


class LSTMDecoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, h, eps = cfg.d_model, cfg.lstm_hidden, cfg.layer_norm_eps
        self.layers = nn.ModuleList(
            LSTMLayer(d if i == 0 else h + d, h, eps) for i in range(cfg.decoder_layers)
        )
        self.attention = AdditiveAttention(h, d)
        self.out_proj = nn.Linear(h, d) if h != d else None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        cache: LSTMCache | None = None,
    ) -> torch.Tensor:
        """Outputs (B, T, d_model) for embedded targets ``x`` (B, T, d_model). With ``cache``,
        ``x`` holds the new steps only and the cache is advanced past them."""
        if cache is None:
            keys, states = self.attention.keys(memory), [None] * len(self.layers)
        else:
            if cache.keys is None:
                cache.keys = self.attention.keys(memory)
                cache.states = [None] * len(self.layers)
            keys, states = cache.keys, cache.states
        y, states[0] = self.layers[0](x, states[0])
        context = self.attention(y, keys, memory, memory_mask)
        for i in range(1, len(self.layers)):
            out, states[i] = self.layers[i](torch.cat([y, context], dim=-1), states[i])
            y = y + self.dropout(out)
        if cache is not None:
            cache.states = states
        return (y if self.out_proj is None else self.out_proj(y)) + context


class HybridTransformer(Seq2SeqTransformer):
    """Transformer encoder + LSTM decoder; the forward, the step and the search are the
    Transformer's, with the decoder pass and its cache replaced."""

    def _decoder_factory(
        self, blocks: _Blocks, language_specific_layers: bool
    ) -> Callable[[], nn.Module]:
        return lambda: LSTMDecoder(self.cfg)

    def _decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        cond: Conditioning,
        gates: SideGates,
        cache: LSTMCache | None = None,  # type: ignore[override]
        offset: int = 0,
        output_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # An LSTM needs no positions (nor their bound): the raw embedding, which the first
        # layer's norm rescales, so the Transformer's sqrt(d) factor would change nothing.
        x = self.embed_dropout(self.embed_tokens(tgt_in))
        h = resolve(self.decoder, cond.route)(x, memory, memory_mask, cache)
        weight = self.embed_tokens.weight
        return nn.functional.linear(h, weight if output_ids is None else weight[output_ids])

    def new_cache(self) -> LSTMCache:  # type: ignore[override]
        return LSTMCache()

    def reorder_cache(self, cache: LSTMCache, index: torch.Tensor) -> None:  # type: ignore[override]
        cache.reorder(index)


class HybridMethod(Method):
    """The LSTM decoder: its own model class; nothing to fuse (a bundle's architecture says
    ``decoder_kind: lstm`` and the hybrid engine serves it)."""

    name = "hybrid"
    model_class = HybridTransformer

    def active(self, cfg: Any) -> bool:
        return bool(cfg.decoder_kind == "lstm")


HYBRID = HybridMethod()
