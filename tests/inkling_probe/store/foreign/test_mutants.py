"""Property suite (issue 42): thousands of mutated foreign files (.pt, safetensors, .npy, .npz,
SGLang dumper folders), seeded, each read whole through the API and held to one rule
(mutants.py ``check``): the values an independent reader gives (torch.load without mmap, the
safetensors library, numpy), or one ProbeError line naming the file; memory and time bounded by
the file's size. The CLI's side of a refusal (one line, exit 2) is tested once per kind of lie in
test_declared_sizes.py; here the readers run in-process, so a case costs milliseconds."""
import ast
import io
import json
import os
import pickletools
import struct
import warnings
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from . import mutants

SUITE = settings(derandomize=True, database=None, deadline=None, print_blob=True, max_examples=80,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                        HealthCheck.data_too_large])
BATCH = 4  # mutants per example: hypothesis's own cost per example (~20 ms here) is shared


def batches(strategy):
    return st.lists(strategy, min_size=BATCH, max_size=BATCH)


def _seed_safetensors() -> bytes:
    from safetensors.torch import save

    g = torch.Generator().manual_seed(0)
    return save({"w": torch.randn(4, 3, generator=g), "b": torch.randn(3, generator=g).bfloat16(),
                 "i": torch.arange(5)})


SEED_ST = _seed_safetensors()


@pytest.fixture(scope="module", autouse=True)
def _bounded(tmp_path_factory):
    """The suite's limits, and every reader imported (imports are not the file's memory)."""
    warm = tmp_path_factory.mktemp("warm")
    torch.save({"a": torch.ones(2)}, warm / "a.pt")
    np.save(warm / "a.npy", np.ones(2))
    np.savez_compressed(warm / "a.npz", a=np.ones(2))
    (warm / "a.safetensors").write_bytes(SEED_ST)
    with pytest.MonkeyPatch.context() as mp:
        mutants.small_limits(mp)
        for name in ("a.pt", "a.npy", "a.npz", "a.safetensors"):
            mutants.read_all(warm / name)
        yield


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("mutants"))


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """The reader's conventions, done independently: bf16 as float32, 8-bit floats as float16."""
    t = t.detach().contiguous()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.half().numpy()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


# -- safetensors ----------------------------------------------------------------------------------
ST_DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I8": 1, "U8": 1}


@st.composite
def safetensors_bytes(draw) -> bytes:
    """A safetensors file written back to back, then one header field, the data or a name edited."""
    names = draw(st.lists(st.sampled_from(["a", "b", "c.d", "e"]), max_size=4, unique=True))
    entries, offset = [], 0
    for name in names:
        dtype = draw(st.sampled_from(sorted(ST_DTYPES)))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        size = int(np.prod(shape)) * ST_DTYPES[dtype]
        entries.append([name, {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}])
        offset += size
    data = bytearray(draw(st.binary(min_size=offset, max_size=offset)))
    edit = draw(st.sampled_from(["none", "shape", "offset", "dtype", "twice", "data"]))
    if entries and edit != "none":
        name, entry = draw(st.sampled_from(entries))
        if edit == "shape":
            entry["shape"] = draw(st.lists(st.integers(-1, 1 << 40) | st.integers(0, 6), max_size=4))
        elif edit == "offset":
            entry["data_offsets"][draw(st.integers(0, 1))] = draw(st.integers(-8, offset + 16) | st.just(1 << 62))
        elif edit == "dtype":
            entry["dtype"] = draw(st.sampled_from(["F64", "BOOL", "F8_E4M3", "Q9", 7, None]))
        elif edit == "twice":
            entries.append([name, dict(entry)])
        else:
            data += draw(st.binary(min_size=1, max_size=8)) if draw(st.booleans()) else b""
            del data[len(data) - draw(st.integers(0, 4)):]
    text = ("{" + ", ".join(f"{json.dumps(n)}: {json.dumps(e)}" for n, e in entries) + "}").encode()
    return struct.pack("<Q", len(text)) + text + bytes(data)


def safetensors_reference(path):
    from safetensors.torch import load_file

    return {name: as_numpy(t) for name, t in load_file(path).items()}


@SUITE
@given(blobs=batches(safetensors_bytes()))
def test_safetensors_header_edits(folder, blobs):
    mutants.check_files(folder, ".safetensors", blobs, safetensors_reference)




@SUITE
@given(blobs=batches(mutants.byte_edits(SEED_ST)))
def test_safetensors_byte_edits(folder, blobs):
    mutants.check_files(folder, ".safetensors", blobs, safetensors_reference)


# -- .npy / .npz ----------------------------------------------------------------------------------
DESCRS = ["<f4", "<i8", "|u1", "|b1", "<f2", ">f4", "|O", "<V4", "<c8", "[('a', '<f4')]", "<U3", "<f8"]


