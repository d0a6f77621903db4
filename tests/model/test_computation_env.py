"""inkling_model's registry of computation variables names the variables its modules really read, and
reaches the toolkit through the entry-point group (a report's repro carries each one)."""
from inkling_model import allreduce
from inkling_model.plugins import computation_env
from inkling_model.switches import faults, forced_routing, precision
from inkling_model.runtime import runtime
from inkling_probe.bundle import registry


def test_names_are_the_ones_the_model_reads():
    names = set(computation_env.variables())
    assert {faults.ENV, allreduce.ENV, precision.ENV, forced_routing.ENV, runtime.CUDA_GRAPH_ENV, runtime.ENFORCE_EAGER_ENV} <= names
    assert {faults.switch_var(f) for f in faults.FAULTS} <= names


def test_the_toolkit_sees_them_through_the_entry_point():
    reg = registry.registry()
    assert set(computation_env.variables()) <= set(reg) and "NCCL_ALGO" in reg
    s = registry.settings({"INKLING_FAULT": "raw_input_amax", "INKLING_PROBE": "d", "HOME": "/x"}, reg)
    assert s["values"]["INKLING_FAULT"] == "raw_input_amax"
    assert s["values"]["INKLING_BF16_LAYERS"] is None  # registered, unset in the run: unset in the repro
    assert "INKLING_PROBE" not in s["values"] and "HOME" not in s["values"]  # recording, not computing


def test_a_run_that_recorded_no_environment_sets_nothing():
    s = registry.settings(None)
    assert s["values"] == {} and s["recorded"] is False  # unknown: neither set nor unset by the repro
