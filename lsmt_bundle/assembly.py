"""``assemble``: the modules one route reads -> that route's dense weights (numpy only).

Selection first (every weight group's ``select``), then the tied embeddings, then the
manifest's fusion rules in order (:data:`lsmt_bundle.fusions.FUSION_RULES`); the result must
hold every layer a plain Transformer of the (possibly fused) architecture needs. A language
with its own tokenizer brings its own embeddings (``Manifest.language_tokenizers``): the
route's source and target vocabularies then differ, which an engine takes as it is. A target
language with its own decoder (``Manifest.language_decoders``) brings it in its ``tgt`` module,
in place of the shared one.
"""

from __future__ import annotations

from lsmt_core.manifest import TARGET_DECODER, Manifest

from .dense import (
    DECODER_EMBEDDING,
    EMBEDDING,
    OUTPUT_PROJECTION,
    SOURCE_EMBEDDING,
    TARGET_EMBEDDING,
    DenseModel,
    Weights,
)
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


def assemble(
    manifest: Manifest,
    modules: dict[str, Weights],
    source_pieces: list[str],
    target_pieces: list[str],
) -> DenseModel:
    """Dense weights for one route from the decoded ``modules`` it reads (module name ->
    weights, in ``Bundle.modules_for`` order); ``source_pieces`` and ``target_pieces`` are the
    vocabularies of its two languages (``Bundle.pieces_of``). float32, except the int8
    matrices of modules read as stored (``DenseModel.row_scales``), which only a bundle that
    :func:`keeps_int8` may be read with (``Bundle.assemble`` decides)."""
    weights, extras = select(manifest, modules)
    scales = {n[: -len(SCALE_SUFFIX)]: weights.pop(n) for n in list(weights) if _is_scale(n)}
    dense = DenseModel(
        architecture=manifest.architecture,
        weights=weights,
        source_vocab=list(source_pieces),
        target_vocab=list(target_pieces),
        modules=list(modules),
        row_scales=scales,
    )
    take_own_decoder(dense)
    tie_embeddings(dense)
    for fusion in manifest.fusions:
        FUSION_RULES[fusion.rule](dense, fusion, extras)
    check_complete(dense)
    return dense


def take_own_decoder(dense: DenseModel) -> None:
    """The target language's own decoder (``target_decoder.*``), if the route has one,
    replaces the shared decoder's weights of the same names (``decoder.*``)."""
    own = TARGET_DECODER.prefix + "."
    names = [n for n in dense.weights if n.startswith(own)]
    if not names:
        return
    taken = {"decoder." + n.removeprefix(own) for n in names}
    lacking = sorted(n for n in dense.weights if n.startswith("decoder.") and n not in taken)
    if lacking:  # half of one decoder and half of another would serve nonsense
        raise BundleError(f"the target language's own decoder lacks {lacking[:3]}")
    for name in names:
        _move(dense, name, "decoder." + name.removeprefix(own))


def tie_embeddings(dense: DenseModel) -> None:
    """The encoder embedding, the decoder embedding and the output projection: the shared
    module's tied matrix, except where a language with its own vocabulary brings its own (the
    source's encoder embedding, the target's decoder embedding and projection)."""
    w = dense.weights
    if EMBEDDING not in w:
        raise BundleError(f"shared module lacks {EMBEDDING}")
    _move(dense, TARGET_EMBEDDING, DECODER_EMBEDDING)  # the target language's own, if any
    _tie(dense, DECODER_EMBEDDING, EMBEDDING)
    _tie(dense, OUTPUT_PROJECTION, DECODER_EMBEDDING)
    _move(dense, SOURCE_EMBEDDING, EMBEDDING)  # the source language's own, after the ties
    for name, vocab in ((EMBEDDING, dense.source_vocab), (DECODER_EMBEDDING, dense.target_vocab)):
        if w[name].shape[0] != len(vocab):
            raise BundleError(
                f"{name} has {w[name].shape[0]} rows for a vocabulary of {len(vocab)} pieces"
            )


def _move(dense: DenseModel, own: str, name: str) -> None:
    """A language's own weight ``own`` (with its int8 scales) becomes ``name``."""
    if own in dense.weights:
        dense.weights[name] = dense.weights.pop(own)
        dense.row_scales.pop(name, None)
        if own in dense.row_scales:
            dense.row_scales[name] = dense.row_scales.pop(own)


def _tie(dense: DenseModel, name: str, tied_to: str) -> None:
    """``name`` is ``tied_to`` (and its int8 scales) unless the route has its own."""
    if name not in dense.weights:
        dense.weights[name] = dense.weights[tied_to]
        if tied_to in dense.row_scales:
            dense.row_scales[name] = dense.row_scales[tied_to]


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
