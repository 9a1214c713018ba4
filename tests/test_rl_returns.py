"""Returns, GAE and n-step returns with dones against plain numpy loops (reference executor)."""

import numpy as np
import pytest

import timerl as tl

I_, T_ = 2, 7
rng = np.random.default_rng(0)
R = rng.normal(size=(I_, T_)).astype("float32")
DONE = rng.random((I_, T_)) < 0.3
DONE[0, 2] = True
DONE[1, T_ - 1] = True
V = rng.normal(size=(I_, T_ + 1)).astype("float32")  # value with points t = 0..T


def np_returns(r, done, gamma):
    g, out = np.zeros(r.shape[0]), np.zeros(r.shape)
    for t in reversed(range(r.shape[1])):
        g = r[:, t] + gamma * (1 - done[:, t]) * g
        out[:, t] = g
    return out


def np_gae(r, v, done, gamma, lam, v_T):
    adv, out = np.zeros(r.shape[0]), np.zeros(r.shape)
    T = r.shape[1]
    for t in reversed(range(T)):
        v_next = v_T if t == T - 1 else v[:, t + 1]
        delta = r[:, t] + gamma * (1 - done[:, t]) * v_next - v[:, t]
        adv = delta + gamma * lam * (1 - done[:, t]) * adv
        out[:, t] = adv
    return out


def np_nstep(r, done, n, gamma, v=None, v_T=None):
    I, T = r.shape
    out = np.zeros(r.shape)
    for i in range(I):
        for t in range(T):
            m, g, alive = min(t + n, T), 0.0, 1.0
            for j in range(t, m):
                g += gamma ** (j - t) * alive * r[i, j]
                alive *= 1 - done[i, j]
            vm = 0.0
            if v is not None and (m < T or v.shape[1] > T):
                vm = v[i, m]
            elif m == T and v_T is not None:
                vm = v_T[i]
            out[i, t] = g + gamma ** (m - t) * alive * vm
    return out


def run(build, done_dtype=bool):
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    out = np.full((I_, T_), np.nan)
    with prog:
        r = tl.tensor(R, domain=(i, t), name="r")
        done = tl.tensor(DONE.astype(done_dtype), domain=(i, t), name="done")
        # a value over (i, t) with points 0..T, like a critic run on o
        vfull = tl.placeholder((), "float32", (i, t), name="v")
        vdata = tl.tensor(V[:, 1:], domain=(i, t), name="vdata")
        vfull[i, 0] = tl.tensor(V[:, 0], domain=(i,), name="v0")
        vfull[i, t + 1] = vdata
        vshort = tl.tensor(V[:, :T_], domain=(i, t), name="vshort")
        last = tl.tensor(V[:, T_], domain=(i,), name="last")
        g = build(r, done, vfull, vshort, last)
        tl.sink(g, lambda v, p: out.__setitem__((p["i"], p["t"]), v))
    prog.compile({"I": I_, "T": T_}, backend="reference").run()
    return out


@pytest.mark.parametrize("done_dtype", [bool, "float32"])
def test_discounted_returns(done_dtype):
    got = run(lambda r, d, *_: tl.rl.discounted_returns(r, d, 0.9), done_dtype)
    np.testing.assert_allclose(got, np_returns(R, DONE, 0.9), rtol=1e-5, atol=1e-5)


def test_gae_value_with_point_T():
    got = run(lambda r, d, v, vs, last: tl.rl.gae(r, v, d, 0.9, 0.8))
    np.testing.assert_allclose(got, np_gae(R, V, DONE, 0.9, 0.8, V[:, T_]), rtol=1e-5, atol=1e-5)


def test_gae_last_value():
    got = run(lambda r, d, v, vs, last: tl.rl.gae(r, vs, d, 0.9, 0.8, last_value=last))
    np.testing.assert_allclose(got, np_gae(R, V, DONE, 0.9, 0.8, V[:, T_]), rtol=1e-5, atol=1e-5)


def test_gae_no_bootstrap():
    got = run(lambda r, d, v, vs, last: tl.rl.gae(r, vs, d, 0.9, 0.8))
    np.testing.assert_allclose(got, np_gae(R, V, DONE, 0.9, 0.8, np.zeros(I_)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 3, T_ + 2])
def test_nstep_plain(n):
    got = run(lambda r, d, *_: tl.rl.nstep_returns(r, d, n, 0.9))
    np.testing.assert_allclose(got, np_nstep(R, DONE, n, 0.9), rtol=1e-5, atol=1e-5)


def test_nstep_matches_mc_for_large_n():
    got = run(lambda r, d, *_: tl.rl.nstep_returns(r, d, T_, 0.9))
    np.testing.assert_allclose(got, np_returns(R, DONE, 0.9), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [2, 4])
def test_nstep_bootstrap_value_with_point_T(n):
    got = run(lambda r, d, v, vs, last: tl.rl.nstep_returns(r, d, n, 0.9, value=v))
    np.testing.assert_allclose(got, np_nstep(R, DONE, n, 0.9, v=V), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [2, 4])
def test_nstep_bootstrap_last_value(n):
    got = run(lambda r, d, v, vs, last: tl.rl.nstep_returns(r, d, n, 0.9, value=vs, last_value=last))
    np.testing.assert_allclose(got, np_nstep(R, DONE, n, 0.9, v=V[:, :T_], v_T=V[:, T_]), rtol=1e-5, atol=1e-5)


def test_nstep_last_value_only():
    got = run(lambda r, d, v, vs, last: tl.rl.nstep_returns(r, d, 3, 0.9, last_value=last))
    np.testing.assert_allclose(got, np_nstep(R, DONE, 3, 0.9, v_T=V[:, T_]), rtol=1e-5, atol=1e-5)


def test_returns_bad_dim():
    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        r = tl.tensor(R[0], domain=(t,), name="r")
        with pytest.raises(tl.ShapeError, match="dim i"):
            tl.rl.discounted_returns(r, r > 0, 0.9, dim=i)
