"""``assemble``: the modules one route reads -> that route's dense weights (numpy only).

Selection first (every weight group's ``select``), then the tied embeddings, then the
manifest's fusion rules in order (:data:`lsmt_bundle.fusions.FUSION_RULES`); the result must
hold every layer a plain Transformer of the (possibly fused) architecture needs.
"""

from __future__ import annotations

from lsmt_core.manifest import Manifest

from .dense import DECODER_EMBEDDING, EMBEDDING, OUTPUT_PROJECTION, DenseModel, Weights
from .errors import BundleError
from .fusions import FUSION_RULES, select
from .storage import SCALE_SUFFIX

# Rules that take whole rows of a weight as they are, so an int8 weight stays int8 through
# them (its row scales follow the rows); the others compute in float32.
ROW_RULES = frozenset({"vocab_slice"})


def keeps_int8(manifest: Manifest) -> bool:
    """Whether a route of this bundle can be assembled in its stored int8: int8 storage, no
    fusion that computes on weights, and a Transformer decoder (the hybrid engine's decoder
    graphs read float weights)."""
    return (
        manifest.store_dtype == "int8"
        and manifest.architecture.decoder_kind == "transformer"
        and all(f.rule in ROW_RULES for f in manifest.fusions)
    )


def assemble(manifest: Manifest, pieces: list[str], modules: dict[str, Weights]) -> DenseModel:
    """Dense weights for one route from the decoded ``modules`` it reads (module name ->
    weights, in ``Bundle.modules_for`` order); ``pieces`` is the full vocabulary. float32,
    except the int8 matrices of modules read as stored (``DenseModel.row_scales``), which
    only a bundle that :func:`keeps_int8` may be read with (``Bundle.assemble`` decides)."""
    weights, extras = select(manifest, modules)
    scales = {n[: -len(SCALE_SUFFIX)]: weights.pop(n) for n in list(weights) if _is_scale(n)}
    dense = DenseModel(
        architecture=manifest.architecture,
        weights=weights,
        source_vocab=list(pieces),
        target_vocab=list(pieces),
        modules=list(modules),
        row_scales=scales,
    )
    tie_embeddings(dense)
    for fusion in manifest.fusions:
        FUSION_RULES[fusion.rule](dense, fusion, extras)
    check_complete(dense)
    return dense


def tie_embeddings(dense: DenseModel) -> None:
    if EMBEDDING not in dense.weights:
        raise BundleError(f"shared module lacks {EMBEDDING}")
    for name in (DECODER_EMBEDDING, OUTPUT_PROJECTION):
        if name not in dense.weights:
            dense.weights[name] = dense.weights[EMBEDDING]
            if EMBEDDING in dense.row_scales:
                dense.row_scales[name] = dense.row_scales[EMBEDDING]


def _is_scale(name: str) -> bool:
    return name.endswith(SCALE_SUFFIX)


def check_complete(dense: DenseModel) -> None:
    a = dense.architecture
    needed = [f"encoder.layers.{i}.ffn.fc1.weight" for i in range(a.encoder_layers)]
    block = "lstm.weight_ih_l0" if a.decoder_kind == "lstm" else "cross_attn.q_proj.weight"
    needed += [f"decoder.layers.{i}.{block}" for i in range(a.decoder_layers)]
    missing = [n for n in needed if n not in dense.weights]
    if missing:
        raise BundleError(f"assembled route lacks weights, e.g. {missing[:3]}")
