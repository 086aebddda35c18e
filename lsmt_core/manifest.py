"""The bundle manifest: the versioned contract between the exporter and the server."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from .routes import Route
from .tags import TagScheme

FORMAT_VERSION: Literal[1] = 1
Index = Literal["shared", "src", "tgt"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Architecture(_Strict):
    """What a dense engine for one route looks like."""

    d_model: int
    heads: int
    ffn_dim: int
    activation: Literal["relu", "gelu"]
    pre_norm: bool
    layer_norm_eps: float
    encoder_layers: int
    decoder_layers: int
    max_positions: int
    positions: Literal["sinusoid"] = "sinusoid"
    embeddings: Literal["tied"] = "tied"  # source, target and output share one matrix
    decoder_kind: Literal["transformer", "lstm"] = "transformer"
    """``lstm``: the hybrid of the Shallow paper, ``decoder_layers`` LSTM layers of
    ``lstm_hidden_size`` with additive attention (``training.model.hybrid``), served by the
    hybrid engine (``lsmt_bundle.hybrid``). Written only for hybrids, so a Transformer
    bundle's manifest reads as it did before the field existed."""
    lstm_hidden_size: int | None = None

    @model_validator(mode="after")
    def _lstm_size(self) -> Architecture:
        if (self.decoder_kind == "lstm") != (self.lstm_hidden_size is not None):
            raise ValueError("lstm_hidden_size is given exactly for an lstm decoder")
        return self

    @model_serializer(mode="wrap")
    def _omit_transformer_defaults(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if self.decoder_kind == "transformer" and isinstance(data, dict):
            data.pop("decoder_kind", None)
            data.pop("lstm_hidden_size", None)
        return data


class WeightGroup(_Strict):
    """Every dense weight whose name starts with ``prefix`` is stored in the ``index`` module.

    ``select`` fusion: the route's language module provides the weights as they are. Longest
    prefix wins, so ``encoder.layers.2.ffn`` (src) overrides ``encoder`` (shared).
    """

    prefix: str
    index: Index
    fusion: Literal["select"] = "select"


class VocabSlice(_Strict):
    """Per-target vocabulary filtering (Shallow paper): keep only the target language's rows.

    ``ids`` is a tensor of the ``tgt`` module; the decoder embedding and the output projection
    become the rows of the tied embedding at those ids, and the engine's target vocabulary the
    matching pieces.
    """

    rule: Literal["vocab_slice"] = "vocab_slice"
    ids: str = "target_vocab.ids"
    reads: ClassVar[frozenset[Index]] = frozenset({"tgt"})  # modules read beyond weight_groups


class LowRankSum(_Strict):
    """LMS (LMS paper, eq. 1): for each linear ``P`` in ``linears``, ``P.weight += V @ F`` with
    ``V = P.<vertical>`` and ``F = P.<flat>``, tensors of the route's modules (their weight
    groups say which: ``src``/``tgt`` language factors, or the shared pair for FD-share).
    The bundle stores factors per language; the product exists only in the assembled route.
    """

    rule: Literal["low_rank_sum"] = "low_rank_sum"
    linears: list[str]
    vertical: str = "lms_v.weight"
    flat: str = "lms_f.weight"
    path: Literal["ls", "shared"] = "ls"  # which trained path (FD-LS or FD-share)
    reads: ClassVar[frozenset[Index]] = frozenset()


class LanguageAwareAttention(_Strict):
    """LAA (LAA paper, eq. 3-5): the target module's ``matrix`` M (d x d) is added to the
    q/k/v projections (``W += M^T`` in PyTorch's out x in layout) and to the output projection
    (``W += M``) of every attention block in ``attentions``."""

    rule: Literal["laa"] = "laa"
    attentions: list[str]
    matrix: str = "laa.weight"
    reads: ClassVar[frozenset[Index]] = frozenset()


class LanguageEmbedding(_Strict):
    """LEE (LAA paper, section 3): the target module's ``vector`` is added to every bias in
    ``biases`` (each adds to the residual stream just before a switching point) and to the
    position tables in ``positions`` (switching points at a stack's input)."""

    rule: Literal["lee"] = "lee"
    biases: list[str]
    positions: list[Literal["encoder", "decoder"]] = Field(default_factory=list)
    vector: str = "lee.weight"
    reads: ClassVar[frozenset[Index]] = frozenset()


class SparseSubnetwork(_Strict):
    """A route's sub-network of an adaptive sparse model (Sparse paper): the ``src`` module
    holds the source language's encoder gates, the ``tgt`` module the target language's
    decoder gates, named ``<prefix>.<group>`` (e.g. ``sparse.encoder_layers`` (layers,),
    ``sparse.decoder_ffn`` (layers, blocks)): 0 = dropped, else the component's inference score
    (float32; bundles of the first version hold 0/1 int32 masks). Assembling drops unselected
    layers, slices unselected FFN blocks out of the FFN matrices, zeroes unselected heads (the
    engine keeps every head: CTranslate2 needs heads * head size = d_model) and folds the
    scores into the weights (docs/sparse.md)."""

    rule: Literal["sparse_subnetwork"] = "sparse_subnetwork"
    prefix: str = "sparse"
    reads: ClassVar[frozenset[Index]] = frozenset({"src", "tgt"})


Fusion = Annotated[
    VocabSlice | LowRankSum | LanguageAwareAttention | LanguageEmbedding | SparseSubnetwork,
    Field(discriminator="rule"),
]


class TargetVocab(_Strict):
    """How each target language's vocabulary was chosen (frequency >= min_count, top max_size)."""

    min_count: int
    max_size: int
    sizes: dict[str, int]


class FileDigest(_Strict):
    """Size and checksums of one bundle file, recorded at export and checked when it is read."""

    bytes: int
    sha256: str
    """What the file is named by (the engine cache's keys, language additions' comparisons)."""
    xxh3_128: str | None = None
    """What a read checks when present (XXH3-128, about 9x SHA-256's speed: 5 ms instead of
    44 for a d512 route's 60 MB of modules); recorded since 2026-11-25, so older bundles are
    checked with ``sha256``. Like it, a guard against damage, not tampering: whoever can
    change a module can change the manifest."""

    @model_serializer(mode="wrap")
    def _omit_missing_xxh3(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if self.xxh3_128 is None and isinstance(data, dict):
            data.pop("xxh3_128", None)
        return data


class TokenizerInfo(_Strict):
    path: str = "tokenizer/spm.model"
    vocab_size: int


def language_tokenizer_path(lang: str) -> str:
    """Where a language's own tokenizer lives in a bundle."""
    return f"tokenizers/{lang}/spm.model"


# The weight groups of a language's own embeddings (``Manifest.language_tokenizers``): only
# the languages with their own tokenizer have modules holding them. Their prefixes are also
# the names of the training model's modules (``training.model.Seq2SeqTransformer``).
SOURCE_EMBEDDINGS = WeightGroup(prefix="source_embed_tokens", index="src")
TARGET_EMBEDDINGS = WeightGroup(prefix="target_embed_tokens", index="tgt")
VOCABULARY_GROUPS = (SOURCE_EMBEDDINGS, TARGET_EMBEDDINGS)
# The weight group of a target language's own decoder (``Manifest.language_decoders``), held
# only by those languages' ``tgt`` modules; also the training model's module name.
TARGET_DECODER = WeightGroup(prefix="target_decoder", index="tgt")
# The groups only some languages have modules for: no route reads a module because of them.
LANGUAGE_OWN_GROUPS = (*VOCABULARY_GROUPS, TARGET_DECODER)


class Manifest(_Strict):
    format_version: Literal[1] = FORMAT_VERSION
    name: str
    languages: list[str]
    routes: list[Route]  # stored as [src, tgt] pairs
    architecture: Architecture
    tag_scheme: TagScheme
    tokenizer: TokenizerInfo
    language_tokenizers: dict[str, TokenizerInfo] = Field(default_factory=dict)
    """Languages written with a tokenizer of their own (a language added with its own
    vocabulary, Shallow paper section 3.5), on both sides: its pieces are the language's
    vocabulary, and its embeddings are in its modules (``source_embed_tokens.weight`` in
    ``src/<lang>``, ``target_embed_tokens.weight``, tied to the output projection, in
    ``tgt/<lang>``). Every other language uses ``tokenizer``. Written only when not empty,
    so a bundle without one reads as it did before the field existed."""
    language_decoders: list[str] = Field(default_factory=list)
    """Target languages with a decoder of their own (a language added with a new decoder,
    Shallow paper section 3.5): their ``tgt/<lang>`` module holds it
    (``target_decoder.layers...``), and routes into them decode with it instead of the
    shared decoder. Written only when not empty, like ``language_tokenizers``."""
    store_dtype: Literal["float32", "float16", "int8"]
    weight_groups: list[WeightGroup]
    fusions: list[Fusion] = Field(default_factory=list)
    target_vocab: TargetVocab | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)
    files: dict[str, FileDigest] = Field(default_factory=dict)
    """Path (relative to the bundle) -> digest of every module and the tokenizer. Empty in
    bundles exported before checksums existed: those are read unchecked."""

    @model_validator(mode="after")
    def _check(self) -> Manifest:
        langs = set(self.languages)
        for src, tgt in self.routes:
            if src not in langs or tgt not in langs or src == tgt:
                raise ValueError(f"route {src}->{tgt} is not a pair of distinct bundle languages")
        if not any(g.index == "shared" and g.prefix == "" for g in self.weight_groups):
            raise ValueError("weight_groups needs a shared group with the empty prefix")
        strangers = sorted(set(self.language_tokenizers) - langs)
        if strangers:
            raise ValueError(f"language_tokenizers names languages the bundle lacks: {strangers}")
        if self.language_tokenizers and not all(g in self.weight_groups for g in VOCABULARY_GROUPS):
            raise ValueError("language_tokenizers needs the weight groups of their embeddings")
        strangers = sorted(set(self.language_decoders) - langs)
        if strangers:
            raise ValueError(f"language_decoders names languages the bundle lacks: {strangers}")
        if self.language_decoders and TARGET_DECODER not in self.weight_groups:
            raise ValueError("language_decoders needs the weight group of their decoders")
        return self

    @model_serializer(mode="wrap")
    def _omit_empty_language_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Bundles without languages of their own read (and write) as before the fields."""
        data = handler(self)
        if isinstance(data, dict):
            for name in ("language_tokenizers", "language_decoders"):
                if not getattr(self, name):
                    data.pop(name, None)
        return data

    def tokenizer_of(self, lang: str) -> TokenizerInfo:
        """The tokenizer that writes ``lang``: its own, else the bundle's."""
        return self.language_tokenizers.get(lang, self.tokenizer)

    def group_of(self, dense_name: str) -> WeightGroup:
        """The group storing ``dense_name`` (longest matching prefix)."""
        matches = [g for g in self.weight_groups if _has_prefix(dense_name, g.prefix)]
        return max(matches, key=lambda g: len(g.prefix))

    def indices_used(self) -> set[Index]:
        """The indices whose module every route reads (a language's own embeddings and decoder
        are read only for the languages of ``language_tokenizers`` and ``language_decoders``:
        ``Bundle.modules_for``)."""
        used: set[Index] = {g.index for g in self.weight_groups if g not in LANGUAGE_OWN_GROUPS}
        for fusion in self.fusions:
            used |= fusion.reads  # the modules holding the fusion's inputs
        return used


def _has_prefix(name: str, prefix: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")
