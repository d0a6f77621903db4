"""Bad foreign input: one line naming the culprit, exit 2; nothing in a pickle is ever executed."""
import json
import os
import pickle

import numpy as np
import pytest
import torch

from inkling_probe.store.foreign.sglang_format import SGLangDumpWriter

from .cli_errors import one_line_error, run


class _Payload:
    """Unpickling this runs os.system: what a malicious .pt file does."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy_pickle", [False, True])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path, legacy_pickle):
    marker = tmp_path / "pwned"
    folder = tmp_path / "d"
    folder.mkdir()
    path = folder / "evil.pt"
    if legacy_pickle:  # a bare pickle (torch's legacy format is pickle too)
        path.write_bytes(pickle.dumps(_Payload(marker), protocol=2))
    else:  # torch.save's zip archive with the payload inside
        torch.save({"x": _Payload(marker)}, path)
    assert not marker.exists()
    for command in (["ls", folder], ["show", folder, "x"], ["import", folder, tmp_path / "out"]):
        err = one_line_error(run(*command), "evil.pt")
        assert "refused" in err or "not a readable torch file" in err or "truncated" in err, err
    assert not marker.exists(), "a pickle was executed"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value, what", [({"x": "a string"}, "holds a str at 'x'"), (3, "holds a int"),
                                          ([torch.ones(1), 2.5], "holds a float at '1'")])
def test_non_tensor_pickles_are_refused(tmp_path, value, what):
    (tmp_path / "d").mkdir()
    torch.save(value, tmp_path / "d" / "t.pt")
    one_line_error(run("ls", tmp_path / "d"), "t.pt", what, "only tensors")


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("kind", ["pt", "safetensors", "npy", "npz"])
def test_truncated_files(tmp_path, kind):
    from safetensors.torch import save_file

    d = tmp_path / "d"
    d.mkdir()
    path = d / f"t.{kind}"
    big = torch.randn(64, 64)
    if kind == "pt":
        torch.save(big, path)
    elif kind == "safetensors":
        save_file({"t": big}, path)
    elif kind == "npy":
        np.save(path, big.numpy())
    else:
        np.savez(d / "t", t=big.numpy())
    _truncate(path)
    r = run("show", d, "t")
    one_line_error(r, "t.")


def test_mixed_runs(tmp_path):
    SGLangDumpWriter(tmp_path, layout="legacy", run="111.0").dump("x", torch.ones(2))
    SGLangDumpWriter(tmp_path, layout="legacy", run="222.0").dump("x", torch.ones(2))
    one_line_error(run("ls", tmp_path), "mixes 2 runs", "111.0", "222.0")


def test_mixed_experiments(tmp_path):
    SGLangDumpWriter(tmp_path, exp_name="dump_a").dump("x", torch.ones(2))
    SGLangDumpWriter(tmp_path, exp_name="dump_b").dump("x", torch.ones(2))
    one_line_error(run("ls", tmp_path), "mixes 2 runs", "dump_a", "dump_b")


def test_missing_rank_folder(tmp_path):
    w = SGLangDumpWriter(tmp_path, world_size=3, layout="legacy")
    for rank in (0, 2):
        w.dump("x", torch.ones(2), rank=rank)
    one_line_error(run("ls", tmp_path), "rank 1 is missing")


def test_missing_rank_told_by_the_dumpers_world_size(tmp_path):
    w = SGLangDumpWriter(tmp_path, world_size=2)
    w.dump("x", torch.ones(2), rank=0)
    one_line_error(run("ls", tmp_path), "world of 2", "rank 1 is missing")


def test_unknown_name_under_tp_is_not_guessed(tmp_path):
    w = SGLangDumpWriter(tmp_path / "d", world_size=2)
    for rank in range(2):
        w.dump("model.layers.0.attn.mystery", torch.ones(3, 2), rank=rank)
    err = one_line_error(run("show", tmp_path / "d", "model.layers.0.attn.mystery"), "mystery",
                         "no name map rule declares")
    assert "rank=" in err
    err = one_line_error(run("import", tmp_path / "d", tmp_path / "out", "--map", "sglang_inkling"), "mystery")
    assert not (tmp_path / "out").exists()
    assert run("show", tmp_path / "d", "model.layers.0.attn.mystery", "--rank", "1").exit_code == 0


def test_not_a_tensor_file_in_the_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    torch.save(torch.ones(2), tmp_path / "a.pt")
    one_line_error(run("ls", tmp_path), "notes.txt", "not a tensor file")


def test_symlink_in_a_foreign_folder(tmp_path):
    torch.save(torch.ones(2), tmp_path / "a.pt")
    os.symlink("/etc/passwd", tmp_path / "b.pt")
    one_line_error(run("ls", tmp_path), "b.pt", "symbolic link")


def test_bad_pattern_and_params(tmp_path):
    torch.save(torch.ones(2), tmp_path / "a.pt")
    one_line_error(run("import", tmp_path, tmp_path / "o", "--pattern", "(a+)+"), "does not match")  # RE2: linear, no refusal needed
    one_line_error(run("import", tmp_path, tmp_path / "o", "--pattern", r"(?P<key>b)\.pt"), "does not match")
    one_line_error(run("import", tmp_path, tmp_path / "o", "--param", "q_width"), "--param 'q_width'")


def test_split_ratio_that_does_not_divide(tmp_path):
    w = SGLangDumpWriter(tmp_path / "d")
    w.dump("non_intrusive__model.layers.0.attn.qkvr.output", torch.ones(4, 7))
    one_line_error(run("show", tmp_path / "d", "layers.0.attn.r"), "no key 'layers.0.attn.r'")
    # with the map given through the folder's settings file
    (tmp_path / "d" / "inkling_probe.toml").write_text('map = "sglang_inkling"\n')
    err = one_line_error(run("show", tmp_path / "d", "layers.0.attn.r"), "does not split in ratio")
    assert "layers.0" in err


def test_import_refuses_a_non_empty_destination(tmp_path):
    torch.save(torch.ones(2), tmp_path / "a.pt")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("keep me")
    one_line_error(run("import", tmp_path / "a.pt", tmp_path / "out"), "already exists")
    assert (tmp_path / "out" / "x").read_text() == "keep me"


def test_bad_settings_file(tmp_path):
    torch.save(torch.ones(2), tmp_path / "a.pt")
    (tmp_path / "inkling_probe.toml").write_text('mapp = "x"\n')
    one_line_error(run("ls", tmp_path), "inkling_probe.toml", "unknown key 'mapp'")


def test_ls_shows_an_undeclared_layout_as_such(tmp_path):
    w = SGLangDumpWriter(tmp_path, world_size=2)
    for rank in range(2):
        w.dump("x", torch.ones(3, 2), rank=rank)
    r = run("ls", tmp_path, "--json")
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)["tensors"]
    assert row["shard"] == "undeclared" and row["shape"] == [3, 2]  # one rank's shape: never a guessed whole
    assert "undeclared x2" in run("ls", tmp_path).stdout


def test_two_names_mapped_to_one_key_are_refused_not_counted_as_calls(tmp_path):
    w = SGLangDumpWriter(tmp_path / "d")
    w.dump("a_out", torch.ones(2))
    w.dump("b_out", torch.ones(2))
    w.dump("a_out", torch.ones(2))  # a second call of a_out: fine
    (tmp_path / "m.toml").write_text("[[rule]]\nmatch = '(a|b)_out'\nto = 'same'\n")
    one_line_error(run("import", tmp_path / "d", tmp_path / "o", "--map", tmp_path / "m.toml"),
                   "'a_out' and 'b_out' both read as key 'same'")
    (tmp_path / "m.toml").write_text("[[rule]]\nmatch = 'a_out'\nto = 'same'\n")
    from inkling_probe.store.foreign import open_foreign
    d = open_foreign(tmp_path / "d", name_map=str(tmp_path / "m.toml"))
    assert [r["call"] for r in d.index if r["key"] == "same"] == [0, 1]


def test_import_of_our_own_dump_or_a_link(tmp_path):
    import dumps

    ours = dumps.write(tmp_path / "ours", [[("a", torch.ones(2))]])
    one_line_error(run("import", ours, tmp_path / "o"), "already an inkling-probe dump")
    torch.save(torch.ones(2), tmp_path / "a.pt")
    os.symlink(tmp_path / "a.pt", tmp_path / "link.pt")
    one_line_error(run("import", tmp_path / "link.pt", tmp_path / "o"), "link.pt")


@pytest.mark.parametrize("kind", ["npy", "npz"])
def test_object_arrays_are_never_unpickled(tmp_path, kind):
    marker = tmp_path / "pwned"
    arr = np.empty(1, dtype=object)
    arr[0] = _Payload(marker)
    (tmp_path / "d").mkdir()
    if kind == "npy":
        np.save(tmp_path / "d" / "evil.npy", arr, allow_pickle=True)
    else:
        np.savez(tmp_path / "d" / "evil.npz", x=arr)
    one_line_error(run("ls", tmp_path / "d"), "evil.np", "holds Python objects")
    assert not marker.exists()


@pytest.mark.parametrize("spec", ["/etc/passwd", "../outside.toml", "sub/../../outside.toml", "link.toml"])
def test_settings_name_map_outside_the_folder_is_refused(tmp_path, spec):
    """Issue 42: a folder's settings file could name any file on the machine as its name map."""
    d = tmp_path / "d"
    d.mkdir()
    torch.save(torch.zeros(2), d / "x.pt")
    (tmp_path / "outside.toml").write_text('[[rule]]\nmatch = "*"\nto = "{0}"\n')
    os.symlink(tmp_path / "outside.toml", d / "link.toml")
    (d / "inkling_probe.toml").write_text(f"map = {json.dumps(spec)}\n")
    one_line_error(run("ls", d), "inkling_probe.toml", f"map {spec!r} is outside the dump folder")


def test_settings_name_map_inside_the_folder_or_shipped_is_read(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    torch.save(torch.zeros(2), d / "x.pt")
    for spec in ("sglang_inkling", ".maps/m.toml"):
        (d / ".maps").mkdir(exist_ok=True)
        (d / ".maps" / "m.toml").write_text('[[rule]]\nmatch = "x"\nto = "y"\n')
        (d / "inkling_probe.toml").write_text(f"map = {json.dumps(spec)}\n")
        assert run("ls", d).exit_code == 0, run("ls", d).output
    (d / "inkling_probe.toml").write_text('map = "nope.toml"\n')
    one_line_error(run("ls", d), "inkling_probe.toml", "'nope.toml': no such file in the dump folder")
