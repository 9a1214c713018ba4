"""The isl schedule and its memory plan: loop directions, frees, peak memory, budget."""

import islpy as tl_isl
import numpy as np
import pytest

import timerl as tl
from timerl.schedule.tree import Call, Seq


def _log_udf(log):
    def ident(x):
        log.append(float(x))
        return x.copy()

    return ident


def test_forward_recurrence_runs_t_ascending():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    log = []
    with prog:
        o = tl.placeholder((), "float32", (t,), name="o")
        o[0] = tl.const(0.0)
        (nxt,) = tl.udf(_log_udf(log), [o + 1.0], [()], ["float32"])
        o[t + 1] = nxt
        tl.sink(o, lambda v, p: None)
    prog.compile({"T": 6}, backend="numpy").run()
    assert log == [1.0, 2.0, 3.0, 4.0, 5.0]  # o[t + 1] = o[t] + 1 computed in t order


def test_backward_recurrence_runs_t_descending():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    r = np.arange(1, 6, dtype="float32")
    log = []
    with prog:
        rt = tl.tensor(r, (t,), name="r")
        g = tl.placeholder((), "float32", (t,), name="g")
        g[T - 1] = rt
        (v,) = tl.udf(_log_udf(log), [rt + 0.5 * g[t + 1]], [()], ["float32"])
        g[t] = v
        tl.sink(g, lambda v, p: None)
    prog.compile({"T": 5}, backend="numpy").run()
    want = np.zeros(5, "float32")
    acc = np.float32(0)
    for k in reversed(range(5)):
        acc = r[k] + np.float32(0.5) * acc
        want[k] = acc
    assert np.allclose(log, want[:4][::-1])  # t = 3, 2, 1, 0


def _window_prog(mc):
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    out = {}
    with prog:
        o = tl.placeholder((4,), "float32", (t,), name="o")
        o[0] = tl.zeros((4,))
        o[t + 1] = tl.tanh(o[t] * 0.9 + 0.1)
        r = (o[t] * 2.0).sum()
        w = r[t:T] if mc else r[t:tl.min(t + 3, T)]
        tl.sink(w.sum(), lambda v, p: out.__setitem__(p["t"], float(v)))
    return prog, out


def test_nstep_window_peak_is_flat_in_T_and_monte_carlo_grows():
    peaks = {}
    for mc in (False, True):
        for T in (40, 320):
            prog, out = _window_prog(mc)
            exe = prog.compile({"T": T}, backend="numpy")
            exe.run()
            got = dict(out)
            out.clear()
            ref = prog.compile({"T": T}, backend="reference")
            ref.run()
            assert sorted(got) == sorted(out)
            assert np.allclose([got[k] for k in sorted(out)], [out[k] for k in sorted(out)], rtol=1e-5)
            assert exe.planned_peak() == exe.stats["peak_bytes"]
            peaks[mc, T] = exe.stats["peak_bytes"]
    assert peaks[False, 40] == peaks[False, 320]
    assert peaks[True, 320] > 4 * peaks[True, 40]


def test_every_stored_point_is_freed_once_and_schedule_prints():
    prog, out = _window_prog(False)
    exe = prog.compile({"T": 8}, backend="numpy")
    text = str(exe.schedule)
    assert "for c" in text and "exec S" in text and "free o[" in text
    exe.run()
    for s in exe._stores:
        assert not s  # stores are emptied; the live count returns to zero
    assert exe._mem()[0] == 0


def test_memory_budget_honoured_or_refused_with_the_least_budget():
    prog, _ = _window_prog(True)
    with pytest.raises(tl.CompileError) as err:
        prog.compile({"T": 40}, backend="numpy", memory_budget=16)
    msg = str(err.value)
    least = int(msg.split("memory_budget>=")[1].split()[0])
    assert least > 16 and "bytes" in msg
    prog, out = _window_prog(True)
    exe = prog.compile({"T": 40}, backend="numpy", memory_budget=least)
    exe.run()
    assert exe.stats["peak_bytes"] <= least and len(out) == 40


def test_donation_writes_in_place_and_keeps_values():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.linspace(0, 1, 5 * 3, dtype="float32").reshape(5, 3)
    with prog:
        xt = tl.tensor(x, (t,), name="x")
        y = tl.exp(xt * 2.0 + 1.0) - 3.0
        out = {}
        tl.sink(y, lambda v, p: out.__setitem__(p["t"], v.copy()))
    exe = prog.compile({"T": 5}, backend="numpy", check=True)
    exe.run()
    assert exe.stats["donations"] >= 2 and "in place of operand" in str(exe.schedule)
    for k in range(5):
        assert np.allclose(out[k], np.exp(x[k] * 2 + 1) - 3, rtol=1e-6)


def test_checking_mode_reports_a_read_after_free():
    from timerl.runtime.interpreter import Lowering

    prog, _ = _window_prog(False)
    exe = prog.compile({"T": 6}, backend="numpy", check=True)
    exe.run()
    plan = exe.plan
    calls = plan.schedule.calls()
    first_exec = next(c for c in calls if c.kind == "exec")
    # a tampered order: free a value of the first execution before the schedule writes it
    node = plan.problem.groups[[g.gid for g in plan.problem.groups].index(first_exec.ident)].members[0]
    bad = Seq([Call("free", node, first_exec.args), plan.tree])
    low = Lowering(prog, exe.pdg, exe.bounds, 0, plan.problem.groups, bad, {}, "check")
    _, run, _, _, _ = low.build(plan.frees)
    with pytest.raises(tl.RuntimeFault, match="schedule check: tensor .* at point .*before it was written"):
        run()


