"""Checkpoints: exact resume for the trainer, and everything the exporter needs.

A checkpoint is one ``torch.save`` dict (loadable with ``weights_only=True``):

=================  ===========================================================================
``format``         ``CHECKPOINT_FORMAT`` (int); ``kind`` = ``"lsmt-checkpoint"``
``step``           optimizer updates done
``model``          ``state_dict()`` of the :class:`Seq2SeqTransformer` (DDP prefix removed)
``model_config``   ``ModelConfig`` as JSON-able dict (architecture, tag scheme, LSL layout)
``recipe``         the full recipe as a dict (provenance; resume uses it)
``languages``      the model's languages (sorted); ``routes``: trained directions "src-tgt"
``vocab_size``     rows of the tied embedding
``tokenizer``      ``{"path", "sha256", "spm_model": bytes}``: the SentencePiece model itself
                   travels with the checkpoint, so export never depends on a moved directory
``dev_chrf``       dev chrF at this step (None if not evaluated); ``best_dev_chrf``
``optimizer``, ``scheduler``, ``scaler``, ``sampler``, ``rng`` (one entry per rank)
                   resume state; absent from ``best.pt`` (weights-only, for export)
=================  ===========================================================================

A run directory holds ``last.pt`` (full, rewritten every ``save_every`` steps) and ``best.pt``
(best dev chrF so far, no optimizer state). Public API for the exporter::

    from training.checkpoint import load_model
    model, recipe, meta = load_model("runs/baseline")      # best.pt, else last.pt; eval mode
    meta.routes, meta.languages, meta.tag_scheme, meta.tokenizer_model_path()
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from lsmt_core.manifest import TARGET_DECODER, VOCABULARY_GROUPS
from lsmt_core.routes import Route, parse_route, route_key
from lsmt_core.tags import TagScheme
from lsmt_text.paths import resolve_path

from .model import ModelConfig, Seq2SeqTransformer, build_model
from .model.layers import language_specific_name, shared_name, split_language_specific
from .recipe import Recipe, recipe_from_dict

CHECKPOINT_FORMAT = 1
KIND = "lsmt-checkpoint"


# -- tokenizer reference -------------------------------------------------------------------------


def tokenizer_model_file(tokenizer: Path | str) -> Path:
    """``spm.model`` inside a tokenizer directory, or the file itself."""
    p = resolve_path(tokenizer)
    return p / "spm.model" if p.is_dir() else p


def tokenizer_reference(tokenizer: Path | str) -> dict[str, Any]:
    path = tokenizer_model_file(tokenizer)
    blob = path.read_bytes()
    return {"path": str(path), "sha256": hashlib.sha256(blob).hexdigest(), "spm_model": blob}


# -- RNG -----------------------------------------------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # current device only: one device per rank
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


# -- metadata ------------------------------------------------------------------------------------


@dataclass
class CheckpointMeta:
    """What a checkpoint says about its model (everything but the weights)."""

    path: Path
    step: int
    languages: list[str]
    routes: list[Route]
    vocab_size: int
    model_config: ModelConfig
    tokenizer_path: str
    tokenizer_sha256: str
    # languages with a tokenizer of their own: lang -> reference (``tokenizer_reference``)
    language_tokenizers: dict[str, dict[str, Any]] = field(default_factory=dict)
    dev_chrf: float | None = None
    best_dev_chrf: float | None = None
    has_training_state: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    _spm_model: bytes | None = field(default=None, repr=False)

    @property
    def tag_scheme(self) -> TagScheme:
        return self.model_config.tag_scheme

    def spm_model_bytes(self) -> bytes:
        """The SentencePiece model the checkpoint was trained with (embedded copy)."""
        if self._spm_model is None:
            return Path(self.tokenizer_path).read_bytes()
        return self._spm_model

    def tokenizer_model_path(self) -> Path:
        """A path to the exact SentencePiece model: the original file if it still matches its
        hash, else the embedded copy written to a temporary file."""
        return _model_file(
            {"path": self.tokenizer_path, "sha256": self.tokenizer_sha256},
            self.spm_model_bytes,
        )

    def language_tokenizer_model_path(self, lang: str) -> Path:
        """As :meth:`tokenizer_model_path`, for a language with its own tokenizer."""
        ref = self.language_tokenizers[lang]
        return _model_file(ref, lambda: ref["spm_model"])


def _model_file(ref: dict[str, Any], embedded: Callable[[], bytes]) -> Path:
    """The SentencePiece model of a tokenizer reference: its file if it still matches the
    recorded hash, else the embedded copy written to a temporary file."""
    p = Path(ref["path"])
    if p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest() == ref["sha256"]:
        return p
    fd, tmp = tempfile.mkstemp(suffix=".model", prefix="lsmt-spm-")
    with os.fdopen(fd, "wb") as f:
        f.write(embedded())
    return Path(tmp)


def _meta_from(ckpt: dict[str, Any], path: Path) -> CheckpointMeta:
    tok = ckpt["tokenizer"]
    return CheckpointMeta(
        path=path,
        step=int(ckpt["step"]),
        languages=list(ckpt["languages"]),
        routes=[parse_route(r) for r in ckpt["routes"]],
        vocab_size=int(ckpt["vocab_size"]),
        model_config=ModelConfig.model_validate(ckpt["model_config"]),
        tokenizer_path=tok["path"],
        tokenizer_sha256=tok["sha256"],
        language_tokenizers=dict(ckpt.get("language_tokenizers") or {}),
        dev_chrf=ckpt.get("dev_chrf"),
        best_dev_chrf=ckpt.get("best_dev_chrf"),
        has_training_state="optimizer" in ckpt,
        extra=dict(ckpt.get("extra", {})),
        _spm_model=tok.get("spm_model"),
    )


# -- save / load ---------------------------------------------------------------------------------


def unwrap(model: nn.Module) -> Seq2SeqTransformer:
    return getattr(model, "module", model)  # DDP


def build_checkpoint(
    *,
    model: nn.Module,
    recipe: Recipe,
    step: int,
    routes: list[Route],
    tokenizer: dict[str, Any],
    language_tokenizers: dict[str, dict[str, Any]] | None = None,
    dev_chrf: float | None = None,
    best_dev_chrf: float | None = None,
    training_state: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``language_tokenizers``: the references of the languages with their own tokenizer
    (with their vocabulary sizes, absent from checkpoints written before them)."""
    m = unwrap(model)
    ckpt: dict[str, Any] = {
        "format": CHECKPOINT_FORMAT,
        "kind": KIND,
        "step": step,
        "model": {k: v.detach().cpu() for k, v in m.state_dict().items()},
        "model_config": m.cfg.model_dump(mode="json"),
        "recipe": recipe.model_dump(mode="json"),
        "languages": list(m.languages),
        "routes": [route_key(r) for r in routes],
        "vocab_size": m.vocab_size,
        "tokenizer": tokenizer,
        "language_tokenizers": language_tokenizers or {},
        "language_vocab_sizes": dict(m.language_vocab_sizes),
        "dev_chrf": dev_chrf,
        "best_dev_chrf": best_dev_chrf,
        "torch_version": str(torch.__version__),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "extra": extra or {},
    }
    if training_state:
        ckpt.update(training_state)
    return ckpt


