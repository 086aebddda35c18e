"""Side-by-side studies (:mod:`lsmt_study.study`): the one package above both ``training`` and
``model_export``. It trains with ``python -m training.train``, exports with ``python -m
model_export`` and scores with ``python -m model_export.evaluate``, each as a subprocess; no
package of the repository imports or runs it (``tests/test_layout.py``)."""
