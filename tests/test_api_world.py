"""UDFs and sinks: call counts and order, state chains, read-only values (reference executor)."""

import numpy as np
import pytest

import timerl as tl
from programs.collect import Collect


def test_udf_runs_once_per_demanded_point_in_order():
    prog = tl.Program("i t")
    i, t = prog.dims
    calls = []

    def f(a, b):
        calls.append((int(a), int(b)))
        return np.float32(a * 10 + b)

    c = Collect()
    with prog:
        (y,) = tl.udf(f, [tl.dim_value(i), tl.dim_value(t)], [()], ["float32"])
        tl.sink(y, c("y"))
        tl.sink(y * 2, c("y2"))  # a second reader does not call f again
    exe = prog.compile({"I": 2, "T": 3}, backend="reference")
    exe.run()
    assert calls == [(a, b) for a in range(2) for b in range(3)]
    assert c["y2"][(1, 2)] == 24.0
    calls.clear()
    c["y"].clear(), c["y2"].clear()
    exe.run()  # each run calls again
    assert len(calls) == 6


def test_udf_only_at_demanded_points():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    calls = []
    with prog:
        (y,) = tl.udf(lambda a: calls.append(int(a)) or np.float32(a), [tl.dim_value(t)], [()], ["float32"])
        tl.sink(y[T - 1], lambda v, p: None)
        tl.sink(y[1:3].sum(), lambda v, p: None)
    prog.compile({"T": 5}, backend="reference").run()
    assert sorted(calls) == [1, 2, 4]


def test_udf_multiple_outputs_and_shapes():
    prog = tl.Program("t")
    (t,) = prog.dims
    c = Collect()
    with prog:
        x = tl.tensor(np.arange(6, dtype="float32").reshape(3, 2), (t,))
        a, b = tl.udf(lambda v: (v * 2, np.int64(v.sum())), [x], [(2,), ()], ["float32", "int64"])
        assert a.shape == (2,) and b.dtype == np.int64
        tl.sink([a, b], c("ab"))
    prog.compile({"T": 3}, backend="reference").run()
    va, vb = c["ab"][(2,)]
    np.testing.assert_array_equal(va, [8.0, 10.0])
    assert vb == 9 and vb.dtype == np.int64


def test_udf_wrong_output_shape_is_runtime_fault():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        (y,) = tl.udf(lambda v: np.zeros(3, "float32"), [tl.dim_value(t)], [(2,)], ["float32"], name="env")
        tl.sink(y, lambda v, p: None)
    with pytest.raises(tl.RuntimeFault, match=r"env.*shape"):
        prog.compile({"T": 2}, backend="reference").run()


def test_udf_exception_names_udf_and_point():
    prog = tl.Program("t")
    (t,) = prog.dims

    def boom(v):
        if v == 1:
            raise ValueError("nope")
        return np.float32(0)

    with prog:
        (y,) = tl.udf(boom, [tl.dim_value(t)], [()], ["float32"])
        tl.sink(y, lambda v, p: None)
    with pytest.raises(tl.RuntimeFault, match=r"boom.*t = 1.*nope"):
        prog.compile({"T": 3}, backend="reference").run()


def test_udf_without_inputs_runs_once_per_run():
    prog = tl.Program("i t")
    i, t = prog.dims
    calls = []
    c = Collect()
    with prog:
        (k,) = tl.udf(lambda: calls.append(1) or np.float32(7), [], [()], ["float32"])
        assert k.domain == ()
        tl.sink(k + tl.dim_value(t), c("s"))
    exe = prog.compile({"I": 2, "T": 3}, backend="reference")
    exe.run()
    assert calls == [1] and c["s"][(2,)] == 9.0
    calls.clear()
    c["s"].clear()
    exe.run()
    assert calls == [1]


def test_state_sharing_udfs_run_in_program_order():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    log = []
    state = {}

    def reset():
        log.append("reset")
        state["s"] = 0.0
        return np.float32(0)

    def act(tv):
        log.append(("act", int(tv)))
        return np.float32(tv)

    def step(tv):
        state["s"] += 1
        log.append(("step", int(tv), state["s"]))
        return np.float32(state["s"])

    with prog:
        (r0,) = tl.udf(reset, [], [()], ["float32"], state="env")
        tv = tl.dim_value(t)
        # act and step do not read each other: only the shared state orders them
        (s,) = tl.udf(step, [tv], [()], ["float32"], state="env")
        (a,) = tl.udf(act, [tv], [()], ["float32"], state="env")
        tl.sink([a, s, r0], lambda v, p: None)
    prog.compile({"I": 1, "T": 3}, backend="reference").run()
    assert log == ["reset"] + [x for k in range(3) for x in (("step", k, k + 1), ("act", k))]