def save_checkpoint(ckpt: dict[str, Any], path: Path | str) -> Path:
    """Atomic write (temporary file + rename): an interruption never leaves a torn file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save(ckpt, tmp)
    os.replace(tmp, path)
    return path


TRAINING_STATE_KEYS = ("optimizer", "scheduler", "scaler", "sampler", "rng", "world_size")


def slim_checkpoint(ckpt: dict[str, Any], dtype: torch.dtype | None = None) -> dict[str, Any]:
    """``ckpt`` without its resume state, floating weights cast to ``dtype`` (e.g. float16 to
    carry a model between machines at half the size; loading casts back to the model's
    dtype). Everything the exporter and ``init_from`` read is kept."""
    slim = {k: v for k, v in ckpt.items() if k not in TRAINING_STATE_KEYS and k != "_path"}
    if dtype is not None:
        slim["model"] = {
            k: v.to(dtype) if v.is_floating_point() else v for k, v in ckpt["model"].items()
        }
    return slim


def interpolate_checkpoints(
    tuned: dict[str, Any], start: dict[str, Any], weight: float
) -> dict[str, Any]:
    """``tuned`` (weights only) with every floating weight moved back toward ``start`` by
    ``weight``: (1 - weight) * tuned + weight * start. For a model fine-tuned from ``start``,
    the points between keep much of what tuning gained and what it forgot (weight-space
    ensembling, Wortsman et al. 2022, "Robust fine-tuning of zero-shot models"). The two must
    hold the same tensors with the same shapes."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight {weight} outside [0, 1]")
    a, b = tuned["model"], start["model"]
    if a.keys() != b.keys():
        raise ValueError(f"the checkpoints hold different tensors: {sorted(a.keys() ^ b.keys())}")
    for k in a:
        if a[k].shape != b[k].shape:
            raise ValueError(f"{k}: shape {tuple(a[k].shape)} vs {tuple(b[k].shape)}")
    out = slim_checkpoint(tuned)
    out["model"] = {
        k: ((1 - weight) * v.float() + weight * b[k].float()).to(v.dtype)
        if v.is_floating_point()
        else v
        for k, v in a.items()
    }
    out["extra"] = {
        **(tuned.get("extra") or {}),
        "interpolated": {"toward": str(start.get("_path", "")), "weight": weight},
    }
    return out


