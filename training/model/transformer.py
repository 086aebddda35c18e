"""Route-aware encoder-decoder Transformer.

Every forward call takes the batch's :class:`Route`; blocks wrapped in :class:`LanguageSpecific`
resolve to the route's language copy, so only that copy runs and receives gradients. With the
route fixed, the model is a plain dense Transformer, which is what the exporter builds.

The route reaches every block as part of a :class:`Conditioning` argument, and a training
forward returns a :class:`ModelOutput`: the logits, the predictions of any other path that
the loss scores too, and named auxiliary losses. The training step therefore never asks
which method a model uses; a method adds its terms to the projections or blocks, or is a
subclass (its registration in ``training.model.methods`` says which).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.utils._pytree
from torch import nn

from lsmt_core.manifest import TARGET_DECODER, VOCABULARY_GROUPS
from lsmt_core.positions import sinusoid_table
from lsmt_core.tags import PAD_ID

from ..fuse_distill import symmetric_kl
from .config import ModelConfig
from .layers import (
    LS_PATH,
    NO_GATES,
    SHARED_PATH,
    AttentionBlock,
    BlockGates,
    Conditioning,
    FeedForwardBlock,
    Index,
    KVCache,
    LanguageSpecific,
    LayerGates,
    Route,
    resolve,
    split_language_specific,
)
from .nas import SearchLayer

LayerCache = dict[str, KVCache]
SideGates = list[LayerGates] | None
"""Per layer of one side, the sparse model's gates (None: a dense model)."""


@dataclass
class ModelOutput:
    """What a forward pass gives the training step.

    ``logits`` (B, T, V or the restricted N) are the model's prediction; ``also_scored`` holds
    the predictions of other paths that the loss scores alongside it (the cross entropy is the
    mean over all of them: Fuse Distillation's shared path, LMS paper eq. 3); ``aux_losses``
    are named terms added to the loss as they are, each summed over the batch's target tokens
    like the cross entropy (so that the step's division by the update's tokens weighs them
    alike).
    """

    logits: torch.Tensor
    also_scored: list[torch.Tensor] = field(default_factory=list)
    aux_losses: dict[str, torch.Tensor] = field(default_factory=dict)


# A pytree node, so that DistributedDataParallel sees the tensors inside (its unused-parameter
# handling flattens a forward's output with torch's pytree), as Hugging Face does for its own.
torch.utils._pytree.register_dataclass(ModelOutput)


def _index_of(layer: int, src: list[int], tgt: list[int]) -> Index | None:
    """Which language indexes 0-based ``layer``, given the recipe's 1-based lists."""
    if layer + 1 in src:
        return "src"
    if layer + 1 in tgt:
        return "tgt"
    return None


class EncoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, ffn: nn.Module):
        super().__init__()
        self.self_attn = self_attn
        self.ffn = ffn

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        cond: Conditioning,
        gates: LayerGates | None = None,
    ) -> torch.Tensor:
        route = cond.route
        x = resolve(self.self_attn, route)(
            x, cond=cond, mask=mask, gates=_block_gates(gates, "self_attn")
        )
        return resolve(self.ffn, route)(x, cond=cond, gates=_block_gates(gates, "ffn"))


class DecoderLayer(nn.Module):
    def __init__(self, self_attn: nn.Module, cross_attn: nn.Module, ffn: nn.Module):
        super().__init__()
        self.self_attn = self_attn
        self.cross_attn = cross_attn
        self.ffn = ffn

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        self_mask: torch.Tensor | None,
        cond: Conditioning,
        cache: LayerCache | None = None,
        gates: LayerGates | None = None,
    ) -> torch.Tensor:
        route = cond.route
        x = resolve(self.self_attn, route)(
            x,
            cond=cond,
            mask=self_mask,
            cache=None if cache is None else cache["self"],
            gates=_block_gates(gates, "self_attn"),
        )
        x = resolve(self.cross_attn, route)(
            x,
            cond=cond,
            memory=memory,
            mask=memory_mask,
            cache=None if cache is None else cache["cross"],
            static_kv=True,
            gates=_block_gates(gates, "cross_attn"),
        )
        return resolve(self.ffn, route)(x, cond=cond, gates=_block_gates(gates, "ffn"))


def _block_gates(gates: LayerGates | None, block: str) -> BlockGates:
    """The gates of one block of a layer: none for a dense model."""
    chosen = None if gates is None else getattr(gates, block)
    return NO_GATES if chosen is None else chosen


