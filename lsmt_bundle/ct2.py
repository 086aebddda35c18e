"""Dense route weights -> CTranslate2 Transformer model, on disk or straight into memory."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import ctranslate2
import numpy as np
from ctranslate2.specs import attention_spec, common_spec, model_spec, transformer_spec

from lsmt_core.positions import sinusoid_table

from .contracts import Engine, TranslationResult
from .dense import (
    DECODER_EMBEDDING,
    DECODER_POSITIONS,
    EMBEDDING,
    ENCODER_POSITIONS,
    OUTPUT_PROJECTION,
    DenseModel,
)

ACTIVATIONS = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}
# Engine quantizations that take a route's stored int8 weights as they are (int8 weights,
# float32 scales and activations).
INT8_AS_STORED = {"int8", "int8_float32"}
# Quantizations a saved model may carry; others (e.g. "auto") are chosen at load time.
SAVE_QUANTIZATIONS = {
    "int8",
    "int8_float16",
    "int8_float32",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
}


def _weight(spec: Any, dense: DenseModel, names: list[str]) -> None:
    """``spec.weight``: the rows of ``names`` one after the other. An int8 weight (a route
    assembled in its stored precision) goes in as it is, with CTranslate2's scale per row:
    the factor that maps a row to int8, the inverse of the bundle's."""
    w, scales = dense.weights, dense.row_scales
    spec.weight = np.concatenate([w[n] for n in names]) if len(names) > 1 else w[names[0]]
    if names[0] in scales:
        spec.weight_scale = _ct2_scale(
            spec.weight, np.concatenate([scales[n] for n in names]).reshape(-1)
        )


