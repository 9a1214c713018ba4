"""Every error of issue 2 item 7 (and API.md) with what its message must say."""

import numpy as np
import pytest

import timerl as tl


def prog_t():
    prog = tl.Program("t")
    return prog, prog.dims[0], prog.bounds[0]


def compile_ref(prog, **bounds):
    return prog.compile(bounds, backend="reference")


def test_read_outside_points_names_tensor_index_and_point():
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.arange(5.0, dtype="float32"), (t,), name="obs")
        tl.sink(x[t - 1] * 2, lambda v, p: None)
    with pytest.raises(tl.CompileError, match=r"'obs'.*\[t - 1\].*t = 0"):
        compile_ref(prog, T=5)


def test_read_past_the_end_names_point():
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.arange(5.0, dtype="float32"), (t,), name="obs")
        tl.sink(x[t:t + 2].sum(), lambda v, p: None)
    with pytest.raises(tl.CompileError, match=r"'obs'.*t = 4.*t = 5"):
        compile_ref(prog, T=5)


def test_read_of_placeholder_outside_its_points():
    prog, t, T = prog_t()
    with prog:
        g = tl.placeholder((), "float32", (t,), name="g")
        g[t] = tl.const(1.0)
        tl.sink(g[t + 1], lambda v, p: None)
    with pytest.raises(tl.CompileError, match=r"'g'.*t = 4"):
        compile_ref(prog, T=5)


def test_point_with_no_branch():
    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="acc")
        x[t + 1] = x + 1
        tl.sink(x, lambda v, p: None)
    with pytest.raises(tl.CompileError, match=r"'acc'.*t = 0.*no branch"):
        compile_ref(prog, T=5)


def test_point_with_no_branch_only_when_read():
    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="x")
        x[t > 2] = tl.const(1.0)
        tl.sink(x[T - 1], lambda v, p: None)  # never reads t <= 2
    compile_ref(prog, T=5).run()


def _simple(name="x"):
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.arange(5.0, dtype="float32"), (t,), name=name)
        tl.sink(x, lambda v, p: None)
    return prog


@pytest.mark.parametrize(
    "bounds, pattern",
    [
        ({}, r"bound T is required.*'x'"),
        ({"T": 0}, r"bound T must be a positive int, got 0"),
        ({"T": -3}, r"bound T must be a positive int"),
        ({"T": 2.5}, r"bound T must be a positive int"),
        ({"T": True}, r"bound T must be a positive int"),
        ({"T": 5, "Q": 3}, r"unknown bound 'Q'.*T"),
    ],
)
def test_bound_errors(bounds, pattern):
    with pytest.raises(tl.CompileError, match=pattern):
        _simple().compile(bounds, backend="reference")


def test_bound_in_index_is_required():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        x = tl.tensor(np.zeros((3, 4), "float32"), (i, t), name="x")
        tl.sink(x[i, 0], lambda v, p: None)  # domain (i,) but x needs T
    with pytest.raises(tl.CompileError, match=r"bound T is required"):
        prog.compile({"I": 3}, backend="reference")


def test_data_length_differs_from_bound():
    with pytest.raises(tl.CompileError, match=r"'x'.*length 5.*dim t.*T = 4"):
        _simple().compile({"T": 4}, backend="reference")


def test_cycle_lists_all_tensors():
    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="xx")
        y = tl.placeholder((), "float32", (t,), name="yy")
        z = tl.placeholder((), "float32", (t,), name="zz")
        x[t] = y[t] + 1
        y[t] = z[t] * 2
        z[t] = x[t] - 1
        tl.sink(x, lambda v, p: None)
    with pytest.raises(tl.CompileError, match="cycle") as err:
        compile_ref(prog, T=3)
    for name in ("xx", "yy", "zz"):
        assert repr(name) in str(err.value)


