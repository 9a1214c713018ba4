"""Finite-difference gradient checking for recurrent-tensor programs (helpers, no tests).

``check_grad(build, data, bounds)`` builds the program twice: once with ``tl.grad`` of the
loss, compiled on the backend under test, and once with only the loss, run on the reference
executor while each input element is moved by ``±eps`` (central differences, float64). On
another backend the gradients are compared with the reference executor's instead.
"""

from __future__ import annotations

import numpy as np
import pytest

import timerl as tl

BACKENDS = ["reference", "numpy"]
ALL_BACKENDS = BACKENDS + ["numba"]  # for a few representative tests (numba's JIT costs seconds)


def compile_or_skip(prog, bounds, backend):
    try:
        return prog.compile(bounds, backend=backend)
    except (ModuleNotFoundError, ImportError, NotImplementedError) as e:
        if backend == "reference":
            raise
        pytest.skip(f"backend {backend!r} is not available yet: {type(e).__name__}: {e}")


def _program(build, data, dims, grad):
    prog = tl.Program(dims)
    store = {}
    with prog:
        xs = {name: tl.tensor(arr, tuple(prog.dim(d) for d in dom), name=name) for name, (arr, dom) in data.items()}
        loss = build(prog, xs)
        store["loss_domain"] = loss.domain
        if grad:
            gs = tl.grad(loss, [xs[n] for n in grad])
            for n, g in zip(grad, gs):
                assert g.domain == xs[n].domain and tuple(g.shape) == tuple(xs[n].shape), (g, xs[n])
                store[n] = {}
                tl.sink(g, _rec(store[n]))
        else:
            store["loss"] = {}
            tl.sink(loss, _rec(store["loss"]))
    return prog, xs, store


def _rec(d):
    def f(v, p):
        d[tuple(p.values())] = np.array(v, copy=True)

    return f


def _as_array(points, shape):
    out = np.zeros(shape)
    for pt, v in points.items():
        out[pt] = v
    return out


def check_grad(build, data, bounds, dims="i t", wrt=None, backend="reference", eps=1e-6, rtol=1e-5, atol=1e-5):
    """Compare ``tl.grad`` of ``build``'s loss with central differences; returns the gradients."""
    wrt = list(wrt or data)
    prog, xs, store = _program(build, data, dims, wrt)
    compile_or_skip(prog, bounds, backend).run()
    got = {n: _as_array(store[n], data[n][0].shape) for n in wrt}
    if backend != "reference":
        # the reference gradients are checked against finite differences by the reference variant
        rprog, _, rstore = _program(build, data, dims, wrt)
        rprog.compile(bounds, backend="reference").run()
        for n in wrt:
            np.testing.assert_allclose(got[n], _as_array(rstore[n], data[n][0].shape), rtol=1e-9, atol=1e-10,
                                       err_msg=f"gradient of {n} on {backend} vs reference")
        return got

    lprog, lxs, lstore = _program(build, data, dims, None)
    exe = lprog.compile(bounds, backend="reference")

    def total():
        lstore["loss"].clear()
        exe.run()
        return float(sum(np.sum(v) for v in lstore["loss"].values()))

    for n in wrt:
        arr = lxs[n].node.attrs["array"]
        arr.setflags(write=True)
        want = np.zeros(arr.shape)
        for idx in np.ndindex(arr.shape):
            old = arr[idx]
            arr[idx] = old + eps
            up = total()
            arr[idx] = old - eps
            down = total()
            arr[idx] = old
            want[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(got[n], want, rtol=rtol, atol=atol, err_msg=f"gradient of {n}")
    return got
