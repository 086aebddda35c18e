"""Settings of the adaptive sparse Transformer (Sparse paper, Gong et al. 2022); torch-free.

A recipe's ``model.sparse`` turns on any of the three kinds of language-conditioned sparsity
(attention heads, FFN blocks, whole layers) and sets the inference budget that every
language's selected sub-network meets exactly (``*_kept``), the loss weights and the
two-phase schedule of Algorithm 1.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator


class SparseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attention: bool = False
    """Attention sparsity (eq. 5): each language keeps ``heads_kept`` heads of every attention
    module (encoder self-attention; decoder self- and cross-attention)."""
    heads_kept: int | None = None
    ffn: bool = False
    """FFN sparsity (eq. 6): the inner dimension is cut into ``ffn_blocks`` blocks; each
    language keeps ``ffn_blocks_kept`` of them in every layer."""
    ffn_blocks: int = 8
    ffn_blocks_kept: int | None = None
    layers: bool = False
    """Layer sparsity (eq. 7): each source language keeps ``encoder_layers_kept`` encoder
    layers, each target language ``decoder_layers_kept`` decoder layers. Needs pre-norm."""
    encoder_layers_kept: int | None = None
    decoder_layers_kept: int | None = None

    phase_one_steps: int = 8000
    """T-bar of Algorithm 1: updates with cross-entropy + sparsity loss over all components,
    before the top-k selection starts (the paper: 8k on Public-24, 50k on OPUS-100)."""
    sparsity_weight: float = 0.1  # c_s (section 4.2)
    disparity_weight: float = 0.02  # c_d
    topk_weight: float = 0.1  # c_t

    initial_logit: float = 0.0
    """mu at update 0, the same for every component and language. 0 starts at the prior
    q(z = 1) = 0.5 (every component randomly half on); a positive value starts near the dense
    model (sigmoid(3) = 0.95), which short runs need to train at all (docs/sparse.md). The
    paper states the prior, not the initialisation."""

    score_lr_scale: float = 1.0
    """Learning rate of the selection logits mu relative to the model's. Adam moves mu about
    one learning rate per update, while the logistic noise of the samples has a scale of ~1.8:
    in short runs the ranking of mu stays within the noise and the top-k of phase two is a new
    random sub-network every update. The paper trains 8k-50k+ updates and gives no value."""

    temperature: float = 1.0
    """Gumbel-softmax temperature at update 0. The paper cites Jang et al. (2017) for the
    Gumbel-softmax and gives no schedule; this is Jang et al.'s annealing:
    ``tau = max(min_temperature, temperature * exp(-temperature_decay * step))``."""
    min_temperature: float = 0.5
    temperature_decay: float = 1e-4

    @model_validator(mode="after")
    def _own(self) -> SparseConfig:
        if not (self.attention or self.ffn or self.layers):
            raise ValueError("sparse: turn on at least one of attention, ffn, layers")
        needed = {
            "heads_kept": self.attention,
            "ffn_blocks_kept": self.ffn,
            "encoder_layers_kept": self.layers,
            "decoder_layers_kept": self.layers,
        }
        for name, on in needed.items():
            if on and getattr(self, name) is None:
                raise ValueError(f"sparse: {name} is the budget and must be set")
            if on and getattr(self, name) < 1:
                raise ValueError(f"sparse: {name} must be at least 1")
        if self.min_temperature <= 0 or self.temperature < self.min_temperature:
            raise ValueError("sparse: need 0 < min_temperature <= temperature")
        return self
