"""Programs about spatial ops, random draws and UDF-free models (see the package docstring)."""

from __future__ import annotations

import numpy as np

import timerl as tl
from timerl.ir import rng

from .collect import Collect
from .recurrences import I, T, X, by_point

_r = np.random.default_rng(99)
W1 = (_r.normal(size=(3, 8)) / np.sqrt(3)).astype("float32")
B1 = _r.normal(size=(8,)).astype("float32") * 0.1
W2 = (_r.normal(size=(8, 4)) / np.sqrt(8)).astype("float32")
IDX = _r.integers(0, 4, size=(I, T)).astype("int64")


def _it():
    prog = tl.Program("i t")
    return prog, prog.dims, prog.bounds


# -- random ops ---------------------------------------------------------------------------------


def build_random():
    prog, (i, t), (I_, T_) = _it()
    c = Collect()
    with prog:
        u = tl.random.uniform((3,), domain=(i, t), low=-1.0, high=1.0)  # stream 0
        z = tl.random.normal((2,), domain=(t,))  # stream 1
        logits = tl.tensor(X, (i, t), name="logits")
        a = tl.random.categorical(logits, domain=(i, t))  # stream 2
        p = tl.random.permutation(5, domain=(i,))  # stream 3
        tl.sink(u * 2 + z.sum(), c("uz"))
        tl.sink(a, c("a"))
        tl.sink(p, c("p"))
    return prog, {"I": I, "T": T}, c


def expect_random(seed=0):
    pts_it = np.array([(a, k) for a in range(I) for k in range(T)])
    u = rng.draw("uniform", seed, 0, pts_it, (3,), "float32", {"low": -1.0, "high": 1.0})
    z = rng.draw("normal", seed, 1, np.arange(T)[:, None], (2,), "float32", {})
    a = rng.draw("categorical", seed, 2, pts_it, (), "int64", {}, X.reshape(I * T, 3))
    p = rng.draw("permutation", seed, 3, np.arange(I)[:, None], (5,), "int64", {"n": 5})
    uz = u.reshape(I, T, 3) * 2 + z.sum(axis=1)[None, :, None]
    return {"uz": by_point(uz, 2), "a": by_point(a.reshape(I, T), 2), "p": by_point(p, 1)}


# -- an MLP forward pass over (i, t) ----------------------------------------------------------


def _mlp(i, t):
    """The MLP's input, first weight, hidden layer and logits over (i, t) (inside the program's ``with``)."""
    x = tl.tensor(X, (i, t), name="x")
    w1, b1, w2 = tl.const(W1, name="w1"), tl.const(B1, name="b1"), tl.const(W2, name="w2")
    h = tl.tanh(x @ w1 + b1)
    return x, w1, h, h @ w2


def build_mlp():
    prog, (i, t), (I_, T_) = _it()
    c = Collect()
    with prog:
        x, w1, _, logits = _mlp(i, t)
        tl.sink(logits, c("logits"))
        tl.sink(logits.logsumexp(), c("lse"))
        tl.sink(logits.argmax(), c("greedy"))
        batch = x[i, 0:T_] @ w1  # (T, 8): the same layer on the whole rollout at once
        tl.sink(tl.relu(batch).mean(axis=0), c("batch"))
    return prog, {"I": I, "T": T}, c


def expect_mlp():
    h = np.tanh(X @ W1 + B1)
    lg = h @ W2
    m = lg.max(axis=-1, keepdims=True)
    lse = (np.log(np.exp(lg - m).sum(axis=-1, keepdims=True)) + m)[..., 0]
    return {"logits": by_point(lg, 2), "lse": by_point(lse, 2), "greedy": by_point(lg.argmax(axis=-1), 2),
            "batch": by_point(np.maximum(X @ W1, 0).mean(axis=1), 1)}


# -- reductions and movement ------------------------------------------------------------------


def build_movement():
    prog, (i, t), (I_, T_) = _it()
    c = Collect()
    with prog:
        x = tl.tensor(X, (i, t), name="x")
        j = tl.tensor(IDX, (i, t), name="j")
        m = tl.stack([x, x * 2]).transpose()  # (3, 2)
        m = tl.concat([m, m.sum(axis=1, keepdims=True)], axis=1)  # (3, 3)
        tl.sink(m.reshape(-1).cumsum(), c("cumsum"))
        oh = tl.one_hot(j, 4)
        tl.sink(oh.argmax() + j, c("onehot"))
        tab = tl.const(np.arange(12, dtype="float32").reshape(4, 3))
        tl.sink(tab.take(j, axis=0) * x, c("take"))
        tl.sink(x.unsqueeze(0).expand(2, 3).std(axis=1, keepdims=True).squeeze(1), c("std"))
        tl.sink(tl.where(x > 0, x, 0.1 * x).min() + tl.clip(x, -0.5, 0.5).max(), c("where"))
        col = x.reshape(3, 1)
        tl.sink(col.take_along_axis(tl.zeros((3, 1), "int64"), axis=1).spatial[:, 0], c("along"))
        tl.sink(x.discounted_cumsum(0.5), c("dcum"))
    return prog, {"I": I, "T": T}, c


def expect_movement():
    out = {k: {} for k in ("cumsum", "onehot", "take", "std", "where", "along", "dcum")}
    tab = np.arange(12, dtype="float32").reshape(4, 3)
    for a in range(I):
        for k in range(T):
            x, j = X[a, k], IDX[a, k]
            m = np.stack([x, x * 2]).T
            m = np.concatenate([m, m.sum(axis=1, keepdims=True)], axis=1)
            out["cumsum"][(a, k)] = np.cumsum(m.reshape(-1))
            out["onehot"][(a, k)] = np.int64(2 * j)
            out["take"][(a, k)] = tab[j] * x
            out["std"][(a, k)] = np.broadcast_to(x[None], (2, 3)).std(axis=1)
            out["where"][(a, k)] = np.where(x > 0, x, 0.1 * x).min() + np.clip(x, -0.5, 0.5).max()
            out["along"][(a, k)] = x
            out["dcum"][(a, k)] = np.array([x[0] + 0.5 * x[1] + 0.25 * x[2], x[1] + 0.5 * x[2], x[2]])
    return out


# -- a loss written per step, read over the whole rollout ----------------------------------------


def build_per_t():
    """Per-point ops that need no order along ``t``, read whole (``l[i, 0:T]``), by a constant slice
    (``h[i, 1:4]``) and point by point by a recurrence (``acc[i, t + 1] = acc + l``)."""
    prog, (i, t), (I_, T_) = _it()
    c = Collect()
    with prog:
        _, _, h, lg = _mlp(i, t)
        l = (lg - lg.logsumexp(keepdims=True)).max() * (tl.dim_value(t) + 1)   # () per (i, t)
        tl.sink(l[i, 0:T_].mean(), c("mean"))
        tl.sink(h[i, 1:4].sum(axis=0), c("part"))
        acc = tl.placeholder((), "float32", (i, t), name="acc")
        acc[i, 0] = tl.const(0.0)
        acc[i, t + 1] = acc + l
        tl.sink(acc[i, T_], c("acc"))
    return prog, {"I": I, "T": T}, c


def expect_per_t():
    h = np.tanh(X @ W1 + B1)
    lg = h @ W2
    m = lg.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(lg - m).sum(axis=-1, keepdims=True)) + m
    l = (lg - lse).max(axis=-1) * (np.arange(T) + 1)[None, :].astype("float32")
    return {"mean": by_point(l.mean(axis=1), 1), "part": by_point(h[:, 1:4].sum(axis=1), 1),
            "acc": by_point(l.sum(axis=1), 1)}