def test_self_cycle_and_cycle_through_reversal():
    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="self")
        x[t] = x[t] + 1
        tl.sink(x, lambda v, p: None)
    with pytest.raises(tl.CompileError, match="cycle.*'self'"):
        compile_ref(prog, T=3)
    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="rev")
        x[t] = x[T - 1 - t] + 1  # t = 0 reads T-1 which reads 0
        tl.sink(x, lambda v, p: None)
    with pytest.raises(tl.CompileError, match="cycle.*'rev'"):
        compile_ref(prog, T=4)


def test_prefix_including_current_point_is_a_cycle():
    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="pre")
        x[t == 0] = tl.const(1.0)
        x[t] = x[0:t + 1].sum()
        tl.sink(x, lambda v, p: None)
    with pytest.raises(tl.CompileError, match="cycle.*'pre'"):
        compile_ref(prog, T=4)


@pytest.mark.parametrize(
    "key, pattern",
    [
        (lambda t, T: t - 1, "negative shift"),
        (lambda t, T: slice(0, T), "must be"),
        (lambda t, T: (t > 0,), "conditions go alone"),
        (lambda t, T: (t + 1, 0), "more entries"),
        (lambda t, T: 0.5, "must be"),
    ],
)
def test_bad_branch_keys_are_compile_errors(key, pattern):
    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="ph")
        with pytest.raises(tl.CompileError, match=f"'ph'.*{pattern}"):
            x[key(t, T)] = tl.const(1.0)


def test_branch_key_must_use_its_own_dim():
    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        x = tl.placeholder((), "float32", (i, t), name="ph")
        with pytest.raises(tl.CompileError, match="'ph'.*only use dim i"):
            x[t, t] = tl.const(1.0)


def test_branch_on_non_placeholder():
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.zeros(3, "float32"), (t,), name="data")
        with pytest.raises(tl.CompileError, match="'data'.*not a placeholder"):
            x[t] = tl.const(1.0)


def test_rhs_with_dims_outside_placeholder():
    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        r = tl.tensor(np.zeros((2, 3), "float32"), (i, t), name="rew")
        x = tl.placeholder((), "float32", (t,), name="ph")
        with pytest.raises(tl.CompileError, match=r"'ph'.*'rew'.*dims i outside"):
            x[t] = r


def test_rhs_shape_that_does_not_broadcast():
    prog, t, T = prog_t()
    with prog:
        v = tl.tensor(np.zeros((3, 4), "float32"), (t,), name="val")
        x = tl.placeholder((2,), "float32", (t,), name="ph")
        with pytest.raises(tl.ShapeError, match=r"'ph'.*\(2,\).*'val'.*\(4,\)"):
            x[t] = v
        y = tl.placeholder((4,), "float32", (t,), name="ph2")
        with pytest.raises(tl.ShapeError, match=r"'ph2'"):
            y[t] = tl.const(np.zeros((2, 4), "float32"))  # more axes than the placeholder


def test_index_entry_uses_another_dim():
    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        r = tl.tensor(np.zeros((2, 3), "float32"), (i, t), name="rew")
        with pytest.raises(tl.ShapeError, match=r"'rew'.*r\[i, t\]|'rew'.*write one entry per domain dim"):
            r[t]


def test_condition_read_is_an_error():
    prog, t, T = prog_t()
    with prog:
        r = tl.tensor(np.zeros(3, "float32"), (t,), name="rew")
        with pytest.raises(tl.ShapeError, match="'rew'.*condition"):
            r[t > 0]


def test_shape_error_at_the_users_line_names_both_operands():
    prog, t, T = prog_t()
    with prog:
        a = tl.tensor(np.zeros((3, 2), "float32"), (t,))
        b = tl.tensor(np.zeros((3, 5), "float32"), (t,), name="bee")
        with pytest.raises(tl.ShapeError) as err:
            a * b
    msg = str(err.value)
    assert "test_errors.py:" in msg and "'bee'" in msg  # unnamed tensors: their source line


def test_unnamed_tensor_named_by_source_line_outside_timerl():
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.arange(4.0, dtype="float32"), (t,))
        y = tl.relu(x[t - 1])  # the access node also gets this file's line
        tl.sink(y, lambda v, p: None)
    with pytest.raises(tl.CompileError) as err:
        compile_ref(prog, T=4)
    msg = str(err.value)
    assert "test_errors.py:" in msg and "timerl/" not in msg


