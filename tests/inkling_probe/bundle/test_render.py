"""report.html renders in headless Chromium (Debian package `chromium`; skipped without it) with no
network and no JavaScript: the culprit is in the rendered page and both plots are drawn (the page
with its images has far more coloured pixels than the same page with the images blanked)."""
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium (apt-get install chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars", "--disable-javascript"]


def chromium(*args, timeout=60):
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                             capture_output=True, text=True, timeout=timeout)
    return res


def screenshot(page, png, size="1280,1700"):
    res = chromium(f"--window-size={size}", f"--screenshot={png}", f"file://{page}")
    assert os.path.isfile(png), res.stderr[-500:]
    from matplotlib.image import imread

    return imread(png)[..., :3]


def plot_hued(image) -> int:
    """Pixels of blue/purple hue: the plots' markers, lines and heatmap (the page's own styles have none)."""
    return int((image[..., 2] > image[..., 0] + 0.2).sum())


def test_report_html_renders_with_culprit_and_both_plots(amax_report, tmp_path):
    page = amax_report[0] / "report.html"
    dom = chromium("--dump-dom", f"file://{page}").stdout
    assert "culprit 1: <code>layers.3.mlp.experts</code>" in dom
    images = re.findall(r'<img alt="[^"]+" src="(data:image/png;base64,[^"]+)"', dom)
    assert len(images) == 2
    full = screenshot(page, str(tmp_path / "full.png"))
    assert plot_hued(full) > 1000  # ~2300 on the raw_input_amax report
    for k, src in enumerate(images):  # each image, blanked, leaves a different page: it was drawn
        blank = tmp_path / f"blank{k}.html"
        blank.write_text(page.read_text().replace(src, ""))
        without = screenshot(blank, str(tmp_path / f"blank{k}.png"))
        assert np.abs(full - without).max(-1).__gt__(0.1).sum() > 100_000, k
