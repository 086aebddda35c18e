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
    tag_scheme: TagScheme = TagScheme.TARGET_PREFIX
    language_specific: LanguageSpecificConfig = Field(default_factory=LanguageSpecificConfig)
    sparse: SparseConfig | None = None
    """Adaptive sparse sub-networks per language (``training.model.sparse``); None = dense."""

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
        if self.sparse is not None:
            self.sparse.check_against(self)
        return self