def test_env_like_recurrence_with_stateful_udf():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    calls = []
    st = {}

    def reset():
        calls.append("reset")
        st["s"] = np.zeros(2, np.float32)
        return st["s"].copy()

    def step(a):
        calls.append(("step", float(a)))
        st["s"] = st["s"] + a
        return st["s"].copy(), np.float32(a * 2)

    c = Collect()
    with prog:
        o = tl.placeholder((2,), "float32", (i, t), name="o")
        (ob0,) = tl.udf(reset, [], [(2,)], ["float32"], state="env")
        o[0, 0] = ob0
        o[i, 0] = o[i - 1, T]
        a = o.sum() * 0.5 + 1
        o[i, t + 1], r = tl.udf(step, [a], [(2,), ()], ["float32", "float32"], state="env")
        tl.sink(r, c("r"))
    prog.compile({"I": 2, "T": 3}, backend="reference").run()
    s = np.zeros(2, np.float32)
    want_calls, want_r = ["reset"], {}
    for k in range(6):
        av = np.float32(s.sum() * 0.5 + 1)
        want_calls.append(("step", float(av)))
        s = s + av
        want_r[divmod(k, 3)] = av * 2
    assert calls == want_calls
    assert c["r"] == pytest.approx(want_r)


def test_sink_value_is_read_only_and_point_is_a_dict():
    prog = tl.Program("i t")
    i, t = prog.dims
    seen = []

    def fn(v, p):
        seen.append(dict(p))
        with pytest.raises(ValueError):
            v[...] = 0
        assert isinstance(v, np.ndarray) and v.shape == (2,)

    with prog:
        x = tl.tensor(np.ones((2, 2, 2), "float32"), (i, t))
        tl.sink(x, fn)
        tl.sink(x.sum(), lambda v, p: seen.append(v.shape))
    prog.compile({"I": 2, "T": 2}, backend="reference").run()
    assert seen[:1] == [{"i": 0, "t": 0}] and () in seen
    assert sum(isinstance(s, dict) for s in seen) == 4


def test_multi_sink_over_union_of_domains():
    prog = tl.Program("i t")
    i, t = prog.dims
    c = Collect()
    with prog:
        a = tl.tensor(np.arange(2, dtype="int64"), (i,))
        b = tl.tensor(np.arange(3, dtype="int64") * 10, (t,))
        tl.sink([a, b], c("ab"))
    prog.compile({"I": 2, "T": 3}, backend="reference").run()
    assert {k: (int(x), int(y)) for k, (x, y) in c["ab"].items()} == {
        (x, y): (x, 10 * y) for x in range(2) for y in range(3)}


def test_dead_code_is_not_run():
    prog = tl.Program("t")
    (t,) = prog.dims
    calls = []
    with prog:
        x = tl.tensor(np.arange(3, dtype="float32"), (t,))
        tl.udf(lambda v: calls.append(1) or v, [x], [()], ["float32"])  # nothing reads it
        tl.sink(x, lambda v, p: None)
    prog.compile({"T": 3}, backend="reference").run()
    assert calls == []


def test_reference_schedule_and_stats():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.arange(4, dtype="float32"), (t,), name="x")
        g = tl.placeholder((), "float32", (t,), name="g")
        g[T - 1] = x
        g[t] = x + g[t + 1]
        tl.sink(g, lambda v, p: None)
    exe = prog.compile({"T": 4}, backend="reference")
    exe.run()
    text = str(exe.schedule)
    assert "g" in text and "t=3" in text
    assert exe.stats["peak_bytes"] > 0 and exe.stats["run_seconds"] >= 0
    assert exe.stats["peak_bytes"] < 4 * 4 * 3  # values are freed after their last read
    assert exe.pdg is not None


def test_batched_udf_sees_a_leading_batch_axis():
    prog = tl.Program("t")
    (t,) = prog.dims
    shapes = []
    c = Collect()

    def f(x):
        shapes.append(x.shape)
        return x * 2

    with prog:
        x = tl.tensor(np.arange(6, dtype="float32").reshape(3, 2), (t,))
        (y,) = tl.udf(f, [x], [(2,)], ["float32"], batched=True)
        tl.sink(y, c("y"))
    prog.compile({"T": 3}, backend="reference").run()
    assert all(s[1:] == (2,) for s in shapes) and sum(s[0] for s in shapes) == 3
    np.testing.assert_array_equal(c.array("y"), np.arange(6).reshape(3, 2) * 2)


def test_run_with_progress(capsys):
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        tl.sink(tl.tensor(np.arange(3.0), (t,)), lambda v, p: None)
    prog.compile({"T": 3}, backend="reference").run(progress=True)
    assert "6/6" in capsys.readouterr().err  # a tqdm bar over 3 data points and 3 sink calls
