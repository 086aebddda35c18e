"""Fuse Distillation with LMS (LMS paper, Xu et al. 2023, section 4).

Every batch runs twice: through the language-specific matrices ``W + W_v^src W_f^tgt`` (p_l)
and through the shared pair ``W + W_v^shared W_f^shared`` (p_s). Because the two paths share
W, the distillation term is the symmetric KL of eq. 4, with gradients into both paths:

    L = 1/2 (CE(y, p_l) + CE(y, p_s)) + 1/2 (KL(p_l || p_s) + KL(p_s || p_l))

CE is the run's regular (label-smoothed) loss. Like that loss, every term is summed over the
batch's target tokens; :func:`training.step.train_step` divides by the update's token count.
The model's training forward runs both paths and returns the KL among its auxiliary losses
(``Seq2SeqTransformer.forward``), and the step averages the two cross entropies, so the step
computes exactly :class:`FDTerms`' loss without knowing the method; ``fd_terms`` writes the
equation out for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class FDTerms:
    ce_ls: torch.Tensor  # label-smoothed CE of the language-specific path, token-summed
    ce_shared: torch.Tensor
    kl: torch.Tensor  # symmetric KL (eq. 4), token-summed

    @property
    def loss(self) -> torch.Tensor:
        return 0.5 * (self.ce_ls + self.ce_shared) + self.kl


def symmetric_kl(logits_ls: torch.Tensor, logits_shared: torch.Tensor) -> torch.Tensor:
    """1/2 (KL(p_l || p_s) + KL(p_s || p_l)) summed over tokens; logits are (N, V), float32."""
    lp_l = F.log_softmax(logits_ls.float(), dim=-1)
    lp_s = F.log_softmax(logits_shared.float(), dim=-1)
    kl_ls = (lp_l.exp() * (lp_l - lp_s)).sum(-1)
    kl_sl = (lp_s.exp() * (lp_s - lp_l)).sum(-1)
    return 0.5 * (kl_ls + kl_sl).sum()


def fd_terms(
    logits_ls: torch.Tensor,
    logits_shared: torch.Tensor,
    ce_ls: torch.Tensor,
    ce_shared: torch.Tensor,
    keep: torch.Tensor,
) -> FDTerms:
    """The eq. 3/4 terms over the tokens ``keep`` marks (the CEs are computed by the caller)."""
    return FDTerms(ce_ls, ce_shared, symmetric_kl(logits_ls[keep], logits_shared[keep]))