def extend_vocabulary(ckpt: dict[str, Any], tokenizer: Path | str) -> dict[str, Any]:
    """``ckpt`` (weights only) with the vocabulary of ``tokenizer``: the checkpoint's own
    SentencePiece model with whole words appended (``python -m lsmt_text.tokenizer extend``).
    Every old row of the tied embedding (input and output) stays; each new word's row starts as
    the mean of the rows of the pieces the old model cut it into, so the model reads the word
    as it read its pieces and training goes on from there."""
    import sentencepiece as spm

    from lsmt_text.spm_model import pieces

    if "tokenizer" not in ckpt:
        raise ValueError(
            "the checkpoint does not carry its tokenizer (one made from a bundle before "
            "2026-11-29): make it again with python -m model_export checkpoint BUNDLE"
        )
    ref = tokenizer_reference(tokenizer)
    old_proto = ckpt["tokenizer"]["spm_model"]
    old, new = pieces(old_proto), pieces(ref["spm_model"])
    if new[: len(old)] != old or len(new) == len(old):
        raise ValueError(
            f"{ref['path']} is not the checkpoint's tokenizer with pieces appended "
            f"({len(old)} -> {len(new)} pieces)"
        )
    if ckpt.get("language_vocab_sizes"):
        raise ValueError("languages with vocabularies of their own: extend those instead")
    weight = ckpt["model"][EMBEDDING_WEIGHT]
    sp = spm.SentencePieceProcessor(model_proto=old_proto)
    rows = []
    for piece, _, _ in new[len(old) :]:
        if not piece.startswith("▁"):
            raise ValueError(f"new piece {piece!r} does not start a word")
        ids = torch.tensor(sp.encode(piece[1:]), dtype=torch.long)
        rows.append(weight[ids].float().mean(0).to(weight.dtype))
    out = slim_checkpoint(ckpt)
    out["model"] = {**ckpt["model"], EMBEDDING_WEIGHT: torch.cat([weight, torch.stack(rows)])}
    out["vocab_size"] = len(new)
    out["tokenizer"] = ref
    extra = dict(ckpt.get("extra") or {})
    extra.pop("target_vocab", None)  # chosen again from the new tokenizer's frequencies
    out["extra"] = {**extra, "extended_vocabulary": {"from": len(old), "to": len(new)}}
    return out


