"""``inkling-probe make-checkpoint --multimodal`` and ``run --image/--audio``: native and transformers
generate the same tokens from a multimodal prefill, the dumps carry the modality layout, compare
names the planted re-norm by modality; bad media or placeholders are one line, exit 2."""

import pytest
from click.testing import CliRunner

import inkling_probe
from inkling_model.cli.make_checkpoint import command as make_checkpoint
from inkling_model.cli.run import command as run
from inkling_model.multimodal.media_io import write_png, write_wav
from inkling_probe.cli.compare import command as compare

from mm_util import synthetic_image, synthetic_wave


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mmcli")
    res = CliRunner().invoke(make_checkpoint, ["--preset", "tiny", "--multimodal", str(d / "ckpt")])
    assert res.exit_code == 0, res.output
    return dict(dir=d, ckpt=str(d / "ckpt"), png=str(write_png(d / "a.png", synthetic_image())),
                wav=str(write_wav(d / "a.wav", synthetic_wave().numpy())))


def _run(files, *args):
    base = ["--ckpt", files["ckpt"], "--tokens", "1,5,6,510,7,509,8", "--image", files["png"], "--audio", files["wav"]]
    return CliRunner().invoke(run, base + list(args), catch_exceptions=False)


def test_native_and_hf_generate_alike_and_compare_names_modality(files):
    d = files["dir"]
    a = _run(files, "--max-new-tokens", "3", "--dump", str(d / "hf"), "--impl", "hf")
    b = _run(files, "--max-new-tokens", "3", "--dump", str(d / "native"))
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    gen = lambda out: next(ln for ln in out.splitlines() if ln.startswith("generated:"))  # noqa: E731
    assert gen(a.output) == gen(b.output)
    media = inkling_probe.open(str(d / "native")).rows("fused", 0)[0]["meta"]["media"]
    assert [m[0] for m in media] == ["image", "audio"]
    c = _run(files, "--dump", str(d / "renorm"), "--fault", "renorm_fused_rows")
    assert c.exit_code == 0, c.output
    res = CliRunner().invoke(compare, [str(d / "hf"), str(d / "renorm"), "--step", "0"], env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "split: vision tower clean, audio tower clean, born at the fusion (fused)" in res.output
    assert "image 0's rows [3..14]" in res.output and "re-normalised: each row scaled to unit rms" in res.output
    ok = CliRunner().invoke(compare, [str(d / "hf"), str(d / "native"), "--step", "0", "--rows", "image"])
    assert ok.exit_code == 0 and "judged: image rows only" in ok.output, ok.output
    import json

    doc = json.loads(CliRunner().invoke(compare, [str(d / "hf"), str(d / "renorm"), "--step", "0", "--json"]).output)
    assert doc["modality"]["media"] == media and doc["modality"]["judged_rows"] == "all"
    assert any("born at the fusion" in ln for ln in doc["modality"]["lines"])


def test_hf_runs_a_multimodal_checkpoint_on_text_alone_as_native_does(files):
    """transformers' text model cannot hold the towers (it failed: 'unexpected model.audio_tower...'):
    without media the conditional model runs on the text, and agrees with the native run."""
    d, base = files["dir"], ["--ckpt", files["ckpt"], "--tokens", "1,5,6,7", "--max-new-tokens", "2"]
    a = CliRunner().invoke(run, [*base, "--impl", "hf", "--dump", str(d / "hf-text")], catch_exceptions=False)
    b = CliRunner().invoke(run, [*base, "--dump", str(d / "native-text")], catch_exceptions=False)
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    gen = lambda out: next(ln for ln in out.splitlines() if ln.startswith("generated:"))  # noqa: E731
    assert gen(a.output) == gen(b.output)
    res = CliRunner().invoke(compare, [str(d / "hf-text"), str(d / "native-text")])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("args,msg", [
    (["--image", "/nonexistent.png"], "No such file or directory"),
    (["--tokens", "1,510,510,8"], "2 image placeholder(s)"),
    (["--tokens", "1,5", "--tokens", "1,6"], "one prompt"),
    (["--enforce-eager"], "multimodal prefill then eager decode"),
])
def test_bad_media_input_is_one_line(files, args, msg):
    base = ["--ckpt", files["ckpt"], "--image", files["png"], "--dump", str(files["dir"] / "x")]
    res = CliRunner().invoke(run, base + args + ([] if "--tokens" in args else ["--tokens", "1,5,8"]))
    assert res.exit_code == 2 and msg in res.output and "Traceback" not in res.output, res.output


def test_text_only_checkpoint_refuses_media(tmp_path, files):
    res = CliRunner().invoke(make_checkpoint, ["--preset", "tiny", str(tmp_path / "t")])
    assert res.exit_code == 0
    res = CliRunner().invoke(run, ["--ckpt", str(tmp_path / "t"), "--tokens", "1,5", "--image", files["png"],
                                   "--dump", str(tmp_path / "d")])
    assert res.exit_code == 2 and "text-only checkpoint" in res.output, res.output
