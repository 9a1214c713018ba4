"""Accounting by base buffers (issue 12, item 1): a view, a broadcast or a reshape costs nothing,
an allocation costs its bytes once until its last reader (through its views), and a statement
kernel's own arrays count while it runs. The independent expectation is ``tracemalloc``: numpy's
and numba's arrays are allocated through numpy's traced allocator."""

from __future__ import annotations

import gc
import importlib
import tracemalloc

import numpy as np
import pytest

import timerl as tl
from timerl.ir.ops import Op
from timerl.kernels import cpu, statement
from timerl.runtime import interpreter


def _traced(exe):
    gc.collect()
    tracemalloc.start()
    try:
        exe.run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _rollout_prog(N=64, T=40, D=256):
    """Acting writes ``x[i, t]`` rows of a block; the learner reads the whole rollout ``x[i, 0:T]``
    (a view of the block), reshapes it (a view) and reduces it."""
    prog = tl.Program("i t")
    (i, t), (I, Tb) = prog.dims, prog.bounds
    out = {}
    rng = np.random.default_rng(0)
    data = rng.standard_normal((2, T, N, D)).astype("float32")
    with prog:
        x = tl.tanh(tl.tensor(data, (i, t), name="x"))
        xs = x[i, 0:T].reshape((T * N, D))
        tl.sink((xs * xs).sum(), lambda v, p: out.__setitem__(p["i"], float(v)))
    return prog, {I: 2, Tb: T}, out, data


def test_views_of_a_block_cost_nothing_and_keep_it_alive():
    prog, bounds, out, data = _rollout_prog()
    exe = prog.compile(bounds, backend="numpy")
    low = exe.plan.lowered
    ops = {exe.pdg.rec(n).op.name for n in low.views}
    assert {"ACCESS", "RESHAPE"} <= ops  # the slice of the block and its reshape
    exe.run()
    block = data[0].nbytes
    # the block once, plus the learner's product; the slice and the reshape add nothing
    assert exe.stats["peak_bytes"] == exe.planned_peak()
    assert block <= exe.stats["peak_bytes"] < 2.5 * block
    want = {k: float((np.tanh(data[k]) ** 2).sum()) for k in range(2)}
    assert out.keys() == want.keys() and all(np.isclose(out[k], want[k], rtol=1e-4) for k in want)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_planned_peak_agrees_with_tracemalloc_on_a_rollout(backend):
    prog, bounds, _, _ = _rollout_prog()
    exe = prog.compile(bounds, backend=backend)
    exe.run()
    traced = _traced(exe)
    assert exe.planned_peak() == exe.stats["peak_bytes"]
    assert abs(exe.stats["peak_bytes"] - traced) <= 0.1 * traced, (exe.stats["peak_bytes"], traced)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_planned_peak_agrees_with_tracemalloc_on_ppo(backend):
    exe = tl.rl.ppo(env="trivial", num_envs=64, num_steps=32, obs_shape=(3, 8, 8), epochs=1, minibatches=1,
                    total_steps=64 * 32 * 2, backend=backend)
    exe.run()
    traced = _traced(exe)
    assert exe.planned_peak() == exe.stats["peak_bytes"]
    assert abs(exe.stats["peak_bytes"] - traced) <= 0.1 * traced, (exe.stats["peak_bytes"], traced)


def test_kernel_transient_bytes_match_what_the_kernel_allocates():
    """transient_bytes reads a kernel's source; tracemalloc measures the same kernel called once."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.linspace(-1, 1, 3 * 512 * 64, dtype="float32").reshape(3, 512, 64)
    w = np.linspace(-1, 1, 64 * 64, dtype="float32").reshape(64, 64)
    with prog:
        xt = tl.tensor(x, (t,), name="x")
        h = tl.tanh(xt @ w) * 2.0 + xt
        tl.sink((h @ w).sum(), lambda v, p: None)
    seen = []
    orig = interpreter.Render._render

    def spy(self, seg, returned, outs=()):
        got = orig(self, seg, returned, outs)
        if type(self) is interpreter.Render:
            seen.append((self.pdg, tuple(seg), got))
        return got

    interpreter.Render._render = spy
    try:
        prog.compile({"T": 3}, backend="numba")
    finally:
        interpreter.Render._render = orig
    checked = 0
    for pdg, seg, (src, ext, consts, dims, keys) in seen:
        est = statement.transient_bytes(pdg, seg, src)
        if est < 100_000:
            continue
        k = cpu.load(src)
        args = [np.ones(tuple(s) or (1,), d) for _, _, s, d in ext] + list(consts) + [0] * len(dims)
        args += [np.uint64(1)] * len(keys)
        tracemalloc.start()
        try:
            k(*args)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert abs(est - peak) <= 0.05 * peak, (est, peak)
        checked += 1
    assert checked >= 1


def test_a_kernel_computes_an_elementwise_value_where_it_is_read():
    """``d = 1 - h * h`` is read only by the loop nest after the matmul (with ``h``): it is computed there, as a
    scalar, not as an array live across the matmul (one batch-sized array less); values unchanged."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.linspace(-1, 1, 2 * 256 * 64, dtype="float32").reshape(2, 256, 64)
    w = np.linspace(-0.1, 0.1, 64 * 64, dtype="float32").reshape(64, 64)
    got = {}
    with prog:
        h = tl.tanh(tl.tensor(x, (t,), name="x") @ w)
        d = 1.0 - h * h
        y = (h @ w) * d + h
        tl.sink(y, lambda v, p: got.__setitem__(p["t"], v.copy()))
    seen = []
    orig = interpreter.Render._render

    def spy(self, seg, returned, outs=()):
        r = orig(self, seg, returned, outs)
        seen.append((self.pdg, tuple(seg), tuple(returned), tuple(outs), r[0]))
        return r

    interpreter.Render._render = spy
    try:
        exe = prog.compile({"T": 2}, backend="numba")
    finally:
        interpreter.Render._render = orig
    exe.run()
    for k in range(2):
        hk = np.tanh(x[k] @ w)
        assert np.allclose(got[k], (hk @ w) * (1 - hk * hk) + hk, rtol=1e-5, atol=1e-6)
    pdg, seg, returned, outs, src = max(seen, key=lambda s: len(s[1]))
    r = statement.Render(pdg, seg, returned, outs)
    r._later = lambda *a: set()  # every elementwise value in the first loop nest that can compute it
    eager = r.source()
    assert statement.transient_bytes(pdg, seg, src) < statement.transient_bytes(pdg, seg, eager)


