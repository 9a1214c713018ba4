"""The vectorize pass: where it fires (statement and op counts), where it must not, and that values
hold with it on and off (the reference executor is the oracle; the verifier runs after every pass)."""

import importlib
import math

import numpy as np
import pytest
from programs import EXPECTED, PROGRAMS, Collect, assert_close, run
from programs.learners import build_reinforce_per_t

import timerl as tl
from timerl.compiler import optimize
from timerl.ir.ops import Op
from timerl.passes.vectorize import vectorize_dim

R = importlib.import_module("timerl.rl.reinforce")
P = importlib.import_module("timerl.rl.ppo")
common = importlib.import_module("timerl.rl.common")


def optimized(prog, bounds, **switches):
    out, analysis = optimize(prog, bounds, switches, check=True)
    assert sorted(analysis.live) == sorted(out.nodes)
    return out


def over(pdg, *dims):
    """Nodes whose domain is exactly ``dims`` (names)."""
    return [n for n in pdg.nodes if tuple(d.name for d in pdg.rec(n).domain) == dims]


def named(pdg, name, op=Op.MERGE):
    return [n for n in pdg.nodes if pdg.rec(n).name.split(" (")[0] == name and pdg.rec(n).op is op]


# -- where it fires ------------------------------------------------------------------------------


def test_per_t_program_runs_once_per_iteration():
    prog, bounds, _ = PROGRAMS["per_t"]()
    off = optimized(prog, bounds, vectorize=False)
    on = optimized(prog, bounds)
    # off: the MLP, the log-softmax and the scaled max run per (i, t); on: once per i on (T, ...) arrays
    mm_off = [n for n in over(off, "i", "t") if off.rec(n).op is Op.MATMUL]
    assert len(mm_off) == 2
    mm_on = [n for n in on.nodes if on.rec(n).op is Op.MATMUL]
    assert len(mm_on) == 2 and all(tuple(d.name for d in on.rec(n).domain) == ("i",) for n in mm_on)
    assert all(on.rec(n).shape[0] == 6 for n in mm_on)  # T = 6 leads the spatial shape
    # what stays per (i, t): the recurrence acc, its add, and the element it takes of l
    left = sorted(on.rec(n).op.value for n in over(on, "i", "t"))
    assert left == ["binary", "merge", "take"]
    # the constant slice h[i, 1:4] becomes a SLICE of the vectorized h
    assert [n for n in on.nodes if on.rec(n).op is Op.SLICE]


def op_instances(pdg, bounds):
    """Ops evaluated in a run: the points of every op (each op here is demanded at all its points)."""
    return sum(math.prod(bounds[d.bound.name] for d in pdg.rec(n).domain) for n in pdg.nodes)


def test_per_t_program_op_instances():
    prog, bounds, _ = PROGRAMS["per_t"]()
    on = prog.compile(bounds, backend="numpy")
    prog, bounds, _ = PROGRAMS["per_t"]()
    off = prog.compile(bounds, backend="numpy", passes={"vectorize": False})
    # 14 ops per (i, t) before; 3 per (i, t) (the recurrence and the element it takes) after
    assert op_instances(on.pdg, bounds) < op_instances(off.pdg, bounds) / 2


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("vec", [True, False])
def test_per_t_program_values(backend, vec):
    assert_close(run("per_t", backend=backend, passes={"vectorize": vec}), EXPECTED["per_t"]())


def _args(mod, **kw):
    base = dict(env="CartPole-v1", num_envs=2, num_steps=8, total_steps=32, backend="numpy", compiled_env=False)
    base.update(kw)
    return common.make_args(mod.Args, base)


def _learner(pdg):
    """The nodes over (i, t) but the accesses of an environment step's outputs (``split_outputs``)."""
    return [n for n in over(pdg, "i", "t") if not (pdg.rec(n).op is Op.ACCESS and
                                                    any(pdg.rec(p).op is Op.UDF for p, _ in pdg.inputs(n)))]


def test_reinforce_per_t_learner_is_vectorized():
    prog, bounds, _ = build_reinforce_per_t(_args(R))
    off = optimized(prog, bounds, vectorize=False)
    on = optimized(prog, bounds)
    # the loss, log-prob and the whole backward pass per step leave (i, t); the acting loop and the
    # returns recurrence stay
    # (the environment step's output accesses stay with it: not counted)
    assert len(_learner(off)) >= 3 * len(_learner(on))
    for n in over(on, "i", "t"):
        assert on.rec(n).op in (Op.MERGE, Op.MATMUL, Op.BINARY, Op.UNARY, Op.RANDOM, Op.UDF, Op.CAST, Op.ACCESS)
        assert "adam" not in on.rec(n).name  # no gradient op runs per step
    # the slice-written REINFORCE has the same ops per (i, t) as the per-t one after vectorizing
    prog, bounds, _ = R.build(_args(R))
    assert len(over(optimized(prog, bounds), "i", "t")) == len(over(on, "i", "t"))


# -- where it must not --------------------------------------------------------------------------


def _recurrent(window=False):
    prog = tl.Program("i t")
    (i, t), (I_, T_) = prog.dims, prog.bounds
    c = Collect()
    X = np.linspace(-1, 1, 2 * 5 * 3, dtype="float32").reshape(2, 5, 3)
    with prog:
        x = tl.tensor(X, (i, t), name="x")
        w = tl.const(np.eye(3, dtype="float32") * 0.5, name="w")
        h = tl.placeholder((3,), "float32", (i, t), name="h")
        h[i, 0] = x
        h[i, t + 1] = tl.tanh(h @ w + x[i, t + 1])          # a recurrence along t
        if window:
            y = x[i, t:T_].sum(axis=0) * 2.0                   # a window: its length depends on t
        else:
            y = tl.tanh(h * 2.0 + 1.0) * 3.0
        tl.sink(y[i, 0:T_].sum(), c("y"))
    return prog, {"I": 2, "T": 5}, c


