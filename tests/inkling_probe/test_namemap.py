import pytest

from inkling_probe.errors import SettingsError
from inkling_probe.namemap import NameMap

RULES = r"""
[[rule]]
match = 'model\.layers\.(\d+)\.self_attn\.q_norm((?:\.in\..*)?)'
to = 'layers.\1.attn.q\2'
[[rule]]
match = 'model\.layers\.\d+\.dropout'
to = ''
"""


def test_rules_rename_in_order_and_keep_suffixes():
    m = NameMap.from_toml(RULES)
    assert m.apply("model.layers.3.self_attn.q_norm") == "layers.3.attn.q"
    assert m.apply("model.layers.3.self_attn.q_norm.in.0") == "layers.3.attn.q.in.0"
    assert m.apply("model.layers.3.dropout") is None  # empty target drops
    assert m.apply("lm_head") == "lm_head"             # unmatched kept ...
    strict = NameMap.from_toml("drop_unmatched = true\n" + RULES)
    assert strict.apply("lm_head") is None              # ... unless drop_unmatched


def test_load_from_file_and_errors(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(RULES)
    assert NameMap.load(p).apply("model.layers.0.self_attn.q_norm") == "layers.0.attn.q"
    with pytest.raises(SettingsError, match="no such name map"):
        NameMap.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rule]]\nmatch = '('\nto = 'x'\n")
    with pytest.raises(SettingsError, match="rule 1"):
        NameMap.load(bad)
    bad.write_text("rule = [")
    with pytest.raises(SettingsError, match="not valid TOML"):
        NameMap.load(bad)
