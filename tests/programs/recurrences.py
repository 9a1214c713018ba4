"""Programs about recurrences and the indexing table (see the package docstring)."""

from __future__ import annotations

import numpy as np

import timerl as tl

from .collect import Collect

I, T = 2, 6
GAMMA = 0.9
_rng = np.random.default_rng(1234)
R = _rng.normal(size=(I, T)).astype("float32")
X = _rng.normal(size=(I, T, 3)).astype("float32")


def by_point(arr, ndims):
    """``{point tuple: value}`` from an array whose first ``ndims`` axes are the points."""
    arr = np.asarray(arr)
    return {tuple(int(v) for v in k): arr[k] for k in np.ndindex(*arr.shape[:ndims])}


def _it():
    prog = tl.Program("i t")
    return prog, prog.dims, prog.bounds


# -- discounted returns: backward recurrence ------------------------------------------------


def build_returns():
    prog, (i, t), (I_, T_) = _it()
    c = Collect()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        g = tl.placeholder((), "float32", (i, t), name="g")
        g[i, T_ - 1] = r
        g[i, t] = r + GAMMA * g[i, t + 1]
        tl.sink(g, c("g"))
    return prog, {"I": I, "T": T}, c


def expect_returns():
    g = np.zeros_like(R)
    acc = np.zeros(I, "float32")
    for k in reversed(range(T)):
        acc = R[:, k] + np.float32(GAMMA) * acc
        g[:, k] = acc
    return {"g": by_point(g, 2)}


# -- env-like forward recurrence with a stateful UDF ------------------------------------------


def _env_fns():
    st = {}

    def reset():
        st["s"] = np.array([1.0, -1.0], "float32")
        st["n"] = 0
        return st["s"].copy()

    def step(a):
        st["n"] += 1
        st["s"] = (st["s"] * np.float32(0.5) + a).astype("float32")
        return st["s"].copy(), np.float32(st["s"].sum() + st["n"])

    return reset, step


def build_env():
    prog, (i, t), (I_, T_) = _it()
    reset, step = _env_fns()
    c = Collect()
    with prog:
        o = tl.placeholder((2,), "float32", (i, t), name="obs")
        (o0,) = tl.udf(reset, [], [(2,)], ["float32"], state="env", name="reset")
        o[0, 0] = o0
        o[i, 0] = o[i - 1, T_]
        a = tl.tanh(o.sum()) + tl.tensor(R, (i, t), name="noise")
        o[i, t + 1], r = tl.udf(step, [a], [(2,), ()], ["float32", "float32"], state="env", name="step")
        tl.sink(r, c("r"))
        tl.sink(o, c("obs"))
        tl.sink(o[i, T_], c("last_obs"))
    return prog, {"I": I, "T": T}, c


def expect_env():
    reset, step = _env_fns()
    o = reset()
    obs, rs, last = np.zeros((I, T, 2), "float32"), np.zeros((I, T), "float32"), np.zeros((I, 2), "float32")
    for a_ in range(I):
        for k in range(T):
            obs[a_, k] = o
            act = np.float32(np.tanh(o.sum())) + R[a_, k]
            o, rs[a_, k] = step(act)
        last[a_] = o
    return {"r": by_point(rs, 2), "obs": by_point(obs, 2), "last_obs": by_point(last, 1)}


# -- n-step window, Monte-Carlo sum, prefix mean, constant and outer slices --------------------

NSTEP = 3


WINDOWS = {
    "nstep": lambda r, x, i, t, I_, T_: r[i, t:tl.min(t + NSTEP, T_)].sum(),
    "mc": lambda r, x, i, t, I_, T_: r[i, t:T_].discounted_sum(GAMMA),
    "prefix_mean": lambda r, x, i, t, I_, T_: x[i, 0:t + 1].mean(axis=0),
    "const_slice": lambda r, x, i, t, I_, T_: x[i, 0:T_].sum(axis=0),
    "fixed_slice": lambda r, x, i, t, I_, T_: x[i, 1:4].max(axis=0),
    "outer": lambda r, x, i, t, I_, T_: x[0:I_, t].mean(axis=0),
    "ends": lambda r, x, i, t, I_, T_: x[i, T_ - 1] - x[i, 0],
}


def build_windows(names=tuple(WINDOWS)):
    """One sink per entry of :data:`WINDOWS` in ``names`` (all of them by default)."""
    prog, (i, t), (I_, T_) = _it()
    c = Collect()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        x = tl.tensor(X, (i, t), name="x")
        for nm in names:
            tl.sink(WINDOWS[nm](r, x, i, t, I_, T_), c(nm))
    return prog, {"I": I, "T": T}, c


def expect_windows(names=tuple(WINDOWS)):
    g = np.float32(GAMMA)
    nstep = np.array([[R[a, k:k + NSTEP].sum() for k in range(T)] for a in range(I)])
    mc = np.array([[sum(g ** j * R[a, k + j] for j in range(T - k)) for k in range(T)] for a in range(I)])
    prefix = np.array([[X[a, :k + 1].mean(axis=0) for k in range(T)] for a in range(I)])
    out = {
        "nstep": by_point(nstep, 2), "mc": by_point(mc, 2), "prefix_mean": by_point(prefix, 2),
        "const_slice": by_point(X.sum(axis=1), 1), "fixed_slice": by_point(X[:, 1:4].max(axis=1), 1),
        "outer": by_point(X.mean(axis=0), 1), "ends": by_point(X[:, T - 1] - X[:, 0], 1),
    }
    return {k: out[k] for k in names}


# -- two-dim recurrence: o[i, 0] = o[i - 1, T] ------------------------------------------------


def build_carry():
    prog, (i, t), (I_, T_) = _it()
    c = Collect()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        o = tl.placeholder((), "float32", (i, t), name="o")
        o[0, 0] = tl.const(1.0)
        o[i, 0] = o[i - 1, T_]
        o[i, t + 1] = o * GAMMA + r
        tl.sink(o, c("o"))
        tl.sink(o[i, T_], c("o_end"))
    return prog, {"I": I, "T": T}, c


def expect_carry():
    o, v, end = np.zeros((I, T), "float32"), np.float32(1.0), np.zeros(I, "float32")
    for a in range(I):
        for k in range(T):
            o[a, k] = v
            v = v * np.float32(GAMMA) + R[a, k]
        end[a] = v
    return {"o": by_point(o, 2), "o_end": by_point(end, 1)}


# -- branch order -------------------------------------------------------------------------------


def build_branches():
    prog = tl.Program("t")
    (t,), (T_,) = prog.dims, prog.bounds
    c = Collect()
    with prog:
        r = tl.tensor(R[0], (t,), name="r")
        x = tl.placeholder((), "float32", (t,), name="x")
        x[t == 0] = r
        x[T_ - 1] = tl.const(-1.0)
        x[(t % 2) == 0] = x[t - 1] * 2
        x[t + 1] = x + r  # odd t: x[t - 1] + r[t - 1]
        tl.sink(x, c("x"))
    return prog, {"T": T}, c


def expect_branches():
    x = np.zeros(T, "float32")
    for k in range(T):
        if k == 0:
            x[k] = R[0, 0]
        elif k == T - 1:
            x[k] = -1.0
        elif k % 2 == 0:
            x[k] = x[k - 1] * 2
        else:
            x[k] = x[k - 1] + R[0, k - 1]
    return {"x": by_point(x, 1)}