def _ct2_scale(rows: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """CTranslate2's scale of int8 ``rows`` whose float value is ``rows * scale``. A row
    that reaches 127 gets the very float32 CTranslate2 computes when it quantizes that float
    value itself (127 / max |value|: the engine is then the same, byte for byte); any other
    row (all zero) the exact inverse."""
    peak = np.abs(rows).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore"):  # all-zero rows: the other branch
        quantizer = np.float32(127.0) / (peak * scale)
    return np.where(peak == 127, quantizer, np.float32(1.0) / scale).astype(np.float32)


def _linear(spec: common_spec.LinearSpec, dense: DenseModel, prefixes: list[str]) -> None:
    """A linear layer from one or more (fused: q|k|v) of ours."""
    _weight(spec, dense, [f"{p}.weight" for p in prefixes])
    spec.bias = np.concatenate([dense.weights[f"{p}.bias"] for p in prefixes])


def _norm(spec: common_spec.LayerNormSpec, dense: DenseModel, prefix: str) -> None:
    spec.gamma = dense.weights[f"{prefix}.weight"]
    spec.beta = dense.weights[f"{prefix}.bias"]


def _attention(
    spec: attention_spec.MultiHeadAttentionSpec, dense: DenseModel, p: str, cross: bool
) -> None:
    """CT2 self-attention: linear[0] = q|k|v; cross-attention: linear[0] = q, linear[1] = k|v."""
    if cross:
        _linear(spec.linear[0], dense, [f"{p}.q_proj"])
        _linear(spec.linear[1], dense, [f"{p}.k_proj", f"{p}.v_proj"])
    else:
        _linear(spec.linear[0], dense, [f"{p}.q_proj", f"{p}.k_proj", f"{p}.v_proj"])
    _linear(spec.linear[-1], dense, [f"{p}.out_proj"])
    _norm(spec.layer_norm, dense, f"{p}.norm")


def _ffn(spec: transformer_spec.FeedForwardSpec, dense: DenseModel, p: str) -> None:
    _linear(spec.linear_0, dense, [f"{p}.fc1"])
    _linear(spec.linear_1, dense, [f"{p}.fc2"])
    _norm(spec.layer_norm, dense, f"{p}.norm")


def _positions(dense: DenseModel, name: str) -> np.ndarray:
    """A stack's position table: the route's own when a fusion made one (LEE adds the
    language embedding to it), else the sinusoids."""
    table = dense.weights.get(name)
    a = dense.architecture
    return sinusoid_table(a.max_positions, a.d_model) if table is None else table


def fill_encoder(enc: transformer_spec.TransformerEncoderSpec, dense: DenseModel) -> None:
    """The encoder's weights into its spec: a Transformer route's, or a hybrid route's
    (``lsmt_bundle.hybrid``, where the encoder is a model of its own)."""
    a = dense.architecture
    _weight(enc.embeddings[0], dense, [EMBEDDING])
    enc.position_encodings.encodings = _positions(dense, ENCODER_POSITIONS)
    for i, layer in enumerate(enc.layer):
        _attention(layer.self_attention, dense, f"encoder.layers.{i}.self_attn", cross=False)
        _ffn(layer.ffn, dense, f"encoder.layers.{i}.ffn")
    if a.pre_norm:
        _norm(enc.layer_norm, dense, "encoder.final_norm")


def build_spec(dense: DenseModel) -> transformer_spec.TransformerSpec:
    a, w = dense.architecture, dense.weights
    spec = transformer_spec.TransformerSpec.from_config(
        (a.encoder_layers, a.decoder_layers),
        a.heads,
        pre_norm=a.pre_norm,
        activation=ACTIVATIONS[a.activation],
    )
    fill_encoder(spec.encoder, dense)
    dec = spec.decoder
    _weight(dec.embeddings, dense, [DECODER_EMBEDDING])
    dec.position_encodings.encodings = _positions(dense, DECODER_POSITIONS)
    _weight(dec.projection, dense, [OUTPUT_PROJECTION])
    if w[OUTPUT_PROJECTION] is w[DECODER_EMBEDDING] and OUTPUT_PROJECTION in dense.row_scales:
        # Tied: CTranslate2 stores the projection as an alias of the embedding, whose scale
        # it reads, as it does for a model it quantized itself (the same engine, byte for byte).
        dec.projection.weight_scale = model_spec.OPTIONAL
    for i, layer in enumerate(dec.layer):
        _attention(layer.self_attention, dense, f"decoder.layers.{i}.self_attn", cross=False)
        _attention(layer.attention, dense, f"decoder.layers.{i}.cross_attn", cross=True)
        _ffn(layer.ffn, dense, f"decoder.layers.{i}.ffn")
    if a.pre_norm:
        _norm(dec.layer_norm, dense, "decoder.final_norm")
    spec.config.layer_norm_epsilon = a.layer_norm_eps
    spec.register_source_vocabulary(dense.source_vocab)
    spec.register_target_vocabulary(dense.target_vocab)
    spec.validate()
    return spec


def save_translator(
    dense: DenseModel, out_dir: str | Path, quantization: str | None = "int8"
) -> Path:
    """Write a ready CTranslate2 model directory (``ctranslate2.Translator(out_dir)``).

    A route assembled in int8 (``dense.row_scales``) keeps its int8 weights when the engine
    is int8 with float32 activations (CPU): CTranslate2 would quantize the dequantized rows
    back to the same integers and scales (both scale each row by its largest value), so only
    the other weights are quantized. For any other quantization the route is made float32
    first."""
    if dense.row_scales and quantization not in INT8_AS_STORED:
        dense.dequantize()
    spec = build_spec(dense)
    if quantization is not None:
        if quantization not in SAVE_QUANTIZATIONS:
            raise ValueError(f"quantization {quantization!r} not in {sorted(SAVE_QUANTIZATIONS)}")
        optimize_spec(spec, quantization)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    return out


def optimize_spec(spec: transformer_spec.TransformerSpec, quantization: str) -> None:
    """``spec.optimize(quantization)``, leaving weights that are int8 already as they are:
    CTranslate2's own pass would compute a new scale from the integers (replacing the one
    given). It is ``optimize``'s two steps with a filter (CTranslate2 4.8's ``_quantize``
    takes one), pinned with the package version."""
    done: set[str] = set()

    def find_int8(_: Any, name: str, value: Any) -> None:
        if getattr(value, "dtype", None) == "int8":
            done.add(name)

    spec._visit(find_int8)
    spec._alias_variables()
    spec._quantize(quantization, variable_filter=lambda name: name not in done)


def translator_files(dense: DenseModel, quantization: str | None = "int8") -> dict[str, bytes]:
    """The files of a CTranslate2 model directory, as bytes (for ``Translator(files=...)``)."""
    with tempfile.TemporaryDirectory(prefix="lsmt-engine-") as tmp:
        out = save_translator(dense, tmp, quantization)
        return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def saved_quantization(compute_type: str) -> str | None:
    """The quantization an engine is saved with for ``compute_type`` (None: chosen at load)."""
    return compute_type if compute_type in SAVE_QUANTIZATIONS else None


def open_translator(
    model: Path | dict[str, bytes],
    device: str = "cpu",
    device_index: int = 0,
    compute_type: str = "int8",
    inter_threads: int = 1,
    intra_threads: int = 1,
    name: str = "lsmt-engine",
) -> tuple[ctranslate2.Translator, int]:
    """A translator of a model directory or of its files in memory, and its weights' bytes."""
    options = {
        "device": device,
        "device_index": device_index,
        "compute_type": compute_type,
        "inter_threads": inter_threads,
        "intra_threads": intra_threads,
    }
    if isinstance(model, dict):
        translator = ctranslate2.Translator(name, files=model, **options)
        return translator, len(model["model.bin"])
    return ctranslate2.Translator(str(model), **options), (model / "model.bin").stat().st_size


def translate_pieces(
    translator: Engine,
    sources: list[list[str]],
    max_positions: int,
    *,
    beam_size: int = 1,
    num_hypotheses: int = 1,
    max_length: int | None = None,
    min_length: int = 0,
    max_batch_size: int = 0,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
) -> list[TranslationResult]:
    """The one decoding call of an assembled engine (server, bundle evaluation, benchmarks):
    tagged source pieces in, ``TranslationResult``s (pieces, scores) out. The decoder's
    position table has ``max_positions`` rows and the start token takes one, so an output is
    bounded by ``max_positions - 1`` tokens (longer would index past the table: CTranslate2
    raises), and by ``max_length`` when given. Sources must fit ``max_positions`` already
    (callers refuse or truncate them: that rule differs between serving and evaluation).
    ``min_length`` forbids the end token before that many tokens: with ``min_length ==
    max_length`` every output has the same length (benchmarks on random weights).
    ``repetition_penalty`` (above 1 penalises tokens already generated) and
    ``no_repeat_ngram_size`` (0: off) are CTranslate2's guards against degenerate output."""
    limit = max_positions - 1 if max_length is None else min(max_length, max_positions - 1)
    results = translator.translate_batch(
        sources,
        beam_size=beam_size,
        num_hypotheses=num_hypotheses,
        max_decoding_length=limit,
        min_decoding_length=min(min_length, limit),
        max_input_length=0,  # the callers bound the source length themselves
        max_batch_size=max_batch_size,
        repetition_penalty=repetition_penalty,
        no_repeat_ngram_size=no_repeat_ngram_size,
        return_scores=True,
    )
    return list(results)