def resolve_checkpoint(path: Path | str, which: Literal["best", "last"] = "best") -> Path:
    """A ``.pt`` file, or a run directory (its ``best.pt``, else ``last.pt``; or the reverse
    with ``which="last"``)."""
    p = resolve_path(path)
    if p.is_file():
        return p
    if p.is_dir():
        order = ["best.pt", "last.pt"] if which == "best" else ["last.pt", "best.pt"]
        for name in order:
            if (p / name).is_file():
                return p / name
        raise FileNotFoundError(f"no best.pt or last.pt in run directory {p}")
    raise FileNotFoundError(f"checkpoint {path} not found")


def load_checkpoint(path: Path | str, which: Literal["best", "last"] = "best") -> dict[str, Any]:
    """The raw checkpoint dict (tensors on CPU), checked for kind and format."""
    file = resolve_checkpoint(path, which)
    ckpt = torch.load(file, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("kind") != KIND:
        raise ValueError(f"{file} is not an LSMT checkpoint")
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{file} has checkpoint format {ckpt.get('format')}, this code reads "
            f"{CHECKPOINT_FORMAT}"
        )
    ckpt["_path"] = str(file)
    return ckpt


def model_from_checkpoint(ckpt: dict[str, Any]) -> Seq2SeqTransformer:
    cfg = ModelConfig.model_validate(ckpt["model_config"])
    model = build_model(
        cfg,
        int(ckpt["vocab_size"]),
        list(ckpt["languages"]),
        dict(ckpt.get("language_vocab_sizes") or {}),
    )
    model.load_state_dict(ckpt["model"], strict=True)
    return model


def load_model(
    run_dir_or_ckpt: Path | str,
    device: str | torch.device = "cpu",
    which: Literal["best", "last"] = "best",
) -> tuple[Seq2SeqTransformer, Recipe, CheckpointMeta]:
    """The exporter's entry point: (model in eval mode on ``device``, recipe, metadata)."""
    ckpt = load_checkpoint(run_dir_or_ckpt, which)
    model = model_from_checkpoint(ckpt).to(device).eval()
    recipe = recipe_from_dict(ckpt["recipe"], source=ckpt["_path"])
    return model, recipe, _meta_from(ckpt, Path(ckpt["_path"]))


# -- initialisation from another checkpoint ------------------------------------------------------

_ENC_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.")
_DEC_LAYER = re.compile(r"^(decoder\.(?:by_lang\.[^.]+\.)?layers\.)(\d+)\.")


def donor_name(name: str, donors: dict[str, str]) -> str:
    """``name`` with a new language's copy replaced by its donor's (else ``name``)."""
    parts = split_language_specific(name)
    if parts is None or parts[1] not in donors:
        return name
    prefix, lang, rest = parts
    return language_specific_name(prefix, donors[lang], rest)


def own_decoder_source(name: str) -> str | None:
    """Where a language's own decoder (``target_decoder.by_lang.<lang>.rest``) starts from:
    the shared decoder, the one its donor used (``model.language_decoders`` needs a shared
    decoder); None for any other parameter."""
    parts = split_language_specific(name)
    if parts is None or parts[0] != TARGET_DECODER.prefix:
        return None
    return f"decoder.{parts[2]}"


def _source_name(name: str, mode: str, n_enc: tuple[int, int], n_dec: tuple[int, int]) -> str:
    """Name in the source model of target parameter ``name``."""
    if mode == "shallow":
        m = _ENC_LAYER.match(name)
        if m:
            i = int(m.group(1))
            j = i * n_enc[0] // n_enc[1]  # 12 from 6: layer i copies layer i // 2
            return f"encoder.layers.{j}." + name[m.end() :]
        m = _DEC_LAYER.match(name)
        if m and int(m.group(2)) >= n_dec[0]:
            raise ValueError(f"decoder layer {m.group(2)} has no source layer")
    return name


