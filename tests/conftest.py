"""Test-wide fixtures: no recording leaks in from the environment; GPU tests skip without a GPU."""
import os

import pytest

for _var in [v for v in os.environ if v.startswith("INKLING_PROBE")]:
    del os.environ[_var]


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_active_recorder():
    """Every test starts and ends with recording off."""
    from inkling_probe import sink

    sink.stop()
    yield
    sink.stop()
