"""Model configuration: everything a recipe's `model:` section may set."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lsmt_core.tags import TagScheme

from .sparse_config import SparseConfig


class LanguageSpecificConfig(BaseModel):
    """Language-specific layers (LSL paper, Pires et al. 2023).

    Layer indices are 1-based, as in the paper (e.g. ``src: [3, 4]``, ``tgt: [13, 14, 15]``).
    ``component`` selects the ablation variant: the whole layer (LSL), only the feed-forward
    block (LS-FFN) or only the self-attention block (LS-attention).
    """

    model_config = ConfigDict(extra="forbid")

    encoder_src: list[int] = Field(default_factory=list)
    encoder_tgt: list[int] = Field(default_factory=list)
    decoder_src: list[int] = Field(default_factory=list)
    decoder_tgt: list[int] = Field(default_factory=list)
    component: Literal["layer", "ffn", "attention"] = "layer"
    search: bool = False
    """Architecture search (LSL paper section 3.2, ``training.model.nas``): every encoder layer
    holds a shared layer and one language-specific layer, used source- and target-indexed,
    mixed by a softmax over 3 learned scalars. ``python -m training.lsl select`` reads the
    converged weights and writes the selected ``encoder_src``/``encoder_tgt`` as a recipe."""

    @model_validator(mode="after")
    def _disjoint(self) -> LanguageSpecificConfig:
        if self.search and (self.encoder_src or self.encoder_tgt or self.component != "layer"):
            raise ValueError(
                "search mixes whole encoder layers: leave encoder_src/encoder_tgt empty and "
                "component 'layer'"
            )
        for side in ("encoder", "decoder"):
            both = set(getattr(self, f"{side}_src")) & set(getattr(self, f"{side}_tgt"))
            if both:
                raise ValueError(
                    f"{side} layers {sorted(both)} are both source- and target-indexed"
                )
        return self


LSL_LISTS = ("encoder_src", "encoder_tgt", "decoder_src", "decoder_tgt")


class LMSConfig(BaseModel):
    """Language-specific Matrix Synthesis (LMS paper, Xu et al. 2023), ``training.model.lms``.

    Each chosen linear computes ``(W + W_v W_f) x`` (eq. 1), ``W_v`` (out x rank) and ``W_f``
    (rank x in) per language: pair-wise (``pair``) takes ``W_v`` from the source language and
    ``W_f`` from the target; language-wise (``language``) takes both from the source language
    in the encoder and from the target language in the decoder (paper section 2.1).
    ``rank: 0`` turns LMS off. ``fuse_distill`` adds one shared low-rank pair and trains both
    paths on every batch (Fuse Distillation, section 4).
    """

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(default=0, ge=0)
    synthesis: Literal["pair", "language"] = "pair"
    ffn: bool = True
    attention: bool = False  # q/k/v/out of every attention block (section 6.2's ablation)
    init_std: float | None = None
    """Std of the Gaussian vertical factors (flat factors start at zero, section 2.2, so a new
    model equals the dense one); None = rank ** -0.5."""
    fuse_distill: bool = False

    @model_validator(mode="after")
    def _check(self) -> LMSConfig:
        if self.rank and not (self.ffn or self.attention):
            raise ValueError("lms: rank > 0 but neither ffn nor attention is chosen")
        if self.fuse_distill and not self.rank:
            raise ValueError("lms.fuse_distill needs lms.rank > 0")
        return self


LAA_PLACES = ("encoder_self", "decoder_self", "decoder_cross")


class LAAConfig(BaseModel):
    """Language-aware attention (LAA paper, Jin & Xiong 2022), ``training.model.laa``: one
    d_model x d_model matrix per target language, shared by every layer and place, added to
    W_Q, W_K, W_V and (transposed) to W_O of the attentions at ``places`` (eq. 3-5, computed
    in the batched form of Appendix A). ``places: []`` turns LAA off.

    ``lee_points`` is language embedding embodiment (LEE, section 3): the target language's
    embedding is added to the hidden states at these switching points, in every layer:
    1 encoder self-attention input, 2 encoder FFN input, 3 encoder output, 4 decoder
    self-attention input, 5 decoder cross-attention input, 6 decoder FFN input.
    """

    model_config = ConfigDict(extra="forbid")

    places: list[Literal["encoder_self", "decoder_self", "decoder_cross"]] = Field(
        default_factory=list
    )
    init_std: float = 0.0  # 0: the matrices start at zero, the model as the base model
    lee_points: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> LAAConfig:
        bad = [p for p in self.lee_points if not 1 <= p <= 6]
        if bad:
            raise ValueError(f"laa.lee_points {bad}: switching points are 1..6")
        return self


class ModelConfig(BaseModel):
    """Architecture of the encoder-decoder Transformer."""

    model_config = ConfigDict(extra="forbid")

    d_model: int = 256
    heads: int = 4
    ffn_dim: int = 1024
    activation: Literal["relu", "gelu"] = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    pre_norm: bool = True
    layer_norm_eps: float = 1e-5
    encoder_layers: int = 6
    decoder_layers: int = 6
    max_positions: int = 256
    decoder_sharing: Literal["shared", "separate"] = "shared"
    language_decoders: list[str] = Field(default_factory=list)
    """Target languages with a decoder of their own beside the shared one: a language added
    to a trained model with a new decoder (Shallow paper section 3.5, ``training.add_language``;
    initialised from the shared decoder). Routes into them decode with it."""
    tag_scheme: TagScheme = TagScheme.TARGET_PREFIX
    language_specific: LanguageSpecificConfig = Field(default_factory=LanguageSpecificConfig)
    lms: LMSConfig = Field(default_factory=LMSConfig)
    laa: LAAConfig = Field(default_factory=LAAConfig)
    sparse: SparseConfig | None = None
    """Adaptive sparse sub-networks per language (``training.model.sparse_transformer``);
    None = dense."""
    decoder_kind: Literal["transformer", "lstm"] = "transformer"
    """``lstm``: the hybrid of the Shallow paper (section 3.2, Appendix A.2), a Transformer
    encoder with ``decoder_layers`` LSTM layers and single-head additive attention
    (``training.model.hybrid``); start it from a trained Transformer (``init_mode: hybrid``)."""
    lstm_hidden_size: int | None = Field(default=None, ge=2)
    """The LSTM decoder's hidden size; None = d_model."""

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by heads {self.heads}")
        if self.d_model % 2:
            raise ValueError("d_model must be even (sinusoidal positions)")
        ls = self.language_specific
        for side, n in (("encoder", self.encoder_layers), ("decoder", self.decoder_layers)):
            for idx in getattr(ls, f"{side}_src") + getattr(ls, f"{side}_tgt"):
                if not 1 <= idx <= n:
                    raise ValueError(
                        f"{side} layer {idx} out of range 1..{n} (indices are 1-based)"
                    )
        if self.decoder_sharing == "separate" and (ls.decoder_src or ls.decoder_tgt):
            raise ValueError("separate decoders are already target-specific: no decoder LSL")
        lsl = ls.search or any(getattr(ls, f) for f in LSL_LISTS)
        if self.lms.rank and (lsl or self.decoder_sharing == "separate"):
            # Factors inside a language-specific block would be indexed twice (and named
            # ``by_lang`` twice), which neither the exporter nor the bundle can express.
            raise ValueError("lms cannot be combined with LSL layers or separate decoders")
        if (self.laa.places or self.laa.lee_points) and (lsl or self.decoder_sharing == "separate"):
            raise ValueError("laa/lee cannot be combined with LSL layers or separate decoders")
        if self.language_decoders:
            self._check_language_decoders(ls)
        if self.decoder_kind == "lstm":
            self._check_lstm(ls)
        elif self.lstm_hidden_size is not None:
            raise ValueError("lstm_hidden_size is set but decoder_kind is not lstm")
        if self.sparse is not None:
            if self.lms.rank or self.laa.places or self.laa.lee_points:
                raise ValueError("sparse cannot be combined with lms, laa or lee (not supported)")
            self._check_sparse_budgets(self.sparse)
        return self

    @property
    def lstm_hidden(self) -> int:
        """The LSTM decoder's hidden size (``lstm_hidden_size`` or d_model)."""
        return self.lstm_hidden_size or self.d_model

    def _check_language_decoders(self, ls: LanguageSpecificConfig) -> None:
        """A language's own decoder replaces one plain shared Transformer decoder."""
        if self.decoder_sharing != "shared" or ls.decoder_src or ls.decoder_tgt:
            raise ValueError(
                "language_decoders needs one shared decoder without LSL layers (with "
                "decoder_sharing: separate every target language has its own already)"
            )
        if self.decoder_kind != "transformer" or self.sparse is not None:
            raise ValueError("language_decoders needs a dense Transformer decoder")
        if self.lms.rank or self.laa.places or self.laa.lee_points:
            raise ValueError("language_decoders cannot be combined with lms, laa or lee")

    def _check_lstm(self, ls: LanguageSpecificConfig) -> None:
        """The hybrid decoder has no Transformer blocks for the decoder-side methods."""
        if ls.decoder_src or ls.decoder_tgt:
            raise ValueError("decoder_kind lstm: no decoder LSL layers (use decoder_sharing)")
        if self.lms.rank or self.laa.places or self.laa.lee_points or self.sparse is not None:
            raise ValueError("decoder_kind lstm cannot be combined with lms, laa, lee or sparse")

    def _check_sparse_budgets(self, sparse: SparseConfig) -> None:
        """The sparse budgets within this model's sizes."""
        limits = [
            ("heads_kept", sparse.attention, self.heads),
            ("ffn_blocks_kept", sparse.ffn, sparse.ffn_blocks),
            ("encoder_layers_kept", sparse.layers, self.encoder_layers),
            ("decoder_layers_kept", sparse.layers, self.decoder_layers),
        ]
        for name, on, total in limits:
            if on and getattr(sparse, name) > total:
                raise ValueError(f"sparse: {name} {getattr(sparse, name)} exceeds {total}")
        if sparse.ffn and self.ffn_dim % sparse.ffn_blocks:
            raise ValueError(f"sparse: ffn_dim {self.ffn_dim} not divisible by {sparse.ffn_blocks}")
        if sparse.layers and not self.pre_norm:
            raise ValueError("sparse: layer sparsity (eq. 7) skips pre-norm layers; set pre_norm")
        if self.language_specific.search:
            raise ValueError("sparse: not combined with the LSL architecture search")
