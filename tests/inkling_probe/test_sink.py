"""The sink: off by default and free; when on, filters, step ids, seq order, token slices, modes."""
import torch

import inkling_probe
from inkling_probe import sink


def test_disabled_probe_records_nothing_and_touches_no_tensor(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.Tensor, "detach", lambda self: calls.append(1) or self)
    assert not inkling_probe.enabled()
    inkling_probe.probe("x", torch.ones(3))
    inkling_probe.step()
    assert calls == [] and sink.active_recorder() is None
    assert list(tmp_path.iterdir()) == []


def test_step_ids_and_seq_order(tmp_path):
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.step()              # first step() before any record keeps step 0
        inkling_probe.probe("a", torch.zeros(2))
        inkling_probe.probe("b", torch.ones(2))
        inkling_probe.probe("a", torch.full((2,), 2.0))   # second call of "a" in step 0
        inkling_probe.step()
        inkling_probe.probe("b", torch.full((2,), 3.0))
    d = inkling_probe.open(tmp_path / "d")
    assert [(r["key"], r["step"], r["seq"], r["call"]) for r in d.index] == [
        ("a", 0, 0, 0), ("b", 0, 1, 0), ("a", 0, 2, 1), ("b", 1, 0, 0)]
    assert d.tensor("a", 0, call=1).tolist() == [2.0, 2.0]
    assert d.steps("b") == [0, 1]


def test_filters_steps_and_names(tmp_path):
    with inkling_probe.recording(tmp_path / "d", include="layers.*", exclude="*.skip", steps="1:3"):
        for s in range(4):
            inkling_probe.step()
            for name in ("layers.0.keep", "layers.0.skip", "embed"):
                inkling_probe.probe(name, torch.full((1,), float(s)))
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == ["layers.0.keep"] and d.steps("layers.0.keep") == [1, 2]
    # seq counts every probe call, recorded or not, so filtered runs keep the same seq numbers
    assert [r["seq"] for r in d.index] == [0, 0]


def test_token_slice_on_declared_token_dim(tmp_path):
    x = torch.arange(40.0).reshape(2, 10, 2)  # [B, T, C] with tokens on dim 1
    with inkling_probe.recording(tmp_path / "d", tokens="-3:"):
        inkling_probe.probe("x", x, token_dim=1)
        inkling_probe.probe("scalar", torch.tensor(5.0))
        inkling_probe.probe("scales", torch.arange(10.0), token_dim=None)  # not per token: never sliced
    d = inkling_probe.open(tmp_path / "d")
    assert torch.equal(d.tensor("scales"), torch.arange(10.0))
    assert torch.equal(d.tensor("x"), x[:, -3:])
    row = [r for r in d.index if r["key"] == "x"][0]
    assert row["token_start"] == 7 and row["token_dim"] == 1
    assert d.tensor("scalar").item() == 5.0


def test_modes_stats_and_hash_store_no_tensor(tmp_path):
    x = torch.tensor([1.0, -3.0, float("nan"), float("inf")])
    for mode in ("stats", "hash"):
        with inkling_probe.recording(tmp_path / mode, mode=mode):
            inkling_probe.probe("x", x)
        d = inkling_probe.open(tmp_path / mode)
        row = d.index[0]
        assert row["dataset"] == "" and len(row["hash"]) == 16
        if mode == "stats":
            assert (row["mean"], row["absmax"], row["nan"], row["inf"]) == (-1.0, 3.0, 1, 1)
        with __import__("pytest").raises(inkling_probe.errors.DumpError, match="stats only"):
            d.tensor("x")
    full = tmp_path / "full"
    with inkling_probe.recording(full):
        inkling_probe.probe("x", x)
    assert inkling_probe.open(full).index[0]["hash"] == inkling_probe.open(tmp_path / "hash").index[0]["hash"]


def test_probe_copies_at_call_time(tmp_path):
    x = torch.zeros(4)
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.probe("x", x)
        x += 1  # the model changes its tensor in place after the probe
    assert inkling_probe.open(tmp_path / "d").tensor("x").tolist() == [0.0] * 4


def test_bad_probe_calls_fail_clearly(tmp_path):
    import pytest

    with inkling_probe.recording(tmp_path / "d"):
        with pytest.raises(ValueError, match="needs dim"):
            inkling_probe.probe("x", torch.zeros(2, 2), shard="concat")
        with pytest.raises(ValueError, match="shard='split'"):
            inkling_probe.probe("x", torch.zeros(2), shard="split")
        with pytest.raises(ValueError, match="must not contain '/'"):
            inkling_probe.probe("a/b", torch.zeros(2))
        with pytest.raises(TypeError, match="expected a torch.Tensor"):
            inkling_probe.probe("x", [1, 2])


def test_env_configuration_is_read_at_start(tmp_path):
    assert sink.configure_from_env({"INKLING_PROBE": str(tmp_path / "env")}) is True
    inkling_probe.probe("x", torch.ones(1))
    sink.stop()
    assert inkling_probe.open(tmp_path / "env").keys() == ["x"]
    assert sink.configure_from_env({}) is False and not inkling_probe.enabled()


def test_negative_and_missing_token_dims(tmp_path):
    x = torch.arange(8.0).reshape(2, 4)
    with inkling_probe.recording(tmp_path / "d", tokens="0:1"):
        inkling_probe.probe("last_dim", x, token_dim=-1)   # tokens along the last dim
        inkling_probe.probe("beyond", torch.arange(3.0), token_dim=2)  # no such dim: not sliced
        inkling_probe.probe("scalar", torch.tensor(1.0), dim=0)        # dim only matters for concat
    d = inkling_probe.open(tmp_path / "d")
    rows = {r["key"]: r for r in d.index}
    assert torch.equal(d.tensor("last_dim"), x[:, :1]) and rows["last_dim"]["token_dim"] == 1
    assert torch.equal(d.tensor("beyond"), torch.arange(3.0)) and rows["beyond"]["token_dim"] == -1
    assert rows["scalar"]["dim"] == -1


def test_steps_with_nothing_recorded_cost_no_writer_round_trip(tmp_path, monkeypatch):
    from inkling_probe.store.writer_process import ProcessWriter

    ends = []
    real = ProcessWriter.end_segment
    monkeypatch.setattr(ProcessWriter, "end_segment",
                        lambda self, complete_through_step: (ends.append(complete_through_step), real(self, complete_through_step)))
    with inkling_probe.recording(tmp_path / "d", steps="0"):
        for _ in range(5):
            inkling_probe.step()
            inkling_probe.probe("x", torch.ones(2))
    assert ends == [0]  # steps 1-4 recorded nothing: no segment to end
    assert inkling_probe.open(tmp_path / "d").steps("x") == [0]


def test_meta_values_equal_as_keys_stay_distinct_in_the_dump(tmp_path):
    """The recorder caches a probe's meta JSON: 1, True and 1.0 hash alike, but each is stored as itself."""
    with inkling_probe.recording(tmp_path / "d"):
        for name, v in (("i", 1), ("b", True), ("f", 1.0), ("i2", 1), ("s", "x"), ("n", None)):
            inkling_probe.probe(name, torch.zeros(2), kind=v)
    d = inkling_probe.open(tmp_path / "d")
    kinds = {r["key"]: r["meta"]["kind"] for r in d.index}
    assert kinds == {"i": 1, "b": True, "f": 1.0, "i2": 1, "s": "x", "n": None}
    assert [type(kinds[k]) for k in ("i", "b", "f")] == [int, bool, float]