def test_check_flag_from_config():
    prog, _ = _window_prog(False)
    with tl.config.override(check=True) if hasattr(tl, "config") else __import__(
            "timerl.config").config.override(check=True):
        exe = prog.compile({"T": 4}, backend="numpy")
    assert exe.check and "chk(" in exe.source
    exe.run()


def test_unknown_pass_is_a_compile_error():
    prog, _ = _window_prog(False)
    with pytest.raises(tl.CompileError, match="unknown pass"):
        prog.compile({"T": 4}, backend="numpy", passes={"nope": False})


def test_numba_fuses_an_elementwise_chain_into_one_kernel():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.linspace(0, 1, 4 * 3, dtype="float32").reshape(4, 3)
    out = {}
    with prog:
        xt = tl.tensor(x, (t,), name="x")
        tl.sink(tl.tanh(xt * 2.0 + 1.0) - 3.0, lambda v, p: out.__setitem__(p["t"], v.copy()))
    exe = prog.compile({"T": 4}, backend="numba", check=True)
    src = next(iter(exe.plan.kernels.values()))
    assert exe.stats["kernels"] == 1 and "numba.njit" in src
    from timerl.kernels import cpu

    assert len(cpu.load(src).signatures) == 1  # compiled at compile time, not at the first call
    exe.run()
    assert len(cpu.load(src).signatures) == 1  # the run passed exactly those types: nothing compiled mid-run
    for k in range(4):
        assert np.allclose(out[k], np.tanh(x[k] * 2 + 1) - 3, rtol=1e-6)


def test_numba_kernel_divides_by_zero_like_numpy():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.array([[1.0, -1.0, 0.0], [2.0, 0.5, 0.0]], dtype="float32")
    d = np.array([[0.0, 0.0, 0.0], [4.0, 2.0, 1.0]], dtype="float32")
    out = {}
    with prog:
        xt, dt = tl.tensor(x, (t,), name="x"), tl.tensor(d, (t,), name="d")
        tl.sink((xt + 0.0) / (dt * 1.0), lambda v, p: out.__setitem__(p["t"], v.copy()))
    exe = prog.compile({"T": 2}, backend="numba")
    with np.errstate(divide="ignore", invalid="ignore"):
        exe.run()
        want = x / d
    assert exe.stats["kernels"] == 1
    for k in range(2):
        np.testing.assert_array_equal(out[k], want[k])  # inf, -inf, nan where numpy has them


def _iterated_returns_prog():
    """An RL-shaped loop: per iteration i a rollout over t, returns backwards in t, a param update."""
    prog = tl.Program("i t")
    (i, t), (I, T) = prog.dims, prog.bounds
    r = np.linspace(0.1, 1.0, 5 * 6, dtype="float32").reshape(5, 6)
    with prog:
        p = tl.placeholder((), "float32", (i,), name="p")
        p[0] = tl.const(1.0)
        rew = tl.tensor(r, (i, t), name="rew") * p[i]
        g = tl.placeholder((), "float32", (i, t), name="g")
        g[i, T - 1] = rew
        g[i, t] = rew + 0.5 * g[i, t + 1]
        p[i + 1] = p[i] - 0.1 * g[i, 0]
        out = {}
        tl.sink(p, lambda v, pt: out.__setitem__(int(next(iter(pt.values()))), float(v)))
    return prog, r, out


def test_outer_iteration_loop_is_fixed_and_isl_schedules_one_iteration():
    prog, r, out = _iterated_returns_prog()
    exe = prog.compile({"I": 5, "T": 6}, backend="numpy")
    exe.run()
    assert exe.plan.problem.split  # iteration dim fixed outside, isl scheduled one iteration
    p, want = np.float32(1.0), {}
    for k in range(5):  # numpy loop
        want[k] = float(p)
        acc = np.float32(0)
        for tt in reversed(range(6)):
            acc = r[k, tt] * p + np.float32(0.5) * acc
        p = p - np.float32(0.1) * acc
    assert sorted(out) == sorted(want)
    assert np.allclose([out[k] for k in sorted(out)], [want[k] for k in sorted(want)], rtol=1e-5)
    # the schedule's outermost dim is the iteration for every statement with an i dim
    sm = exe.plan.isl_schedule.get_map().intersect_domain(exe.plan.problem.domain)
    names = {g.name: [d.name for d in g.domain] for g in exe.plan.problem.groups}

    maps = []
    sm.foreach_map(maps.append)
    looped = 0
    for m in maps:
        dims = names[m.get_tuple_name(tl_isl.dim_type.in_)]
        if "i" in dims and m.domain().dim_max_val(dims.index("i")).to_python() > 0:
            k, looped = dims.index("i"), looped + 1
            for x in range(m.domain().dim_max_val(k).to_python() + 1):
                rng = m.intersect_domain(m.domain().fix_val(tl_isl.dim_type.set, k, x)).range()
                if not rng.is_empty():
                    assert rng.dim_min_val(0).to_python() == rng.dim_max_val(0).to_python() == x
    assert looped >= 2


def test_backward_outer_dim_falls_back_to_isl_on_the_whole_problem():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        rt = tl.tensor(np.arange(1, 6, dtype="float32"), (t,), name="r")
        g = tl.placeholder((), "float32", (t,), name="g")
        g[T - 1] = rt
        g[t] = rt + 0.5 * g[t + 1]
        tl.sink(g, lambda v, p: None)
    exe = prog.compile({"T": 5}, backend="numpy")
    exe.run()
    assert not exe.plan.problem.split  # g[t] reads g[t + 1]: the outer dim runs backwards
