"""Every file path README.md and docs/*.md name exists: a path from the repository root
(``docs/...``, ``scripts/...``, ``tests/...``, ``inkling_probe/...``, ``model/...``, ``corpus/...``,
``notebooks/...``); globs and ``{a,b}`` sets are left alone. A moved file breaks this test, not a
reader's trust in the docs."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"(?<![\w./-])((?:docs|scripts|tests|inkling_probe|model|corpus|notebooks)/[\w./-]*[\w/])")


def named_paths(text: str) -> list[str]:
    """The repository paths a document names (a trailing full stop is the sentence's)."""
    found = (m.group(1).rstrip(".") for m in PATH.finditer(text))
    return [p for p in found if not p.endswith("_") and not re.search(r"[*{]", p)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_named_path_exists(doc):
    missing = sorted({p for p in named_paths(doc.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_pattern_finds_paths_and_skips_globs():
    text = "see docs/PROBES.md, `model/switches/faults.py`; scripts/bench_* and tests/{a,b}.py."
    assert named_paths(text) == ["docs/PROBES.md", "model/switches/faults.py"]
