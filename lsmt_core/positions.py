"""Sinusoidal position table: one formula for training and for the exported engines."""

from __future__ import annotations

import math

import numpy as np


def sinusoid_table(n_positions: int, dim: int) -> np.ndarray:
    """(n_positions, dim) float32; sin in the first half, cos in the second; positions from 0.

    CTranslate2's built-in table differs (starts at 1, other timescale), so the exporter always
    passes this table to the engine explicitly.
    """
    half = dim // 2
    scale = math.log(10000.0) / (half - 1)
    freqs = np.exp(np.arange(half, dtype=np.float64) * -scale)
    angles = np.arange(n_positions, dtype=np.float64)[:, None] * freqs[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)
