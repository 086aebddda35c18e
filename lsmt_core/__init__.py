"""LSMT's core: the contracts that training, export and serving share, with no torch.

Languages and editions, reserved symbols and source tagging, the position table, routes, text
normalisation, per-target vocabulary selection, the bundle manifest, language identification
and chrF/BLEU scoring. Dependencies point one way: ``lsmt_core`` imports none of
``lsmt_bundle``, ``training``, ``model_export`` or ``server``; they import it
(tests/test_layout.py checks).
"""
