"""Optimizers as update recurrences: Adam and SGD step by step against numpy, clipping,
learning-rate annealing, updates along an inner dim, final parameters, a fitted regression."""

import numpy as np
import pytest

import timerl as tl
from timerl.ir.ops import Op
from test_grad_util import ALL_BACKENDS, BACKENDS, compile_or_skip

rng = np.random.default_rng(3)
N, D = 6, 3


def np_adam(w, grads_fn, n, lr, b1=0.9, b2=0.999, eps=1e-8, clip=None, lr_fn=None):
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    ws = [w.copy()]
    for k in range(n):
        g = grads_fn(k, w)
        if clip is not None:
            norm = np.sqrt(sum(np.sum(x * x) for x in [g]))
            g = g * min(1.0, clip / (norm + 1e-6))
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        step = k + 1
        lr_k = lr_fn(k) if lr_fn else lr
        w = w - lr_k / (1 - b1 ** step) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** step) + eps)
        ws.append(w.copy())
    return ws


def regression(I, opt_fn, backend="reference", dtype="float64", inner=None):
    Xs = rng.normal(size=(I, N, D)).astype(dtype)
    w_true = np.array([1.0, -2.0, 0.5])
    ys = (Xs @ w_true).astype(dtype)
    dims = "i k" if inner else "i"
    prog = tl.Program(dims)
    got, final = {}, {}
    with prog:
        i = prog.dims[0]
        dom = prog.dims
        w = tl.nn.Parameter((D,), domain=dom, init=np.zeros(D), dtype=dtype, name="w")
        x = tl.tensor(Xs, (i,), name="X")
        y = tl.tensor(ys, (i,), name="y")
        loss = ((x @ w - y) ** 2).mean()
        opt = opt_fn([w], prog)
        opt.step(loss, dim=prog.dims[1] if inner else None)
        tl.sink(w, lambda v, p: got.__setitem__(tuple(p.values()), v.copy()))
        tl.sink(opt.final(w), lambda v, p: final.__setitem__("w", v.copy()))
    bounds = {"I": I} if not inner else {"I": I, "K": inner}
    compile_or_skip(prog, bounds, backend).run()
    return Xs, ys, got, final["w"]


