"""Dumps round-trip bit-exact through the reader, and read as numbers with plain h5py."""
import glob
import json

import h5py
import numpy as np
import pytest
import torch

import inkling_probe
from inkling_probe.store.stats import array_stats

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
          torch.int64, torch.int32, torch.uint8, torch.bool, torch.float4_e2m1fn_x2]


def _sample(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.float4_e2m1fn_x2:
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g) * 3
    x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -0.0])
    return x.to(dtype)


def _bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def _record(path, tensors, **settings):
    with inkling_probe.recording(path, **settings):
        for step in range(2):
            inkling_probe.step()
            for key, t in tensors.items():
                inkling_probe.probe(key, t[step], **({"note": key} if key.startswith("big") else {}))


@pytest.fixture(params=["process", "inline"])
def writer(request):
    return request.param


def _tensors():
    out = {}
    for i, dtype in enumerate(DTYPES):
        name = str(dtype).removeprefix("torch.")
        out[f"small.{name}"] = [_sample(dtype, (3, 5), 10 * i + s) for s in range(2)]
        out[f"big.{name}"] = [_sample(dtype, (300, 300), 10 * i + s) for s in range(2)]  # own dataset
    out["scalar"] = [torch.tensor(1.5), torch.tensor(-2.0)]
    out["empty"] = [torch.zeros(0, 4), torch.zeros(0, 4)]
    return out


def test_every_dtype_round_trips_bit_exact(tmp_path, writer):
    tensors = _tensors()
    _record(tmp_path / "d", tensors, writer=writer)
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == list(tensors)
    for key, per_step in tensors.items():
        for step, want in enumerate(per_step):
            got = d.tensor(key, step=step)
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert torch.equal(_bits(got), _bits(want)), (key, step)
    rows = {r["key"]: r for r in d.index if r["step"] == 1}
    assert rows["small.float32"]["dataset"].startswith("/packs/1/") and rows["small.float32"]["offset"] >= 0
    assert rows["big.float32"]["dataset"] == "/tensors/1/big.float32" and rows["big.float32"]["offset"] == -1
    assert rows["big.bfloat16"]["meta"] == {"note": "big.bfloat16"}


def test_index_stats_and_hash(tmp_path):
    x = torch.tensor([[1.0, -4.0], [float("nan"), 3.0]])
    y = x.clone()
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.probe("x", x)
        inkling_probe.probe("y", y)
        inkling_probe.probe("z", x + 1e-7)
    rows = {r["key"]: r for r in inkling_probe.open(tmp_path / "d").index}
    r = rows["x"]
    assert r["mean"] == 0.0 and r["absmax"] == 4.0 and r["nan"] == 1 and r["inf"] == 0
    assert r["rms"] == pytest.approx(((1 + 16 + 9) / 3) ** 0.5)
    assert rows["x"]["hash"] == rows["y"]["hash"] != rows["z"]["hash"]
    assert r["shape"] == (2, 2) and r["dtype"] == "float32" and r["numel"] == 4


def test_plain_h5py_reads_numbers_without_this_package(tmp_path):
    """A reader with only h5py and numpy: the index, own datasets, packs, bf16 (2 bytes a value on
    disk, HDF5's bfloat16 type, which h5py reads as float32 numbers)."""
    big = torch.randn(300, 300)
    small_bf16 = torch.randn(4, 6).bfloat16()
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.probe("layers.0.big", big)
        inkling_probe.probe("layers.0.small", small_bf16)
    (path,) = glob.glob(str(tmp_path / "d" / "rank00000-seg*.h5"))
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "inkling-probe" and f.attrs["schema_version"] == 3
        json.loads(f.attrs["run"])
        index = f["index"][()]
        keys = [k.decode() for k in index["key"]]
        assert keys == ["layers.0.big", "layers.0.small"]
        assert np.array_equal(f["/tensors/0/layers.0.big"][()], big.numpy())
        row = index[1]
        assert row["dtype"].decode() == "bfloat16"
        flat = f[row["dataset"].decode()][row["offset"]: row["offset"] + row["numel"]]
        shape = tuple(int(s) for s in row["shape"].decode().split("x"))
        assert flat.dtype == np.float32 and f[row["dataset"].decode()].id.get_type().get_size() == 2
        assert np.array_equal(flat.reshape(shape), small_bf16.float().numpy())


def test_segments_roll_over_by_size_and_keep_order(tmp_path):
    with inkling_probe.recording(tmp_path / "d", segment_mb=0.5):
        inkling_probe.step()
        for i in range(6):
            inkling_probe.probe(f"t{i}", torch.full((300, 300), float(i)))  # 360 KB each
    files = sorted(glob.glob(str(tmp_path / "d" / "rank00000-seg*.h5")))
    assert len(files) >= 3
    d = inkling_probe.open(tmp_path / "d")
    assert d.keys() == [f"t{i}" for i in range(6)]
    assert all(d.tensor(f"t{i}")[0, 0].item() == i for i in range(6))
    assert d.complete_through_step() == 0


