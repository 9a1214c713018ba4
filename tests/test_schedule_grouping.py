"""Grouping (isl statements = groups of nodes): a value read by an n-step window at min(t + n, T)
and by a sink at t = 0..T-1 (A2C's critic values with a sink on them) stays grouped, and a grouping
without a schedule is refined where it fails, not dropped."""

import functools
import importlib

import numpy as np

import timerl as tl
from timerl.schedule import model

group_pass = importlib.import_module("timerl.passes.group")  # the module (the package's `group` is the pass)


def _actor_critic(sink_v=True, n=2, Tn=4):
    """i: iteration, t: step. The actor p drives the rollout o; the critic q gives v = V(o) at
    t = 0..T, read by the window G at min(t + n, T) (and by a sink at t = 0..T-1); the learner
    reads o[i, 0:T] with q[i]; both parameters step along i."""
    prog = tl.Program("i t")
    (i, t), (I, T) = prog.dims, prog.bounds
    seen = {}
    with prog:
        p = tl.placeholder((3,), "float32", (i,), name="p")
        p[0] = tl.const(np.array([0.5, -0.25, 1.0], dtype="float32"))
        q = tl.placeholder((3,), "float32", (i,), name="q")
        q[0] = tl.const(np.array([0.1, 0.2, -0.3], dtype="float32"))
        o = tl.placeholder((3,), "float32", (i, t), name="o")
        o[i, 0] = tl.ones((3,))
        o[i, t + 1] = tl.tanh(o[i, t] * 0.9 + p[i] * 0.1)
        v = (tl.tanh(o * q[i]) * 2.0).sum()  # points t = 0..T
        r = (o * 0.5).sum()
        G = r[i, t:tl.min(t + n, T)].sum() + 0.9 * v[i, tl.min(t + n, T)]
        loss = (G[i, 0:Tn] - (o[i, 0:Tn] * q[i]).sum(-1)).mean()
        p[i + 1] = p[i] - 0.01 * loss
        q[i + 1] = q[i] - 0.02 * loss
        if sink_v:
            tl.sink(v, lambda val, pt: seen.__setitem__(("v", pt["i"], pt["t"]), float(val)))
        tl.sink(loss, lambda val, pt: seen.__setitem__(("loss", pt["i"]), float(val)))
        tl.sink(q, lambda val, pt: seen.__setitem__(("q", pt["i"]), np.array(val)))
    return prog, seen


BOUNDS = {"I": 3, "T": 4}


def _values(backend, **kw):
    prog, seen = _actor_critic(**kw)
    prog.compile(BOUNDS, backend=backend).run()
    return seen


def _assert_same(got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=str(k))


def test_value_read_by_window_and_sink_is_scheduled_grouped():
    counts = {}
    for sink_v in (False, True):
        prog, _ = _actor_critic(sink_v=sink_v)
        exe = prog.compile(BOUNDS, backend="numpy")
        plan = exe.plan
        assert plan.grouping and plan.problem.restrict is None  # grouped as built, no refinement needed
        assert plan.problem.split  # the iteration loop outermost
        counts[sink_v] = exe.stats["statements"]
        assert counts[sink_v] * 3 < len(plan.problem.of)  # far fewer statements than nodes
        if sink_v:
            # the critic's weights q[i] are read by the acting steps that compute v and by the
            # learner with its read of o[i, 0:T]: no statement holds q with a reader of o
            pdg, of = exe.pdg, plan.problem.of
            named = {pdg.rec(n).name: n for n in of if pdg.rec(n).name in ("o", "q")}
            q_group = [g for g in plan.problem.groups if g.gid == of[named["q"]]][0]
            assert of[named["q"]] != of[named["o"]]
            assert not any(src == named["o"] for n in q_group.members for src, _ in pdg.inputs(n))
    assert counts[True] <= counts[False] + 1  # the sink's own statement at most


def test_value_read_by_window_and_sink_values_equal_the_reference():
    _assert_same(_values("numpy"), _values("reference"))


def test_grouping_without_a_schedule_is_refined_not_dropped(monkeypatch):
    # with the cycle check off, grouping ties instances that need different orders: the
    # search keeps apart only the joins that break the schedule
    # the group pass and the scheduler's refinement both group without the cycle check
    loose = functools.partial(group_pass.make_groups, check_cycles=False)
    monkeypatch.setattr(group_pass, "make_groups", loose)
    monkeypatch.setattr(model, "make_groups", loose)
    prog, seen = _actor_critic()
    exe = prog.compile(BOUNDS, backend="numpy")
    plan = exe.plan
    assert plan.grouping and plan.problem.restrict is not None  # refined, still grouped
    assert exe.stats["statements"] * 3 < len(plan.problem.of)
    exe.run()
    monkeypatch.undo()
    _assert_same(seen, _values("reference"))


def test_refine_gives_up_within_its_budget(monkeypatch):
    # the group pass and the scheduler's refinement both group without the cycle check
    loose = functools.partial(group_pass.make_groups, check_cycles=False)
    monkeypatch.setattr(group_pass, "make_groups", loose)
    monkeypatch.setattr(model, "make_groups", loose)
    prog, _ = _actor_critic()
    from timerl.ir.analysis import analyze, live_nodes, resolve_bounds
    from timerl.passes import run_passes

    bounds = resolve_bounds(prog, prog.pdg, BOUNDS, live_nodes(prog.pdg))
    pdg, analysis = run_passes(prog, prog.pdg, bounds, analyze(prog, prog.pdg, bounds), None, {})
    problem = model.build_problem(prog, pdg, analysis)
    assert model._schedule_once(prog, problem, "default") is None
    assert model.refine(prog, problem, budget=len(problem.groups)) is None  # one probe's worth: no search
    found = model.refine(prog, problem)
    assert found is not None and found[0].restrict is not None


