"""The command's ways out: a bad INKLING_PROBE_* variable never breaks --help and stops a command
with one line and exit 2; output closed early (| head) is silent; read commands import no torch."""
import os
import subprocess
import sys

import pytest
import torch

from dumps import write


def cli(*args, env=None, **kw):
    base = {k: v for k, v in os.environ.items() if not k.startswith("INKLING_PROBE")}
    return subprocess.run([sys.executable, "-m", "inkling_probe.cli", *map(str, args)], env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    return write(tmp_path_factory.mktemp("exit") / "d", [[(f"k{i}", torch.full((3,), float(i))) for i in range(1000)]])


def test_misspelled_variable_help_works_commands_stop_with_a_suggestion(dump):
    env = {"INKLING_PROBE_STPES": "0:2"}
    r = cli("--help", env=env)
    assert r.returncode == 0 and "INKLING_PROBE_STEPS" in r.stdout
    assert r.stderr == "Warning: INKLING_PROBE_STPES: unknown variable (did you mean INKLING_PROBE_STEPS?)\n"
    r = cli("ls", dump, env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "Error: INKLING_PROBE_STPES: unknown variable (did you mean INKLING_PROBE_STEPS?)\n"


def test_bad_rank_variable_is_exit_2_not_a_traceback(dump):
    r = cli("ls", dump, env={"INKLING_PROBE": "/tmp/x", "RANK": "abc"})
    assert r.returncode == 2 and r.stderr == "Error: RANK='abc': 'abc' is not an integer\n"


def test_output_closed_early_is_silent(dump):
    import fcntl

    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: a small pipe, so the command is still writing
    p = subprocess.Popen([sys.executable, "-m", "inkling_probe.cli", "ls", dump, "--json"], stdout=w,
                         stderr=subprocess.PIPE, text=True)
    os.close(w)
    p.stdout = os.fdopen(r)
    p.stdout.readline()
    p.stdout.close()  # like `| head -1`
    err = p.stderr.read()
    assert p.wait(60) in (0, 141) and err == ""  # 141 when the command was still writing


@pytest.mark.parametrize("args", [["ls"], ["show", "{dump}", "k3"], ["show", "{dump}", "k3", "--bins", "0"]])
def test_read_commands_import_no_torch(dump, args):
    code = ("import sys\nfrom inkling_probe.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print('exit', e.code, 'torch' in sys.modules)")
    argv = [a.format(dump=dump) for a in args] + ([dump] if args == ["ls"] else [])
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    expected = "2" if "--bins" in args else "0"
    assert r.stdout.strip().splitlines()[-1] == f"exit {expected} False", r.stderr


def test_name_map_that_is_a_directory_is_a_one_line_error(tmp_path):
    from inkling_probe.errors import SettingsError
    from inkling_probe.store.namemap import NameMap

    with pytest.raises(SettingsError, match=f"^{tmp_path}: a directory, not a regular file \\(name map\\)"):
        NameMap.load(tmp_path)


def test_catastrophic_name_map_pattern_runs_in_linear_time():
    import time

    from inkling_probe.errors import SettingsError
    from inkling_probe.store.namemap import NameMap

    t0 = time.perf_counter()
    bad = NameMap.from_toml("[[rule]]\nmatch = '(a+)+b'\nto = 'x'\n")  # RE2: no backtracking
    assert bad.apply("a" * 1024) == "a" * 1024
    ok = NameMap.from_toml("[[rule]]\nmatch = 'model\\.layers\\.(\\d+)(?:\\.\\w+)*'\nto = 'l.\\1'\n")
    assert ok.apply("model.layers.3.mlp.experts") == "l.3"
    assert ok.apply("model.layers.3" + ".a" * 400 + "!") == "model.layers.3" + ".a" * 400 + "!"
    with pytest.raises(SettingsError, match="at most 1024"):
        ok.apply("a" * 5000)
    assert time.perf_counter() - t0 < 1.0