def init_from_checkpoint(
    model: nn.Module,
    source: Path | str | dict[str, Any],
    mode: str = "copy",
    donors: dict[str, str] | None = None,
    vocabularies: NewVocabularies | None = None,
) -> dict[str, str]:
    """Copy weights from a checkpoint (a bundle: ``python -m model_export checkpoint``)
    into ``model`` (in place); returns target <- source names.

    - ``copy``: parameters by name. A dense source tensor also initialises every language's
      copy of a module that is language-specific in ``model`` (``...by_lang.<xx>...``), as the
      LSL paper does when it starts from a dense baseline.
    - ``shallow``: the deep-encoder/shallow-decoder initialisation of the Shallow paper: a
      model with E encoder layers from one with E' (12 from 6): layer i copies layer
      ``i * E' // E`` (i // 2); the D decoder layers copy the bottom D of the source's.
      Embeddings and final norms are copied as is.

    - ``hybrid``: the Shallow paper's hybrid (section 3.2): everything but the decoder by
      name, as ``copy``; the model's LSTM decoder keeps its random initialisation.

    ``donors`` (new language -> trained language) fill a new language's copies of the
    language-specific modules from its donor's (``training.add_language``), and its own
    decoder (``model.language_decoders``) from the decoder its donor used.
    ``vocabularies`` fill the embeddings of a language with a new vocabulary that the
    source lacks: the rows of the pieces the source's (shared) vocabulary knows start from
    their trained rows (Shallow paper 3.5), the others keep their initialisation.

    Every parameter of ``model`` must be filled with a tensor of the same shape, else a
    ``ValueError`` lists what is missing.
    """
    ckpt = source if isinstance(source, dict) else _init_checkpoint(source)
    state = ckpt["model"]
    src_cfg = ModelConfig.model_validate(ckpt["model_config"])
    m = unwrap(model)
    _check_init(m, src_cfg, int(ckpt["vocab_size"]), mode)
    n_enc = (src_cfg.encoder_layers, m.cfg.encoder_layers)
    n_dec = (src_cfg.decoder_layers, m.cfg.decoder_layers)
    mapping: dict[str, str] = {}
    missing: list[str] = []
    new_state = {}
    for name, tensor in m.state_dict().items():
        if mode == "hybrid" and name.startswith("decoder."):
            new_state[name] = tensor  # the new decoder starts at random (Shallow paper 3.2)
            continue
        cand = _source_name(name, mode, n_enc, n_dec)
        own_decoder = own_decoder_source(cand)
        for c in (donor_name(cand, donors or {}), cand, shared_name(cand), own_decoder):
            if c is not None and c in state and state[c].shape == tensor.shape:
                new_state[name] = state[c]
                mapping[name] = c
                break
        else:
            rows = _own_embedding(name, tensor, vocabularies, state)
            if rows is None:
                missing.append(name)
            else:
                new_state[name], mapping[name] = rows, f"{EMBEDDING_WEIGHT} (by piece)"
    if missing:
        more = f" (+{len(missing) - 8} more)" if len(missing) > 8 else ""
        raise ValueError(
            f"init_from ({mode}): no source tensor of the right shape for "
            f"{', '.join(missing[:8])}{more}"
        )
    m.load_state_dict(new_state, strict=True)
    return mapping


EMBEDDING_WEIGHT = "embed_tokens.weight"
OWN_EMBEDDINGS = tuple(g.prefix for g in VOCABULARY_GROUPS)


@dataclass(frozen=True)
class NewVocabularies:
    """The pieces of the shared vocabulary (the checkpoint's) and of each language's own."""

    shared: list[str]
    own: dict[str, list[str]]


def _own_embedding(
    name: str,
    init: torch.Tensor,
    vocabularies: NewVocabularies | None,
    state: dict[str, torch.Tensor],
) -> torch.Tensor | None:
    """A new vocabulary's embedding (parameter ``name``) from the source's shared one, piece
    by piece; None when ``name`` is no such parameter."""
    parts = split_language_specific(name)
    if vocabularies is None or parts is None or parts[0] not in OWN_EMBEDDINGS:
        return None
    own = vocabularies.own.get(parts[1])
    if own is None:
        return None
    known = {piece: i for i, piece in enumerate(vocabularies.shared)}
    pairs = [(i, known[p]) for i, p in enumerate(own) if p in known]
    new, old = (torch.tensor(ids, dtype=torch.long) for ids in zip(*pairs, strict=True))
    rows = init.clone()
    rows[new] = state[EMBEDDING_WEIGHT][old].to(rows.dtype)
    return rows


