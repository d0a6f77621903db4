"""The key rule (inkling_probe/keys.py, issue 42): recording accepted a key with a newline, which then
made `report` refuse the whole bundle; a foreign tensor name with a lone surrogate (a non-UTF-8 file
name) made a command exit 3. Now neither gets in: one line naming the key, escaped."""
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import inkling_probe
from inkling_probe.cli import group
from inkling_probe.errors import SettingsError
from inkling_probe.keys import key_problem


@pytest.mark.parametrize("name,problem", [
    ("a\nb", "a control character U+000A at index 1"),
    ("\ta", "a control character U+0009 at index 0"),
    ("x\x7f", "a control character U+007F at index 1"),
    ("layers.\x85", "a control character U+0085 at index 7"),
    ("a\ud800", "a lone surrogate U+D800 at index 1"),
    ("b\udcff.c", "a lone surrogate U+DCFF at index 1"),
])
def test_bad_keys_are_named(name, problem):
    assert problem in key_problem(name)


@pytest.mark.parametrize("name", ["layers.0.mlp", "ünïcode.键", "a b", "x\u200by", "emoji.\U0001F600"])
def test_printable_keys_pass(name):
    assert key_problem(name) is None


@pytest.mark.parametrize("name", ["a\nb", "a\ud800"])
def test_recording_refuses_what_no_command_can_report(tmp_path, name):
    with inkling_probe.recording(str(tmp_path / "d")):
        inkling_probe.probe("ok", torch.zeros(2))
        with pytest.raises(SettingsError) as e:
            inkling_probe.probe(name, torch.zeros(2))
        text = str(e.value)
        assert "\n" not in text and repr(name) in text and "no command could report it" in text
    assert inkling_probe.open(str(tmp_path / "d")).keys() == ["ok"]  # recording went on


def test_a_foreign_name_that_no_command_can_print_is_one_line_exit_2(tmp_path):
    d = tmp_path / "f"
    d.mkdir()
    with open(os.path.join(os.fsencode(d), b"a\xffb.npy"), "wb") as f:  # not UTF-8: listed as 'a\udcffb'
        np.save(f, np.zeros(3, np.float32))
    np.save(d / "ok.npy", np.zeros(3, np.float32))
    for cmd in (["ls", str(d)], ["show", str(d), "ok"]):
        res = CliRunner().invoke(group, cmd)
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
        assert ("'a\\udcffb'" in res.output and "lone surrogate U+DCFF" in res.output) or \
            ("a\\xffb.npy" in res.output and "not UTF-8" in res.output), res.output  # the file name, refused first
