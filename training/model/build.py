"""The model a recipe asks for: the class its methods need (the route-aware Transformer, its
adaptive sparse subclass, the hybrid with an LSTM decoder), with every method attached
(``training.model.methods``)."""

from __future__ import annotations

from .config import ModelConfig
from .methods import active_methods, model_class
from .transformer import Seq2SeqTransformer


def build_model(
    cfg: ModelConfig,
    vocab_size: int,
    languages: list[str],
    language_vocab_sizes: dict[str, int] | None = None,
) -> Seq2SeqTransformer:
    """``language_vocab_sizes``: the languages with a vocabulary of their own (an added
    language's tokenizer) and its size; the others use the shared one of ``vocab_size``."""
    cls = model_class(cfg)
    if language_vocab_sizes and cls is not Seq2SeqTransformer:
        raise ValueError(
            "a language with its own vocabulary needs a dense Transformer "
            "(the hybrid and the sparse model read the shared embedding only)"
        )
    model = cls(cfg, vocab_size, languages, language_vocab_sizes)
    for method in active_methods(cfg):
        method.attach(model)
    return model
