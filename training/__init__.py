"""LSMT training side: models and training loops (PyTorch). The corpus and the tokenizer are
:mod:`lsmt_text`, below it."""