def _init_checkpoint(source: Path | str) -> dict[str, Any]:
    if (resolve_path(source) / "manifest.json").is_file():
        # Reading bundles is the exporter's business (training never imports model_export).
        raise ValueError(
            f"init_from {source} is a bundle directory: write its weights as a checkpoint "
            f"first (python -m model_export checkpoint {source} --out FILE.pt) and use that"
        )
    return load_checkpoint(source, "last")


def _check_init(model: nn.Module, src_cfg: ModelConfig, src_vocab_size: int, mode: str) -> None:
    """Refuse an initialisation that cannot fill ``model`` (a clear error, not a shape one)."""
    if mode not in ("copy", "shallow", "hybrid"):
        raise ValueError(f"unknown init mode {mode!r} (copy | shallow | hybrid)")
    if (mode == "hybrid") != (model.cfg.decoder_kind == "lstm" and src_cfg.decoder_kind != "lstm"):
        raise ValueError(
            "init mode hybrid starts an LSTM-decoder model from a Transformer-decoder one; "
            f"here the model's decoder is {model.cfg.decoder_kind}, the checkpoint's "
            f"{src_cfg.decoder_kind} (use copy between models of one decoder kind)"
        )
    if mode == "shallow" and model.cfg.decoder_layers > src_cfg.decoder_layers:
        raise ValueError(
            f"shallow init keeps the bottom decoder layers: the target has "
            f"{model.cfg.decoder_layers}, the source only {src_cfg.decoder_layers}"
        )
    if src_vocab_size != model.vocab_size:
        raise ValueError(
            f"vocabulary sizes differ: checkpoint {src_vocab_size}, model {model.vocab_size}"
        )


def main(argv: list[str] | None = None) -> int:
    """``python -m training.checkpoint slim SRC DST [--dtype float16]``,
    ``python -m training.checkpoint interpolate TUNED START DST [--weight 0.5]``,
    ``python -m training.checkpoint extend-vocabulary SRC TOKENIZER DST``"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m training.checkpoint")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("slim", help="weights-only copy of a checkpoint, optionally cast")
    s.add_argument("src", help="run directory (best.pt) or .pt file")
    s.add_argument("dst", help="output .pt file")
    s.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default=None)
    i = sub.add_parser(
        "interpolate", help="weights between a fine-tuned checkpoint and its starting point"
    )
    i.add_argument("tuned", help="run directory (best.pt) or .pt file")
    i.add_argument("start", help="the checkpoint it was fine-tuned from (.pt)")
    i.add_argument("dst", help="output .pt file (weights only)")
    i.add_argument("--weight", type=float, default=0.5, help="share of start (default 0.5)")
    x = sub.add_parser(
        "extend-vocabulary", help="weights for a tokenizer extended with whole words"
    )
    x.add_argument("src", help="run directory (best.pt) or .pt file")
    x.add_argument("tokenizer", help="the extended tokenizer (directory or spm.model)")
    x.add_argument("dst", help="output .pt file (weights only)")
    args = ap.parse_args(argv)
    ckpt = load_checkpoint(args.tuned if args.command == "interpolate" else args.src)
    if args.command == "interpolate":
        start = load_checkpoint(args.start)
        out = save_checkpoint(interpolate_checkpoints(ckpt, start, args.weight), args.dst)
    elif args.command == "extend-vocabulary":
        out = save_checkpoint(extend_vocabulary(ckpt, args.tokenizer), args.dst)
    else:
        dtype = None if args.dtype is None else getattr(torch, args.dtype)
        out = save_checkpoint(slim_checkpoint(ckpt, dtype), args.dst)
    # a checkpoint made from a bundle (python -m model_export checkpoint) records no step
    step = ckpt.get("step", "unknown")
    print(f"{ckpt['_path']} (step {step}) -> {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
