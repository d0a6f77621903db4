"""``run --image/--audio`` on the measured cases of issue 42, as a user runs it (a subprocess under a
3 GiB address-space limit and a 60 s timeout): one line naming the file, exit 2. Before: a 255 KB
9000x9000 PNG still ran at 120 s (at 40 s under this limit: 2.3 GB), a 370-byte 1x100000 PNG asked
for 20 GB, a 10-minute WAV took 7.5 GB; a 0x0 PNG, Pillow's bomb and a WAV cut mid-frame exited 3."""

import resource
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from inkling_model.cli.make_checkpoint import command as make_checkpoint
from inkling_model.cli.run import command as run

from media_util import png_bytes, silent_wav, wav_bytes, zero_png_streamed

LIMIT_AS = 3 << 30


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mmlimcli")
    res = CliRunner().invoke(make_checkpoint, ["--preset", "tiny", "--multimodal", str(d / "ckpt")])
    assert res.exit_code == 0, res.output
    (d / "wide.png").write_bytes(png_bytes(100000, 1))
    zero_png_streamed(d / "big.png", 9000, 9000)
    silent_wav(d / "long.wav", 600)
    (d / "zero.png").write_bytes(png_bytes(0, 0))
    (d / "bomb.png").write_bytes(png_bytes(13000, 14000, raw=bytes(10)))
    (d / "cut.wav").write_bytes(wav_bytes(np.zeros(1000, "<i2"))[:-1])
    return d


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


@pytest.mark.parametrize("flag,name,msg", [
    ("--image", "big.png", "9000x9000 = 81000000 pixels, over the limit of 50000000 (INKLING_MEDIA_MAX_PIXELS)"),
    ("--audio", "long.wav", "12000 tokens"),
])
def test_measured_case_is_one_line_in_bounded_time_and_memory(files, flag, name, msg):
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "inkling_probe.cli", "run", "--ckpt", str(files / "ckpt"),
                          "--tokens", "1,5,8", flag, str(files / name), "--dump", str(files / f"d_{name}")],
                         capture_output=True, text=True, timeout=60, preexec_fn=_limit)
    lines = (res.stdout + res.stderr).strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, (res.returncode, lines[-5:])
    assert str(files / name) in lines[0] and msg in lines[0], lines[0]
    assert time.monotonic() - t0 < 60 and not (files / f"d_{name}").exists()


@pytest.mark.parametrize("flag,name,msg", [
    ("--image", "wide.png", "50001 tokens; the prompt with its media would be 50005 tokens, over the model's "
                            "max_position_embeddings 4096"),
    ("--image", "zero.png", "a 0x0 image holds no pixels"),
    ("--image", "bomb.png", "13000x14000 = 182000000 pixels"),
    ("--audio", "cut.wav", "(truncated)"),
])
def test_decoder_errors_are_one_line_exit_2(files, flag, name, msg):
    res = CliRunner().invoke(run, ["--ckpt", str(files / "ckpt"), "--tokens", "1,5,8", flag, str(files / name),
                                   "--dump", str(files / f"d_{name}")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert str(files / name) in res.output and msg in res.output, res.output


def test_a_bad_limit_setting_is_one_line_exit_2(files, monkeypatch):
    monkeypatch.setenv("INKLING_MEDIA_MEMORY_MIB", "-5")
    res = CliRunner().invoke(run, ["--ckpt", str(files / "ckpt"), "--tokens", "1,5,8", "--image",
                                   str(files / "zero.png"), "--dump", str(files / "d_env")])
    assert res.exit_code == 2 and "INKLING_MEDIA_MEMORY_MIB='-5': expected a number > 0" in res.output, res.output
