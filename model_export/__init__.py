"""Export: fuse language-specific weights into a module bundle; assemble dense route engines.

Importing this package needs numpy only (no torch, no CTranslate2): the server and the
exporter share :mod:`model_export.bundle` and :mod:`lsmt_core.manifest`.
"""

from lsmt_core.manifest import FORMAT_VERSION, Manifest

from .bundle import Bundle, BundleError, DenseModel, load_bundle

__all__ = ["FORMAT_VERSION", "Bundle", "BundleError", "DenseModel", "Manifest", "load_bundle"]
