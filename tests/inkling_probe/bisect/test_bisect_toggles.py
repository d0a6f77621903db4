"""inkling_model's toggles: registered through the entry point, and each variable does what it says."""
from inkling_model.switches import faults, precision

from inkling_probe.bisect.toggles import model_toggles, parse_flag


def test_model_toggles_load_through_the_entry_point():
    found = {t.name: t for t in model_toggles("inkling_model")}
    assert (found["cuda_graph"].env, found["cuda_graph"].good, found["cuda_graph"].bad) == ("INKLING_ENFORCE_EAGER", "1", "0")
    assert (found["allreduce"].good, found["allreduce"].bad) == ("nccl", "oneshot")
    assert found["nvfp4_experts"].env == precision.ENV
    assert {f"fault_{n}" for n in faults.FAULTS} <= set(found)
    assert [t.name for t in model_toggles("inkling_model", "fault_*")] == [f"fault_{n}" for n in faults.FAULTS]


def test_fault_switch_variable_and_precision_variable():
    t = {t.name: t for t in model_toggles("inkling_model")}["fault_raw_input_amax"]
    assert faults.from_env({t.env: t.bad}) == {"raw_input_amax"}
    assert faults.from_env({}) == frozenset()
    assert precision.keeps_reference(4, {precision.ENV: "3-4"})
    assert not precision.keeps_reference(5, {precision.ENV: "3-4"})
    assert precision.keeps_reference(9, {precision.ENV: "all"}) and not precision.keeps_reference(9, {})


def test_flag_spec_empty_side_unsets():
    t = parse_flag("INKLING_FAULT=:raw_input_amax")
    assert (t.env, t.good, t.bad) == ("INKLING_FAULT", None, "raw_input_amax")