def test_empty_slice_max_runtime_fault_names_tensor_and_point():
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.arange(4.0, dtype="float32"), (t,), name="x")
        m = x[0:t].max()
        tl.sink(m, lambda v, p: None)
    with pytest.raises(tl.RuntimeFault, match=r"max.*empty.*test_errors.py:\d+.*t = 0"):
        compile_ref(prog, T=4).run()


def test_no_sink_is_an_error():
    prog, t, T = prog_t()
    with prog:
        tl.tensor(np.arange(4.0, dtype="float32"), (t,))
    with pytest.raises(tl.CompileError, match="no sink"):
        compile_ref(prog, T=4)


def test_unknown_backend():
    with pytest.raises(tl.CompileError, match="unknown backend 'gpu'"):
        _simple().compile({"T": 5}, backend="gpu")


def test_symbolic_lengths_that_disagree_are_compile_errors():
    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        x = tl.tensor(np.zeros((2, 6), "float32"), (i, t), name="x")
        pre, post = x[i, 0:t + 1], x[i, t:6]
        tl.sink(pre + post, lambda v, p: None)  # lengths t + 1 and 6 - t never agree
    with pytest.raises(tl.CompileError, match=r"length 1 but .* length 6 at i = 0, t = 0|lengths must agree"):
        prog.compile({"I": 2, "T": 6}, backend="reference")
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.zeros((4, 3), "float32"), (t,), name="x")
        tl.sink(tl.concat([x[0:t + 1], x[t:T]], axis=1), lambda v, p: None)
    with pytest.raises(tl.CompileError, match=r"concat.*lengths must agree"):
        prog.compile({"T": 4}, backend="reference")


def test_symbolic_lengths_agreeing_where_demanded_compile():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    c = {}
    with prog:
        x = tl.tensor(np.arange(6, dtype="float32"), (t,), name="x")
        y = x[0:t + 1] + x[T - 1 - t:T]  # t + 1 == t + 1
        tl.sink(y.sum(), lambda v, p: c.__setitem__(p["t"], float(v)))
    prog.compile({"T": 6}, backend="reference").run()
    assert c[2] == float(0 + 1 + 2 + 3 + 4 + 5)


def test_slice_of_tensor_whose_shape_varies_along_that_dim():
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.zeros(4, "float32"), (t,), name="x")
        w = x[t:T]
        with pytest.raises(tl.ShapeError, match=r"varies along dim t"):
            w[0:t]


def _recurrence(body, T=7):
    prog, t, T_ = prog_t()
    out = {}
    with prog:
        x = tl.placeholder((), "int64", (t,), name="x")
        body(x, t, T_)
        tl.sink(x, lambda v, p: out.__setitem__(p["t"], int(v)))
    return prog, out


