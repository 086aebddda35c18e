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


def assemble(manifest: Manifest, pieces: list[str], modules: dict[str, Weights]) -> DenseModel:
    """Dense float32 weights for one route from the decoded ``modules`` it reads (module name
    -> weights, in ``Bundle.modules_for`` order); ``pieces`` is the full vocabulary."""
    weights, extras = select(manifest, modules)
    dense = DenseModel(
        architecture=manifest.architecture,
        weights=weights,
        source_vocab=list(pieces),
        target_vocab=list(pieces),
        modules=list(modules),
    )
    tie_embeddings(dense)
    for fusion in manifest.fusions:
        FUSION_RULES[fusion.rule](dense, fusion, extras)
    check_complete(dense)
    return dense


def tie_embeddings(dense: DenseModel) -> None:
    if EMBEDDING not in dense.weights:
        raise BundleError(f"shared module lacks {EMBEDDING}")
    dense.weights.setdefault(DECODER_EMBEDDING, dense.weights[EMBEDDING])
    dense.weights.setdefault(OUTPUT_PROJECTION, dense.weights[EMBEDDING])


def check_complete(dense: DenseModel) -> None:
    a = dense.architecture
    needed = [f"encoder.layers.{i}.ffn.fc1.weight" for i in range(a.encoder_layers)]
    block = "lstm.weight_ih_l0" if a.decoder_kind == "lstm" else "cross_attn.q_proj.weight"
    needed += [f"decoder.layers.{i}.{block}" for i in range(a.decoder_layers)]
    missing = [n for n in needed if n not in dense.weights]
    if missing:
        raise BundleError(f"assembled route lacks weights, e.g. {missing[:3]}")
