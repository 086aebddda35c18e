"""The torch-free text of LSMT: the tokenizer (:mod:`lsmt_text.tokenizer`: SentencePiece
training, per-language piece frequencies, the wrapper that encodes and decodes), the corpus
(:mod:`lsmt_text.data`: its builder and sources, formats, named test sets, user-corpus import)
and where relative paths and caches point (:mod:`lsmt_text.paths`).

It imports only ``lsmt_core`` (``tests/test_layout.py``), so training, export, the study and
the data tools share it without the trainer or torch. Importing the package imports nothing.
"""
