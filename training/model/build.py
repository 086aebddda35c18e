"""The model a recipe asks for: the dense route-aware Transformer, its adaptive sparse
subclass, or the hybrid with an LSTM decoder."""

from __future__ import annotations

from .config import ModelConfig
from .hybrid import HybridTransformer
from .sparse import SparseTransformer
from .transformer import Seq2SeqTransformer


def build_model(cfg: ModelConfig, vocab_size: int, languages: list[str]) -> Seq2SeqTransformer:
    if cfg.decoder_kind == "lstm":
        return HybridTransformer(cfg, vocab_size, languages)
    if cfg.sparse is not None:
        return SparseTransformer(cfg, vocab_size, languages)
    return Seq2SeqTransformer(cfg, vocab_size, languages)
