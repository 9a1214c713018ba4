"""Placeholders and branches, points and domain union (API.md), on the reference executor."""

import numpy as np
import pytest

import timerl as tl
from programs.collect import Collect

R = np.arange(12, dtype="float32").reshape(2, 6) * 0.25 + 1.0


def prog_it():
    prog = tl.Program("i t")
    return (prog, *prog.dims, *prog.bounds)


def run(prog, **bounds):
    prog.compile(bounds, backend="reference").run()


def test_first_true_branch_wins():
    prog, i, t, I, T = prog_it()
    c = Collect()
    with prog:
        x = tl.placeholder((), "float32", (i, t), name="x")
        x[i, 0] = tl.const(-1.0)
        x[t < 3] = tl.const(5.0)  # t == 0 already taken by the first branch
        x[(t % 2) == 0] = tl.const(7.0)
        x[True] = tl.const(9.0)
        x[i, t] = tl.const(100.0)  # never reached
        tl.sink(x, c("x"))
    run(prog, I=2, T=6)
    want = {0: -1, 1: 5, 2: 5, 3: 9, 4: 7, 5: 9}
    assert c["x"] == {(a, b): want[b] for a in range(2) for b in range(6)}


def test_branch_at_last_point_and_backward_recurrence():
    prog, i, t, I, T = prog_it()
    c = Collect()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        g = tl.placeholder((), "float32", (i, t), name="g")
        g[i, T - 1] = r
        g[i, t] = r + 0.5 * g[i, t + 1]
        tl.sink(g, c("g"))
    run(prog, I=2, T=6)
    want = np.zeros_like(R)
    acc = np.zeros(2, "float32")
    for k in reversed(range(6)):
        acc = R[:, k] + 0.5 * acc
        want[:, k] = acc
    np.testing.assert_allclose(c.array("g"), want, rtol=1e-6)


def test_constant_index_branch_reads_rhs_at_that_point():
    prog, i, t, I, T = prog_it()
    c = Collect()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        x = tl.placeholder((), "float32", (i, t), name="x")
        x[i, 0] = r  # r at (i, 0)
        x[i, 2] = r * 10  # r at (i, 2)
        x[i, t] = x[i, t - 1]
        tl.sink(x, c("x"))
    run(prog, I=2, T=6)
    got = c.array("x")
    for a in range(2):
        np.testing.assert_allclose(got[a], [R[a, 0], R[a, 0], R[a, 2] * 10, R[a, 2] * 10, R[a, 2] * 10,
                                            R[a, 2] * 10])


def _env_like(sinks):
    """o[i, 0] = 0, o[i, t + 1] = o + policy(o); policy calls are recorded with their point."""
    prog, i, t, I, T = prog_it()
    calls = []
    c = Collect()

    def policy(o, tv):
        calls.append(int(tv))
        return np.float32(o + 1.0)

    with prog:
        o = tl.placeholder((), "float32", (i, t), name="o")
        o[i, 0] = tl.const(0.0)
        (a,) = tl.udf(policy, [o, tl.dim_value(t)], [()], ["float32"])
        o[i, t + 1] = o + a
        sinks(o, a, c, i, t, T)
    run(prog, I=1, T=4)
    return o, calls, c


def test_shift_sugar_extends_points():
    o, calls, c = _env_like(lambda o, a, c, i, t, T: tl.sink(o, c("o")))
    assert dict(c["o"]) == {(0, 0): 0, (0, 1): 1, (0, 2): 3, (0, 3): 7}  # sinks never see t = T
    assert calls == [0, 1, 2]  # the policy runs only where o[t + 1] is demanded


def test_sink_at_extension_point_and_policy_not_run_there():
    o, calls, c = _env_like(lambda o, a, c, i, t, T: (tl.sink(o[i, T], c("oT")), tl.sink(a, c("a"))))
    assert c["oT"] == {(0,): 15.0}
    assert calls == [0, 1, 2, 3]  # o at T is read, but nothing reads the policy at t = T
    assert sorted(c["a"]) == [(0, b) for b in range(4)]


def test_policy_runs_at_extension_point_when_read():
    o, calls, c = _env_like(
        lambda o, a, c, i, t, T: tl.sink(tl.udf(lambda v: v * 2, [o], [()], ["float32"])[0][i, T], c("vT")))
    assert c["vT"] == {(0,): 30.0}
    assert calls == [0, 1, 2, 3]


def test_points_of_other_ops_are_the_intersection():
    prog, i, t, I, T = prog_it()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        o = tl.placeholder((), "float32", (i, t), name="o")
        o[i, 0] = tl.const(0.0)
        o[i, t + 1] = o + r
        z = o * 2  # o's points: t = 0..T
        s = o + r  # intersection: t = 0..T-1
        c = Collect()
        tl.sink(z[i, T], c("zT"))
    run(prog, I=2, T=6)
    np.testing.assert_allclose([c["zT"][(a,)] for a in range(2)], 2 * R.sum(axis=1))
    with prog:
        tl.sink(s[i, T], lambda v, p: None)
    with pytest.raises(tl.CompileError, match=r"t = 6"):
        prog.compile({"I": 2, "T": 6}, backend="reference")


