"""The indexing table of API.md: structure (domain, shape) first, then values vs numpy."""

import numpy as np
import pytest

import timerl as tl
from timerl.ir.ops import Op
from programs.collect import Collect

I_, T_ = 3, 9
X = np.arange(I_ * T_ * 2, dtype="float32").reshape(I_, T_, 2) * 0.5 - 3.0


def build(fn, data=X, dims="i t"):
    prog = tl.Program(dims)
    i, t = prog.dims
    I, T = prog.bounds
    c = Collect()
    with prog:
        x = tl.tensor(data, domain=(i, t), name="x")
        y = fn(x, i, t, I, T)
        tl.sink(y, c("y"))
    return prog, y, c


def values(fn, data=X, bounds=None):
    prog, y, c = build(fn, data)
    prog.compile(bounds or {"I": data.shape[0], "T": data.shape[1]}, backend="reference").run()
    return y, c["y"]


def dims_of(y):
    return tuple(d.name for d in y.domain)


def test_structure_current_point():
    prog, y, _ = build(lambda x, i, t, I, T: x)
    i, t = prog.dims
    x = y
    for z in (x, x[i, t], x[i]):
        assert dims_of(z) == ("i", "t") and z.shape == (2,)
    assert x[i, t] is not None and x[i].nid == x.nid  # no access node for the trivial key
    assert len(prog.pdg) == 2  # data + sink


@pytest.mark.parametrize(
    "key, dims, shape",
    [
        (lambda i, t, I, T: (i, t - 1), ("i", "t"), (2,)),
        (lambda i, t, I, T: (i, t + 2), ("i", "t"), (2,)),
        (lambda i, t, I, T: (i, tl.min(t + 5, T - 1)), ("i", "t"), (2,)),
        (lambda i, t, I, T: (i, 0), ("i",), (2,)),
        (lambda i, t, I, T: (i, T - 1), ("i",), (2,)),
        (lambda i, t, I, T: (i, slice(0, T)), ("i",), ("T", 2)),
        (lambda i, t, I, T: (i, slice(2, 7)), ("i",), (5, 2)),
        (lambda i, t, I, T: (i, slice(0, t + 1)), ("i", "t"), ("dyn", 2)),
        (lambda i, t, I, T: (i, slice(t, T)), ("i", "t"), ("dyn", 2)),
        (lambda i, t, I, T: (i, slice(t, tl.min(t + 3, T))), ("i", "t"), ("dyn", 2)),
        (lambda i, t, I, T: (slice(0, I), t), ("t",), ("I", 2)),
    ],
)
def test_structure_table(key, dims, shape):
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        x = tl.tensor(X, domain=(i, t), name="x")
        y = x[key(i, t, I, T)]
    assert dims_of(y) == dims
    assert len(y.shape) == len(shape)
    for got, want in zip(y.shape, shape):
        if want == "dyn":
            assert not isinstance(got, int)
            assert {s.name for s in got.free_symbols} & {"t"}
        elif isinstance(want, str):
            assert str(got) == want
        else:
            assert got == want
    assert y.node.op is Op.ACCESS and len(y.prog.pdg.inputs(y.nid)) == 1


def test_slice_shapes_with_same_start_stop_are_equal():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        x = tl.tensor(X, domain=(i, t), name="x")
        a, b = x[i, t:T], x[i, t:T]
        s = a + b  # equal symbolic lengths broadcast
    assert s.shape == a.shape


def test_values_shift_with_branch():
    def f(x, i, t, I, T):
        y = tl.placeholder((2,), "float32", (i, t), name="y")
        y[i, 0] = tl.zeros((2,))
        y[i, t] = x[i, t - 1]
        return y
    _, got = values(f)
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, b - 1] if b > 0 else 0)
    assert len(got) == I_ * T_


def test_values_lookahead_with_branch():
    def f(x, i, t, I, T):
        y = tl.placeholder((2,), "float32", (i, t), name="y")
        y[t >= T - 2] = tl.ones((2,))
        y[i, t] = x[i, t + 2]
        return y
    _, got = values(f)
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, b + 2] if b < T_ - 2 else 1)


def test_values_clamped_lookahead():
    _, got = values(lambda x, i, t, I, T: x[i, tl.min(t + 5, T - 1)])
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, min(b + 5, T_ - 1)])


@pytest.mark.parametrize("which", ["first", "last"])
def test_values_constant_point(which):
    _, got = values(lambda x, i, t, I, T: x[i, 0] if which == "first" else x[i, T - 1])
    assert sorted(got) == [(a,) for a in range(I_)]
    for (a,), v in got.items():
        np.testing.assert_array_equal(v, X[a, 0 if which == "first" else T_ - 1])


def test_values_constant_slices():
    _, got = values(lambda x, i, t, I, T: x[i, 0:T])
    for (a,), v in got.items():
        np.testing.assert_array_equal(v, X[a])
    _, got = values(lambda x, i, t, I, T: x[i, 2:7])
    for (a,), v in got.items():
        np.testing.assert_array_equal(v, X[a, 2:7])


def test_values_prefix_slice():
    _, got = values(lambda x, i, t, I, T: x[i, 0:t + 1])
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, 0:b + 1])


def test_values_suffix_slice():
    _, got = values(lambda x, i, t, I, T: x[i, t:T])
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, b:])


def test_values_window_slice():
    _, got = values(lambda x, i, t, I, T: x[i, t:tl.min(t + 4, T)])
    assert len(got) == I_ * T_
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, b:min(b + 4, T_)])


