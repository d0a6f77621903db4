"""DIR.zip: the report folder zipped beside it, every entry under ``<DIR name>/`` (relative)."""
from __future__ import annotations

import os
import zipfile

from inkling_probe.bundle.safe_write import check_folder, check_target, open_new


def zip_folder(folder: str) -> str:
    """Zip ``folder`` into ``folder + '.zip'`` (created new: an existing file or a planted link,
    dangling or not, is refused); returns the zip's path."""
    folder = os.path.normpath(folder)
    if os.path.islink(folder):
        check_folder(folder)  # refuses it, naming the link
    root = os.path.basename(folder)
    target = check_target(folder + ".zip")
    with open_new(target) as fh, zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for file in sorted(os.listdir(folder)):
            path = os.path.join(folder, file)
            if os.path.isfile(path) and not os.path.islink(path):
                z.write(path, arcname=f"{root}/{file}")
    return target