def grad_fn(Xs, ys):
    return lambda k, w: 2 * Xs[k].T @ (Xs[k] @ w - ys[k]) / N


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_adam_equals_numpy_step_by_step(backend):
    I = 6
    Xs, ys, got, final = regression(I, lambda ps, prog: tl.optim.Adam(ps, lr=0.1), backend)
    want = np_adam(np.zeros(D), grad_fn(Xs, ys), I, 0.1)
    for k in range(I):
        np.testing.assert_allclose(got[(k,)], want[k], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(final, want[I], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adam_clipping_and_linear_schedule(backend):
    I = 5

    def make(ps, prog):
        lr = tl.optim.linear_schedule(0.2, prog.dims[0], dtype="float64")
        return tl.optim.Adam(ps, lr=lr, betas=(0.8, 0.99), eps=1e-5, max_grad_norm=0.5)

    Xs, ys, got, final = regression(I, make, backend)
    want = np_adam(np.zeros(D), grad_fn(Xs, ys), I, None, b1=0.8, b2=0.99, eps=1e-5, clip=0.5,
                   lr_fn=lambda k: 0.2 * (1 - k / I))
    for k in range(I):
        np.testing.assert_allclose(got[(k,)], want[k], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(final, want[I], rtol=1e-10, atol=1e-12)


def test_sgd_step_by_step():
    I = 4
    Xs, ys, got, final = regression(I, lambda ps, prog: tl.optim.SGD(ps, lr=0.05))
    w = np.zeros(D)
    g = grad_fn(Xs, ys)
    for k in range(I):
        np.testing.assert_allclose(got[(k,)], w, rtol=1e-12, atol=1e-12)
        w = w - 0.05 * g(k, w)
    np.testing.assert_allclose(final, w, rtol=1e-12, atol=1e-12)


def test_inner_dim_updates_carry_over_iterations():
    """Parameters over (i, k): K updates per iteration, p[i, 0] = p[i - 1, K]; Adam's step count
    runs across iterations. The loss at (i, k) reads the data of iteration i."""
    I, K = 3, 2
    Xs, ys, got, final = regression(I, lambda ps, prog: tl.optim.Adam(ps, lr=0.1), inner=K)
    g = grad_fn(Xs, ys)
    want = np_adam(np.zeros(D), lambda n, w: g(n // K, w), I * K, 0.1)
    for a in range(I):
        for b in range(K):
            np.testing.assert_allclose(got[(a, b)], want[a * K + b], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(final, want[I * K], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_regression_converges_with_adam(backend):
    """A regression with an MLP-free linear layer (float32) fitted by Adam: the loss falls."""
    I = 150
    Xs = rng.normal(size=(I, 16, 4)).astype("float32")
    w_true = rng.normal(size=(4, 2)).astype("float32")
    ys = Xs @ w_true + 0.5
    prog = tl.Program("i")
    (i,) = prog.dims
    losses, final = {}, {}
    with prog:
        lin = tl.nn.Linear(4, 2, domain=(i,), seed=0)
        loss = ((lin(tl.tensor(Xs, (i,))) - tl.tensor(ys, (i,))) ** 2).mean()
        opt = tl.optim.Adam(lin.parameters(), lr=0.05)
        opt.step(loss)
        tl.sink(loss, lambda v, p: losses.__setitem__(p["i"], float(v)))
        tl.sink([opt.final(p) for p in lin.parameters()], lambda v, p: final.__setitem__("p", v))
    compile_or_skip(prog, {"I": I}, backend).run()
    assert losses[I - 1] < 1e-2 * losses[0]
    np.testing.assert_allclose(final["p"][0], w_true, atol=0.05)
    np.testing.assert_allclose(final["p"][1], 0.5, atol=0.05)


def test_update_nodes_are_roots():
    prog = tl.Program("i")
    (i,) = prog.dims
    with prog:
        w = tl.nn.Parameter((2,), domain=(i,), init=np.ones(2), dtype="float64")
        tl.optim.SGD([w], lr=0.1).step((w * w).sum())
    roots = [n for n in prog.pdg.roots() if prog.pdg.rec(n).op is not Op.SINK]
    assert len(roots) == 1 and prog.param_updates == [(w.nid, roots[0])]
    # no sink: the update is still computed (compile succeeds and demands it)
    exe = prog.compile({"I": 3}, backend="reference")
    assert any(n == roots[0] for n, _ in exe.order)


def test_optimizer_errors():
    prog = tl.Program("i k")
    i, k = prog.dims
    with prog:
        w = tl.nn.Parameter((2,), domain=(i, k), dtype="float64", name="w")
        with pytest.raises(tl.CompileError, match="dim=k"):
            tl.optim.SGD([w], lr=0.1).step((w * w).sum())
        with pytest.raises(tl.CompileError, match="no update"):
            tl.optim.final(w)
        x = tl.tensor(np.ones((2, 2)), (i,))
        with pytest.raises(tl.CompileError, match="not a parameter"):
            tl.optim.SGD([x], lr=0.1)


def test_adjoints_inside_the_update_loop_need_no_zero_branch():
    """The loss at (i, k) reads parameters that also have the point k = K (their values after the
    last update), so the loss and what it computes have that point too, where no gradient flows.
    Only a requested gradient must be zero there; every other adjoint is read only at the points
    that reach the loss, so it is its consumer's vjp as it is, with no placeholder per backward op
    (PPO's backward pass was dozens of one-op statements). Values: the test above and the
    optimizer tests on every backend; here, the reference executor against numpy."""
    I, K = 2, 3
    Xs, ys = rng.normal(size=(I, N, D)), rng.normal(size=(I, N))
    prog = tl.Program("i k")
    i, k = prog.dims
    got = {}
    with prog:
        w = tl.nn.Parameter((D,), domain=(i, k), init=np.full(D, 0.1), dtype="float64", name="w")
        x = tl.tensor(Xs, (i,), name="X")
        y = tl.tensor(ys, (i,), name="y")
        loss = (tl.tanh(x @ w - y) ** 2).mean()
        tl.optim.SGD([w], lr=0.5).step(loss, dim=k)
        tl.sink(w, lambda v, p: got.__setitem__((p["i"], p["k"]), v.copy()))
    pdg = prog.pdg
    merges = sorted(pdg.rec(n).name.split(" (")[0] for n in pdg.nodes
                    if pdg.rec(n).op is Op.MERGE and n != w.nid)
    assert merges == ["sgd.grad(w)"], merges  # before: one more per op between w and the loss
    prog.compile({"I": I, "K": K}, backend="reference").run()
    w_np = np.full(D, 0.1)
    for a in range(I):
        for b in range(K):
            np.testing.assert_allclose(got[(a, b)], w_np, rtol=1e-12, atol=1e-14)
            z = Xs[a] @ w_np - ys[a]
            w_np = w_np - 0.5 * Xs[a].T @ (2 * np.tanh(z) * (1 - np.tanh(z) ** 2)) / N
