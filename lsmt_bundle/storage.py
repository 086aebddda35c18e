"""How module weights are stored: float32, float16, or int8 with one scale per row.

int8 storage halves a float16 bundle again (the default model must ship small); CTranslate2
quantizes to int8 at load time anyway, so serving loses little. Vectors (biases, norms) stay
float16 under int8 storage, and integer tensors (vocabulary ids) are kept as they are.
"""

from __future__ import annotations

import numpy as np

STORE_DTYPES = ("float32", "float16", "int8")
SCALE_SUFFIX = ".int8_scale"


def encode(weights: dict[str, np.ndarray], store_dtype: str) -> dict[str, np.ndarray]:
    if store_dtype not in STORE_DTYPES:
        raise ValueError(f"store dtype {store_dtype!r} not in {STORE_DTYPES}")
    out: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        if not np.issubdtype(value.dtype, np.floating):
            out[name] = value
        elif store_dtype == "int8" and value.ndim == 2:
            scale = np.abs(value).max(axis=1, keepdims=True).astype(np.float32) / 127.0
            scale[scale == 0] = 1.0
            out[name] = np.clip(np.rint(value / scale), -127, 127).astype(np.int8)
            out[name + SCALE_SUFFIX] = scale
        else:
            out[name] = value.astype(np.float32 if store_dtype == "float32" else np.float16)
    return out


def decode(stored: dict[str, np.ndarray], keep_int8: bool = False) -> dict[str, np.ndarray]:
    """float32 weights (integer tensors unchanged); int8 rows are multiplied by their scale,
    unless ``keep_int8``: then they stay int8, next to their scales (``<name>.int8_scale``)."""
    out: dict[str, np.ndarray] = {}
    for name, value in stored.items():
        if name.endswith(SCALE_SUFFIX):
            if keep_int8:
                out[name] = value
            continue
        scale = stored.get(name + SCALE_SUFFIX)
        if scale is not None and keep_int8:
            out[name] = value
        elif scale is not None:
            out[name] = value.astype(np.float32) * scale
        elif np.issubdtype(value.dtype, np.floating):
            out[name] = value.astype(np.float32, copy=False)
        else:
            out[name] = value
    return out


def max_error(store_dtype: str, weights: dict[str, np.ndarray]) -> float:
    """Largest absolute rounding error this storage can introduce on ``weights``."""
    if store_dtype == "float32":
        return 0.0
    worst = max((float(np.abs(v).max()) for v in weights.values() if v.size), default=0.0)
    if store_dtype == "float16":
        return worst * 2.0**-11
    return worst / 127.0 / 2.0 + 1e-7