def test_pack_threshold_zero_gives_every_tensor_its_dataset(tmp_path):
    with inkling_probe.recording(tmp_path / "d", pack_kb=0):
        inkling_probe.probe("a", torch.ones(2))
    assert inkling_probe.open(tmp_path / "d").index[0]["dataset"] == "/tensors/0/a"


def test_gzip_option_is_stock_deflate(tmp_path):
    x = torch.zeros(512, 1024)
    with inkling_probe.recording(tmp_path / "d", compress="gzip"):
        inkling_probe.probe("zeros", x)
    d = inkling_probe.open(tmp_path / "d")
    assert torch.equal(d.tensor("zeros"), x)
    with h5py.File(d.segments[0].path, "r") as f:
        assert f["/tensors/0/zeros"].compression == "gzip"


def test_array_stats_match_float64_reference():
    a = np.random.default_rng(0).standard_normal(10_000).astype(np.float32) * 50
    s = array_stats(a, "native")
    ref = a.astype(np.float64)
    assert s["mean"] == pytest.approx(ref.mean(), abs=1e-4)
    assert s["rms"] == pytest.approx(np.sqrt((ref ** 2).mean()), rel=1e-6)
    assert s["absmax"] == np.abs(ref).max()
    many = np.random.default_rng(1).standard_normal(4_000_000).astype(np.float32)  # one float32 dot drifts
    wide = many.astype(np.float64)
    assert array_stats(many, "native")["rms"] == pytest.approx(np.sqrt((wide ** 2).mean()), rel=1e-6)
    huge = np.array([3e38, 3e38, -1.0], dtype=np.float32)  # float32 sum overflows; stats must not
    assert array_stats(huge, "native")["mean"] == pytest.approx(2e38, rel=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_array_stats_over_many_chunks_see_every_chunk(dtype):
    """Sums, max and min are taken 64K values at a time: the extremes and the non-finite values of
    the last, partial chunk count as much as the first's."""
    a = (np.random.default_rng(2).standard_normal(3 * 65536 + 123) * 10 + 5).astype(dtype)
    a[-1], a[-2] = 1000, -2000
    ref = a.astype(np.float64)
    s = array_stats(a, "native")
    assert s["mean"] == pytest.approx(ref.mean(), rel=1e-6)
    assert s["rms"] == pytest.approx(np.sqrt((ref ** 2).mean()), rel=1e-6)
    assert s["absmax"] == 2000 and (s["nan"], s["inf"]) == (0, 0)
    if dtype != np.int32:
        a[-3], a[-4] = np.nan, -np.inf
        s = array_stats(a, "native")
        finite = ref[np.isfinite(a)]
        assert (s["nan"], s["inf"]) == (1, 1) and s["mean"] == pytest.approx(finite.mean(), rel=1e-6)


@pytest.mark.parametrize("kind", ["float32", "float64", "float16", "bfloat16", "int64", "bool", "-0.0", "nan", "huge"])
@pytest.mark.parametrize("size", [1, 65536, 3 * 65536 + 123])
def test_one_pass_hash_and_stats_equal_the_separate_ones(kind, size):
    """The writer's one pass (hash, sums and the write, 64K values at a time) gives the bits of
    content_hash and array_stats, hands every byte over once in order, and keeps -0.0's sign."""
    from inkling_probe.store.stats import content_hash, hash_and_stats

    rng = np.random.default_rng(3)
    made = {"float64": rng.standard_normal(size), "int64": rng.integers(-10**12, 10**12, size),
            "bool": rng.integers(0, 2, size).astype(bool), "-0.0": -np.zeros(size, np.float32),
            "bfloat16": rng.integers(0, 65536, size).astype(np.uint16), "huge": np.full(size, 3e38, np.float32),
            "float16": rng.standard_normal(size).astype(np.float16)}
    a = made.get(kind, rng.standard_normal(size).astype(np.float32))  # float32, and "nan" below
    if kind == "nan":
        a[::1000], a[1::777] = np.nan, -np.inf
    a = a.reshape(1, size)
    seen = []
    digest, stats = hash_and_stats(a, kind, "native", True, lambda view, at: seen.append((at, bytes(view))))
    assert digest == content_hash(a, kind, a.shape)
    assert b"".join(b for _, b in seen) == a.tobytes() and [at for at, _ in seen] == sorted(at for at, _ in seen)
    want = array_stats(a, "native", kind)
    assert repr(stats) == repr(want)  # NaN, -0.0 and every float to the bit
    assert hash_and_stats(a, kind, "native", False) == (digest, None)


@pytest.mark.parametrize("compress", ["none", "gzip"])
def test_bf16_is_stored_as_itself_two_bytes_a_value(tmp_path, compress):
    """Every bf16 bit pattern (NaN payloads too) in an own dataset, plain or deflated, and in a pack
    beside a real uint16 tensor: 2 bytes a value on disk, statistics as of its float32 values."""
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    big = every.repeat(8).reshape(256, 2048)  # 1 MiB as bf16: its own dataset (gzip applies)
    small = every[:40].reshape(5, 8)
    u16 = torch.arange(40, dtype=torch.int32).to(torch.uint16).reshape(5, 8)
    with inkling_probe.recording(tmp_path / "d", compress=compress, writer="inline"):
        inkling_probe.probe("big", big)
        inkling_probe.probe("small", small)
        inkling_probe.probe("u16", u16)
    d = inkling_probe.open(tmp_path / "d")
    for key, want in (("big", big), ("small", small), ("u16", u16)):
        got = d.tensor(key)
        assert got.dtype == want.dtype and torch.equal(_bits(got), _bits(want)), key
    rows = {r["key"]: r for r in d.index}
    assert rows["small"]["dataset"] != rows["u16"]["dataset"]  # a bf16 pack and a uint16 pack
    wide = big.float().numpy()
    assert rows["big"]["nan"] == int(np.isnan(wide).sum()) and rows["big"]["inf"] == int(np.isinf(wide).sum())
    finite = wide[np.isfinite(wide)].astype(np.float64)
    assert rows["big"]["absmax"] == np.abs(finite).max()
    assert rows["big"]["rms"] == pytest.approx(np.sqrt((finite ** 2).mean()), rel=1e-5)
    with h5py.File(d.segments[0].path, "r") as f:
        ds = f["/tensors/0/big"]
        assert ds.id.get_type().get_size() == 2 and ds.dtype == np.float32  # plain h5py: float32 numbers
        assert (ds.compression == "gzip") == (compress == "gzip")
        if compress == "none":
            assert ds.id.get_storage_size() == big.numel() * 2
        plain = ds[()]
        assert np.array_equal(plain[np.isfinite(wide)], wide[np.isfinite(wide)])


def test_bf16_of_a_schema_2_dump_reads_bit_exact(tmp_path):
    """Schema 2 wrote bf16 as float32 (bits << 16, storage 'upcast'): still read bit-exact."""
    from inkling_probe.store import schema
    from inkling_probe.store.writer import SegmentWriter

    x = torch.randn(300, 300).bfloat16()
    wide = x.float().numpy()
    w = SegmentWriter(tmp_path, 0, 1, run_id="0123456789ab", workers=0)
    w.add({"key": "x", "step": 0, "seq": 0, "call": 0, "rank": 0, "shape": schema.shape_text(x.shape),
           "dtype": "bfloat16", "storage": "upcast", "shard": "replicated", "dim": -1, "token_dim": 0,
           "token_start": 0, "numel": x.numel(), "meta": ""}, wide)
    w.close(complete_through_step=0)
    d = inkling_probe.open(tmp_path)
    assert torch.equal(_bits(d.tensor("x")), _bits(x)) and np.array_equal(d.array("x"), wide)
    with h5py.File(d.segments[0].path, "r") as f:
        assert f["/tensors/0/x"].id.get_type().get_size() == 4


def test_meta_and_shape_texts_are_exact_whatever_the_caching(tmp_path):
    """Equal dict keys are not equal JSON (1, True, 1.0): each probe's meta is stored as its own."""
    metas = [{"x": 1}, {"x": True}, {"x": 1.0}, {"x": "1"}, {"x": 1}, {"x": [1, 2]}, {"b": 0, "a": None}]
    with inkling_probe.recording(tmp_path / "d"):
        for i, meta in enumerate(metas):
            inkling_probe.probe("t", torch.ones(2, 3 + i % 2), **meta)
    rows = sorted(inkling_probe.open(tmp_path / "d").index, key=lambda r: r["seq"])
    assert [json.dumps(r["meta"], sort_keys=True) for r in rows] == [json.dumps(m, sort_keys=True) for m in metas]
    assert [r["shape"] for r in rows] == [(2, 3), (2, 4)] * 3 + [(2, 3)]


def test_root_attributes_have_the_documented_types(tmp_path):
    """Written through h5py's low-level calls, they read as attrs.update would have written them."""
    with inkling_probe.recording(tmp_path / "d"):
        inkling_probe.probe("a", torch.ones(2))
    with h5py.File(glob.glob(str(tmp_path / "d" / "*.h5"))[0], "r") as f:
        a = dict(f.attrs)
        for name in ("format", "run_id", "run"):
            assert isinstance(a[name], str) and f.attrs.get_id(name).get_type().get_cset() == h5py.h5t.CSET_UTF8
        for name in ("schema_version", "rank", "world_size", "segment", "complete_through_step"):
            assert f.attrs.get_id(name).dtype == np.int64
        assert f.attrs.get_id("created").dtype == np.float64
        assert a["format"] == "inkling-probe" and a["complete_through_step"] == 0 and json.loads(a["run"])["pid"]