def test_cycles_with_inexact_transitive_closure():
    def halves(x, t, T):
        x[t == 0] = tl.const(1)
        x[t] = x[t // 2] + x[t - 1]

    prog, out = _recurrence(halves)
    compile_ref(prog, T=7).run()
    want = [1]
    for k in range(1, 7):
        want.append(want[k // 2] + want[k - 1])
    assert [out[k] for k in range(7)] == want

    def self_at_one(x, t, T):
        x[t == 0] = tl.const(1)
        x[t] = x[(t + 1) // 2] + 1  # t = 1 reads itself

    prog, _ = _recurrence(self_at_one)
    with pytest.raises(tl.CompileError, match="cycle.*'x'"):
        compile_ref(prog, T=7)


def test_point_level_order_when_no_affine_schedule_exists():
    from timerl.ir import analysis
    from timerl.ir.polyhedral import Model

    def vshape(x, t, T):  # valid order 2, 1, 0, 3, 4, ...: no affine schedule of one statement
        x[t == 2] = tl.const(1)
        x[t < 2] = x[t + 1] + 1
        x[t] = x[t - 1] * 2

    prog, out = _recurrence(vshape)
    compile_ref(prog, T=7).run()
    assert [out[k] for k in range(7)] == [3, 2, 1, 2, 4, 8, 16]

    def reversal(x, t, T):
        x[t] = x[T - 1 - t] + 1

    prog, _ = _recurrence(reversal)
    model = Model(prog, prog.pdg, {"T": 4})
    members = [n for n in prog.pdg.nodes if prog.pdg.rec(n).op.value in ("merge", "access", "binary")]
    dem = {n: model.points(n) for n in members}
    with pytest.raises(tl.CompileError, match=r"cycle.*'x'.*at t = "):
        analysis._point_demand(model, prog.pdg, members, dem, dem)


def test_cycle_among_points_nothing_reads_is_not_an_error():
    def body(x, t, T):
        x[t == 0] = tl.const(5)
        x[t] = x[t] + 1  # every t > 0 reads itself, but only x[0] is demanded

    prog, t, T = prog_t()
    got = {}
    with prog:
        x = tl.placeholder((), "int64", (t,), name="x")
        body(x, t, T)
        tl.sink(x[0], lambda v, p: got.__setitem__("x0", int(v)))
    compile_ref(prog, T=4).run()
    assert got == {"x0": 5}


def test_demand_inside_a_cycle_is_what_is_read():
    prog, t, T = prog_t()
    calls = []
    with prog:
        x = tl.placeholder((), "float32", (t,), name="x")
        x[t == 0] = tl.const(1.0)
        (y,) = tl.udf(lambda v, k: calls.append(int(k)) or v * 2, [x, tl.dim_value(t)], [()], ["float32"])
        x[t + 1] = y
        tl.sink(x[3], lambda v, p: None)  # needs y at 0, 1, 2 only
    exe = compile_ref(prog, T=8)
    exe.run()
    assert calls == [0, 1, 2]
    dem = exe.analysis.demand[y.nid]
    assert dem.count_val().to_python() == 3


def test_reference_plan_names_the_tensors_of_a_point_cycle():
    from timerl.ir import analysis

    prog, t, T = prog_t()
    with prog:
        x = tl.placeholder((), "float32", (t,), name="xx")
        y = tl.placeholder((), "float32", (t,), name="yy")
        x[t] = y[t] + 1
        y[t] = x[t] * 2
        tl.sink(x, lambda v, p: None)
    from timerl.runtime.reference import ReferenceExecutable

    # hand the executor a demand without the analysis' own cycle check
    model = analysis.Model(prog, prog.pdg, {"T": 3})
    live = sorted(analysis.live_nodes(prog.pdg))
    demand = {n: model.box_set(n) if prog.pdg.rec(n).op.value == "sink" else model.points(n) for n in live}
    fake = analysis.Analysis(model, live, demand)
    with pytest.raises(tl.CompileError, match=r"cycle.*'xx'.*'yy'|cycle.*'yy'.*'xx'"):
        ReferenceExecutable(prog, prog.pdg.subgraph(live).copy(), {"T": 3}, 0, fake, {})


@pytest.mark.parametrize("backend", ["reference", "numpy", "numba"])
def test_slice_empty_at_every_point(backend):
    """x[t:0] reads nothing anywhere: x itself is never demanded (it was an IndexError at compile)."""
    prog, t, T = prog_t()
    got = {}
    with prog:
        x = tl.tensor(np.arange(3, dtype="float32"), (t,), name="x")
        tl.sink(x[t:0].sum() + 1.0, lambda v, p: got.__setitem__(p["t"], float(v)))
    for passes in (None, {"dce": False}):  # with dce, x stays as the (never computed) producer of the slice
        got.clear()
        prog.compile({"T": 3}, backend=backend, passes=passes).run()
        assert got == {0: 1.0, 1: 1.0, 2: 1.0}
    prog, t, T = prog_t()
    with prog:
        x = tl.tensor(np.arange(3, dtype="float32"), (t,), name="x")
        tl.sink(x[t:0].max(), lambda v, p: None, name="m")
    with pytest.raises(tl.RuntimeFault, match=r"max over an empty slice .* t = 0"):
        prog.compile({"T": 3}, backend=backend).run()
