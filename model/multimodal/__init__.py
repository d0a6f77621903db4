"""Multimodal Inkling: the vision (hMLP) and audio (dMel codebook) towers, the input processor and
the fusion of tower rows into the normed text embeddings (docs/MULTIMODAL.md)."""
