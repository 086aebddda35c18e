"""Adaptive sparse multilingual Transformer (Sparse paper, Gong et al. 2022, sections 3-4).

Every language holds a logit ``mu`` per component: per attention head of every attention
module (eq. 5), per block of every FFN's inner dimension (eq. 6) and per layer (eq. 7).
Encoder components are indexed by the source language, decoder components by the target
language. A component's score ``s`` weighs its output in the forward pass.

Training follows Algorithm 1. The scores are binary Gumbel-softmax samples,
``s = sigmoid((mu + log u - log(1 - u)) / tau)`` (the difference of two Gumbels is logistic),
with tau annealed by :func:`temperature`. Phase one (``step < phase_one_steps``): all
components, loss ``L_cp + c_s L_s``. Phase two: per category the top-k sampled scores are kept
(``m``), the forward uses ``m * s`` and the loss is ``L_cp + c_d L_d(m * s) + c_t L_t(s, m)``.
The auxiliary losses cover all languages' scores (eq. 8-10 sum over every language), not only
the batch's route.

Inference (``model.eval()``) uses the selected sub-network (section 4.3) with the scores it was
trained with: the top-k of ``mu`` (the noise-free ranking) are kept, every other gate is 0, and
a kept component's gate is its noise-free score ``sigmoid(mu / tau)`` at the temperature
training ended with (:attr:`SparseScores.temperature`; the median of the training-time score,
since the logistic noise has median 0). A language uses exactly its budget, and export folds
these gates exactly into the weights (``lsmt_bundle.fusions.sparse_subnetwork``), so what is
evaluated is what the engine computes. Categories: the heads of one attention module, the
blocks of one FFN, the layers of one side (encoder or decoder).

Parameters: ``sparse_scores.logits.<group>`` of shape (languages, ...), languages in the
model's sorted order; groups in :func:`groups`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from lsmt_core.manifest import Fusion, SparseSubnetwork

from .config import ModelConfig
from .layers import LS_PATH, BlockGates, LayerGates, Route
from .method import Method, ModuleTensor
from .sparse_config import SparseConfig
from .transformer import Seq2SeqTransformer

Side = Literal["encoder", "decoder"]
SCORES_PREFIX = "sparse_scores."


@dataclass(frozen=True)
class Group:
    """One kind of component on one side: scores (languages, *shape), top-``kept`` along the
    last dimension."""

    side: Side
    kind: str  # heads | self_heads | cross_heads | ffn | layers
    shape: tuple[int, ...]
    kept: int

    @property
    def name(self) -> str:
        return f"{self.side}_{self.kind}"


def groups(cfg: ModelConfig) -> list[Group]:
    sp = cfg.sparse
    assert sp is not None
    out: list[Group] = []
    for side, n in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        if sp.attention:
            kinds = ["heads"] if side == "encoder" else ["self_heads", "cross_heads"]
            out += [Group(side, k, (n, cfg.heads), sp.heads_kept) for k in kinds]  # type: ignore[arg-type]
        if sp.ffn:
            out.append(Group(side, "ffn", (n, sp.ffn_blocks), sp.ffn_blocks_kept))  # type: ignore[arg-type]
        if sp.layers:
            kept = sp.encoder_layers_kept if side == "encoder" else sp.decoder_layers_kept
            out.append(Group(side, "layers", (n,), kept))  # type: ignore[arg-type]
    return out


# -- scores, selection and the three losses (pure functions, tested by hand) -------------------


def temperature(sp: SparseConfig, step: int) -> float:
    """Jang et al. (2017) annealing; the Sparse paper gives no schedule of its own."""
    return max(sp.min_temperature, sp.temperature * math.exp(-sp.temperature_decay * step))


def gumbel_scores(logits: torch.Tensor, tau: float) -> torch.Tensor:
    """Binary Gumbel-softmax sample of q(z = 1) for every component."""
    u = torch.rand_like(logits).clamp(1e-6, 1 - 1e-6)
    return torch.sigmoid((logits + torch.log(u) - torch.log1p(-u)) / tau)


def topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """1.0 for the ``k`` highest scores along the last dimension (ties: the lower index)."""
    order = torch.sort(scores.detach(), dim=-1, descending=True, stable=True).indices
    mask = torch.zeros_like(scores)
    return mask.scatter_(-1, order[..., :k], 1.0)


def sparsity_loss(s: torch.Tensor) -> torch.Tensor:
    """Eq. 8: sum of s (log s - log 0.5), the KL to the prior p(z = 1) = 0.5."""
    return (torch.special.xlogy(s, s) - s * math.log(0.5)).sum()


def disparity_loss(s: torch.Tensor) -> torch.Tensor:
    """Eq. 9: sum over language pairs l < l' of the dot product of their scores."""
    flat = s.reshape(s.shape[0], -1)
    gram = flat @ flat.T
    return torch.triu(gram, diagonal=1).sum()


