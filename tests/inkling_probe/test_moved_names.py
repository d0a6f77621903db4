"""Names moved to open circles and upward imports (docs/ARCHITECTURE.md) stay reachable at their old
paths for one release: the same objects, with a DeprecationWarning; the names that did not move
import without one."""
import importlib
import warnings

import pytest

MOVED = [("inkling_probe.store.reader", "inkling_probe.store.dump",
          ["Dump", "Segment", "MAX_OPEN_FILES", "PACK_CACHE_BYTES"]),
         ("inkling_probe.namemap", "inkling_probe.store.namemap",
          ["NameMap", "FOREIGN_RULE_KEYS", "shipped_maps"]),
         ("inkling_probe.views.dump_html", "inkling_probe.store.dump_html", ["dump_html", "LIMIT"])]


@pytest.mark.parametrize("old, new, names", MOVED)
def test_old_names_warn_and_are_the_same_objects(old, new, names):
    old_mod, new_mod = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}.{name}"):
            assert getattr(old_mod, name) is getattr(new_mod, name)


@pytest.mark.parametrize("old", [m[0] for m in MOVED])
def test_a_name_that_never_was_is_an_attribute_error(old):
    with pytest.raises(AttributeError):
        importlib.import_module(old).no_such_name


def test_from_import_of_an_old_name_warns():
    with pytest.warns(DeprecationWarning):
        from inkling_probe.store.reader import Dump
    from inkling_probe.store.dump import Dump as moved

    assert Dump is moved


def test_what_stayed_imports_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from inkling_probe.compare import parallel, readahead
        from inkling_probe.store.reader import as_dump, open_dump  # noqa: F401

        assert parallel.lookup is readahead.lookup and parallel.key_of is readahead.key_of
