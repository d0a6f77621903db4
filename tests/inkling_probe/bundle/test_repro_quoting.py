"""repro.sh's words survive the shell unchanged: every hostile string round-trips through `sh` as one
word (absolute paths as "$WORK"/<name>), recorded arguments with control characters come back
through bash from their encoded form, and a script holding a stray control character is refused."""
import shutil
import subprocess

import pytest

from inkling_probe.bundle import repro
from inkling_probe.errors import ProbeError

HOSTILE = ["plain", "two words", "$(touch x)", "`touch x`", "a'b", 'a"b', "a;b|c&d", "$HOME", "*", "~", "-n",
           "", "a\\b", "--prompt=$(id)", "é ü 中"]


def sh_word(word, env=None):
    return subprocess.run(["sh", "-c", f"printf '%s' {word}"], capture_output=True, text=True, env=env or {},
                          timeout=30).stdout


@pytest.mark.parametrize("text", HOSTILE)
def test_each_word_round_trips_through_sh(text):
    assert sh_word(repro.portable(text)) == text
    assert sh_word(repro.portable("/abs/dir/" + text + "x"), {"WORK": "/w"}) == "/w/" + text + "x"


@pytest.mark.skipif(shutil.which("bash") is None, reason="the encoded form is bash's $'...'")
@pytest.mark.parametrize("text", ["two\nlines", "cr\rhere", "tab\tand'quote", "bell\x07", "back\\slash\n"])
def test_control_characters_are_encoded_and_come_back_through_bash(text):
    word = repro.encoded(text)
    assert "\n" not in word and "\r" not in word and "\t" not in word
    out = subprocess.run(["bash", "-c", f"printf '%s' {word}"], capture_output=True, timeout=30).stdout
    assert out.decode() == text


def test_a_control_character_in_an_executed_word_or_a_line_is_refused():
    with pytest.raises(ProbeError, match="control character"):
        repro.portable("a\nb")
    with pytest.raises(ProbeError, match="line 2"):
        repro.check_script("#!/bin/sh\necho a\rb\n")


def test_settings_lines_export_unset_or_leave_to_repro_json():
    run = {"candidate": "cand\n$(x)", "settings": {"recorded": True, "values": {
        "INKLING_A": "it's $(x)", "INKLING_B": None, "INKLING_C": "https://<redacted>@h", "INKLING_D": "a\nb"}}}
    lines = repro._settings(run)
    assert "export INKLING_A='it'\"'\"'s $(x)'" in lines and "unset INKLING_B" in lines
    assert not any(line.startswith("export INKLING_C") or line.startswith("export INKLING_D") for line in lines)
    repro.check_script("\n".join(lines))  # the candidate's name, in a comment, is encoded too
    assert repro._settings({"settings": {"recorded": False}})[0].startswith("# the candidate recorded no environment")