def test_a2c_with_a_sink_on_the_critic_values_compiles_grouped():
    import test_example_a2c as ex

    a2c = ex._load()
    args = a2c.Args(num_envs=2, num_steps=6, total_steps=2 * 6 * 2, nstep=3, hidden=8, backend="numpy")
    prog, bounds, parts = a2c.build(args, log=None)
    # the program as written: vectorize turns the n-step returns' tail into one statement per i that
    # gathers four per-step tensors, and grouping that needs a refinement
    off = {"vectorize": False}
    base = prog.compile(bounds=bounds, backend="numpy", passes=off).stats["statements"]
    prog, bounds, parts = a2c.build(args, log=None)
    with prog:
        tl.sink(parts["v"], lambda val, p: None)
    exe = prog.compile(bounds=bounds, backend="numpy", passes=off)
    assert exe.plan.grouping and exe.plan.problem.restrict is None
    assert exe.stats["statements"] <= base + 1


def _backward_grad_prog(out):
    """docs/api.md's gradient through a forward recurrence: its backward pass runs t descending,
    so the iteration split does not apply and isl schedules the whole problem."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        w = tl.tensor(np.array([1.0, 2.0], "float32"), requires_grad=True, name="w")
        x = tl.tensor(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], "float32"), domain=(t,), name="x")
        h = tl.placeholder((), "float32", (t,), name="h")
        h[0] = (w * x).sum()
        h[t + 1] = 0.5 * h + (w * x[t + 1]).sum()
        loss = h[T - 1] ** 2
        loss.backward()
        (gx,) = tl.grad(loss, [x])
        tl.sink([loss, w.grad], lambda v, p: out.update(loss=np.array(v[0]), wgrad=np.array(v[1])))
        tl.sink(gx, lambda v, p: out.__setitem__(("gx", p["t"]), np.array(v)))
    return prog


def test_refinement_on_a_problem_scheduled_whole():
    got, want = {}, {}
    exe = _backward_grad_prog(got).compile({"T": 3}, backend="numpy")
    assert exe.plan.grouping and not exe.plan.problem.split
    assert exe.stats["statements"] * 2 < len(exe.plan.problem.of)  # grouped, not one statement per node
    exe.run()
    _backward_grad_prog(want).compile({"T": 3}, backend="reference").run()
    assert sorted(got, key=str) == sorted(want, key=str)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, err_msg=str(k))


def _window_of_a_lagged_flag(n=3):
    """t: step. An env-like recurrence whose flag ``done[t]`` is computed from the state ``s[t]``
    alone (as a compiled CartPole's termination: Euler's new position uses the old velocity), not
    from the action ``a[t]``, and per-step returns ``G[t]`` over the window ``done[t:t + n]`` of
    later flags, multiplied with ``a[t]``: no chain of reads at one point joins ``G`` to ``a``, but
    ``G[t]`` waits for ``done[t + n - 1]``, computed from ``a[t + n - 2]``, which follows ``a[t]``."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    seen = {}
    with prog:
        s = tl.placeholder((2,), "float32", (t,), name="s")
        s[0] = tl.const(np.array([0.1, -0.2], dtype="float32"))
        a = tl.placeholder((2,), "float32", (t,), name="a")
        a[t] = tl.tanh(s[t] * 1.5 + 0.1)
        s[t + 1] = s[t] * 0.9 + a[t] * 0.3
        done = s.sum() > 0.05
        G = tl.placeholder((), "float32", (t,), name="G")
        G[t] = tl.cast(done[t:tl.min(t + n, T)], "float32").sum()
        tl.sink((a * G).sum(), lambda val, pt: seen.__setitem__(pt["t"], float(val)))
    return prog, seen


def test_window_of_later_points_is_not_grouped_with_what_it_waits_for():
    """A join whose chain of reads comes back through a window of later points is refused (the
    grouping used to put ``G[t]`` with ``a[t]``: a group with no order, which isl could not schedule
    and refine searched for minutes; the per-step n-step REINFORCE on a compiled CartPole)."""
    prog, _ = _window_of_a_lagged_flag()
    exe = prog.compile({"T": 8}, backend="numpy")
    plan, pdg = exe.plan, exe.pdg
    assert plan.grouping and plan.problem.restrict is None   # grouped as built: no refinement
    named = {pdg.rec(n).name: n for n in plan.problem.of}
    assert plan.problem.of[named["G"]] != plan.problem.of[named["a"]]


def test_window_of_later_points_values_equal_the_reference():
    results = {}
    for backend in ("reference", "numpy", "numba"):
        prog, seen = _window_of_a_lagged_flag()
        prog.compile({"T": 8}, backend=backend).run()
        results[backend] = seen
    assert sorted(results["reference"]) == list(range(8))
    for backend in ("numpy", "numba"):
        _assert_same(results[backend], results["reference"])
