"""elements: a planted block-scale corruption is named by expert, rows and blocks; a copy is 0 diverged."""
import numpy as np

from inkling_probe.bisect.elements import bisect_elements, region_lines, split

SCALE = "model.llm.layers.4.mlp.experts.w13_weight_scale"


def test_corrupted_block_scales_are_named(nvfp4_ckpt, corrupted_copy, tmp_path):
    def flip(v):
        v[5, 16:32, 2:4] ^= 0x08  # expert 5, rows 16-31, NVFP4 blocks 2-3

    bad = corrupted_copy(nvfp4_ckpt, tmp_path / "bad", SCALE, flip)
    res = bisect_elements(str(nvfp4_ckpt), str(bad))
    assert res["diverged"] == 32
    (row,) = res["diverged_keys"]
    assert row["key"] == SCALE
    assert region_lines(row["regions"]) == ["expert 5: 32 of 1024", "  rows 16-31: 32 of 128",
                                            "    blocks 2-3: 32 of 32"]


def test_correct_pair_is_zero_of_n(nvfp4_ckpt):
    res = bisect_elements(str(nvfp4_ckpt), str(nvfp4_ckpt))
    assert res["diverged"] == 0 and res["elements"] > 1_000_000 and not res["diverged_keys"]


def test_packed_weight_blocks_are_16_elements():
    mask = np.zeros((2, 32, 64), bool)
    mask[1, 3, 17] = mask[1, 3, 50] = True
    regions = split(mask, [("expert", 0, 1), ("rows", 1, 16), ("blocks", 2, 16)])
    assert [r["start"] for r in regions] == [1]
    blocks = regions[0]["inside"][0]["inside"]
    assert [(b["start"], b["stop"]) for b in blocks] == [(16, 32), (48, 64)]


def test_two_dumps_token_rows_and_bf16(tmp_path):
    import torch
    from dumps import write

    x = torch.randn(40, 64).to(torch.bfloat16)
    y = x.clone()
    y[20, 5] += 1
    a = write(tmp_path / "a", [[("layers.0.out", x)]])
    b = write(tmp_path / "b", [[("layers.0.out", y)]])
    res = bisect_elements(a, b)
    assert (res["diverged"], res["elements"]) == (1, 40 * 64)
    assert region_lines(res["diverged_keys"][0]["regions"]) == ["rows 16-31: 1 of 1024",
                                                                "  blocks 0 (elements 0-15): 1 of 256"]
    assert bisect_elements(a, a)["diverged"] == 0


def test_per_expert_vector_is_split_by_expert(nvfp4_ckpt, corrupted_copy, tmp_path):
    """A per-expert [E] tensor names the expert, not "blocks 0 (elements 0-15)" (issue 22)."""
    amax = "model.llm.layers.4.mlp.experts.w13_input_amax"

    def bump(v):
        v[5] ^= 0x1  # expert 5's fp32 amax, lowest mantissa bit

    bad = corrupted_copy(nvfp4_ckpt, tmp_path / "bad", amax, bump, itemsize=4)
    (row,) = bisect_elements(str(nvfp4_ckpt), str(bad), keys="*experts.w13_input_amax")["diverged_keys"]
    assert row["key"] == amax and row["shape"] == [8]
    assert region_lines(row["regions"]) == ["expert 5: 1 of 1"]


def test_a_per_expert_vector_is_split_by_expert():
    from inkling_probe.bisect.elements import levels

    assert levels("layers.3.mlp.experts.input_scale", (8,), False) == [("expert", 0, 1)]
    mask = np.zeros(8, bool)
    mask[5] = True
    assert region_lines(split(mask, levels("layers.3.mlp.experts.input_scale", (8,), False))) == ["expert 5: 1 of 1"]


