"""The model a recipe asks for: the dense route-aware Transformer, its adaptive sparse
subclass, or the hybrid with an LSTM decoder."""

from __future__ import annotations

from .config import ModelConfig
from .hybrid import HybridTransformer
from .sparse_transformer import SparseTransformer
from .transformer import Seq2SeqTransformer


def build_model(
    cfg: ModelConfig,
    vocab_size: int,
    languages: list[str],
    language_vocab_sizes: dict[str, int] | None = None,
) -> Seq2SeqTransformer:
    """``language_vocab_sizes``: the languages with a vocabulary of their own (an added
    language's tokenizer) and its size; the others use the shared one of ``vocab_size``."""
    if language_vocab_sizes and (cfg.decoder_kind == "lstm" or cfg.sparse is not None):
        raise ValueError(
            "a language with its own vocabulary needs a dense Transformer "
            "(the hybrid and the sparse model read the shared embedding only)"
        )
    if cfg.decoder_kind == "lstm":
        return HybridTransformer(cfg, vocab_size, languages)
    if cfg.sparse is not None:
        return SparseTransformer(cfg, vocab_size, languages)
    return Seq2SeqTransformer(cfg, vocab_size, languages, language_vocab_sizes)
