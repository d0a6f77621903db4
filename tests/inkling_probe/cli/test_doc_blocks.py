"""Doc blocks that show command output are generated from the code, so they cannot go stale.

A generated block in README.md or docs/*.md is a fenced block right after a marker line
``<!-- generated: NAME (tests/inkling_probe/cli/test_doc_blocks.py) -->``. Each NAME below runs its
commands through the real CLI (in-process, ``COLUMNS`` fixed) in a scratch folder and renders
``$ command``, the output and ``[exit N]``; the test fails when the doc's block differs.
``INKLING_UPDATE_DOCS=1`` rewrites the blocks instead (then review the diff).
"""
import json
import os
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from inkling_probe.cli import group

DOCS = Path(__file__).resolve().parents[3] / "docs"
README = DOCS.parent / "README.md"
MARKER = re.compile(r"<!-- generated: ([\w-]+) \(tests/inkling_probe/cli/test_doc_blocks\.py\) -->\n```\n(.*?)```\n",
                    re.S)
WIDTH = 110
ONE = "--tokens 5,77,300,12,9,4"
PROMPTS = f"{ONE} --tokens 1,2,3 --tokens 7,7,450"


def sh(*commands: str, show_exit: bool = True, width: int = WIDTH) -> str:
    """Run each command through the CLI in the current folder, ``width`` columns; the transcript,
    trailing spaces cut."""
    out = []
    for command in commands:
        r = CliRunner().invoke(group, shlex.split(command), env={"COLUMNS": str(width), "NO_COLOR": "1"})
        assert r.exception is None or isinstance(r.exception, SystemExit), (command, r.output, r.exception)
        out.append(f"$ inkling-probe {command}")
        out += [line.rstrip() for line in r.output.splitlines()]
        if show_exit:
            out.append(f"[exit {r.exit_code}]")
    return "\n".join(out) + "\n"


def bisect_flags_list() -> str:
    return sh("bisect flags --model inkling_model --list", width=170)


def graphdiff_refuses_eager_pair() -> str:
    sh("make-checkpoint --preset tiny ck", show_exit=False)
    return sh(f"run --ckpt ck {ONE} --max-new-tokens 3 --dump plain",
              f"run --ckpt ck {ONE} --max-new-tokens 3 --enforce-eager --dump static", "graphdiff static plain")


def health_capped() -> str:
    sh("make-checkpoint --preset tiny ck", show_exit=False)
    return sh(f"run --ckpt ck {PROMPTS} --max-new-tokens 24 --gen-log gen.jsonl", "health gen.jsonl",
              "health gen.jsonl --fail-capped", "health gen.jsonl --eos 180")


def paired_bad_gate() -> str:
    for name, correct in (("a.jsonl", [1, 1, 0, 1]), ("b.jsonl", [1, 0, 0, 1])):
        Path(name).write_text("".join(json.dumps({"id": i, "correct": c}) + "\n" for i, c in enumerate(correct)))
    return sh("paired a.jsonl b.jsonl --gate nan", "paired a.jsonl b.jsonl --gate 0.3")


def worked_example() -> str:
    """README's hunt: scripts/demo.py's checkpoints, prompt and runs, the candidate at TP=1 (the demo
    runs it at TP=2; a spawn is too slow for a doc test)."""
    tokens = "1,17,42,99,7,300,12,5,88,256,31,64,9,410,3,77"  # scripts/demo.py's TOKENS
    sh("make-checkpoint --preset tiny --seed 0 ckpt-bf16", "make-checkpoint --preset tiny --seed 0 --quant nvfp4 "
       "ckpt-nvfp4", show_exit=False)
    common = f"--dtype bf16 --tokens {tokens}"
    sh(f"run --ckpt ckpt-bf16 --impl hf {common} --dump ref", f"run --ckpt ckpt-nvfp4 {common} --dump control",
       f"run --ckpt ckpt-nvfp4 {common} --fault raw_input_amax --dump cand", show_exit=False)
    return sh("compare ref cand --control control", width=120)


GENERATORS = {"worked-example": worked_example, "bisect-flags-list": bisect_flags_list, "graphdiff-refuses-eager-pair": graphdiff_refuses_eager_pair,
              "health-capped": health_capped, "paired-bad-gate": paired_bad_gate}


def _blocks() -> dict[str, Path]:
    found = {}
    for doc in [README, *sorted(DOCS.glob("*.md"))]:
        for m in MARKER.finditer(doc.read_text()):
            assert m.group(1) not in found, f"{m.group(1)} generated twice ({found[m.group(1)]}, {doc})"
            found[m.group(1)] = doc
    return found


def test_every_marker_has_a_generator_and_back():
    assert set(_blocks()) == set(GENERATORS)


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_doc_block_matches_the_code(name, tmp_path, monkeypatch):
    doc = _blocks()[name]
    monkeypatch.chdir(tmp_path)
    for var in [v for v in os.environ if v.startswith(("INKLING_PROBE", "INKLING_FAULT", "INKLING_BF16"))]:
        monkeypatch.delenv(var)
    want = GENERATORS[name]()
    text = doc.read_text()
    m = next(m for m in MARKER.finditer(text) if m.group(1) == name)
    if os.environ.get("INKLING_UPDATE_DOCS") == "1":
        doc.write_text(text[: m.start(2)] + want + text[m.end(2):])
        return
    assert m.group(2) == want, f"{doc.name} block {name!r} is stale; INKLING_UPDATE_DOCS=1 rewrites it:\n{want}"


# -- synopses: every option a doc's usage line names is an option of that command ---------------------
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")


def _synopses() -> list[tuple[str, str, str]]:
    """(where, command, text) of the README's CLI block lines and the usage lines in EVALS.md/GRAPHS.md."""
    out = []
    block = README.read_text().split("## CLI\n\n```\n", 1)[1].split("```", 1)[0]
    for entry in re.split(r"\n(?=inkling-probe )", block.strip()):
        out.append(("README.md CLI", *entry.split(None, 2)[1:3]))
    for doc in ("EVALS.md", "GRAPHS.md"):
        for m in re.finditer(r"^(?:## `|)inkling-probe (health|paired|parity|graphdiff) ([^`\n]*)", (DOCS / doc).read_text(),
                             re.M):
            out.append((doc, m.group(1), m.group(2)))
    return out


def test_usage_lines_name_only_real_options():
    import click

    ctx = click.Context(group)
    seen = set()
    for where, name, text in _synopses():
        text = text.split("(")[0] if name in ("bisect", "report", "extract") else text  # prose after the synopsis
        cmd = group.get_command(ctx, name)
        assert cmd is not None, f"{where}: no command {name!r}"
        seen.add(name)
        opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        wrong = [o for o in OPTION.findall(re.sub(r'"[^"]*"', "", text)) if o not in opts]  # quoted: CMD
        assert not wrong, f"{where}: `inkling-probe {name}` has no option {wrong} ({sorted(opts)})"
    assert seen >= set(group.list_commands(ctx)) - {"bisect"}, sorted(set(group.list_commands(ctx)) - seen)
