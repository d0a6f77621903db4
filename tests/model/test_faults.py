"""The planted-fault registry: off by default, switched by env or context, unknown names refused; the
one list the carriers, ``run --help`` and docs/MODEL.md's table are held to."""

import os
import re
from pathlib import Path

import pytest

from inkling_model.switches import faults
from inkling_model.config import InklingConfig


def test_off_by_default(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.active() == frozenset()
    assert not any(faults.is_active(n) for n in faults.FAULTS)


def test_env_and_context(monkeypatch):
    monkeypatch.setenv(faults.ENV, "raw_input_amax, gate_up_layout")
    assert faults.is_active("raw_input_amax") and faults.is_active("gate_up_layout")
    assert not faults.is_active("renorm_rows")
    with faults.activate("renorm_rows"):
        assert faults.is_active("renorm_rows")
    assert not faults.is_active("renorm_rows")


def test_unknown_names(monkeypatch):
    with pytest.raises(ValueError, match=re.escape(f"unknown fault 'nope' (known: {', '.join(faults.FAULTS)})")):
        faults.is_active("nope")
    with pytest.raises(ValueError, match="unknown fault 'typo'"):
        with faults.activate("renorm_rows,typo"):
            pass
    monkeypatch.setenv(faults.ENV, "bogus")
    with pytest.raises(ValueError, match="bogus"):
        faults.active()


def test_locations():
    cfg = InklingConfig.preset("tiny", quant_method="nvfp4")
    assert faults.location("raw_input_amax", cfg) == "layers.3.mlp.experts"
    assert faults.location("gate_up_layout", cfg) == "layers.2.mlp.experts"
    assert faults.location("renorm_rows", cfg) == "layers.1.attn_norm"
    assert faults.location("raw_input_amax", InklingConfig.preset("tiny", quant_first_layer=4)) == "layers.4.mlp.experts"
    assert faults.location("adp_global_tp_size", cfg) == "layers.0.attn.out"
    assert faults.location("adp_dense_allreduce", cfg) == "layers.0.mlp.out"
    assert faults.location("no_config_eos", cfg) == "generate.resolve_eos"
    assert all(f.doc and f.carrier for f in faults.FAULTS.values())


# -- the registry is the one list: the carriers, run --help and docs/MODEL.md read it ----------------
ROOT = Path(__file__).resolve().parents[2]
TABLE = re.compile(r"(<!-- generated: faults \(tests/model/test_faults\.py, from model/switches/faults\.py\) -->\n)"
                   r"(.*?)(<!-- end generated -->)", re.S)


def _table() -> str:
    cfg = InklingConfig.preset("tiny", quant_method="nvfp4")
    lines = ["| fault | reproduces | lives in | switch | true location (tiny) |", "|---|---|---|---|---|"]
    lines += [f"| `{f.name}` | {f.reproduces} | `{f.carrier_file}` ({f.carrier.partition(' (')[2].rstrip(')')}) "
              f"| `{f.switch}=1` | `{f.locate(cfg)}` |" for f in faults.FAULTS.values()]
    return "\n".join(lines) + "\n"


def test_every_fault_lives_where_the_registry_says():
    for f in faults.FAULTS.values():
        path = ROOT / f.carrier_file
        assert path.is_file(), f"{f.name}: carrier {f.carrier_file} is not a file"
        assert f'"{f.name}"' in path.read_text(), f"{f.name}: {f.carrier_file} does not switch on it"


def test_model_md_table_is_the_registry():
    doc = ROOT / "docs" / "MODEL.md"
    text = doc.read_text()
    m = TABLE.search(text)
    assert m, "docs/MODEL.md has no generated faults table"
    if os.environ.get("INKLING_UPDATE_DOCS") == "1":
        doc.write_text(text[: m.start(2)] + _table() + text[m.end(2):])
        return
    assert m.group(2) == _table(), f"docs/MODEL.md's faults table is stale; INKLING_UPDATE_DOCS=1 rewrites it:\n{_table()}"


def test_run_help_names_every_fault():
    from click.testing import CliRunner

    from inkling_model.cli.run import command

    text = " ".join(CliRunner().invoke(command, ["--help"], env={"COLUMNS": "400"}).output.split())
    assert f"Names: {', '.join(faults.FAULTS)} (docs/MODEL.md" in text
