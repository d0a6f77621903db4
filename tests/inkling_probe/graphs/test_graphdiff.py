"""`inkling-probe graphdiff` on CPU with synthetic eager vs "replay" dumps: a NaN born at one probe
point of one decode step is named there (not where it is biggest); equal dumps exit 0; --run records
both sides through the INKLING_ENFORCE_EAGER switch; bad input exits 2."""
import json

import pytest
import torch
from click.testing import CliRunner

from inkling_probe.cli import group

import dumps as dumps_helper

KEYS = ["embed", "layers.0.attn.out", "layers.0.attn.o_proj", "layers.0.resid", "layers.1.attn.o_proj", "logits"]


GRAPH, STATIC = {"forward": "graph", "graph_bs": 1}, {"forward": "static-eager"}


def _steps(nan_at=None, decode=GRAPH):
    """Step 0 = prefill (eager on both sides), steps 1-3 decode (``decode``: how they ran, the runtime's
    step meta); ``nan_at`` = (key, step) where NaN is born."""
    g = torch.Generator().manual_seed(0)
    steps = []
    for step in range(4):
        x = torch.randn(1 if step else 5, 16, generator=g)
        items, poisoned = [], False
        for key in KEYS:
            x = x + torch.tanh(x)
            if nan_at == (key, step):
                x, poisoned = torch.full_like(x, float("nan")), True
            meta = decode if step else {"forward": "eager"}
            items.append((key, x * 3 if poisoned and key == "logits" else x, meta))
        steps.append(items)
    return steps


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("gd")
    return {"eager": dumps_helper.write(root / "eager", _steps(decode=STATIC)),
            "eager2": dumps_helper.write(root / "eager2", _steps(decode=STATIC)),
            "unstated": dumps_helper.write(root / "unstated", [[(k, t) for k, t, _ in s] for s in _steps()]),
            "same": dumps_helper.write(root / "same", _steps()),
            "bad": dumps_helper.write(root / "bad", _steps(("layers.0.attn.o_proj", 1))), "root": root}


def run(*args):
    return CliRunner().invoke(group, ["graphdiff", *args], catch_exceptions=False)


def test_names_the_birth_of_the_nan(pair):
    r = run(pair["eager"], pair["bad"])
    assert r.exit_code == 1, r.output
    assert "first divergent point: layers.0.attn.o_proj at step 1 (16 non-finite values in the replay)" in r.output
    doc = json.loads(run(pair["eager"], pair["bad"], "--json").output)
    assert doc["first_divergence"]["key"] == "layers.0.attn.o_proj" and doc["first_divergence"]["step"] == 1
    assert doc["exact"] == 24 - 4  # all but the o_proj and the 3 keys after it at step 1


def test_equal_dumps_exit_0(pair):
    r = run(pair["eager"], pair["same"])
    assert r.exit_code == 0, r.output
    assert "24 of 24 tensors bit-identical, steps [0, 1, 2, 3]" in r.output
    assert "graph side: step 0 eager, steps 1-3 graph bs=1\neager side: step 0 eager, steps 1-3 static-eager" in r.output
    doc = json.loads(run(pair["eager"], pair["same"], "--json").output)
    assert doc["ran"]["steps"] == [1, 2, 3] and doc["ran"]["graph_bs"] == [1]


def test_refuses_a_graph_side_that_replayed_nothing(pair):
    """Two eager dumps (the issue's `graphdiff --run` without --cuda-graph) are not 'equal': exit 2."""
    r = run(pair["eager"], pair["eager2"])
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and "no step replayed a CUDA graph (step 0 eager, steps 1-3 static-eager)" \
        in r.output
    r = run(pair["eager"], pair["unstated"])  # a dump that does not say how it ran proves nothing
    assert r.exit_code == 2 and "steps 0-3 unstated" in r.output, r.output
    r = run(pair["eager"], pair["same"], "--step", "0")  # the prefill alone: no replay among the steps
    assert r.exit_code == 2 and "(step 0 eager)" in r.output, r.output


def test_refuses_an_eager_side_that_replayed_a_graph(pair):
    r = run(pair["same"], pair["bad"])
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and "eager side" in r.output and "steps [1, 2, 3] replayed a CUDA graph" in r.output