def test_a_cut_kernel_computes_the_backward_elementwise_values_where_they_are_read(monkeypatch):
    """REINFORCE's learner is one statement cut into two kernels (64 ops each at most); the tanh
    derivatives ``1 - h * h`` belong with the backward matmuls that read them: moved into the
    second kernel they are never stored between the two. Same losses, a lower peak."""
    import importlib

    fuse = importlib.import_module("timerl.passes.fuse")  # the module (timerl.passes exports the pass)
    kw = dict(env="trivial", num_envs=64, num_steps=16, obs_shape=(3, 4, 4), total_steps=64 * 16 * 2)
    losses, peaks = {}, {}
    for move in (True, False):
        if not move:
            monkeypatch.setattr(fuse, "_operands_kept", lambda *a, **k: False)
        exe = tl.rl.reinforce(**kw)
        exe.run()
        losses[move] = [row["loss"] for row in exe.history.rows]
        peaks[move] = exe.stats["peak_bytes"]
    assert losses[True] == losses[False]
    assert peaks[True] < peaks[False]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_monte_carlo_returns_do_not_hold_the_environment_steps_observations(backend, monkeypatch):
    """The returns read each step's reward and done flag after the rollout. With the environment
    step's outputs freed one by one (the ``split_outputs`` option Monte-Carlo REINFORCE sets), its
    observations are not held until then: the planned peak drops by most of a rollout of
    observations, the measured peak is the planned one, and the losses are the same."""
    N, T, obs = 4, 32, (3, 8, 8)
    kw = dict(env="trivial", num_envs=N, num_steps=T, obs_shape=obs, hidden=4, layers=1, total_steps=N * T * 2,
              backend=backend, compiled_env=False)   # the host env: one UDF returns (obs, reward, done)
    mod = importlib.import_module("timerl.rl.reinforce")
    on = tl.rl.reinforce(**kw)
    on.run()
    assert mod._passes(on.args) == {"split_outputs": True}
    monkeypatch.setattr(mod, "_passes", lambda args: {"split_outputs": False})
    off = tl.rl.reinforce(**kw)
    off.run()
    assert [r["loss"] for r in on.history.rows] == [r["loss"] for r in off.history.rows]
    rollout = N * T * int(np.prod(obs)) * 4
    assert off.planned_peak() - on.planned_peak() > 0.8 * rollout
    assert on.stats["peak_bytes"] == on.planned_peak() and off.stats["peak_bytes"] == off.planned_peak()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gae_does_not_hold_the_environment_steps_observations(backend, monkeypatch):
    """GAE's delta reads each step's reward and done flags with the next step's value, so it runs
    with the advantages' backward recurrence, after the rollout. Each output of the environment
    step is read through an access of its own that joins the step's statement (``split_outputs``,
    on unless switched off), so each step's observation is freed once the next step has copied it
    into ``o``: the planned peak is lower than with the switch off by most of a rollout of
    observations, the measured peak is the planned one, and the losses are the same."""
    N, T, obs = 4, 32, (3, 16, 16)
    kw = dict(env="trivial", num_envs=N, num_steps=T, obs_shape=obs, hidden=8, epochs=1, minibatches=1,
              total_steps=N * T * 2, backend=backend, compiled_env=False)  # the host env: one UDF
    on = tl.rl.ppo(**kw)
    on.run()
    mod = importlib.import_module("timerl.rl.ppo")
    build = mod.compile_algorithm
    monkeypatch.setattr(mod, "compile_algorithm",
                        lambda *a, **k: build(*a, passes=lambda args: {"split_outputs": False}))
    off = tl.rl.ppo(**kw)
    off.run()
    for key in ("pg_loss", "v_loss"):
        assert [r[key] for r in on.history.rows] == [r[key] for r in off.history.rows]
    step = on.pdg.graph["groups"]
    (udf,) = [n for n in on.pdg if on.pdg.rec(n).op is Op.UDF and len(on.pdg.rec(n).shapes) > 1]
    outs = {udf} | {c for c, _ in on.pdg.consumers(udf)}
    assert any(outs <= set(ms) for _, ms in step)  # the accesses joined the step's statement
    rollout = N * T * int(np.prod(obs)) * 4
    held = {}
    for name, exe in (("on", on), ("off", off)):
        held[name] = exe.plan.planned_peak(exe.prog, exe.pdg, exe.bounds, exe.seed, exe.backend, holders=True)[1]
        assert exe.stats["peak_bytes"] == exe.planned_peak()
    assert held["off"].get(udf, 0) >= rollout  # every step's tuple waits for GAE
    assert sum(held["on"].get(n, 0) for n in outs) <= 2 * rollout // T  # two steps' observations at most
    assert off.planned_peak() - on.planned_peak() > rollout // 2
