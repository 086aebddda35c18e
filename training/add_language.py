"""Incremental language addition (Shallow paper, Berard et al. 2021, section 3.5).

A trained model gains new languages without any change to what it already knows: every
parameter it had is frozen, and only the new languages' copies of the language-specific
modules train, on pairs with languages it already has. The paper trains a new source
embedding matrix for a new source language and a new shallow decoder for a new target
language; in LSMT's route-aware models those are the new language's source-indexed and
target-indexed modules (LSL layers, separate decoders, LMS factors, LAA matrices), each
initialised from the closest trained language's (``add_languages.donors``). Because frozen
weights stay bit-identical, every existing route translates exactly as before, and the
exported bundle only gains the new languages' modules (``python -m model_export
add-language``).

Recipe: ``add_languages: {donors: {de: fr}}`` beside ``init_from`` (the trained checkpoint);
``data`` names the new language's pairs. The existing target languages keep the checkpoint's
target vocabularies (:func:`read_trained_model`), so the trained routes into them are the
ones the bundle serves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from lsmt_text.paths import resolve_path

from .checkpoint import load_checkpoint
from .model.layers import split_language_specific
from .recipe import Recipe


class AddLanguageError(ValueError):
    """A language addition that cannot keep the trained model unchanged."""


def check_donors(donors: dict[str, str], trained_languages: list[str]) -> None:
    """Donors must be languages the model has; new languages must be new."""
    unknown = sorted(d for d in donors.values() if d not in trained_languages)
    if unknown:
        raise AddLanguageError(
            f"donor languages {unknown} are not in the trained model ({trained_languages})"
        )
    known = sorted(lang for lang in donors if lang in trained_languages)
    if known:
        raise AddLanguageError(f"languages {known} are already in the trained model")


def freeze_all_but(model: nn.Module, languages: set[str]) -> tuple[int, int]:
    """Only the copies of ``languages`` in the language-specific modules keep gradients;
    (trainable, frozen) parameter counts. A model without such modules cannot learn a new
    language without changing the others: refused."""
    trainable = frozen = 0
    for name, param in model.named_parameters():
        parts = split_language_specific(name)
        param.requires_grad = parts is not None and parts[1] in languages
        if param.requires_grad:
            trainable += param.numel()
        else:
            frozen += param.numel()
    if not trainable:
        raise AddLanguageError(
            "the model has no language-specific modules for the new languages (LSL layers, "
            "separate decoders, LMS or LAA): adding a language would change the shared weights"
        )
    return trainable, frozen


@dataclass(frozen=True)
class TrainedModel:
    """What an addition keeps of the trained model: its languages (the new model has them
    all, whatever the new data covers) and its target vocabularies (piece ids per language;
    empty when it was trained without them)."""

    languages: list[str]
    target_vocab: dict[str, list[int]]


def read_trained_model(recipe: Recipe) -> TrainedModel | None:
    """The ``init_from`` model of a language addition (None for any other recipe), its
    donors checked against it."""
    if recipe.add_languages is None or recipe.init_from is None:
        return None
    ckpt: dict[str, Any] = load_checkpoint(resolve_path(recipe.init_from), "last")
    languages = list(ckpt["languages"])
    check_donors(recipe.add_languages.donors, languages)
    vocab = (ckpt.get("extra") or {}).get("target_vocab") or {}
    ids = {lang: list(map(int, lang_ids)) for lang, lang_ids in (vocab.get("ids") or {}).items()}
    return TrainedModel(languages, ids)