def test_multi_step_shift_branch():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    c = Collect()
    with prog:
        f = tl.placeholder((), "int64", (t,), name="fib")
        f[t < 2] = tl.const(1)
        f[t + 2] = f + f[t + 1]
        tl.sink(f, c("f"))
        tl.sink(f[T + 1], c("last"))
    run(prog, T=7)
    assert [int(c["f"][(k,)]) for k in range(7)] == [1, 1, 2, 3, 5, 8, 13]
    assert int(c["last"][()]) == 34


def test_rhs_with_fewer_dims_broadcasts():
    prog, i, t, I, T = prog_it()
    c = Collect()
    with prog:
        init = tl.tensor(np.array([10.0, 20.0], "float32"), (i,), name="init")
        step = tl.tensor(np.arange(6, dtype="float32"), (t,), name="step")
        x = tl.placeholder((3,), "float32", (i, t), name="x")
        x[i, 0] = init  # (i,) broadcast over t, () broadcast to (3,)
        x[i, t] = x[i, t - 1] + step
        tl.sink(x, c("x"))
    run(prog, I=2, T=6)
    got = c.array("x")
    for a in range(2):
        for b in range(6):
            np.testing.assert_allclose(got[a, b], np.full(3, [10.0, 20.0][a] + np.arange(1, b + 1).sum()))


def test_rhs_dtype_is_cast_to_placeholder():
    prog = tl.Program("t")
    (t,) = prog.dims
    c = Collect()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="x")
        x[t] = tl.dim_value(t)  # int64 -> float32
        tl.sink(x, c("x"))
    run(prog, T=3)
    assert all(v.dtype == np.float32 and v == k[0] for k, v in c["x"].items())


def test_domain_union_broadcasting():
    prog, i, t, I, T = prog_it()
    c = Collect()
    a_np, b_np = np.array([1.0, 2.0], "float32"), np.arange(6, dtype="float32").reshape(6, 1) * np.ones(3, "float32")
    with prog:
        a = tl.tensor(a_np, (i,), name="a")
        b = tl.tensor(b_np, (t,), name="b")
        s = a * 10 + b
        assert tuple(d.name for d in s.domain) == ("i", "t") and s.shape == (3,)
        w = tl.const(np.ones(3, "float32"))
        z = (s * w).sum()
        assert z.domain == (i, t)
        tl.sink(z, c("z"))
        tl.sink([a, b], c("ab"))
    run(prog, I=2, T=6)
    for (x, y), v in c["z"].items():
        assert v == pytest.approx(3 * (a_np[x] * 10 + y))
    assert sorted(c["ab"]) == [(x, y) for x in range(2) for y in range(6)]
    va, vb = c["ab"][(1, 4)]
    assert va == 2.0 and (vb == 4.0).all()


def test_const_and_zeros_with_domain():
    prog, i, t, I, T = prog_it()
    c = Collect()
    with prog:
        z = tl.zeros((2,), domain=(i, t))
        k = tl.const(3, domain=(t,))
        o = tl.ones(2, dtype="int32", domain=t)
        assert z.domain == (i, t) and k.domain == (t,) and o.domain == (t,)
        assert k.dtype == np.int64 and o.dtype == np.int32 and z.dtype == np.float32
        tl.sink(z + k + o, c("s"))
    run(prog, I=2, T=3)
    assert sorted(c["s"]) == [(x, y) for x in range(2) for y in range(3)]
    assert all((v == 4).all() and v.shape == (2,) for v in c["s"].values())


def test_dim_value_and_conditions_on_tensors():
    prog, i, t, I, T = prog_it()
    c = Collect()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        m = tl.where(tl.dim_value(t) > 2, r, -r)
        tl.sink(m + tl.dim_value(i), c("m"))
    run(prog, I=2, T=6)
    for (x, y), v in c["m"].items():
        assert v == pytest.approx((R[x, y] if y > 2 else -R[x, y]) + x)


def test_two_dim_recurrence_carries_across_iterations():
    prog, i, t, I, T = prog_it()
    c = Collect()
    with prog:
        r = tl.tensor(R, (i, t), name="r")
        o = tl.placeholder((), "float32", (i, t), name="o")
        o[0, 0] = tl.const(0.0)
        o[i, 0] = o[i - 1, T]
        o[i, t + 1] = o + r
        tl.sink(o, c("o"))
    run(prog, I=2, T=6)
    flat = np.concatenate([[0.0], np.cumsum(R.reshape(-1))])
    got = c.array("o")
    np.testing.assert_allclose(got[0], flat[0:6], rtol=1e-6)
    np.testing.assert_allclose(got[1], flat[6:12], rtol=1e-6)


def test_where_evaluates_both_sides():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.arange(4.0, dtype="float32"), (t,), name="xs")
        y = tl.where(tl.dim_value(t) > 0, x[t - 1], x)
        tl.sink(y, lambda v, p: None)
    with pytest.raises(tl.CompileError, match=r"'xs'.*t = 0"):
        prog.compile({"T": 4}, backend="reference")
