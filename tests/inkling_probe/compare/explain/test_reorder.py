"""explain's reordered_input: a module that read its input's axes in another order is named from
the recorded input and the rows that stayed exact (and from nothing weaker)."""
import numpy as np

from inkling_probe.compare.explain import explain


def _module(seed=1):
    """A fixed nonlinear map of a [2, 2, 3] patch (flattened), like an hMLP stage: [N, 2, 2, 3] -> [N, 16]."""
    w = np.random.default_rng(seed).standard_normal((12, 16))
    return lambda x: np.tanh(x.reshape(len(x), -1) @ w)


def _patches(n=10, symmetric=(), constant=(7, 8), transposed_of=None, seed=0):
    g = np.random.default_rng(seed)
    x = g.standard_normal((n, 2, 2, 3))
    for t in constant:  # a padded patch: one value per channel
        x[t] = g.standard_normal(3)
    for t in symmetric:  # equal to its own transpose, not constant
        x[t] = (x[t] + x[t].transpose(1, 0, 2)) / 2
    if transposed_of is not None:
        t, u = transposed_of
        x[t] = x[u].transpose(1, 0, 2)
    return x


def _explain(x, cand_x, f=None):
    f = f or _module()
    r, c = f(x), f(cand_x)
    return {g.name: g for g in explain(r, c, noise=1e-6, inputs={"0": x})}


def test_transposed_patches_named_with_the_dims():
    x = _patches()
    f = _explain(x, x.transpose(0, 2, 1, 3))["reordered_input"]
    assert f.evidence["dims"] == [1, 2] and f.evidence["exact"] == [7, 8] and f.evidence["block"] is None
    assert f.evidence["rows"] == [0, 1, 2, 3, 4, 5, 6, 9] and f.kind == "permutation"
    assert "read in another order" in f.summary


def test_symmetric_patches_single_out_the_transpose():
    """A non-constant patch equal to its transpose stays exact: only the swap fits, not a flip."""
    x = _patches(symmetric=(2,))
    f = _explain(x, x.transpose(0, 2, 1, 3))["reordered_input"]
    assert f.evidence["transforms"] == ["dims 1<->2 swapped"], f.evidence


def test_a_patch_and_its_transpose_confirm_the_pair():
    x = _patches(transposed_of=(3, 0))
    f = _explain(x, x.transpose(0, 2, 1, 3))["reordered_input"]
    assert f.evidence["pairs_confirmed"] >= 1 and f.evidence["transforms"] == ["dims 1<->2 swapped"]


def test_a_flip_is_told_from_a_transpose():
    x = _patches(symmetric=(2,))
    f = _explain(x, x[:, ::-1])["reordered_input"]  # dim 1 reversed: the symmetric patch changes too
    assert "dim 1 reversed" in f.evidence["transforms"] and "dims 1<->2 swapped" not in f.evidence["transforms"]


def test_other_weights_are_not_a_reordering():
    x = _patches()
    r, c = _module(1)(x), _module(2)(x)
    assert "reordered_input" not in {g.name for g in explain(r, c, noise=1e-6, inputs={"0": x})}


def test_exact_rows_symmetric_under_everything_say_nothing():
    """Zero rows are unchanged by any reordering (and by most bugs): no claim from them."""
    x = _patches(constant=())
    x[7:9] = 0.0
    f = lambda v: np.tanh(v.reshape(len(v), -1) @ np.random.default_rng(1).standard_normal((12, 16)))  # noqa: E731
    r = f(x)
    c = f(x.transpose(0, 2, 1, 3))
    assert "reordered_input" not in {g.name for g in explain(r, c, noise=1e-6, inputs={"0": x})}


def test_without_inputs_or_with_another_row_count_nothing_is_read():
    x = _patches()
    r, c = _module()(x), _module()(x.transpose(0, 2, 1, 3))
    assert "reordered_input" not in {g.name for g in explain(r, c, noise=1e-6)}
    assert "reordered_input" not in {g.name for g in explain(r, c, noise=1e-6, inputs={"0": x[:5]})}


def test_a_changed_row_whose_input_is_symmetric_refutes_it():
    x = _patches()
    r, c = _module()(x), _module()(x.transpose(0, 2, 1, 3))
    c[7] += 0.5  # a constant patch changed too: not explained by any reordering
    assert "reordered_input" not in {g.name for g in explain(r, c, noise=1e-6, inputs={"0": x})}


def test_a_fold_in_another_order_is_named_per_output_position():
    """An output grid coarsening the input's (space-to-depth): each 2x2 block read transposed, units
    are output positions; padded (constant) blocks exact, the patch-level rows all changed."""
    g = np.random.default_rng(3)
    x = g.standard_normal((4, 4, 4, 3))  # [patches, 4, 4, C]
    x[:, :, 2:] = g.standard_normal(3)  # the right half padded: its 2x2 blocks constant
    w = g.standard_normal((12, 8))

    def fold(v, transposed):  # [N, 4, 4, C] -> [N, 2, 2, 2*2*C], neighbours (h, w)- or (w, h)-major
        b = v.reshape(4, 2, 2, 2, 2, 3).transpose(0, 1, 3, 2, 4, 5)  # [N, H, W, fh, fw, C]
        if transposed:
            b = b.transpose(0, 1, 2, 4, 3, 5)
        return np.tanh(b.reshape(4, 2, 2, 12) @ w)  # [N, 2, 2, 8]

    f = {g.name: g for g in explain(fold(x, False), fold(x, True), noise=1e-6, inputs={"0": x})}["reordered_input"]
    assert f.evidence["block"] == [2, 2] and f.evidence["rows"] == [0, 1, 2, 3] and f.evidence["exact_units"] == 8
    assert "dims 1<->2 swapped" in f.evidence["transforms"] and "within each 2x2 block" in f.summary


def test_only_padding_exact_is_said_to_be_weak():
    """Exact units that are all constant along the reordered dims (identical padded patches) say only
    that the fault spared them: a fault on the real rows alone (zeroed, noised) fits that as well, so
    the finding says so; a symmetric non-constant patch left exact is evidence of the order itself."""
    g = np.random.default_rng(0)
    x = g.standard_normal((12, 2, 2, 3))
    x[8:] = g.standard_normal(3)  # padded patches: one value per channel
    r = _module()(x)
    for c in (np.concatenate([np.zeros_like(r[:8]), r[8:]]), r + np.where(np.arange(12)[:, None] < 8, 0.1, 0.0)):
        names = [h.name for h in explain(r, c, noise=1e-6, inputs={"0": x})]
        f = {h.name: h for h in explain(r, c, noise=1e-6, inputs={"0": x})}.get("reordered_input")
        assert f is None or (f.evidence["weak"] and "any fault that spares" in f.summary)
        assert "zeroed" not in names or names.index("zeroed") < names.index("reordered_input")  # weak: after
    f = _explain(x, x.transpose(0, 2, 1, 3))["reordered_input"]
    assert f.evidence["weak"]
    xs = _patches(symmetric=(2,))
    assert not _explain(xs, xs.transpose(0, 2, 1, 3))["reordered_input"].evidence["weak"]
