"""Export: fuse language-specific weights into a module bundle; assemble dense route engines.

Importing this package needs numpy only (no torch, no CTranslate2): the server and the
exporter share :mod:`model_export.bundle` and :mod:`model_export.manifest`.
"""

from .bundle import Bundle, BundleError, DenseModel, load_bundle
from .manifest import FORMAT_VERSION, Manifest

__all__ = ["FORMAT_VERSION", "Bundle", "BundleError", "DenseModel", "Manifest", "load_bundle"]