def test_not_on_a_recurrence_along_the_dim():
    prog, bounds, _ = _recurrent()
    on = optimized(prog, bounds)
    (hn,) = named(on, "h")
    assert tuple(d.name for d in on.rec(hn).domain) == ("i", "t")
    tanh = [n for n in on.nodes if on.rec(n).op is Op.UNARY]
    mm = [n for n in on.nodes if on.rec(n).op is Op.MATMUL]
    assert sum(tuple(d.name for d in on.rec(n).domain) == ("i", "t") for n in tanh) == 1
    assert all(tuple(d.name for d in on.rec(n).domain) == ("i", "t") for n in mm)
    # y = tanh(h * 2 + 1) * 3 is off the cycle: it runs once per i over h[i, 0:T]
    muls = [n for n in on.nodes if on.rec(n).op is Op.BINARY and on.rec(n).attrs["fn"] == "mul"]
    assert len(muls) == 2 and all(tuple(d.name for d in on.rec(n).domain) == ("i",) for n in muls)
    for vec in (True, False):
        prog, bounds, c = _recurrent()
        prog.compile(bounds, backend="numpy", passes={"vectorize": vec}).run()
        prog, bounds, ref = _recurrent()
        prog.compile(bounds, backend="reference").run()
        assert_close(c, ref)


def test_not_over_a_window_whose_length_depends_on_the_dim():
    prog, bounds, _ = _recurrent(window=True)
    on = optimized(prog, bounds)
    # x[i, t:T] has shape (T - t, 3): no op that reads it leaves (i, t)
    red = [n for n in on.nodes if on.rec(n).op is Op.REDUCE and on.rec(n).attrs["axis"] == (0,)]
    assert any(tuple(d.name for d in on.rec(n).domain) == ("i", "t") for n in red)
    prog, bounds, c = _recurrent(window=True)
    prog.compile(bounds, backend="numpy").run()
    prog, bounds, ref = _recurrent(window=True)
    prog.compile(bounds, backend="reference").run()
    assert_close(c, ref)


def test_not_through_a_condition_that_varies_along_the_dim():
    prog = tl.Program("i t")
    (i, t), (I_, T_) = prog.dims, prog.bounds
    c = Collect()
    with prog:
        x = tl.tensor(np.arange(8, dtype="float32").reshape(2, 4), (i, t), name="x")
        y = tl.placeholder((), "float32", (i, t), name="y")
        y[t == 0] = x * 10.0   # the first branch holds only at t = 0
        y[True] = x
        z = tl.placeholder((), "float32", (i, t), name="z")
        z[t < T_] = tl.exp(x * 0.1) * 3.0 + 1.0     # holds at every 0 <= t < T: z is vectorized
        tl.sink((y + z)[i, 0:T_].sum(), c("s"))
    on = optimized(prog, {"I": 2, "T": 4})
    (yn,) = named(on, "y")
    assert tuple(d.name for d in on.rec(yn).domain) == ("i", "t")
    assert not named(on, "z") or all(tuple(d.name for d in on.rec(n).domain) == ("i",) for n in named(on, "z"))
    out = prog.compile({"I": 2, "T": 4}, backend="numpy")
    out.run()
    X = np.arange(8, dtype="float32").reshape(2, 4)
    want = np.where(np.arange(4) == 0, X * 10, X) + np.exp(X * np.float32(0.1)) * 3 + 1
    np.testing.assert_allclose([c["s"][(k,)] for k in range(2)], want.sum(axis=1))


def test_not_without_a_static_bound():
    prog, bounds, _ = PROGRAMS["per_t"]()
    pdg, analysis = optimize(prog, bounds, {"vectorize": False}, check=False)
    t = prog.dims[1]
    assert vectorize_dim(prog, pdg, {"I": 2}, analysis, t) is None
    assert vectorize_dim(prog, pdg, {"I": 2, "T": 6}, analysis, t) is not None


# -- values with the pass on and off ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_catalogue_with_and_without(name):
    want = run(name, backend="reference")
    assert_close(run(name, backend="numpy", passes={"vectorize": True}), want)
    assert_close(run(name, backend="numpy", passes={"vectorize": False}), want)


def _history(build, args, backend, passes=None, keys=("loss",)):
    prog, bounds, h = build(args)
    prog.compile(bounds, backend=backend, seed=args.seed, passes=passes).run()
    return np.array([[r[k] for k in keys] for r in h.rows], dtype=float)


@pytest.mark.parametrize("which", ["reinforce_per_t", "reinforce", "ppo"])
def test_rl_algorithms_with_and_without(which):
    if which == "ppo":
        args, build, keys = _args(P, epochs=1, minibatches=2), P.build, ("pg_loss", "v_loss", "entropy")
    elif which == "reinforce":
        args, build, keys = _args(R), R.build, ("loss", "entropy")
    else:
        args, build, keys = _args(R), build_reinforce_per_t, ("loss",)
    want = _history(build, args, "reference", keys=keys)
    for vec in (True, False):
        got = _history(build, args, "numpy", {"vectorize": vec}, keys=keys)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
