"""Tensor-parallel layers of the Inkling text decoder (each owns its shard and its weight_loader)."""
