"""Every op of API.md "Operations" against numpy, point by point on the reference executor."""

import numpy as np
import pytest

import timerl as tl
from programs.collect import Collect

rng = np.random.default_rng(0)
T_ = 3


def pointwise(fn, *arrays, spatial=()):
    """Run ``fn`` on tensors over domain (t,) made from ``arrays`` (leading axis t) and
    on tensors of domain () made from ``spatial``; return the per-point outputs."""
    prog = tl.Program("t")
    (t,) = prog.dims
    c = Collect()
    with prog:
        xs = [tl.tensor(a, (t,), name=f"x{k}") for k, a in enumerate(arrays)]
        ys = [tl.tensor(a, (), name=f"s{k}") for k, a in enumerate(spatial)]
        out = fn(*xs, *ys)
        tl.sink(out, c("y"))
    prog.compile({"T": T_}, backend="reference").run()
    return out, [c["y"][(k,)] for k in range(T_)]


def check(fn, npfn, *arrays, rtol=1e-5, atol=1e-6):
    out, got = pointwise(fn, *arrays)
    for k in range(T_):
        want = np.asarray(npfn(*[a[k] for a in arrays]))
        assert got[k].shape == want.shape, (got[k].shape, want.shape)
        assert tuple(out.shape) == want.shape
        assert got[k].dtype == out.dtype
        np.testing.assert_allclose(got[k], want, rtol=rtol, atol=atol)
    return out


A = rng.normal(size=(T_, 2, 3)).astype("float32")
B = rng.normal(size=(T_, 2, 3)).astype("float32")
P = (rng.random(size=(T_, 2, 3)) + 0.1).astype("float32")
V = rng.normal(size=(T_, 3)).astype("float32")
N = rng.integers(0, 3, size=(T_, 4)).astype("int64")


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**", "<", "<=", ">", ">=", "==", "!="])
def test_binary_operators(op):
    f = eval(f"lambda a, b: a {op} b")
    lhs = P if op == "**" else A
    out = check(f, f, lhs, B if op != "**" else A)
    assert out.dtype == (np.bool_ if op in "< <= > >= == !=".split() else np.float32)


def test_binary_broadcast_and_scalars():
    check(lambda a, v: a * v - 1.5, lambda a, v: a * v - np.float32(1.5), A, V)
    check(lambda a: 2 - a, lambda a: 2 - a, A)
    check(lambda a: 1 / (a + 3), lambda a: 1 / (a + 3), P)
    check(lambda a: -a, np.negative, A)
    check(lambda a: 2.0 ** a, lambda a: np.float32(2.0) ** a, A)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "relu", "sqrt", "abs", "sign", "sin", "cos"])
