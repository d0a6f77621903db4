"""Test-wide fixtures: no recording leaks in from the environment; GPU tests skip without a GPU."""
import os

import pytest

for _var in [v for v in os.environ if v.startswith("INKLING_PROBE")]:
    del os.environ[_var]

# One intra-op thread in every process the suite starts (bisect's and graphdiff's runs, `inkling-probe
# run` subprocesses, notebooks), as tests/model/conftest.py and spawned ranks already do for theirs: on
# the shared 2-core machine OpenMP threads waiting on each other under load made a warm tiny-model
# `run` 2.4-6.4 s instead of 0.7-1.2 s. An explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")


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