def test_bad_input_exits_2(pair, tmp_path):
    assert run(pair["eager"]).exit_code == 2
    assert run(pair["eager"], str(tmp_path / "nope")).exit_code == 2
    assert run("--run", "echo {dump}").exit_code == 2  # no --out
    r = run("--run", "echo nothing", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "{dump}" in r.output


def test_run_records_both_sides(pair, tmp_path):
    """CMD runs twice; here it copies a prepared dump per side (no interpreter start-up in the test)."""
    cmd = (f"sh -c 'if [ \"$INKLING_ENFORCE_EAGER\" = 1 ]; then cp -r {pair['eager']} \"$0\"; "
           f"else cp -r {pair['bad']} \"$0\"; fi' {{dump}}")
    r = run("--run", cmd, "--out", str(tmp_path / "o"))
    assert r.exit_code == 1, r.output
    assert "first divergent point: layers.0.attn.o_proj at step 1" in r.output
    assert (tmp_path / "o" / "eager").is_dir() and (tmp_path / "o" / "graph").is_dir()
    r = run("--run", "sh -c 'exit 3' {dump}", "--out", str(tmp_path / "p"))
    assert r.exit_code == 2 and "eager run failed (exit 3)" in r.output


def _alive(pid: int) -> bool:
    from inkling_probe.procs import _stat

    st = _stat(pid)
    return st is not None and st[0] != "Z"


def test_run_kills_a_hanging_side_with_its_process_group(tmp_path):
    """--run goes through the toolkit's one runner (inkling_probe.procs, bisect's): a side that hangs
    is killed past --timeout together with the process it started, and said in one line, exit 2."""
    pidfile = tmp_path / "child.pid"
    r = run("--run", f"sh -c 'sleep 300 & echo $! > {pidfile}; wait' {{dump}}", "--out", str(tmp_path / "o"),
            "--timeout", "1")
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and "eager run failed (timed out after 1.0 s)" in r.output, r.output
    assert not _alive(int(pidfile.read_text())), "the hung side's child outlived graphdiff"


def test_run_kills_what_a_finished_side_left_running(pair, tmp_path):
    """A side whose leader exits 0 but leaves a process behind (a rank, a writer) does not leave it
    running: the runner kills the rest of the group after its grace; the verdict is unchanged."""
    pidfile = tmp_path / "child.pid"
    cmd = (f"sh -c 'sleep 300 & echo $! > {pidfile}; if [ \"$INKLING_ENFORCE_EAGER\" = 1 ]; "
           f"then cp -r {pair['eager']} \"$0\"; else cp -r {pair['same']} \"$0\"; fi' {{dump}}")
    r = run("--run", cmd, "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert not _alive(int(pidfile.read_text()))
    assert (tmp_path / "o" / "eager-output.txt").is_file()  # each side's output is kept beside its dump


def test_run_that_cannot_start_is_one_line(tmp_path):
    r = run("--run", "no-such-program-xyz {dump}", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "eager run failed (could not start" in r.output, r.output
    assert run("--run", "sh -c true {dump}", "--out", str(tmp_path / "p"), "--timeout", "nan").exit_code == 2


@pytest.mark.slow
def test_the_issue_command_without_cuda_graph_is_refused(tmp_path):
    """Issue 22's command: `graphdiff --run "inkling-probe run ... --dump {dump}"` without --cuda-graph
    printed "graph replay equals eager ... 426 of 426 tensors bit-identical", exit 0. Both sides decode
    eagerly (the static path, the plain forward): exit 2, one line saying so."""
    import os
    import sys

    from inkling_model.checkpoint.synthetic import write_random_checkpoint
    from inkling_model.config import InklingConfig

    ckpt = write_random_checkpoint(InklingConfig.preset("tiny"), tmp_path / "ck", seed=0)
    exe = os.path.join(os.path.dirname(sys.executable), "inkling-probe")
    r = run("--run", f"{exe} run --ckpt {ckpt} --tokens 5,77,300,12,9,4 --max-new-tokens 4 --dtype bf16 "
            "--allreduce oneshot --dump {dump}", "--out", str(tmp_path / "gd"))
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and "no step replayed a CUDA graph (steps 0-3 eager)" in r.output, r.output