def test_values_outer_slice():
    _, got = values(lambda x, i, t, I, T: x[0:I, t])
    assert sorted(got) == [(b,) for b in range(T_)]
    for (b,), v in got.items():
        np.testing.assert_array_equal(v, X[:, b])


def test_spatial_entries_after_domain_entries():
    _, got = values(lambda x, i, t, I, T: x[i, t, 1])
    for (a, b), v in got.items():
        assert v.shape == () and v == X[a, b, 1]
    _, got = values(lambda x, i, t, I, T: x[i, 0:T, :, 0])
    for (a,), v in got.items():
        np.testing.assert_array_equal(v, X[a, :, 0])


def test_missing_trailing_entries_mean_current_point():
    prog, _, _ = build(lambda x, i, t, I, T: x)
    i, t = prog.dims
    _, got = values(lambda x, i, t, I, T: x[i] * 2)
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, b] * 2)
    _, got = values(lambda x, i, t, I, T: x[i - 0] + x[0:3][1])
    assert len(got) == I_ * T_


def test_entry_using_wrong_dim_is_shape_error():
    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        r = tl.tensor(X, domain=(i, t), name="rew")
        with pytest.raises(tl.ShapeError, match=r"rew.*entry 0 is for dim i.*uses t"):
            r[t]
        with pytest.raises(tl.ShapeError, match="rew"):
            r[i, i]


def test_spatial_indexer():
    _, got = values(lambda x, i, t, I, T: x.spatial[1])
    for (a, b), v in got.items():
        assert v == X[a, b, 1]
    _, got = values(lambda x, i, t, I, T: x[i, 0:T].spatial[2:5, ::-1])
    for (a,), v in got.items():
        np.testing.assert_array_equal(v, X[a, 2:5, ::-1])
    _, got = values(lambda x, i, t, I, T: x[i, 0:T].spatial[:, None, 0])
    for (a,), v in got.items():
        np.testing.assert_array_equal(v, X[a, :, None, 0])


def test_spatial_index_keeps_symbolic_axis_whole_or_int():
    _, got = values(lambda x, i, t, I, T: x[i, t:T].spatial[:, 1] * 1)
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, b:, 1])
    _, got = values(lambda x, i, t, I, T: x[i, 0:T].spatial[..., 0].spatial[3])
    for (a,), v in got.items():
        assert v == X[a, 3, 0]
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        x = tl.tensor(X, domain=(i, t), name="x")
        with pytest.raises(tl.ShapeError, match="symbolic axis.*step 1"):
            x[i, t:T].spatial[::2]
        with pytest.raises(tl.ShapeError, match="out of range"):
            x[i, t:T].spatial[:, 2]


def test_spatial_slice_of_symbolic_axis():
    _, got = values(lambda x, i, t, I, T: x[i, t:T].spatial[1:3])
    for (a, b), v in got.items():
        np.testing.assert_array_equal(v, X[a, b:][1:3])
    _, got = values(lambda x, i, t, I, T: x[i, t:T].spatial[-2:, 0].sum())
    for (a, b), v in got.items():
        np.testing.assert_allclose(v, X[a, b:][-2:, 0].sum())


def test_spatial_int_out_of_range_on_symbolic_axis_is_runtime_fault():
    prog, _, _ = build(lambda x, i, t, I, T: x[i, t:T].spatial[2])
    with pytest.raises(tl.RuntimeFault, match=r"t = 7"):
        prog.compile({"I": I_, "T": T_}, backend="reference").run()


def test_empty_domain_tensor_indexes_spatially():
    prog = tl.Program("t")
    c = Collect()
    with prog:
        w = tl.const(np.arange(6.0).reshape(2, 3))
        tl.sink(w[1, 0:2], c("w"))
    prog.compile({}, backend="reference").run()
    np.testing.assert_array_equal(c["w"][()], [3.0, 4.0])


# -- empty slices -------------------------------------------------------------------------


def test_empty_prefix_sum_and_mean():
    _, got = values(lambda x, i, t, I, T: x[i, 0:t].sum(axis=0))
    for (a, b), v in got.items():
        np.testing.assert_allclose(v, X[a, :b].sum(axis=0))
    _, got = values(lambda x, i, t, I, T: x[i, 0:t].mean())
    for (a, b), v in got.items():
        if b == 0:
            assert np.isnan(v)
        else:
            np.testing.assert_allclose(v, X[a, :b].mean(), rtol=1e-6)


def test_empty_slice_discounted_and_cumsum():
    _, got = values(lambda x, i, t, I, T: x[i, 0:t].discounted_sum(0.5))
    for (a, b), v in got.items():
        np.testing.assert_allclose(v, sum(0.5**k * X[a, k] for k in range(b)) if b else np.zeros(2), rtol=1e-6)
    _, got = values(lambda x, i, t, I, T: x[i, 0:t].cumsum(axis=0))
    for (a, b), v in got.items():
        assert v.shape == (b, 2)
        np.testing.assert_allclose(v, np.cumsum(X[a, :b], axis=0), rtol=1e-6)


@pytest.mark.parametrize("fn", ["max", "min", "argmax"])
def test_empty_slice_max_is_runtime_fault(fn):
    prog, _, _ = build(lambda x, i, t, I, T: getattr(x[i, 0:t], fn)(axis=0))
    exe = prog.compile({"I": I_, "T": T_}, backend="reference")
    with pytest.raises(tl.RuntimeFault, match=r"t = 0"):
        exe.run()


def test_slice_empty_at_last_point():
    _, got = values(lambda x, i, t, I, T: x[i, t + 1:T].sum(axis=0))
    for (a, b), v in got.items():
        np.testing.assert_allclose(v, X[a, b + 1:].sum(axis=0), rtol=1e-6)
