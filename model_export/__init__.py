"""Export: a trained PyTorch model -> a module bundle, and back (the bundle format itself, its
reader and the engine builder are :mod:`lsmt_bundle`, which needs no torch).

- :mod:`.from_torch`: split a model into per-language modules and write the bundle
- :mod:`.methods`: which fusion rules a model's methods (LMS, FD, LAA, LEE) record
- :mod:`.to_checkpoint`: a bundle's weights back as a training checkpoint
- :mod:`.evaluate`: a bundle evaluated as served (CTranslate2 engines; no torch)
- ``python -m model_export``: the command line (export, ``build-engines``, ``verify``,
  ``checkpoint``)

Importing this package imports nothing: torch and ``training`` are loaded by the modules
that need them.
"""
