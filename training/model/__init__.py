"""The route-aware multilingual Transformer (PyTorch)."""

from .build import build_model
from .config import LanguageSpecificConfig, ModelConfig
from .layers import LanguageSpecific, Route, language_specific_name
from .transformer import Seq2SeqTransformer

__all__ = [
    "LanguageSpecific",
    "LanguageSpecificConfig",
    "ModelConfig",
    "Route",
    "Seq2SeqTransformer",
    "build_model",
    "language_specific_name",
]