class _Blocks:
    """Factories for the blocks of one configuration, language-specific where asked."""

    def __init__(self, cfg: ModelConfig, languages: list[str]):
        self.cfg = cfg
        self.languages = languages

    def attention(self) -> AttentionBlock:
        c = self.cfg
        return AttentionBlock(
            c.d_model, c.heads, c.pre_norm, c.layer_norm_eps, c.dropout, c.attention_dropout
        )

    def ffn(self) -> FeedForwardBlock:
        c = self.cfg
        return FeedForwardBlock(
            c.d_model, c.ffn_dim, c.activation, c.pre_norm, c.layer_norm_eps, c.dropout
        )

    def maybe_specific(self, factory: Callable[[], nn.Module], index: Index | None) -> nn.Module:
        return factory() if index is None else LanguageSpecific(factory, self.languages, index)

    def layer(self, make_layer: Callable[..., nn.Module], n_attn: int, index: Index | None):
        """A layer whose whole body, FFN only or attention only is indexed by ``index``."""
        component = self.cfg.language_specific.component
        if index is not None and component == "layer":
            return LanguageSpecific(
                lambda: self.layer(make_layer, n_attn, None), self.languages, index
            )
        attn_index = index if component == "attention" else None
        ffn_index = index if component == "ffn" else None
        attns = [self.maybe_specific(self.attention, attn_index) for _ in range(n_attn)]
        return make_layer(*attns, self.maybe_specific(self.ffn, ffn_index))


class Encoder(nn.Module):
    def __init__(self, blocks: _Blocks):
        super().__init__()
        cfg, ls = blocks.cfg, blocks.cfg.language_specific
        self.layers = nn.ModuleList(
            blocks.layer(EncoderLayer, 1, _index_of(i, ls.encoder_src, ls.encoder_tgt))
            if not ls.search
            # architecture search (LSL paper 3.2): shared + src/tgt-indexed layers, mixed
            else SearchLayer(lambda: blocks.layer(EncoderLayer, 1, None), blocks.languages)
            for i in range(cfg.encoder_layers)
        )
        self.final_norm = (
            nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.pre_norm else None
        )

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        *,
        cond: Conditioning,
        gates: SideGates = None,
    ) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = resolve(layer, cond.route)(x, mask, cond, None if gates is None else gates[i])
        return x if self.final_norm is None else self.final_norm(x)


