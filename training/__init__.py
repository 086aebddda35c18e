"""LSMT training side: corpus building, tokenizer, models and training loops (PyTorch)."""