def topk_loss(s: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Eq. 10: squared distance of the scores to their top-k masks."""
    return ((s - m) ** 2).sum()


class SparseScores(nn.Module):
    """The selection parameters mu, one tensor per group, (languages, *shape)."""

    def __init__(self, cfg: ModelConfig, languages: list[str]):
        super().__init__()
        assert cfg.sparse is not None
        self.sp = cfg.sparse
        self.groups = {g.name: g for g in groups(cfg)}
        # every component starts at sigmoid(initial_logit) (0: the prior q(z = 1) = 0.5); the
        # Gumbel noise breaks the ties between languages
        self.logits = nn.ParameterDict(
            {
                n: nn.Parameter(torch.full((len(languages), *g.shape), self.sp.initial_logit))
                for n, g in self.groups.items()
            }
        )
        # the temperature of the latest update (set_training_step), for the inference scores
        self.register_buffer("temperature", torch.tensor(temperature(self.sp, 0)))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, *args):
        # checkpoints written before the buffer existed: the schedule's floor, the temperature
        # of any run longer than its annealing
        state_dict.setdefault(prefix + "temperature", torch.tensor(self.sp.min_temperature))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, *args)

    def side_groups(self, side: Side) -> list[Group]:
        return [g for g in self.groups.values() if g.side == side]

    def sample(self, side: Side, step: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Training gates for every language of ``side`` and their auxiliary loss (Alg. 1)."""
        tau = temperature(self.sp, step)
        gates: dict[str, torch.Tensor] = {}
        aux = self.logits[self.side_groups(side)[0].name].new_zeros(())
        for g in self.side_groups(side):
            s = gumbel_scores(self.logits[g.name], tau)
            if step < self.sp.phase_one_steps:
                gates[g.name] = s
                aux = aux + self.sp.sparsity_weight * sparsity_loss(s)
            else:
                m = topk_mask(s, g.kept)
                gates[g.name] = m * s
                aux = aux + self.sp.disparity_weight * disparity_loss(m * s)
                aux = aux + self.sp.topk_weight * topk_loss(s, m)
        return gates, aux

    def selection(self, side: Side | None = None) -> dict[str, torch.Tensor]:
        """The selected sub-networks: binary top-k masks of mu, per group (languages, ...)."""
        chosen = self.groups.values() if side is None else self.side_groups(side)
        return {g.name: topk_mask(self.logits[g.name], g.kept) for g in chosen}

    def inference_scores(self, side: Side | None = None) -> dict[str, torch.Tensor]:
        """Inference gates: the selection masks times the noise-free scores sigmoid(mu / tau),
        tau the temperature training ended with; 0 exactly for every unselected component."""
        tau = self.temperature.to(next(iter(self.logits.values())).dtype)
        return {
            name: m * torch.sigmoid(self.logits[name] / tau)
            for name, m in self.selection(side).items()
        }


class SparseTransformer(Seq2SeqTransformer):
    """Seq2SeqTransformer whose blocks are gated by the route's language scores.

    :meth:`gates` gives each side's blocks the scores of the route's source (encoder) or
    target (decoder) language: in training mode fresh Gumbel samples with their auxiliary loss
    (which ``forward`` returns among its ``aux_losses``), in evaluation the selected
    sub-network's scores. The trainer reports the update number through
    :meth:`set_training_step` (temperature and phase).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        vocab_size: int,
        languages: list[str],
        language_vocab_sizes: dict[str, int] | None = None,
    ):
        super().__init__(cfg, vocab_size, languages, language_vocab_sizes)
        self.sparse_scores = SparseScores(cfg, self.languages)
        self.training_step = 0

    def set_training_step(self, step: int) -> None:
        self.training_step = step
        self.sparse_scores.temperature.fill_(temperature(self.sparse_scores.sp, step))

    def optimizer_groups(self, lr: float) -> list[dict]:
        scale = self.sparse_scores.sp.score_lr_scale
        if scale == 1.0:  # one group, as every other model (and checkpoints before the option)
            return super().optimizer_groups(lr)
        scores = [p for n, p in self.named_parameters() if n.startswith(SCORES_PREFIX)]
        rest = [p for n, p in self.named_parameters() if not n.startswith(SCORES_PREFIX)]
        return [{"params": rest, "lr": lr}, {"params": scores, "lr": lr * scale}]

    def gates(self, side: str, route: Route) -> tuple[list[LayerGates], torch.Tensor | None]:
        aux = None
        if self.training:
            scores, aux = self.sparse_scores.sample(side, self.training_step)  # type: ignore[arg-type]
        else:
            scores = self.sparse_scores.inference_scores(side)  # type: ignore[arg-type]
        lang = self.languages.index(route.src if side == "encoder" else route.tgt)
        row = {name: g[lang] for name, g in scores.items()}

        def block(kind: str, i: int) -> BlockGates:
            units = row.get(f"{side}_{kind}")
            layers = row.get(f"{side}_layers")
            return BlockGates(
                None if units is None else units[i], None if layers is None else layers[i]
            )

        n = self.cfg.encoder_layers if side == "encoder" else self.cfg.decoder_layers
        if side == "encoder":
            return [LayerGates(block("heads", i), block("ffn", i)) for i in range(n)], aux
        return [
            LayerGates(block("self_heads", i), block("ffn", i), block("cross_heads", i))
            for i in range(n)
        ], aux


def selection_record(model: SparseTransformer) -> dict:
    """What each language keeps (0-based indices), for the checkpoint and
    ``training.sparse_report``.

    ``{"budget": {...}, "phase": 1|2, "temperature": tau, "languages": {lang: {group:
    [kept layer indices] | [[kept head/block indices] per layer]}}}``.
    """
    scores = model.sparse_scores
    sp, step = scores.sp, model.training_step
    masks = {n: m.cpu() for n, m in scores.selection().items()}
    langs = {}
    for li, lang in enumerate(model.languages):
        entry = {}
        for name, m in masks.items():
            row = m[li]
            if row.dim() == 1:
                entry[name] = torch.nonzero(row).flatten().tolist()
            else:
                entry[name] = [torch.nonzero(r).flatten().tolist() for r in row]
        langs[lang] = entry
    return {
        "budget": {n: g.kept for n, g in scores.groups.items()},
        "phase": 1 if step < sp.phase_one_steps else 2,
        "temperature": float(scores.temperature),
        "languages": langs,
    }


class SparseMethod(Method):
    """The adaptive sparse Transformer: its own model class (the gates), selection logits that
    no bundle stores (each language's selected gates are exported instead, encoder groups in
    its ``src`` module, decoder groups in its ``tgt`` module) and the selection recorded in
    every checkpoint."""

    name = "sparse"
    kinds = ("sparse_scores",)
    rule = "sparse_subnetwork"
    model_class = SparseTransformer

    def active(self, cfg: Any) -> bool:
        return cfg.sparse is not None

    def kind_of(self, param_name: str) -> str | None:
        return "sparse_scores" if param_name.startswith(SCORES_PREFIX) else None

    def stored(self, kind: str, lms_path: str) -> bool:
        return False  # exported as gates: module_tensors

    def fusion(self, model: Seq2SeqTransformer, lms_path: str = LS_PATH) -> Fusion:
        return SparseSubnetwork()

    def changes(self, fusion: Fusion) -> Callable[[str], bool]:
        """Every layer's weights (scores folded in, FFN blocks sliced out, layers renumbered:
        ``lsmt_bundle.fusions.sparse_subnetwork``): only those outside the layers compare."""
        return lambda name: name.startswith(("encoder.layers.", "decoder.layers."))

    def module_tensors(self, model: Seq2SeqTransformer, languages: list[str]) -> list[ModuleTensor]:
        """Each language's selected sub-network as its inference gates (float32; 0 = dropped,
        else the component's noise-free score, which assembling folds into the weights)."""
        assert isinstance(model, SparseTransformer)
        prefix = SparseSubnetwork().prefix
        tensors = []
        for group, gates in model.sparse_scores.inference_scores().items():
            index = "src" if group.startswith("encoder_") else "tgt"
            for lang in languages:
                row = gates[model.languages.index(lang)].detach().cpu().float().numpy()
                tensors.append(ModuleTensor(index, lang, f"{prefix}.{group}", row))
        return tensors

    def checkpoint_record(self, model: Seq2SeqTransformer) -> dict[str, Any]:
        assert isinstance(model, SparseTransformer)
        return {"sparse": selection_record(model)}


SPARSE = SparseMethod()