@st.composite
def npy_bytes(draw) -> bytes:
    """A .npy header written by hand (any dtype text, shape, order) over data of about its size."""
    descr = draw(st.sampled_from(DESCRS))
    shape = tuple(draw(st.lists(st.integers(0, 5) | st.integers(-2, 1 << 40), max_size=3)))
    header = f"{{'descr': {descr if descr.startswith('[') else repr(descr)}, 'fortran_order': " \
             f"{draw(st.booleans())}, 'shape': {shape!r}, }}"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    try:
        nbytes = int(np.prod([max(d, 0) for d in shape])) * np.dtype(ast.literal_eval(descr) if descr.startswith("[") else descr).itemsize
    except (TypeError, ValueError):
        nbytes = 8
    nbytes = min(nbytes, 4096) + draw(st.integers(-4, 4))
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + bytes(max(nbytes, 0))


@SUITE
@given(blobs=batches(npy_bytes()))
def test_npy_header_edits(folder, blobs):
    mutants.check_files(folder, ".npy", blobs, lambda path: {"": np.load(path, allow_pickle=False)})


@SUITE
@st.composite
def npz_bytes(draw) -> bytes:
    """An .npz of hand-written .npy members (a name maybe twice), stored or deflated."""
    members = draw(st.lists(st.tuples(st.sampled_from(["x", "y", "x"]), npy_bytes()), min_size=1, max_size=3))
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a name given twice: a case under test
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED if draw(st.booleans()) else zipfile.ZIP_STORED) as z:
            for name, data in members:
                z.writestr(name + ".npy", data)
    return out.getvalue()


def npz_reference(path):
    with np.load(path, allow_pickle=False) as z:
        return {n: z[n] for n in z.files}


@SUITE
@given(blobs=batches(npz_bytes()))
def test_npz_member_edits(folder, blobs):
    mutants.check_files(folder, ".npz", blobs, npz_reference)


def _seed_npz() -> bytes:
    out = io.BytesIO()
    np.savez_compressed(out, a=np.arange(12.0).reshape(3, 4), b=np.ones(5, np.int8))
    return out.getvalue()


@SUITE
@given(blobs=batches(mutants.byte_edits(_seed_npz())))
def test_npz_byte_edits(folder, blobs):
    mutants.check_files(folder, ".npz", blobs, npz_reference)


# -- .pt ------------------------------------------------------------------------------------------
def _pt_seeds() -> list[bytes]:
    g = torch.Generator().manual_seed(0)
    t = torch.randn(3, 4, generator=g)
    objs = [{"a": t}, {"x": t, "y": [torch.arange(6).reshape(2, 3), None]}, {"w": t, "tied": t},
            {"e": torch.arange(4.0).expand(3, 4)}, {"h": t.bfloat16(), "m": t[1:, ::2]}, t]
    out = []
    for obj in objs:
        buf = io.BytesIO()
        torch.save(obj, buf)
        out.append(buf.getvalue())
    return out


PT_SEEDS = _pt_seeds()


def pt_reference(path):
    """torch's own loader without mmap (it checks record sizes), flattened by dict keys and list
    indices joined with dots."""
    out = {}

    def walk(obj, name):
        if isinstance(obj, torch.Tensor):
            out[name] = as_numpy(obj)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{name}.{k}" if name else str(k))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{name}.{i}" if name else str(i))
    walk(torch.load(path, map_location="cpu", weights_only=True), "")
    return out


def rezip(seed: bytes, edit) -> bytes:
    """``seed``'s members written again (stored, CRCs right), ``edit(name, data)`` applied to each."""
    src = zipfile.ZipFile(io.BytesIO(seed))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in src.infolist():
            z.writestr(info.filename, edit(info.filename, src.read(info.filename)))
    return out.getvalue()


_INT_OPS = {"BININT1": (1, 0, 255), "BININT2": (2, 0, 65535), "BININT": (4, -(1 << 31), (1 << 31) - 1)}


