"""Gradients through every indexing pattern of API.md and through recurrences, against
float64 central differences (the reverse access of each pattern comes from isl)."""

import numpy as np
import pytest

import timerl as tl
from test_grad_util import ALL_BACKENDS, BACKENDS, check_grad

rng = np.random.default_rng(2)
I_, T_ = 2, 4
B = {"I": I_, "T": T_}


def X(*shape):
    return rng.normal(size=(I_, T_) + shape)


def wsum(y):
    """Sum of y weighted per element (works for dynamic slice lengths too)."""
    return (y * y).sum() * 0.5 + (tl.tanh(y)).sum()


def check(build, backend="reference", shape=(3,), bounds=B, extra=None):
    data = {"x": (X(*shape), ("i", "t"))}
    data.update(extra or {})
    return check_grad(build, data, bounds, backend=backend)


PATTERNS = {
    # point shifts: the branch excludes the points outside x
    "t-1": lambda p, x, i, t, I, T: _ph(p, x, i, t, lambda: x[i, t - 1] * 2.0, first=True),
    "t+1": lambda p, x, i, t, I, T: _ph(p, x, i, t, lambda: x[i, t + 1] * x, last=True),
    "min(t+2,T-1)": lambda p, x, i, t, I, T: wsum(x[i, tl.min(t + 2, T - 1)] * x),
    "const_first": lambda p, x, i, t, I, T: wsum(x[i, 0] * 3.0 + x[i, T - 1]),
    "const_point_broadcast": lambda p, x, i, t, I, T: wsum(x * x[i, 0]),
    "const_slice": lambda p, x, i, t, I, T: wsum(x[i, 0:T] * 1.5),
    "const_slice_part": lambda p, x, i, t, I, T: wsum(x[i, 1:3].sum(axis=0) + x[i, 2:T]),
    "prefix": lambda p, x, i, t, I, T: wsum(x[i, 0:t + 1].sum(axis=0) * tl.dim_value(t).astype("float64")),
    "suffix": lambda p, x, i, t, I, T: wsum(x[i, t:T].discounted_sum(0.9)),
    "window": lambda p, x, i, t, I, T: wsum(x[i, t:tl.min(t + 2, T)].sum(axis=0) + x[i, t:tl.min(t + 2, T)].max()),
    "across_i": lambda p, x, i, t, I, T: wsum(x[0:I, t].mean(axis=0) * x[0:I, t].std(axis=0)),
    "both": lambda p, x, i, t, I, T: wsum(x[0:I, 0:T]),
    "prefix_mean": lambda p, x, i, t, I, T: wsum(x[i, 0:t + 1].mean(axis=0)),
}


def _ph(prog, x, i, t, value, first=False, last=False):
    y = tl.placeholder((3,), "float64", (i, t), name="y")
    T = prog.bound("T")
    if first:
        y[i, 0] = x * 0.5
    if last:
        y[i, T - 1] = x * 0.5
    y[i, t] = value()
    return wsum(y)



