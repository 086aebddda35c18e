"""The bundle: LSMT's module store on disk, read and assembled into dense routes (no torch).

What the server reads, and what the exporter writes. Importing this package needs numpy,
safetensors and pydantic only; :mod:`lsmt_bundle.ct2` (the CTranslate2 engine builder) also
needs ctranslate2. Dependencies: ``lsmt_bundle`` imports ``lsmt_core`` and none of
``training``, ``model_export`` or ``server`` (tests/test_layout.py checks).

- :mod:`.store`: the on-disk layout, writing a bundle, reading its manifest, checksums
- :mod:`.storage`: how module weights are stored (float32, float16, int8 with row scales)
- :mod:`.bundle`: :class:`Bundle` (routes, engine keys, checked module reads) and
  :func:`load_bundle`
- :mod:`.assembly`: :func:`assemble`, a route's modules -> :class:`DenseModel`
- :mod:`.fusions`: one module per fusion rule, registered in ``FUSION_RULES``
- :mod:`.ct2`: a :class:`DenseModel` -> a CTranslate2 model (on disk or in memory)
- :mod:`.engine_cache`: built engines kept on disk across cold starts and processes
- :mod:`.contracts`: what an engine is to those who drive it (``Engine``, ``Resident``)
- :mod:`.packages`: ready models (Argos packages, CTranslate2 folders) served as routes
"""

from lsmt_core.manifest import FORMAT_VERSION, Manifest

from .assembly import assemble
from .bundle import Bundle, load_bundle, read_pieces
from .dense import DenseModel, Weights
from .errors import BundleError
from .fusions import FUSION_RULES
from .store import module_name, write_bundle

__all__ = [
    "FORMAT_VERSION",
    "FUSION_RULES",
    "Bundle",
    "BundleError",
    "DenseModel",
    "Manifest",
    "Weights",
    "assemble",
    "load_bundle",
    "module_name",
    "read_pieces",
    "write_bundle",
]
