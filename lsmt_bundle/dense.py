"""One route's dense model, what assembly produces and an engine is built from: a plain
Transformer, or a hybrid's Transformer encoder and LSTM decoder (``architecture.decoder_kind``).

The weight names here are the dense names of the bundle format (docs/export.md): the names a
parameter has in a model with the route fixed. The tied embedding is one matrix, the encoder's
(``EMBEDDING``); the decoder embedding and the output projection are written only when a
fusion or a target language's own vocabulary makes them differ from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lsmt_core.manifest import SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS, Architecture

from .errors import BundleError

Weights = dict[str, np.ndarray]

EMBEDDING = "embed_tokens.weight"
# A language's own embeddings, stored in its modules (``Manifest.language_tokenizers``): the
# source language's replaces the encoder's, the target language's the decoder's and the
# output projection (tied).
SOURCE_EMBEDDING = f"{SOURCE_EMBEDDINGS.prefix}.weight"
TARGET_EMBEDDING = f"{TARGET_EMBEDDINGS.prefix}.weight"
DECODER_EMBEDDING = "decoder.embed_tokens.weight"
OUTPUT_PROJECTION = "decoder.output_projection.weight"
# Optional dense weights: a stack's position table when a fusion changed it (else sinusoids).
ENCODER_POSITIONS = "encoder.positions"
DECODER_POSITIONS = "decoder.positions"


@dataclass
class DenseModel:
    """One route's plain model: what an engine is built from.

    A weight named in ``row_scales`` is still the bundle's int8 (a route assembled in its
    stored precision, ``Bundle.assemble(..., keep_int8=True)``): its float value is each row
    times its scale. Every other weight is float32."""

    architecture: Architecture
    weights: Weights
    source_vocab: list[str]
    target_vocab: list[str]
    modules: list[str] = field(default_factory=list)  # the modules it was assembled from
    row_scales: Weights = field(default_factory=dict)

    def dequantize(self) -> None:
        """Every weight in float32 (in place)."""
        for name, scale in self.row_scales.items():
            self.weights[name] = self.weights[name].astype(np.float32) * scale
        self.row_scales = {}


def take_input(dense: DenseModel, name: str) -> np.ndarray:
    """Remove and return a fusion's input tensor (a factor, matrix or vector that the route's
    modules carry beside its dense weights)."""
    value = dense.weights.pop(name, None)
    if value is None:
        raise BundleError(f"fusion input {name} missing from the route's modules")
    return value
