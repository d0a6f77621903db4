"""DIR.zip: the report folder zipped beside it, every entry under ``<DIR name>/`` (relative)."""
from __future__ import annotations

import os
import zipfile


def zip_folder(folder: str) -> str:
    """Zip ``folder`` into ``folder + '.zip'``; returns the zip's path."""
    folder = os.path.normpath(folder)
    root = os.path.basename(folder)
    target = folder + ".zip"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for file in sorted(os.listdir(folder)):
            path = os.path.join(folder, file)
            if os.path.isfile(path) and not os.path.islink(path):
                z.write(path, arcname=f"{root}/{file}")
    return target
