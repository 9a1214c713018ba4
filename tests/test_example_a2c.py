"""examples/a2c.py on a tiny budget: it runs, logs one row per iteration, and the n-step
returns it computes equal a plain numpy loop over the rewards, dones and values it saw."""

import importlib.util
import math
import os
import sys

import numpy as np
import pytest

import timerl as tl

_PATH = os.path.join(os.path.dirname(__file__), "..", "examples", "a2c.py")


def _load():
    spec = importlib.util.spec_from_file_location("a2c_example", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def nstep_loop(r, done, v, v_last, n, gamma):
    """G_t = Σ_{j=t}^{m-1} γ^{j-t} a_j r_j + γ^{m-t} a_m V_m, m = min(t + n, T), as loops."""
    T, N = r.shape
    vals = np.concatenate([v, v_last[None]], axis=0)  # V_0 .. V_T
    G = np.zeros((T, N))
    for e in range(N):
        for t in range(T):
            m = min(t + n, T)
            g, alive = 0.0, 1.0
            for j in range(t, m):
                g += gamma ** (j - t) * alive * r[j, e]
                alive *= 1.0 - done[j, e]
            G[t, e] = g + gamma ** (m - t) * alive * vals[m, e]
    return G


@pytest.mark.parametrize("nstep", [3, None])
def test_a2c_returns_match_numpy_loop(nstep):
    a2c = _load()
    args = a2c.Args(num_envs=3, num_steps=8, total_steps=3 * 8 * 4, nstep=nstep, hidden=8,
                    backend="numpy", gamma=0.9)
    prog, bounds, parts = a2c.build(args, log=None)
    I, T = prog.bounds
    i, t = prog.dims
    seen = {}
    with prog:
        # the critic values themselves: v has points t = 0..T, read by the n-step window at
        # min(t + n, T) and by this sink at t = 0..T-1 (grouping once fell back to one isl
        # statement per node here, a compile of minutes)
        v = parts["v"]
        tl.sink([parts["r"], parts["done"], v, parts["G"]],
                lambda vals, p: seen.__setitem__((p["i"], p["t"]), [np.array(x) for x in vals]))
        last = {}
        tl.sink(parts["v"][i, T], lambda val, p: last.__setitem__(p["i"], np.array(val)))
    exe = prog.compile(bounds=bounds, backend=args.backend, seed=args.seed)
    assert exe.plan.grouping and exe.stats["statements"] < 30  # grouped (one per node: hundreds)
    exe.run()
    n_iter, Tn = bounds[I], bounds[T]
    assert n_iter == 4 and len(seen) == n_iter * Tn and sorted(last) == list(range(n_iter))
    episodes = 0
    for it in range(n_iter):
        r, done, v, G = (np.stack([seen[it, k][j] for k in range(Tn)]) for j in range(4))
        episodes += int(done.sum())
        expect = nstep_loop(r.astype(np.float64), done.astype(np.float64), v, last[it], nstep or Tn, args.gamma)
        np.testing.assert_allclose(G, expect, rtol=1e-5, atol=1e-5)
    assert episodes > 0  # CartPole under a random policy: some episodes end in 96 steps, masks are exercised

    rows = parts["rows"]
    assert [row["iteration"] for row in rows] == list(range(1, n_iter + 1))
    for row in rows:
        assert all(math.isfinite(row[k]) for k in ("loss", "pg_loss", "v_loss", "entropy"))
        assert 0.0 < row["entropy"] <= math.log(2) + 1e-6
    assert len({row["loss"] for row in rows}) > 1  # the parameters moved


def test_a2c_main_runs_from_flags(capsys):
    a2c = _load()
    rows = a2c.main(["--num-envs", "2", "--num-steps", "8", "--total-steps", "48", "--hidden", "8",
                     "--backend", "numpy", "--anneal-lr", "false"])
    assert len(rows) == 3
    out = capsys.readouterr().out
    assert "compiled in" in out and "iter    3" in out
