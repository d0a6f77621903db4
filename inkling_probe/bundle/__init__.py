"""The bug-report bundle: report folder (:mod:`.folder`), environment with redaction
(:mod:`.environment`), the slice of tensors around each culprit (:mod:`.slice`), repro.sh
(:mod:`.repro`) and the zip (:mod:`.archive`). numpy, h5py and matplotlib only: no torch."""
from inkling_probe.bundle.folder import write_report

__all__ = ["write_report"]
