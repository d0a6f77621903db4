"""A recording whose filters select nothing is an error, never a silent "dump: d" with no dump."""
import os
import subprocess
import sys

import pytest
import torch

import inkling_probe
from inkling_probe.errors import NothingRecorded, SettingsError


def _record(path, **settings):
    with inkling_probe.recording(str(path), writer="inline", **settings):
        for _ in range(3):
            inkling_probe.step()
            inkling_probe.probe("layers.0.x", torch.ones(2))
            inkling_probe.probe("embed", torch.ones(2))


@pytest.mark.parametrize("settings, why", [
    ({"include": "nomatch*"}, r"INKLING_PROBE_INCLUDE='nomatch\*' matched none of the 2 probe names called "
                              r"\(layers.0.x, embed\)"),
    ({"exclude": "*"}, r"INKLING_PROBE_EXCLUDE='\*' matched none"),
    ({"steps": "7:9"}, r"INKLING_PROBE_STEPS=7:9 selected none of the steps run \(0..2\)"),
    ({"steps": "5"}, r"INKLING_PROBE_STEPS=5 selected none"),
])
def test_filters_that_select_nothing_raise_and_leave_no_folder(tmp_path, settings, why):
    with pytest.raises(NothingRecorded, match=f"recorded nothing, so there is no dump: {why}"):
        _record(tmp_path / "d", **settings)
    assert not (tmp_path / "d").exists()


def test_a_recording_no_probe_reached_is_not_a_filter_error(tmp_path):
    """Nothing was filtered (e.g. every probe went to an in-graph plan): no error, and no folder."""
    with inkling_probe.recording(str(tmp_path / "d"), writer="inline", include="nomatch"):
        pass
    assert not (tmp_path / "d").exists()


def test_a_rank_filter_outside_the_world_is_refused(tmp_path):
    with pytest.raises(SettingsError, match=r"INKLING_PROBE_RANKS=3: selects no rank of this launch \(world size 1"):
        _record(tmp_path / "d", ranks="3")


def test_an_error_in_the_block_is_not_hidden_by_nothing_recorded(tmp_path):
    with pytest.raises(KeyError):
        with inkling_probe.recording(str(tmp_path / "d"), writer="inline", include="nomatch"):
            raise KeyError("the model's own error")


SCRIPT = """
import torch, inkling_probe
for s in range(3):
    inkling_probe.step(); inkling_probe.probe("embed", torch.ones(2))
print("done", flush=True)
"""


def test_an_env_recording_that_selects_nothing_exits_non_zero_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("INKLING_PROBE")}
    env.update(INKLING_PROBE=str(tmp_path / "d"), INKLING_PROBE_INCLUDE="nomatch")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "done\n"
    assert r.stderr.count("\n") == 1 and "recorded nothing, so there is no dump" in r.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
@pytest.mark.parametrize("var, value, why", [("INKLING_PROBE_STEPS", "5:2", "selects no step"),
                                             ("INKLING_PROBE_INCLUDE", "nomatch*", "recorded nothing")])
@pytest.mark.parametrize("tp", ["1", "2"])
def test_run_command_that_records_nothing_exits_2(tmp_path, monkeypatch, var, value, why, tp):
    """The issue's case: ``run`` printed ``dump: d`` and exited 0 with no dump."""
    from click.testing import CliRunner

    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.cli.run import command
    from inkling_model.config import InklingConfig

    ckpt = str(write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path / "tiny", seed=0))
    monkeypatch.setenv(var, value)
    r = CliRunner().invoke(command, ["--ckpt", ckpt, "--tokens", "5,6,7", "--max-new-tokens", "2", "--tp", tp,
                                     "--dump", str(tmp_path / "d")])
    assert r.exit_code == 2 and why in r.output and "\ndump: " not in "\n" + r.output, r.output
    assert not (tmp_path / "d").exists()