class Decoder(nn.Module):
    def __init__(self, blocks: _Blocks, language_specific_layers: bool = True):
        super().__init__()
        cfg, ls = blocks.cfg, blocks.cfg.language_specific
        src, tgt = (ls.decoder_src, ls.decoder_tgt) if language_specific_layers else ([], [])
        self.layers = nn.ModuleList(
            blocks.layer(DecoderLayer, 2, _index_of(i, src, tgt)) for i in range(cfg.decoder_layers)
        )
        self.final_norm = (
            nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.pre_norm else None
        )

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        self_mask: torch.Tensor | None,
        cond: Conditioning,
        cache: list[LayerCache] | None = None,
        gates: SideGates = None,
    ) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache[i]
            layer_gates = None if gates is None else gates[i]
            x = resolve(layer, cond.route)(
                x, memory, memory_mask, self_mask, cond, layer_cache, layer_gates
            )
        return x if self.final_norm is None else self.final_norm(x)


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder with tied source/target/output embeddings and route-aware blocks."""

    def __init__(
        self,
        cfg: ModelConfig,
        vocab_size: int,
        languages: list[str],
        language_vocab_sizes: dict[str, int] | None = None,
    ):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.languages = sorted(languages)
        blocks = _Blocks(cfg, self.languages)
        self.embed_tokens = self._new_embedding(vocab_size)
        # Languages with a vocabulary of their own (an added language, Shallow paper 3.5):
        # their source embeddings and their target embeddings (tied to their output layer).
        self.language_vocab_sizes = dict(sorted((language_vocab_sizes or {}).items()))
        self.source_embed_tokens: LanguageSpecific | None = None
        self.target_embed_tokens: LanguageSpecific | None = None
        if self.language_vocab_sizes:
            unknown = sorted(set(self.language_vocab_sizes) - set(self.languages))
            if unknown:
                raise ValueError(f"own vocabularies for languages the model lacks: {unknown}")
            for group in VOCABULARY_GROUPS:  # the bundle's names for them
                copies = {
                    lang: self._new_embedding(n) for lang, n in self.language_vocab_sizes.items()
                }
                setattr(self, group.prefix, LanguageSpecific.of(copies, group.index))
        self.register_buffer(
            "positions",
            torch.from_numpy(sinusoid_table(cfg.max_positions, cfg.d_model)),
            persistent=False,
        )
        self.embed_scale = math.sqrt(cfg.d_model)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(blocks)
        self.decoder = self._build_decoder(blocks)
        # Target languages with a decoder of their own (an added language, Shallow paper 3.5).
        self.target_decoder: LanguageSpecific | None = None
        if cfg.language_decoders:
            unknown = sorted(set(cfg.language_decoders) - set(self.languages))
            if unknown:
                raise ValueError(f"language_decoders names languages the model lacks: {unknown}")
            make = self._decoder_factory(blocks, language_specific_layers=False)
            own = LanguageSpecific(make, sorted(cfg.language_decoders), TARGET_DECODER.index)
            setattr(self, TARGET_DECODER.prefix, own)  # the bundle's name for it
        # The language-conditioned methods (LMS, LAA, LEE) attach their parameters and terms
        # after this (``build_model``). Fuse Distillation trains both LMS paths on every batch
        # (LMS paper eq. 3/4); evaluation and search run the one they are given.
        self.training_paths = (LS_PATH, SHARED_PATH) if cfg.lms.fuse_distill else (LS_PATH,)

    def _build_decoder(self, blocks: _Blocks) -> nn.Module:
        """The decoder: one shared, or one per target language (``decoder_sharing``)."""
        separate = self.cfg.decoder_sharing == "separate"
        make = self._decoder_factory(blocks, language_specific_layers=not separate)
        return LanguageSpecific(make, self.languages, "tgt") if separate else make()

    def _decoder_factory(
        self, blocks: _Blocks, language_specific_layers: bool
    ) -> Callable[[], nn.Module]:
        """Makes one decoder (a separate decoder is already target-specific: no LSL in it)."""
        return lambda: Decoder(blocks, language_specific_layers)

    def _new_embedding(self, rows: int) -> nn.Embedding:
        embedding = nn.Embedding(rows, self.cfg.d_model)
        nn.init.normal_(embedding.weight, std=self.cfg.d_model**-0.5)
        return embedding

    # -- pieces used by training, search and export -------------------------------------------
    def embedding_of(self, index: Index, lang: str) -> torch.Tensor:
        """The embedding matrix ``lang`` is read with as a source (``src``) or written with as a
        target (``tgt``; also its output layer): its own, else the shared one."""
        own = self.source_embed_tokens if index == "src" else self.target_embed_tokens
        if own is not None and lang in own.by_lang:
            weight: torch.Tensor = own.by_lang[lang].weight
            return weight
        return self.embed_tokens.weight

    def decoder_of(self, route: Route) -> nn.Module:
        """The decoder of ``route``: its target language's own, else the shared one."""
        own = self.target_decoder
        if own is not None and route.tgt in own.by_lang:
            return own.by_lang[route.tgt]
        return resolve(self.decoder, route)

    def vocab_size_of(self, lang: str) -> int:
        """The size of ``lang``'s vocabulary (its own, else the shared one)."""
        return self.language_vocab_sizes.get(lang, self.vocab_size)

    def embed(
        self, ids: torch.Tensor, offset: int = 0, table: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Scaled token embeddings (from ``table``, default the shared matrix) plus positions."""
        t = ids.shape[1]
        if offset + t > self.cfg.max_positions:
            raise ValueError(
                f"sequence of {offset + t} tokens exceeds max_positions {self.cfg.max_positions}"
            )
        table = self.embed_tokens.weight if table is None else table
        x = nn.functional.embedding(ids, table) * self.embed_scale
        return self.embed_dropout(x + self.positions[offset : offset + t])

    def gates(self, side: str, route: Route) -> tuple[SideGates, torch.Tensor | None]:
        """The gates of ``side`` ("encoder" or "decoder") for ``route`` and, in training, their
        auxiliary loss: none for a dense model (the sparse model overrides this)."""
        return None, None

    def encode(
        self, src_ids: torch.Tensor, route: Route, pad_id: int = 0, *, lms_path: str = LS_PATH
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states and the key mask (B, 1, 1, S), True where a token may be attended.
        ``lms_path``: the LMS path (``shared``: a Fuse-Distillation model's shared pair)."""
        gates, _ = self.gates("encoder", route)
        return self._encode(src_ids, Conditioning(route, lms_path), gates, pad_id)

    def _encode(
        self, src_ids: torch.Tensor, cond: Conditioning, gates: SideGates, pad_id: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mask = (src_ids != pad_id)[:, None, None, :]
        x = self.embed(src_ids, table=self.embedding_of("src", cond.route.src))
        return self.encoder(x, mask, cond=cond, gates=gates), mask

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        route: Route,
        cache: list[LayerCache] | None = None,
        offset: int = 0,
        output_ids: torch.Tensor | None = None,
        *,
        lms_path: str = LS_PATH,
    ) -> torch.Tensor:
        """Logits (B, T, V). With ``cache``, ``tgt_in`` holds only the new tokens at ``offset``.
        With ``output_ids`` (N,), logits (B, T, N) over those vocabulary rows only."""
        gates, _ = self.gates("decoder", route)
        cond = Conditioning(route, lms_path)
        return self._decode(tgt_in, memory, memory_mask, cond, gates, cache, offset, output_ids)

    def _decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor,
        cond: Conditioning,
        gates: SideGates,
        cache: list[LayerCache] | None = None,
        offset: int = 0,
        output_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        t = tgt_in.shape[1]
        self_mask = None
        if cache is None or t > 1:
            self_mask = torch.ones(t, offset + t, dtype=torch.bool, device=tgt_in.device).tril(
                diagonal=offset
            )
        weight = self.embedding_of("tgt", cond.route.tgt)  # tied: input and output
        h = self.decoder_of(cond.route)(
            self.embed(tgt_in, offset, weight), memory, memory_mask, self_mask, cond, cache, gates
        )
        return nn.functional.linear(h, weight if output_ids is None else weight[output_ids])

    def new_cache(self) -> list[LayerCache]:
        return [{"self": {}, "cross": {}} for _ in range(self.cfg.decoder_layers)]

    def reorder_cache(self, cache: list[LayerCache], index: torch.Tensor) -> None:
        """Keep the cache rows ``index`` (beam search's surviving hypotheses), in place."""
        for layer in cache:
            for part in layer.values():
                for key in part:
                    part[key] = part[key].index_select(0, index)

    def forward(
        self,
        src_ids: torch.Tensor,
        tgt_in: torch.Tensor,
        route: Route,
        output_ids: torch.Tensor | None = None,
        *,
        lms_path: str = LS_PATH,
    ) -> ModelOutput:
        """Teacher-forced logits (see :meth:`decode`) with what the loss needs besides them.

        In evaluation the LMS path ``lms_path`` runs; in training every path of
        :attr:`training_paths` (each its own encoder and decoder pass): the first gives
        ``logits``, the others are scored alongside it and distilled into it (Fuse
        Distillation, LMS paper eq. 4: the symmetric KL, summed over the target tokens).
        Auxiliary losses of the gates (sparse model) are summed over the passes and weighted
        by the batch's target tokens: one per batch, as the paper's loss.
        """
        paths = self.training_paths if self.training else (lms_path,)
        predictions, gate_losses = [], []
        for path in paths:
            cond = Conditioning(route, path)
            gates, aux = self.gates("encoder", route)
            memory, mask = self._encode(src_ids, cond, gates)
            gate_losses.append(aux)
            gates, aux = self.gates("decoder", route)
            predictions.append(self._decode(tgt_in, memory, mask, cond, gates, None, 0, output_ids))
            gate_losses.append(aux)
        keep = tgt_in != PAD_ID  # gold has its padding where the decoder input has
        aux_losses: dict[str, torch.Tensor] = {}
        if any(aux is not None for aux in gate_losses):
            total = sum(aux.float() for aux in gate_losses if aux is not None)
            aux_losses["gates"] = total * keep.sum()
        for other in predictions[1:]:
            aux_losses["fuse_distill_kl"] = symmetric_kl(predictions[0][keep], other[keep])
        return ModelOutput(predictions[0], predictions[1:], aux_losses)

    def set_training_step(self, step: int) -> None:
        """The update about to be made (0-based); models with a schedule (sparse) use it."""

    def optimizer_groups(self, lr: float) -> list[dict]:
        """Parameter groups for the optimizer; models whose parameters learn at another rate
        (the sparse model's selection logits) split them off."""
        return [{"params": list(self.parameters()), "lr": lr}]

    # -- parameter accounting -----------------------------------------------------------------
    def route_parameter_count(self, route: Route) -> int:
        """Parameters one route actually uses (what a dense model for that route would hold)."""
        total = 0
        own_decoder = self.target_decoder is not None and route.tgt in self.target_decoder.by_lang
        for name, p in self.named_parameters():
            if own_decoder and name.startswith("decoder."):
                continue  # the route decodes with its target's own decoder instead
            lang = _lang_of(name)
            if lang is None or lang in self._languages_at(name, route):
                total += p.numel()
        return total

    def _languages_at(self, name: str, route: Route) -> set[str]:
        prefix, _, _ = split_language_specific(name)
        module = self.get_submodule(prefix)
        assert isinstance(module, LanguageSpecific)
        return module.route_languages(route)


def _lang_of(param_name: str) -> str | None:
    parts = split_language_specific(param_name)
    return None if parts is None else parts[1]