@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(PATTERNS))
def test_pattern(name, backend):
    def build(prog, xs):
        i, t = prog.dims
        I, T = prog.bounds
        return PATTERNS[name](prog, xs["x"], i, t, I, T)

    check(build, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tanh_recurrence_20_steps(backend):
    """h[t+1] = tanh(W h[t] + x[t]): the gradient is a backward recurrence over 20 steps."""
    W = rng.normal(size=(3, 3)) * 0.5

    def build(prog, xs):
        i, t = prog.dims
        x, w = xs["x"], xs["w"]
        h = tl.placeholder((3,), "float64", (i, t), name="h")
        h[i, 0] = tl.tanh(x)
        h[i, t + 1] = tl.tanh(h @ w + x)
        return (h * h).sum() + h.sum()

    data = {"x": (rng.normal(size=(1, 20, 3)), ("i", "t")), "w": (W, ())}
    check_grad(build, data, {"I": 1, "T": 20}, backend=backend)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_future_discounted_sum(backend):
    """g[t] = r[t] + γ g[t+1]: gradients w.r.t. r and γ-independent weights."""

    def build(prog, xs):
        i, t = prog.dims
        T = prog.bound("T")
        r = xs["r"] * xs["s"]
        g = tl.placeholder((), "float64", (i, t), name="g")
        g[i, T - 1] = r
        g[i, t] = r + 0.9 * g[i, t + 1]
        return (g * g).sum() + g[i, 0] * 2.0

    data = {"r": (rng.normal(size=(I_, 5)), ("i", "t")), "s": (rng.normal(size=(5,)), ("t",))}
    check_grad(build, data, {"I": I_, "T": 5}, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_reduction_loss(backend):
    """A loss over (i,) from constant slices of a per-step computation."""

    def build(prog, xs):
        i, t = prog.dims
        T = prog.bound("T")
        y = tl.tanh(xs["x"] @ xs["w"])
        return (y[i, 0:T] ** 2).mean() + y[i, 0:T].logsumexp()

    data = {"x": (X(3), ("i", "t")), "w": (rng.normal(size=(3, 2)), ())}
    check_grad(build, data, B, backend=backend)


def test_recurrence_with_condition_branch():
    """h[t > 0] = f(h[t - 1]): the value at t == 0 is never read, and never differentiated
    (it would read h[-1])."""

    def build(prog, xs):
        i, t = prog.dims
        x = xs["x"]
        h = tl.placeholder((3,), "float64", (i, t), name="h")
        h[t == 0] = x
        h[t > 0] = tl.tanh(h[i, t - 1] * 0.9 + x)
        return wsum(h)

    check(build)


def test_recurrence_across_iterations():
    """o[0, 0] = x0; o[i, 0] = o[i - 1, T]; o[i, t + 1] = f(o[i, t], x[i, t]): state carried over i."""

    def build(prog, xs):
        i, t = prog.dims
        T = prog.bound("T")
        o = tl.placeholder((3,), "float64", (i, t), name="o")
        o[0, 0] = xs["x0"]
        o[i, 0] = o[i - 1, T]
        o[i, t + 1] = tl.tanh(o * 0.8 + xs["x"])
        return wsum(o) + wsum(o[i, T]) * 0.5

    check(build, extra={"x0": (rng.normal(size=(3,)), ())})


def test_detach_stops_gradient():
    data = X(3)
    prog = tl.Program("i t")
    i, t = prog.dims
    got = {}
    with prog:
        x = tl.tensor(data, (i, t))
        (gx,) = tl.grad((x * x.detach()).sum(), [x])
        tl.sink(gx, lambda v, p: got.__setitem__(tuple(p.values()), v.copy()))
    prog.compile(B, backend="reference").run()
    assert len(got) == I_ * T_
    for (a, b), v in got.items():
        np.testing.assert_allclose(v, data[a, b])  # d/dx (x * c) = c, not 2x


def test_backward_and_grad_attribute():
    data = X(3)
    prog = tl.Program("i t")
    i, t = prog.dims
    got = {}
    with prog:
        x = tl.tensor(data, (i, t), requires_grad=True, name="x")
        loss = (x * x).sum()
        loss.backward()
        tl.sink(x.grad, lambda v, p: got.__setitem__(tuple(p.values()), v.copy()))
    prog.compile(B, backend="reference").run()
    for (a, b), v in got.items():
        np.testing.assert_allclose(v, 2 * data[a, b])


def test_grad_through_comparison_is_an_error():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        x = tl.tensor(np.ones((3, 2)), (t,), name="x")
        y = (x > 0).astype("float64") * x
        with pytest.raises(tl.CompileError, match="comparison gt.*detach"):
            tl.grad(y.sum(), [x])
        z = tl.where(x > 0, x, 0.0)  # a where condition is a stop: fine
        tl.grad(z.sum(), [x])


def test_grad_through_argmax_and_sampling_are_errors():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        x = tl.tensor(np.ones((3, 2)), (t,), name="x")
        with pytest.raises(tl.CompileError, match="argmax"):
            tl.grad(x.argmax().astype("float64") * 1.0, [x])
        a = tl.random.categorical(x)
        with pytest.raises(tl.CompileError, match="sampling"):
            tl.grad(a.astype("float64"), [x])
        # an index is a stop: the gradient flows into x only
        tl.grad(x.take(x.argmax(), axis=0).sum(), [x])


def test_backward_needs_scalar_loss_and_grad_before_backward():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        x = tl.tensor(np.ones((3, 2)), (t,), requires_grad=True, name="x")
        with pytest.raises(tl.ShapeError, match="shape"):
            x.backward()
        with pytest.raises(tl.CompileError, match="backward"):
            x.grad


def test_unreached_target_gets_zeros():
    prog = tl.Program("t")
    (t,) = prog.dims
    got = {}
    with prog:
        x = tl.tensor(np.ones((3, 2)), (t,), name="x")
        y = tl.tensor(np.ones((3,)), (t,), name="y")
        gx, gy = tl.grad((x * 2).sum(), [x, y])
        tl.sink([gx, gy], lambda v, p: got.__setitem__(p["t"], [a.copy() for a in v]))
    prog.compile({"T": 3}, backend="reference").run()
    for v in got.values():
        assert np.all(v[0] == 2) and np.all(v[1] == 0)


def test_graph_size_is_linear():
    """One backward op group per forward op and edge: no unrolling over points."""
    sizes = []
    for T in (4, 64):
        prog = tl.Program("i t")
        i, t = prog.dims
        with prog:
            x = tl.tensor(np.zeros((1, T, 3)), (i, t))
            h = tl.placeholder((3,), "float64", (i, t))
            h[i, 0] = x
            h[i, t + 1] = tl.tanh(h + x)
            n0 = prog.pdg.number_of_nodes()
            tl.grad(h.sum(), [x])
            sizes.append(prog.pdg.number_of_nodes() - n0)
    assert sizes[0] == sizes[1] < 60


def test_unsupported_gradient_names_the_tensor():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        x = tl.tensor(np.ones((3, 4)), (t,), name="x")
        g = tl.tensor(np.full(3, 0.9), (t,), name="gamma")
        y = x.discounted_cumsum(g, axis=0)
        with pytest.raises(tl.CompileError, match="discount"):
            tl.grad(y.sum(), [g])
        b = tl.tensor(np.ones((3, 4), bool), (t,), name="mask")
        with pytest.raises(tl.CompileError, match="comparison gt"):
            tl.grad((~(x > b.astype("float64"))).astype("float64").sum(), [x])


def test_backward_accumulates():
    data = X(3)
    prog = tl.Program("i t")
    i, t = prog.dims
    got = {}
    with prog:
        x = tl.tensor(data, (i, t), requires_grad=True, name="x")
        (x * x).sum().backward()
        (3.0 * x).sum().backward()
        tl.sink(x.grad, lambda v, p: got.__setitem__(tuple(p.values()), v.copy()))
    prog.compile(B, backend="reference").run()
    for (a, b), v in got.items():
        np.testing.assert_allclose(v, 2 * data[a, b] + 3.0)