def _safetensors(path, header: dict, data: bytes = b""):
    import json
    import struct

    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_bad_safetensors_inputs_are_one_line_exit_2(tmp_path):
    """A FIFO (read would wait forever), a header larger than the file, offsets past the data, a size
    that does not fit the shape: each refused before any tensor is read."""
    import os
    import subprocess
    import sys

    good = _safetensors(tmp_path / "a.safetensors", {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                        bytes(8))
    os.mkfifo(tmp_path / "fifo.safetensors")
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes((10 ** 15).to_bytes(8, "little") + b"{}")
    past = _safetensors(tmp_path / "past.safetensors", {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 800]}},
                        bytes(8))
    odd = _safetensors(tmp_path / "odd.safetensors", {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
                       bytes(8))
    cases = [(tmp_path / "fifo.safetensors", "not a regular file"), (huge, "header of 1000000000000000 bytes"),
             (past, "outside the file's 8 data bytes"), (odd, "shape [3] of F32 needs 12 bytes, data_offsets span 8")]
    for path, text in cases:
        p = subprocess.run([sys.executable, "-m", "inkling_probe.cli", "bisect", "elements", str(good), str(path)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (path, p.stderr)
        assert text in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


LAYOUT = [["image", 0, 2, 6], ["audio", 0, 9, 3], ["image", 1, 12, 4]]  # [kind, item, first row, rows]


def _media_dumps(tmp_path, change):
    """Two dumps of a fused stream [18, 32] and the vision tower's rows [10, 32] (images 0 and 1) with
    their media layout; ``change(fused, vision)`` edits the second."""
    import torch

    import inkling_probe

    g = torch.Generator().manual_seed(0)
    fused, vision = torch.randn(18, 32, generator=g), torch.randn(10, 32, generator=g)
    out = []
    for name in ("a", "b"):
        f, v = fused.clone(), vision.clone()
        if name == "b":
            change(f, v)
        with inkling_probe.recording(str(tmp_path / name)):
            inkling_probe.probe("vision.out", v)
            inkling_probe.probe("fused", f, media=LAYOUT)
        out.append(str(tmp_path / name))
    return out


def test_rows_split_by_image_and_patch(tmp_path):
    """A difference confined to image 1's patches 1-2 is named by image, then patch."""
    def change(f, v):
        v[6 + 1:6 + 3] += 1  # image 1's patches 1-2 in the tower (image 0 holds rows 0-5)
        f[12 + 1:12 + 3] += 1  # and their rows in the stream

    a, b = _media_dumps(tmp_path, change)
    res = {r["key"]: region_lines(r["regions"]) for r in bisect_elements(a, b)["diverged_keys"]}
    assert res["vision.out"][:2] == ["image 1 (rows 6-9): 64 of 128", "  patches 1-2: 64 of 64"]
    assert res["fused"][:2] == ["image 1 (rows 12-15): 64 of 128", "  patches 1-2: 64 of 64"]


def test_text_and_audio_rows_named_apart(tmp_path):
    def change(f, v):
        f[0, 3] += 1  # a text row
        f[10] += 1  # audio 0's frame 1

    a, b = _media_dumps(tmp_path, change)
    (row,) = bisect_elements(a, b)["diverged_keys"]
    lines = region_lines(row["regions"])
    assert lines[:2] == ["text (rows 0-1): 1 of 64", "  rows 0-1: 1 of 64"] and "audio 0 (rows 9-11): 32 of 96" in lines
    assert "  frames 1: 32 of 32" in lines


def test_text_row_blocks_keep_the_stream_numbering(tmp_path):
    def change(f, v):
        f[16] += 1  # text row 16 (the run after image 1 starts at row 16)

    a, b = _media_dumps(tmp_path, change)
    (row,) = bisect_elements(a, b)["diverged_keys"]
    assert region_lines(row["regions"])[:2] == ["text (rows 16-17): 32 of 64", "  rows 16-17: 32 of 64"]


def test_no_layout_no_media_split(tmp_path):
    """A dump without a media layout splits rows in blocks of 16 as before."""
    import torch

    from dumps import write

    x = torch.randn(18, 32)
    y = x.clone()
    y[13] += 1
    a, b = write(tmp_path / "a", [[("fused", x)]]), write(tmp_path / "b", [[("fused", y)]])
    assert region_lines(bisect_elements(a, b)["diverged_keys"][0]["regions"])[0] == "rows 0-15: 32 of 512"