def test_unary_functions(name):
    special = {"sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0)}
    npf = special[name] if name in special else getattr(np, name)
    check(getattr(tl, name), npf, P if name in ("log", "sqrt") else A)


def test_where_clip_minimum_maximum_astype():
    check(lambda a, b: tl.where(a > b, a, b * 2), lambda a, b: np.where(a > b, a, b * 2), A, B)
    check(lambda a: tl.where(a > 0, a, 0.0), lambda a: np.where(a > 0, a, 0), A)
    check(lambda a: tl.clip(a, -0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), A)
    check(tl.minimum, np.minimum, A, B)
    check(tl.maximum, np.maximum, A, B)
    check(lambda a, b: tl.min(a, b), np.minimum, A, B)
    check(lambda a, b: tl.max(a, b), np.maximum, A, B)
    out = check(lambda a: a.astype("int32"), lambda a: a.astype("int32"), A * 3)
    assert out.dtype == np.int32
    out = check(lambda a: (a > 0).astype("float64"), lambda a: (a > 0).astype("float64"), A)
    assert out.dtype == np.float64


def test_logical_ops():
    check(lambda a, b: (a > 0) & (b > 0), lambda a, b: (a > 0) & (b > 0), A, B)
    check(lambda a, b: (a > 0) | (b > 0), lambda a, b: (a > 0) | (b > 0), A, B)
    check(lambda a: ~(a > 0), lambda a: ~(a > 0), A)


@pytest.mark.parametrize("fn", ["sum", "mean", "max", "min", "std", "argmax"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions(fn, axis, keepdims):
    if fn == "argmax" and isinstance(axis, tuple):
        return
    npf = getattr(np, fn)
    out = check(lambda a: getattr(a, fn)(axis=axis, keepdims=keepdims),
                lambda a: npf(a, axis=axis, keepdims=keepdims), A)
    assert out.dtype == (np.int64 if fn == "argmax" else np.float32)


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_logsumexp(axis):
    def ref(a):
        m = a.max(axis=axis, keepdims=True)
        out = np.log(np.exp(a - m).sum(axis=axis, keepdims=True)) + m
        return out.reshape(np.sum(a, axis=axis).shape)
    check(lambda a: a.logsumexp(axis=axis), ref, A * 30)


def test_reduction_dtypes():
    out = check(lambda n: n.sum(), lambda n: n.sum(), N)
    assert out.dtype == np.int64
    out = check(lambda n: n.mean(), lambda n: n.mean(), N)
    assert out.dtype == np.float32
    out = check(lambda a: (a > 0).sum(axis=1), lambda a: (a > 0).sum(axis=1), A)
    assert out.dtype == np.int64
    out = check(lambda n: n.astype("int32").sum(), lambda n: n.astype("int32").sum(), N)
    assert out.dtype == np.int64
    out = check(lambda n: n.astype("uint8").cumsum(), lambda n: n.astype("uint8").cumsum(), N)
    assert out.dtype == np.uint64
    out = check(lambda n: n.astype("int32").max(), lambda n: n.astype("int32").max(), N)
    assert out.dtype == np.int32


def test_scans():
    check(lambda a: a.cumsum(axis=1), lambda a: np.cumsum(a, axis=1), A)
    check(lambda a: a.cumsum(), lambda a: np.cumsum(a, axis=0), A)

    def dsum(a, g, axis):
        a = np.moveaxis(a, axis, 0)
        return sum(g**k * a[k] for k in range(len(a)))

    def dcum(a, g, axis):
        a = np.moveaxis(a, axis, 0)
        out = np.stack([dsum(a[k:], g, 0) for k in range(len(a))])
        return np.moveaxis(out, 0, axis)

    check(lambda a: a.discounted_sum(0.9), lambda a: dsum(a, 0.9, 0), A)
    check(lambda a: a.discounted_sum(0.5, axis=1), lambda a: dsum(a, 0.5, 1), A)
    check(lambda a: a.discounted_cumsum(0.9, axis=-1), lambda a: dcum(a, 0.9, 1), A)
    check(lambda a: a.discounted_cumsum(0.7), lambda a: dcum(a, 0.7, 0), A)
    G = np.array([0.5, 0.9, 0.99], "float32")
    check(lambda a, g: a.discounted_sum(g, axis=1), lambda a, g: dsum(a, g, 1), A, G)


@pytest.mark.parametrize(
    "sa, sb",
    [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((5, 2, 3), (5, 3, 4)),
     ((1, 2, 3), (4, 3, 2))],
)
def test_matmul(sa, sb):
    a = rng.normal(size=(T_,) + sa).astype("float32")
    b = rng.normal(size=(T_,) + sb).astype("float32")
    check(lambda x, y: x @ y, np.matmul, a, b)
    check(tl.matmul, np.matmul, a, b)


def test_matmul_with_parameter_of_smaller_domain():
    w = rng.normal(size=(3, 4)).astype("float32")
    _, got = pointwise(lambda x, w: tl.tanh(x @ w), A, spatial=(w,))
    for k in range(T_):
        np.testing.assert_allclose(got[k], np.tanh(A[k] @ w), rtol=1e-5)


def test_movement():
    check(lambda a: a.reshape(3, 2), lambda a: a.reshape(3, 2), A)
    check(lambda a: a.reshape((-1,)), lambda a: a.reshape(-1), A)
    check(lambda a: a.transpose(), lambda a: a.T, A)
    check(lambda a: a.T, lambda a: a.T, A)
    check(lambda a: a.reshape(1, 2, 3).permute(2, 0, 1), lambda a: a.reshape(1, 2, 3).transpose(2, 0, 1), A)
    check(lambda v: v.expand(4, 3), lambda v: np.broadcast_to(v, (4, 3)), V)
    check(lambda v: v.broadcast_to((2, 3)), lambda v: np.broadcast_to(v, (2, 3)), V)
    check(lambda a: tl.broadcast_to(a.reshape(2, 1, 3), (2, 5, 3)), lambda a: np.broadcast_to(a[:, None], (2, 5, 3)), A)
    check(lambda a, b: tl.concat([a, b], axis=1), lambda a, b: np.concatenate([a, b], axis=1), A, B)
    check(lambda a, b: tl.concat([a, b]), lambda a, b: np.concatenate([a, b]), A, B)
    check(lambda a, b: tl.stack([a, b]), lambda a, b: np.stack([a, b]), A, B)
    check(lambda a, b: tl.stack([a, b], axis=-1), lambda a, b: np.stack([a, b], axis=-1), A, B)
    check(lambda a: a.unsqueeze(1).squeeze(), lambda a: a, A)
    check(lambda a: a.unsqueeze(-1), lambda a: a[..., None], A)
    check(lambda a: a.reshape(2, 1, 3).squeeze(1), lambda a: a, A)
    check(lambda a: tl.squeeze(tl.unsqueeze(a, 0), 0), lambda a: a, A)


def test_concat_promotes_dtypes():
    out = check(lambda a, n: tl.concat([a.reshape(-1), n]),
                lambda a, n: np.concatenate([a.reshape(-1), n]).astype("float32"), A, N)
    assert out.dtype == np.float32 and out.shape == (10,)


def test_gathers():
    check(lambda v, n: v.take(n, axis=0), lambda v, n: np.take(v, n, axis=0), V, N)
    check(lambda a, n: a.take(n, axis=1), lambda a, n: np.take(a, n, axis=1), A, N)
    check(lambda a, n: a.take(n), lambda a, n: np.take(a, n), A, N)
    check(lambda v, n: v.spatial[n], lambda v, n: v[n], V, N)
    check(lambda n: tl.one_hot(n, 3), lambda n: np.eye(3, dtype="float32")[n], N)
    idx = rng.integers(0, 3, size=(T_, 2, 1)).astype("int64")
    check(lambda a, j: a.take_along_axis(j, axis=1), lambda a, j: np.take_along_axis(a, j, axis=1), A, idx)
    check(lambda a, j: tl.take_along_axis(a, j, 1), lambda a, j: np.take_along_axis(a, j, axis=1), A, idx)


def test_take_out_of_range_is_runtime_fault():
    bad = N.copy()
    bad[1, 2] = 7
    with pytest.raises(tl.RuntimeFault, match=r"t = 1"):
        pointwise(lambda v, n: v.take(n, axis=0), V, bad)


def test_ops_on_dynamic_shapes():
    X = rng.normal(size=(6, 2)).astype("float32")
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    c = Collect()
    w = rng.normal(size=(2, 3)).astype("float32")
    with prog:
        x = tl.tensor(X, (t,), name="x")
        win = x[t:tl.min(t + 3, T)]  # (dynamic, 2)
        tl.sink((win @ tl.const(w)).sum(axis=0), c("mm"))
        tl.sink(tl.concat([win, win], axis=0).mean(axis=0), c("cat"))
        tl.sink(win.transpose().sum(axis=1), c("tr"))
        tl.sink((win * 2 + win).reshape(-1).sum(), c("rs"))
        tl.sink(win.spatial[:, 0].cumsum(), c("cs"))
        tl.sink(win.discounted_cumsum(0.5).spatial[0], c("dc"))
        tl.sink(tl.stack([win, win], axis=1).sum(axis=(0, 1)), c("st"))
        tl.sink(win.unsqueeze(0).squeeze(0).max(axis=0), c("sq"))
    prog.compile({"T": 6}, backend="reference").run()
    for k in range(6):
        wn = X[k:min(k + 3, 6)]
        np.testing.assert_allclose(c["mm"][(k,)], (wn @ w).sum(axis=0), rtol=1e-5)
        np.testing.assert_allclose(c["cat"][(k,)], wn.mean(axis=0), rtol=1e-5)
        np.testing.assert_allclose(c["tr"][(k,)], wn.T.sum(axis=1), rtol=1e-5)
        np.testing.assert_allclose(c["rs"][(k,)], 3 * wn.sum(), rtol=1e-5)
        np.testing.assert_allclose(c["cs"][(k,)], np.cumsum(wn[:, 0]), rtol=1e-5)
        np.testing.assert_allclose(c["dc"][(k,)], sum(0.5**j * wn[j] for j in range(len(wn))), rtol=1e-5)
        np.testing.assert_allclose(c["st"][(k,)], 2 * wn.sum(axis=0), rtol=1e-5)
        np.testing.assert_allclose(c["sq"][(k,)], wn.max(axis=0), rtol=1e-5)


def test_detach_is_identity():
    check(lambda a: a.detach() * 2, lambda a: a * 2, A)


def test_arange_const_and_ones():
    _, got = pointwise(lambda a: a + tl.arange(3) + tl.const(np.ones((2, 3), "float32")) + tl.ones(3), A)
    for k in range(T_):
        np.testing.assert_allclose(got[k], A[k] + np.arange(3) + 2, rtol=1e-6)


# -- dtype promotion -------------------------------------------------------------------------


def _dtype(fn):
    prog = tl.Program("t")
    with prog:
        return fn(prog.dims[0]).dtype


@pytest.mark.parametrize(
    "fn, want",
    [
        (lambda t: tl.const(np.arange(3, dtype="int64")) * 0.5, np.float32),
        (lambda t: tl.const(np.arange(3, dtype="int32")) + 1.5, np.float32),
        (lambda t: tl.const(np.array([True])) * 2.0, np.float32),
        (lambda t: tl.const(np.array([True])) & tl.const(np.array([False])), np.bool_),
        (lambda t: tl.const(np.array([True])) + 1, np.int64),
        (lambda t: tl.const(np.arange(3, dtype="int32")) + 1, np.int32),
        (lambda t: tl.const(np.ones(3, "float32")) * 2, np.float32),
        (lambda t: tl.const(np.ones(3, "float32")) * 2.0, np.float32),
        (lambda t: tl.const(np.ones(3, "float64")) * 2.0, np.float64),
        (lambda t: tl.const(np.ones(3, "float16")) * 2.0, np.float16),
        (lambda t: tl.const(np.ones(3, "float32")) + tl.const(np.ones(3, "float64")), np.float64),
        (lambda t: tl.const(np.ones(3, "int32")) + tl.const(np.ones(3, "float32")), np.float32),
        (lambda t: tl.const(np.ones(3, "int64")) * tl.const(np.ones(3, "float16")), np.float16),
        (lambda t: tl.const(np.ones(3, "int64")) + tl.const(np.ones(3, "float64")), np.float64),
        (lambda t: tl.const(np.ones(3, "int64")) + tl.const(np.ones(3, "int32")), np.int64),
        (lambda t: tl.const(np.ones(3, "uint8")) + 1, np.uint8),
        (lambda t: tl.const(np.ones(3, "int64")) / 2, np.float32),
        (lambda t: tl.const(1.5), np.float32),
        (lambda t: tl.const(2), np.int64),
        (lambda t: tl.const(True), np.bool_),
        (lambda t: tl.const(np.array([1.0])), np.float64),
        (lambda t: tl.dim_value(t) * 0.5, np.float32),
        (lambda t: tl.dim_value(t) + 1, np.int64),
        (lambda t: tl.exp(tl.dim_value(t)), np.float32),
        (lambda t: tl.zeros(3), np.float32),
        (lambda t: tl.random.uniform((2,)), np.float32),
    ],
)
def test_dtype_promotion(fn, want):
    assert _dtype(fn) == np.dtype(want)


def test_tensor_keeps_data_dtype():
    for dt in ("bool", "float64", "int32", "float32"):
        assert _dtype(lambda t: tl.tensor(np.zeros(3, dt), (t,))) == np.dtype(dt)


def test_shape_error_names_both_operands():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        a = tl.tensor(np.zeros((3, 2), "float32"), (t,), name="alpha")
        b = tl.tensor(np.zeros((3, 3), "float32"), (t,), name="beta")
        with pytest.raises(tl.ShapeError, match=r"alpha.*beta"):
            a + b
        with pytest.raises(tl.ShapeError, match=r"alpha.*beta"):
            a @ b
        with pytest.raises(tl.ShapeError, match=r"alpha.*beta"):
            tl.where(a > 0, a, b)
        with pytest.raises(tl.ShapeError, match=r"alpha.*beta"):
            tl.stack([a, b])
        with pytest.raises(tl.ShapeError, match=r"alpha"):
            a.reshape(5)
        with pytest.raises(tl.ShapeError, match=r"alpha"):
            a.sum(axis=2)
    assert issubclass(tl.ShapeError, ValueError)


def test_mod_and_floordiv():
    check(lambda n: n % 2, lambda n: n % 2, N)
    check(lambda n: n // 2, lambda n: n // 2, N)
    check(lambda a: a % 0.5, lambda a: a % np.float32(0.5), A)
    check(lambda a: 7 // (a * 0 + 2), lambda a: 7 // (a * 0 + 2), A)


def test_empty_read_keeps_the_producers_spatial_shape():
    X = np.arange(12, dtype="float32").reshape(2, 6)
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    c = Collect()
    with prog:
        x = tl.tensor(X, (i, t), name="x")
        col = x[0:I, t]  # shape (I,)
        tl.sink(col[0:t], c("prefix"))
    prog.compile({"I": 2, "T": 6}, backend="reference").run()
    assert c["prefix"][(0,)].shape == (0, 2)
    np.testing.assert_array_equal(c["prefix"][(3,)], X[:, :3].T)


def test_numpy_failure_at_run_time_is_runtime_fault():
    with pytest.raises(tl.RuntimeFault, match=r"binary in tensor 'test_api_ops.py:\d+' failed at t = 0.*negative"):
        pointwise(lambda n: n ** -1, N)
