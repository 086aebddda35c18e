"""A bundle's weights back as a training checkpoint: the inverse of :mod:`model_export.from_torch`,
so the shipped model can be trained further, or fine-tuned on a user's corpus, without its
training checkpoint (``python -m model_export checkpoint BUNDLE --out FILE.pt``, then
``init_from: FILE.pt``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lsmt_bundle import BundleError, load_bundle
from lsmt_core.manifest import VocabSlice
from lsmt_core.routes import Route
from training.checkpoint import tokenizer_reference
from training.model import language_specific_name


def checkpoint_from_bundle(path: Path | str) -> dict[str, Any]:
    """A bundle's weights as a checkpoint dict (``model``, ``model_config``, ``vocab_size``),
    for ``init_from``: the shipped model can be trained further, or fine-tuned on a user's
    corpus, without its training checkpoint. Module weights are named back to the model's
    parameters (``P.rest`` of module ``src/xx`` -> ``P.by_lang.xx.rest``); int8 modules come
    back dequantized (within their storage error). A bundle with per-target vocabularies
    gives them back as ``extra["target_vocab"]``, as a training checkpoint records them."""
    bundle = load_bundle(path)
    manifest = bundle.manifest
    model_cfg = manifest.provenance.get("recipe", {}).get("model")
    if model_cfg is None:
        raise BundleError(f"{path}: the manifest's provenance has no recipe model section")
    # languages added with a decoder of their own after the recipe the provenance records
    model_cfg = {**model_cfg, "language_decoders": list(manifest.language_decoders)}
    state: dict[str, torch.Tensor] = {}
    target_vocab: dict[str, list[int]] = {}
    both_sides = [Route(lang, lang) for lang in manifest.languages]  # a language's every module
    names = list(dict.fromkeys(name for route in both_sides for name in bundle.modules_for(route)))
    for name in names:
        index = "shared" if name == "shared" else name.split("/")[0]
        lang = None if name == "shared" else name.split("/")[1]
        for key, value in bundle.read_module(name).items():
            if key == VocabSlice().ids and lang is not None:
                target_vocab[lang] = [int(i) for i in value]
            group = manifest.group_of(key)
            if group.index != index:
                continue  # an input of a fusion rule (e.g. the target vocabulary ids)
            if lang is not None:
                key = language_specific_name(
                    group.prefix, lang, key[len(group.prefix) :].removeprefix(".")
                )
            state[key] = torch.from_numpy(value)
    ckpt: dict[str, Any] = {
        "model": state,
        "model_config": model_cfg,
        "vocab_size": manifest.tokenizer.vocab_size,
        # the SentencePiece model the weights were trained with, as a training checkpoint
        # carries it (python -m training.checkpoint extend-vocabulary reads it)
        "tokenizer": tokenizer_reference(bundle.tokenizer_path),
        "languages": manifest.languages,
        # the languages with their own tokenizer, as a training checkpoint records them
        "language_vocab_sizes": {
            lang: info.vocab_size for lang, info in manifest.language_tokenizers.items()
        },
        "language_tokenizers": {
            lang: tokenizer_reference(bundle.tokenizer_path_of(lang))
            for lang in manifest.language_tokenizers
        },
    }
    if target_vocab and manifest.target_vocab is not None:
        # what the model trained with: a language added on top keeps these (training.vocab)
        ckpt["extra"] = {
            "target_vocab": {
                "min_count": manifest.target_vocab.min_count,
                "max_size": manifest.target_vocab.max_size,
                "filter_training": True,
                "ids": target_vocab,
            }
        }
    return ckpt


def write_checkpoint_from_bundle(bundle_dir: Path | str, out: Path | str) -> Path:
    """``checkpoint_from_bundle`` written as a checkpoint file that ``init_from`` reads."""
    from training.checkpoint import CHECKPOINT_FORMAT, KIND, save_checkpoint

    ckpt = checkpoint_from_bundle(bundle_dir)
    ckpt.update(kind=KIND, format=CHECKPOINT_FORMAT, source_bundle=str(bundle_dir))
    return save_checkpoint(ckpt, out)
