"""The registry of methods (:class:`training.model.method.Method`), and the loops over it that
the model builder, the trainer, ``training.method_params`` and the exporter run, so that none
of them asks which method a model uses.

A new method is one registration in its own module and one entry in :data:`METHODS` (plus its
manifest record in ``lsmt_core.manifest``, its maths in ``lsmt_bundle.fusions`` and a parity
test). The order of :data:`METHODS` is the order in which methods attach (so the order of a
model's parameters, which optimizer states in checkpoints follow) and in which their records
appear in a manifest: change it and older checkpoints resume wrongly, older bundles re-export
differently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lsmt_core.manifest import Fusion

from .hybrid import HYBRID
from .laa import LAA, LEE
from .layers import LS_PATH
from .lms import LMS
from .method import Method, ModuleTensor
from .sparse_transformer import SPARSE
from .transformer import Seq2SeqTransformer

METHODS: tuple[Method, ...] = (LMS, LAA, LEE, SPARSE, HYBRID)


def active_methods(cfg: Any) -> list[Method]:
    """The methods a model of ``cfg`` (a ``ModelConfig``) uses, in :data:`METHODS` order."""
    return [method for method in METHODS if method.active(cfg)]


def model_class(cfg: Any) -> type[Seq2SeqTransformer]:
    """The class of a model of ``cfg``: the one its methods need, else the dense Transformer
    (the configuration refuses methods that need different classes together)."""
    needed = [m.model_class for m in active_methods(cfg) if m.model_class is not None]
    return needed[0] if needed else Seq2SeqTransformer


def parameter_owner(param_name: str) -> tuple[Method, str] | None:
    """The method owning a parameter (or a ``LanguageSpecific`` prefix ``P.by_lang.``) and its
    kind; None for a parameter of the base model."""
    for method in METHODS:
        kind = method.kind_of(param_name)
        if kind is not None:
            return method, kind
    return None


def is_method_tensor(param_name: str) -> bool:
    """A method's own tensor, which a bundle holds as a fusion's input (or not at all) rather
    than as a dense weight: LMS factors, LAA matrices, LEE vectors, sparse selection logits."""
    return parameter_owner(param_name) is not None


def stored_in_bundle(param_name: str, lms_path: str = LS_PATH) -> bool:
    """Whether a bundle exported on ``lms_path`` stores the parameter (every base parameter
    does; a method's, as its registration says)."""
    owner = parameter_owner(param_name)
    return owner is None or owner[0].stored(owner[1], lms_path)


def method_fusions(model: Seq2SeqTransformer, lms_path: str = LS_PATH) -> list[Fusion]:
    """The manifest records of ``model``'s methods, for a bundle exported on ``lms_path``."""
    LMS.check_path(model.cfg, lms_path)  # every model: 'shared' needs Fuse Distillation
    found = (method.fusion(model, lms_path) for method in active_methods(model.cfg))
    return [fusion for fusion in found if fusion is not None]


def module_tensors(model: Seq2SeqTransformer, languages: list[str]) -> list[ModuleTensor]:
    """The tensors ``model``'s methods export besides its parameters."""
    return [
        t for method in active_methods(model.cfg) for t in method.module_tensors(model, languages)
    ]


def fused_weights(fusions: list[Fusion]) -> Callable[[str], bool]:
    """Whether a dense weight is one that ``fusions`` (a manifest's) change: the exporter's
    check compares the others with the model as they are; the parity tests check these."""
    by_rule = {method.rule: method for method in METHODS if method.rule is not None}
    changed = [by_rule[f.rule].changes(f) for f in fusions if f.rule in by_rule]
    return lambda name: any(change(name) for change in changed)


def checkpoint_records(model: Seq2SeqTransformer) -> dict[str, Any]:
    """What ``model``'s methods add to a checkpoint's ``extra``."""
    records: dict[str, Any] = {}
    for method in active_methods(model.cfg):
        records |= method.checkpoint_record(model)
    return records
