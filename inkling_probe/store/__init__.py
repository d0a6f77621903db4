"""The HDF5 store: segment files written per rank, read back as one dump (docs/FORMAT.md)."""
