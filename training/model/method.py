"""What one method registration says (fairseq registers model variants by name; CTranslate2
declares each format as a spec): everything the trainer, ``training.method_params`` and the
exporter need to know about a method, in one class per method (``training.model.methods``
lists them).

A registration says

- how it attaches to a model built without it (:meth:`Method.attach`; or, for a method that
  changes the forward pass itself, the model class it needs: :attr:`Method.model_class`);
- which parameters it owns, by kind (:meth:`Method.kind_of`), and which kinds a bundle stores
  on each LMS path (:meth:`Method.stored`);
- how it fuses for a route: the manifest record it writes (:meth:`Method.fusion`, a
  ``lsmt_core.manifest`` type whose ``rule`` names the numpy maths in
  ``lsmt_bundle.fusions``) and the dense weights that record changes (:meth:`Method.changes`);
- which tensors it exports besides its parameters (:meth:`Method.module_tensors`) and what it
  adds to a checkpoint (:meth:`Method.checkpoint_record`).

The torch half and the record half live here, in ``training``, because both need the torch
model and both may name ``lsmt_core``'s records; the fusion maths lives below, in
``lsmt_bundle.fusions``, because the server fuses without torch or ``training``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lsmt_core.manifest import Fusion, Index

from .layers import LS_PATH

if TYPE_CHECKING:  # the models import no registration: no circle
    from .transformer import Seq2SeqTransformer


class MethodExportError(ValueError):
    """A method's placement or path that cannot be fused exactly into a dense route."""


@dataclass(frozen=True)
class ModuleTensor:
    """A tensor a method exports besides its parameters: ``name`` in the ``index`` module of
    ``lang`` (e.g. a sparse model's inference gates), stored as it is (not in the bundle's
    store dtype)."""

    index: Index
    lang: str
    name: str
    value: np.ndarray


def nothing_changed(name: str) -> bool:
    return False


class Method:
    """One method's registration; the defaults are those of a method without that part."""

    name: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]] = ()
    """The kinds of parameters it owns (``training.method_params`` counts each)."""
    rule: ClassVar[str | None] = None
    """The ``rule`` of the manifest record :meth:`fusion` writes (the key of its maths in
    ``lsmt_bundle.fusions.FUSION_RULES``), None: the method writes none."""
    model_class: ClassVar[type[Seq2SeqTransformer] | None] = None
    """The model class the method needs (its forward pass differs), None: any."""

    def active(self, cfg: Any) -> bool:
        """Whether a model of ``cfg`` (a ``ModelConfig``) uses the method."""
        raise NotImplementedError

    def attach(self, model: Seq2SeqTransformer) -> None:
        """Give ``model`` the method's parameters and terms (at initialisation)."""

    def kind_of(self, param_name: str) -> str | None:
        """The kind of a parameter the method owns (one of :attr:`kinds`), else None. Also
        asked of a ``LanguageSpecific`` module's prefix (``P.by_lang.``)."""
        return None

    def stored(self, kind: str, lms_path: str) -> bool:
        """Whether a bundle exported on ``lms_path`` stores the parameters of ``kind`` (each
        in its language's module): what serving costs beyond the base model."""
        return True

    def fusion(self, model: Seq2SeqTransformer, lms_path: str = LS_PATH) -> Fusion | None:
        """The manifest's record of how a route's modules fuse for this method."""
        return None

    def changes(self, fusion: Fusion) -> Callable[[str], bool]:
        """Whether a dense weight is one that ``fusion`` (this method's record) changes: the
        exporter's check compares the others with the model as they are."""
        return nothing_changed

    def module_tensors(self, model: Seq2SeqTransformer, languages: list[str]) -> list[ModuleTensor]:
        """Tensors the bundle needs besides the stored parameters."""
        return []

    def checkpoint_record(self, model: Seq2SeqTransformer) -> dict[str, Any]:
        """What a checkpoint's ``extra`` records about the method (merged into it)."""
        return {}
