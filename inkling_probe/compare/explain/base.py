"""What every hypothesis shares: its context, its finding, and the pair's values as numpy.

No torch here (nor anywhere in explain/): a torch tensor is accepted by duck typing and turned
into numpy with its own methods, so the read side of compare imports numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from inkling_probe.compare.explain.dtypes import dtype_name
from inkling_probe.compare.values import from_any, unpack_fp4

# kind: what a verdict matches on; name: the hypothesis as reported (kept stable for the JSON)
KINDS = ("ratio", "permutation", "confined", "saturation", "zeroed", "shift", "nonfinite", "rounding",
         "offset", "flushed", "nonzero")
KIND_OF = {"constant_ratio": "ratio", "row_ratio": "ratio", "channel_ratio": "ratio",
           "layout_permutation": "permutation", "weight_layout": "permutation", "confined": "confined",
           "saturation": "saturation", "zeroed": "zeroed", "sequence_shift": "shift",
           "nonfinite": "nonfinite", "rounding": "rounding", "channel_offset": "offset", "flushed": "flushed",
           "nonzero": "nonzero", "reordered_input": "permutation", "positionless_lookup": "offset"}


@dataclass
class Context:
    """What a hypothesis may know besides the two arrays.

    ``noise`` is the residual rel_rms at or below which a hypothesis explains the difference (the
    key's threshold inside compare); None: 4 x eps of the coarser of the two float dtypes.
    ``token_dim`` is the dim of token rows (None: no such dim). ``routing`` holds the reference's
    expert ids per token (``[T, k]``) for the layer, when recorded. ``ref_dtype``/``cand_dtype`` are
    dtype names ('bfloat16', 'float8_e4m3fn', 'float4_e2m1fn_x2', ...); torch dtypes are accepted.
    ``inputs`` holds the reference's recorded inputs of the key (``KEY.in.<name>``: name -> array,
    rows along dim 0 after any leading size-1 dims), read by the input hypotheses (:mod:`.recorded`).
    """

    noise: float | None = None
    token_dim: int | None = 0
    tp_sizes: tuple[int, ...] = ()
    head_dim: int | None = None
    routing: np.ndarray | None = None
    ref_dtype: str | None = None
    cand_dtype: str | None = None
    inputs: dict | None = None

    def __post_init__(self):
        self.ref_dtype, self.cand_dtype = dtype_name(self.ref_dtype), dtype_name(self.cand_dtype)


@dataclass
class Finding:
    """A hypothesis that holds: its name, its kind (one of ``KINDS``), a one-line summary and the
    numbers behind it."""

    name: str
    summary: str
    evidence: dict = field(default_factory=dict)
    kind: str = ""

    def __post_init__(self):
        if not self.kind:
            self.kind = KIND_OF.get(self.name, self.name)

    def to_dict(self) -> dict:
        return {"hypothesis": self.name, "kind": self.kind, "summary": self.summary, "evidence": self.evidence}

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        """The finding of a ``to_dict()`` document (compare's JSON, ``report.explanations``)."""
        return cls(d.get("hypothesis", ""), d.get("summary", ""), dict(d.get("evidence") or {}), d.get("kind", ""))

    def __getitem__(self, key: str):  # the JSON spelling works too: f["hypothesis"], f["evidence"]
        return self.to_dict()[key]

    def get(self, key: str, default=None):
        return self.to_dict().get(key, default)


def as_values(x) -> tuple[np.ndarray, str]:
    """(numpy values, dtype name) of a numpy array or, by duck typing, a torch tensor.

    bf16 and the 8-bit floats become exact float32, packed fp4 is unpacked; numpy arrays pass as
    they are (the caller unpacks fp4 bytes and says the dtype in the Context).
    """
    v = from_any(x)
    if v.packed:
        return unpack_fp4(v.array), v.dtype
    if v.array.dtype.kind not in "fiub":
        raise TypeError(f"explain needs real numbers, got {v.dtype}")
    return v.array, v.dtype


def short_list(items, limit: int = 16) -> str:
    """'[2, 5]' or '[0, 1, ... 37 more]'."""
    items = [int(i) if isinstance(i, np.integer) else i for i in items]
    if len(items) <= limit:
        return str(items)
    return str(items[:limit])[:-1] + f", ... {len(items) - limit} more]"


def fmt_num(x: float) -> str:
    return f"{x:.6g}"


def median(v: np.ndarray) -> float:
    """The median (np.median would import numpy.ma: a quarter second on a cold start)."""
    s = np.sort(v.ravel())
    return float(s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def summary_of(v: np.ndarray) -> dict:
    """{min, median, max} of a vector, as floats."""
    if v.size == 0:
        return {"min": None, "median": None, "max": None}
    return {"min": float(v.min()), "median": median(v), "max": float(v.max())}
