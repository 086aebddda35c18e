"""Architecture search for language-specific layers (LSL paper, Pires et al. 2023, section 3.2).

In a search model every encoder layer ``i`` holds a shared layer, one language-specific layer
(one copy per language) and 3 scalars; with ``w_i = softmax(mix_logits_i)`` (eq. 1)::

    h_i = w_i[shared] * layer_i(h_{i-1})
        + w_i[src]    * LSL_i(h_{i-1}, src)      # the copy of the route's source language
        + w_i[tgt]    * LSL_i(h_{i-1}, tgt)      # the copy of the route's target language

The same copy of a language is used when that language is the source and when it is the
target. After training, the architecture is the argmax per layer (``python -m training.lsl
select``), which is then trained from scratch (or from a dense checkpoint).

Parameter names: ``encoder.layers.<i>.mix_logits`` (order :data:`CHOICES`),
``encoder.layers.<i>.shared.<...>`` and ``encoder.layers.<i>.specific.by_lang.<lang>.<...>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn

from .layers import Conditioning, LanguageSpecific, LayerGates, Route

CHOICES: tuple[str, str, str] = ("shared", "src", "tgt")
"""Order of the 3 mixing scalars of each layer."""

MIX_SUFFIX = ".mix_logits"


class DualIndexed(LanguageSpecific):
    """One module per language, used both source- and target-indexed in the same forward.

    It is a :class:`LanguageSpecific` (so the trainer and DDP know parameters depend on the
    route), but there is no single copy per route: use :meth:`copy`.
    """

    def __init__(self, factory: Callable[[], nn.Module], languages: list[str]):
        super().__init__(factory, languages, "src")

    def copy(self, lang: str) -> nn.Module:
        if lang not in self.by_lang:
            raise KeyError(f"no language-specific layer for language {lang!r}")
        return self.by_lang[lang]

    def select(self, route: Route) -> nn.Module:
        raise TypeError("a search layer's language-specific copies are used src- and tgt-indexed")

    def route_languages(self, route: Route) -> set[str]:
        return {route.src, route.tgt}


class SearchLayer(nn.Module):
    """Shared layer + source-indexed LSL + target-indexed LSL, mixed by softmax (eq. 1)."""

    def __init__(self, make_layer: Callable[[], nn.Module], languages: list[str]):
        super().__init__()
        self.shared = make_layer()
        self.specific = DualIndexed(make_layer, languages)
        # zeros: the search starts from uniform weights (1/3 each)
        self.mix_logits = nn.Parameter(torch.zeros(len(CHOICES)))

    def mixing_weights(self) -> torch.Tensor:
        """(3,) non-negative, summing to 1, in :data:`CHOICES` order."""
        return torch.softmax(self.mix_logits, dim=0)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        cond: Conditioning,
        gates: LayerGates | None = None,
    ) -> torch.Tensor:
        w = self.mixing_weights().to(x.dtype)
        route = cond.route
        h = w[0] * self.shared(x, mask, cond, gates)
        h = h + w[1] * self.specific.copy(route.src)(x, mask, cond, gates)
        return h + w[2] * self.specific.copy(route.tgt)(x, mask, cond, gates)


def mixing_weights_from_state(state: Mapping[str, torch.Tensor]) -> list[list[float]]:
    """Softmaxed mixing weights per encoder layer (bottom first) from a state dict."""
    found: dict[int, torch.Tensor] = {}
    for name, tensor in state.items():
        if name.startswith("encoder.layers.") and name.endswith(MIX_SUFFIX):
            index = name[len("encoder.layers.") : -len(MIX_SUFFIX)]
            if index.isdigit():
                found[int(index)] = tensor
    if not found:
        raise ValueError("no encoder.layers.<i>.mix_logits: not an architecture-search model")
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"mixing weights for layers {sorted(found)}: expected 0..{len(found) - 1}")
    return [torch.softmax(found[i].detach().float(), dim=0).tolist() for i in sorted(found)]


def select_architecture(weights: list[list[float]]) -> dict[str, list[int]]:
    """The argmax per layer as the recipe's 1-based ``encoder_src`` / ``encoder_tgt`` lists."""
    picks = [CHOICES[max(range(len(CHOICES)), key=lambda k: w[k])] for w in weights]
    return {
        "encoder_src": [i + 1 for i, c in enumerate(picks) if c == "src"],
        "encoder_tgt": [i + 1 for i, c in enumerate(picks) if c == "tgt"],
    }
