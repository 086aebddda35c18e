"""Split a trained PyTorch model into the bundle's per-language modules (needs torch)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lsmt_bundle.dense import Weights
from lsmt_bundle.storage import encode
from lsmt_bundle.store import module_name, write_bundle
from lsmt_core.manifest import (
    Architecture,
    Index,
    Manifest,
    TargetVocab,
    TokenizerInfo,
    VocabSlice,
    WeightGroup,
    language_tokenizer_path,
)
from lsmt_core.routes import Route


def architecture_of(cfg: Any) -> Architecture:
    return Architecture(
        d_model=cfg.d_model,
        heads=cfg.heads,
        ffn_dim=cfg.ffn_dim,
        activation=cfg.activation,
        pre_norm=cfg.pre_norm,
        layer_norm_eps=cfg.layer_norm_eps,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        max_positions=cfg.max_positions,
        decoder_kind=cfg.decoder_kind,
        lstm_hidden_size=cfg.lstm_hidden if cfg.decoder_kind == "lstm" else None,
    )


@dataclass(frozen=True)
class DenseName:
    """Where a model parameter goes in a bundle."""

    name: str  # its dense (route-independent) name
    index: Index  # the module kind holding it
    lang: str | None  # the language of its copy; None for a shared parameter


def dense_names(model: Any) -> dict[str, DenseName]:
    """Every parameter of ``model`` -> its :class:`DenseName`. Parameter ``rest`` of language
    ``lang``'s copy of the ``LanguageSpecific`` module at ``P`` (named
    ``training.model.language_specific_name(P, lang, rest)``) is ``P.rest`` in the ``index``
    module of ``lang``; every other parameter is shared under its own name."""
    from training.model import LanguageSpecific, language_specific_name

    names: dict[str, DenseName] = {}
    for path, module in model.named_modules():  # outer modules first
        if not isinstance(module, LanguageSpecific):
            continue
        for lang in model.languages:
            try:
                copy = model.get_submodule(language_specific_name(path, lang))
            except AttributeError:  # no copy for this language
                continue
            for rest, _ in copy.named_parameters():
                full = language_specific_name(path, lang, rest)
                names.setdefault(full, DenseName(f"{path}.{rest}", module.index, lang))
    for name, _ in model.named_parameters():
        names.setdefault(name, DenseName(name, "shared", None))
    return names


def split_modules(
    model: Any,
    languages: list[str],
    store_dtype: str = "float16",
    stored: Callable[[str], bool] = lambda name: True,
) -> tuple[list[WeightGroup], dict[str, Weights]]:
    """Weight groups and module contents, keyed by dense (route-independent) names.

    A parameter ``P.by_lang.<lang>.rest`` of a LanguageSpecific module at ``P`` goes to the
    module ``<index>/<lang>`` under the dense name ``P.rest`` (:func:`dense_names`).
    Only the parameters (and groups: asked as ``P.by_lang.``) for which ``stored(name)``
    holds are written.
    """
    from training.model import LanguageSpecific

    groups = [WeightGroup(prefix="", index="shared")]
    modules: dict[str, Weights] = {"shared": {}}
    for path, module in model.named_modules():
        if isinstance(module, LanguageSpecific) and stored(path + ".by_lang."):
            groups.append(WeightGroup(prefix=path, index=module.index))
    names = dense_names(model)
    for name, param in model.named_parameters():
        if not stored(name):
            continue
        value = param.detach().cpu().float().numpy()
        dense = names[name]
        if dense.lang is None:
            modules["shared"][dense.name] = value
        elif dense.lang in languages:
            modules.setdefault(module_name(dense.index, dense.lang), {})[dense.name] = value
    return groups, {name: encode(weights, store_dtype) for name, weights in modules.items()}


def export_bundle(
    model: Any,
    out: Path,
    *,
    name: str,
    tokenizer_model: Path,
    routes: list[Route],
    languages: list[str] | None = None,
    store_dtype: str = "float16",
    target_vocab: dict[str, list[int]] | None = None,
    target_vocab_rule: tuple[int, int] | None = None,
    provenance: dict[str, Any] | None = None,
    lms_path: str = "ls",
    language_tokenizer_models: dict[str, Path] | None = None,
) -> Manifest:
    """Write ``model`` as a bundle serving ``routes``.

    ``language_tokenizer_models``: the SentencePiece models of the languages with their own
    vocabulary (``model.language_vocab_sizes``), recorded as ``language_tokenizers``.

    ``target_vocab`` maps each target language to the token ids it keeps (test-time vocabulary
    filtering); ``target_vocab_rule`` records the (min_count, max_size) that chose them.
    ``lms_path`` picks, for a Fuse-Distillation model, the language-specific path (``ls``) or
    the shared one (``shared``: one engine serves every route).
    """
    from training.model.methods import method_fusions, module_tensors, stored_in_bundle

    languages = sorted(languages or {lang for route in routes for lang in route})
    routes = [r for r in routes if r[0] in languages and r[1] in languages]
    fusions = method_fusions(model, lms_path)  # the methods' registrations say each record
    stored = functools.partial(stored_in_bundle, lms_path=lms_path)
    groups, modules = split_modules(model, languages, store_dtype, stored)
    for tensor in module_tensors(model, languages):  # as they are, not in store_dtype
        modules.setdefault(module_name(tensor.index, tensor.lang), {})[tensor.name] = tensor.value
    vocab_info = None
    if target_vocab is not None:
        fusions.append(VocabSlice())
        for lang in languages:
            ids = np.asarray(sorted(set(target_vocab[lang])), dtype=np.int32)
            modules.setdefault(module_name("tgt", lang), {})[VocabSlice().ids] = ids
        min_count, max_size = target_vocab_rule or (0, 0)
        vocab_info = TargetVocab(
            min_count=min_count,
            max_size=max_size,
            sizes={lang: len(set(target_vocab[lang])) for lang in languages},
        )
    manifest = Manifest(
        name=name,
        languages=languages,
        routes=routes,
        architecture=architecture_of(model.cfg),
        tag_scheme=model.cfg.tag_scheme,
        tokenizer=TokenizerInfo(vocab_size=model.vocab_size),
        language_tokenizers={
            lang: TokenizerInfo(path=language_tokenizer_path(lang), vocab_size=size)
            for lang, size in model.language_vocab_sizes.items()
            if lang in languages
        },
        language_decoders=[lang for lang in model.cfg.language_decoders if lang in languages],
        store_dtype=store_dtype,
        weight_groups=groups,
        fusions=fusions,
        target_vocab=vocab_info,
        provenance=provenance or {},
    )
    own = {lang: (language_tokenizer_models or {})[lang] for lang in manifest.language_tokenizers}
    write_bundle(out, manifest, modules, tokenizer_model, own)
    return manifest
