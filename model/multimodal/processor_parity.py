"""Our image processor against transformers' ``InklingImageProcessor`` on synthetic images.

transformers' processor is a torchvision backend: it needs ``torchvision`` (not installed in the CPU
venv; the GPU machine has it). :func:`missing` says why it cannot run; :func:`run_case` compares one
image: the patch grid (``num_patches``, ``pixel_values`` shape) and every value of ``pixel_values``.
Used by ``tests/model/test_multimodal_image_parity.py`` and ``scripts/image_parity.py`` (which writes
the per-image lines for docs/gpu/).

Inputs go to transformers as a user's would: a PIL image (what ``Image.open`` gives; grey, grey+alpha,
RGB and RGBA modes) or a channels-last uint8 numpy array. Ours: :func:`processor.image_patches` on the
same pixels (a PIL image's array). An image transformers refuses is skipped with its reason; one
ours refuses after transformers took it is a failure. Tolerance: bit-exact, except numpy RGBA arrays: transformers'
torchvision path blends them onto white in float32 and truncates, where ours (like transformers for
a PIL image) uses Pillow's integer ``alpha_composite``: within one 8-bit level (``LEVEL``).
Resizing (``rescale_image_frac``) is off by default in transformers and not implemented here (a
checkpoint asking for it is refused: ``checkpoint.read_multimodal_config``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .processor import CLIP_STD, image_patches, patch_grid

LEVEL = 1.0001 / (255 * min(CLIP_STD))  # one 8-bit level after normalisation (the largest of the channels; float32 slack)
MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


@dataclass(frozen=True)
class Case:
    height: int
    width: int
    mode: str  # L, LA, RGB, RGBA
    patch: int
    source: str  # "pil" or "numpy"
    seed: int = 0

    @property
    def name(self) -> str:
        return f"{self.height}x{self.width} {self.mode} P={self.patch} {self.source}"

    @property
    def tolerance(self) -> float:
        return LEVEL if self.source == "numpy" and "A" in self.mode else 0.0


def cases() -> list[Case]:
    """Sizes and aspect ratios for each preset's patch (2 tiny, 4 small, 40 full), every mode, both inputs."""
    sizes = {2: [(5, 6), (1, 1), (2, 2), (7, 3), (3, 11)], 4: [(16, 16), (17, 33), (33, 5)],
             40: [(40, 40), (39, 41), (97, 130), (300, 517)]}
    out = []
    for patch, shapes in sizes.items():
        for i, (h, w) in enumerate(shapes):
            for mode in MODES:
                for source in ("pil", "numpy"):
                    if source == "numpy" and mode == "LA":
                        continue  # transformers reads a 2-channel array as neither grey nor RGB(A)
                    out.append(Case(h, w, mode, patch, source, seed=i))
    return out


def pixels(case: Case) -> np.ndarray:
    """The synthetic image, uint8 ``[H, W]`` (L) or ``[H, W, C]``: random values with a flat block
    and the extremes 0 / 255 (alpha too: fully transparent and opaque pixels)."""
    g = np.random.default_rng(case.seed * 7919 + case.height * 31 + case.width)
    c = MODES[case.mode]
    x = g.integers(0, 256, (case.height, case.width, c), dtype=np.uint8)
    x[: case.height // 2, : case.width // 3] = x[0, 0]
    x.reshape(-1, c)[::5] = 0
    x.reshape(-1, c)[2::7] = 255
    return x[..., 0] if c == 1 and case.source == "pil" else x  # a grey array is [H, W, 1]: transformers
    # 5.24 refuses a 2-D numpy image (make_flat_list_of_images)


def missing() -> str | None:
    """Why transformers' image processor cannot run here, or None."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        return "transformers' InklingImageProcessor needs torchvision, which is not installed"
    try:
        from transformers import InklingImageProcessor  # noqa: F401
    except ImportError as e:
        return f"transformers has no InklingImageProcessor ({e})"
    return None


def theirs(case: Case):
    """transformers' (pixel_values [N, 2, P, P, 3] float32, num_patches) of the case's image."""
    from transformers import InklingImageProcessor

    proc = InklingImageProcessor(size={"height": case.patch, "width": case.patch})
    x = pixels(case)
    if case.source == "pil":
        from PIL import Image

        img = Image.fromarray(x, case.mode)
        out = proc(images=[img], return_tensors="pt")
    else:
        out = proc(images=[x], return_tensors="pt", input_data_format="channels_last")
    return out["pixel_values"].float().numpy(), [int(n) for n in out["num_patches"]]


def ours(case: Case) -> np.ndarray:
    """inkling_model's pixel_values of the case's image (a PIL image's array: the same pixels)."""
    return image_patches(pixels(case), case.patch).numpy()


def run_case(case: Case) -> dict:
    """One image compared: grid, shape, max |difference|, elements off, and whether it is within tolerance.
    An image transformers refuses gives ``refused`` (its error, one line) instead of a comparison; one
    transformers takes and ours refuses is a failure (``error``): ours must take what transformers takes."""
    rows, cols = patch_grid(case.height, case.width, case.patch)
    res = {"case": case.name, "grid": [rows, cols], "tolerance": case.tolerance, "refused": None, "error": None}
    for side, fn in (("transformers", theirs), ("inkling_model", ours)):
        try:
            res[side] = fn(case)
        except Exception as e:  # noqa: BLE001 - a refusal is a result line, not a traceback
            msg = str(e).splitlines()[0] if str(e) else ""
            why = f"refused by {side}: {type(e).__name__}: {msg[:200]}"
            if side == "transformers":
                return {**res, "refused": why, "ok": None, "max_abs": None}
            return {**res, "error": why, "ok": False, "max_abs": None}
    got, (want, counts) = res.pop("inkling_model"), res.pop("transformers")
    res.update(ours_shape=list(got.shape), theirs_shape=list(want.shape), theirs_num_patches=counts)
    if got.shape != want.shape or counts != [rows * cols]:
        return {**res, "ok": False, "max_abs": None, "off": None}
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return {**res, "max_abs": float(d.max()), "off": int((d > 0).sum()), "elements": int(d.size),
            "ok": bool(d.max() <= case.tolerance)}


def line(r: dict) -> str:
    """One text line of a result."""
    if r.get("refused"):
        return f"skip  {r['case']}: {r['refused']}"
    if r.get("error"):
        return f"FAIL  {r['case']}: {r['error']} (transformers took it)"
    if r["max_abs"] is None:
        return (f"FAIL  {r['case']}: grid {r['grid']} shape ours {r['ours_shape']} theirs {r['theirs_shape']} "
                f"num_patches {r['theirs_num_patches']}")
    exact = "bit-exact" if r["max_abs"] == 0 else f"max |diff| {r['max_abs']:.3g} ({r['off']} of {r['elements']} off)"
    tol = "" if not r["tolerance"] else f", tolerance {r['tolerance']:.3g} (one 8-bit level)"
    return f"{'ok   ' if r['ok'] else 'FAIL '} {r['case']}: grid {r['grid'][0]}x{r['grid'][1]}, pixel_values " \
           f"{r['ours_shape']}, {exact}{tol}"