@st.composite
def pickle_int_edits(draw, pkl: bytes) -> bytes:
    """One integer of the pickle (a size, stride, storage offset or element count) set to another."""
    ints = [(op.name, pos) for op, _, pos in pickletools.genops(pkl) if op.name in _INT_OPS]
    name, pos = draw(st.sampled_from(ints))
    width, lo, hi = _INT_OPS[name]
    value = draw(st.integers(lo, min(hi, 64)) | st.sampled_from([lo, hi, 0, 1, 2, hi // 2]))
    fmt = {1: "<B", 2: "<H", 4: "<i"}[width]
    return pkl[: pos + 1] + struct.pack(fmt, value) + pkl[pos + 1 + width:]


def _with_pickle(seed: bytes, pkl: bytes) -> bytes:
    return rezip(seed, lambda name, b: pkl if name.endswith("data.pkl") else b)


def _pickle_of(seed: bytes) -> bytes:
    z = zipfile.ZipFile(io.BytesIO(seed))
    return z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))


pt_int_mutants = st.sampled_from(PT_SEEDS).flatmap(
    lambda seed: pickle_int_edits(_pickle_of(seed)).map(lambda pkl: _with_pickle(seed, pkl)))


@SUITE
@given(blobs=batches(pt_int_mutants))
def test_pt_pickle_int_edits(folder, blobs):
    mutants.check_files(folder, ".pt", blobs, pt_reference)


@SUITE
@given(cases=batches(st.tuples(st.integers(-64, 64), st.sampled_from(PT_SEEDS))))
def test_pt_record_sizes(folder, cases):
    for cut, seed in cases:
        def edit(name, b):
            return b if "/data/" not in name else b[:cut] if cut < 0 else b + bytes(cut)
        (got,) = mutants.check_files(folder, ".pt", [rezip(seed, edit)], pt_reference)
        assert (got is None) == (cut != 0)


@SUITE
@given(blobs=batches(st.sampled_from(PT_SEEDS).flatmap(mutants.byte_edits)))
def test_pt_byte_edits(folder, blobs):
    mutants.check_files(folder, ".pt", blobs, pt_reference)


@SUITE
@given(cases=batches(st.tuples(st.lists(st.sampled_from(["a", "a.b", "b", "0", "0.b"]), min_size=1, max_size=4,
                                        unique=True), st.none() | st.sampled_from(["a", "0", "c"]))))
def test_pt_names_that_clash(folder, cases):
    for keys, nested in cases:
        obj = {k: torch.full((2,), float(i)) for i, k in enumerate(keys)}
        if nested is not None and nested not in obj:  # {'a.b': t1, 'a': {'b': t2}}: both flatten to 'a.b'
            obj[nested] = {"b": torch.zeros(2)}
        buf = io.BytesIO()
        torch.save(obj, buf)
        (got,) = mutants.check_files(folder, ".pt", [buf.getvalue()], pt_reference)
        clash = nested is not None and nested not in keys and f"{nested}.b" in keys
        assert (got is None) == clash


# -- SGLang dumper folders ------------------------------------------------------------------------
@st.composite
def dumper_tags(draw) -> tuple[list, object, int]:
    """(ranks, declared world size or None, step): half of them a whole honest run."""
    if draw(st.booleans()):
        n = draw(st.integers(1, 3))
        return list(range(n)), draw(st.sampled_from([None, n])), draw(st.integers(0, 2))
    ranks = draw(st.lists(st.integers(0, 3) | st.sampled_from([-1, 10**11]), min_size=1, max_size=3, unique=True))
    return ranks, draw(st.none() | st.integers(1, 4) | st.just(10**12)), draw(st.integers(-1, 2) | st.just(10**15))


@SUITE
@given(tags=dumper_tags(), edit=st.none() | st.integers(0, 1200))
def test_sglang_dumper_folders(folder, tags, edit):
    ranks, world, step = tags
    root = mutants.new_path(folder, "")
    exp = os.path.join(root, "dump_x")
    os.makedirs(exp)
    files = {}
    for i, rank in enumerate(ranks):
        files[rank] = os.path.join(exp, f"step={step}___rank={rank}___dump_index={i + 1}___name=h.pt")
        torch.save({"value": torch.full((2, 3), float(i)), "meta": {} if world is None else {"world_size": world}},
                   files[rank])
    if edit is not None:  # one byte of the first file flipped
        with open(files[ranks[0]], "r+b") as fh:
            fh.seek(edit)
            byte = fh.read(1)
            fh.seek(edit)
            fh.write(bytes([byte[0] ^ 0x55]) if byte else b"")
    got = mutants.check(root, lambda: {("h", r): pt_reference(f)["value"] for r, f in files.items()})
    if got is not None:
        assert sorted(ranks) == list(range(len(ranks))) and world in (None, len(ranks)) and step >= 0

def test_both_outcomes_were_checked():
    """Run after the rest (file order): each format had mutants read (their values checked against
    the reference) and mutants refused; a suite whose mutants were all refused would check nothing."""
    if not mutants.TALLY:
        pytest.skip("run with the property tests above")
    print(dict(mutants.TALLY))
    for suffix in (".safetensors", ".npy", ".npz", ".pt", "folder"):
        assert mutants.TALLY[suffix, "read"] >= 10 and mutants.TALLY[suffix, "refused"] >= 10, dict(mutants.TALLY)
