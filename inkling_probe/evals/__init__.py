"""Evals, the layer above tensors (numpy only): paired comparison of per-item results, generation
health, teacher-forced generation parity and the visible content of Inkling chat output."""
