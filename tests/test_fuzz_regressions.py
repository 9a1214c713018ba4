"""Defects found by differential fuzzing (``python -m tests.fuzz``), one minimal program each."""

import re

import numpy as np
import pytest

import timerl as tl


def _least_budget(build, bounds, backend):
    with pytest.raises(tl.CompileError) as err:
        build().compile(bounds, backend=backend, memory_budget=1)
    return int(re.search(r"memory_budget>=(\d+)", str(err.value)).group(1))


def test_least_memory_budget_holds_when_a_ufunc_cannot_write_in_place():
    # fuzz seed 26: (|x| + 0.5) ** n with n int64 runs the ufunc in float64 and casts back,
    # so the run does not write into x's buffer; the planner counted that donation anyway,
    # planned a peak 16 bytes under the run's and chose a schedule that broke the budget
    def build():
        prog = tl.Program("t")
        (t,) = prog.dims
        with prog:
            x = tl.tensor(np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4), domain=(t,))
            n = tl.const(np.array([2], dtype="int64"))
            tl.sink((tl.abs(x) + 0.5) ** n, lambda v, p: None)
            tl.sink(x[1].spatial[1:], lambda v, p: None)
        return prog

    least = _least_budget(build, {"T": 2}, "numpy")
    exe = build().compile({"T": 2}, backend="numpy", memory_budget=least).run()
    assert exe.stats["peak_bytes"] <= least
    assert exe.stats["planned_peak_bytes"] == exe.stats["peak_bytes"]


def _execution_order(node, env=None):
    """The Calls of a schedule tree in the order a run executes them."""
    from timerl.schedule.tree import Call, Guard, Loop, Seq

    env = dict(env or {})
    if isinstance(node, Call):
        return [(node.kind, node.ident, tuple(eval(a, {}, env) for a in node.args))]
    if isinstance(node, Seq):
        return [c for ch in node.children for c in _execution_order(ch, env)]
    if isinstance(node, Guard):
        branch = node.then if eval(node.cond, {"max": max, "min": min}, env) else node.other
        return [] if branch is None else _execution_order(branch, env)
    assert isinstance(node, Loop) and node.stop is not None
    out, v = [], eval(node.init, {"max": max, "min": min}, env)
    while v < eval(node.stop, {"max": max, "min": min}, {**env, node.it: v}):
        out += _execution_order(node.body, {**env, node.it: v})
        v += node.step
    return out


def test_schedule_tree_keeps_a_free_with_two_pieces_after_its_last_reader():
    # fuzz seed 20247 (group pass off): F0 frees S0[0] after its reader S29[0] and S0[1..2]
    # elsewhere; isl's AST generator, given one statement with that two-piece schedule,
    # placed F0(0) before S29(0) (read after free). Each piece is now its own statement.
    import islpy as isl

    from timerl.schedule.tree import build_tree

    c = "P_I = 3 and P_T = 2"
    T = isl.UnionMap(f"""[P_I, P_T] -> {{
        S29[x0] -> [x0, 0, 0, 0, 0, 1, 1, 0, 14, 0] : {c} and 0 <= x0 <= 2;
        S30[x0] -> [0, 0, 0, 0, x0, 1, 0, 2, 15, 0] : {c} and 0 <= x0 <= 1;
        S28[x0] -> [x0, 0, 4, 0, 0, 0, 0, 0, 13, 0] : {c} and 0 <= x0 <= 2;
        S7[x0] -> [0, 0, 0, 0, x0, 1, 0, 1, 5, 0] : {c} and 0 <= x0 <= 1 }}""")
    frees = [isl.Map(f"""[P_I, P_T] -> {{ F16[o0] -> [1 + o0, 0, 0, 1, 0, 0, 0, 0, 8, 2] : {c} and 0 <= o0 <= 1;
                                          F16[o0 = 2] -> [2, 0, 4, 0, 0, 0, 0, 0, 13, 2] : {c} }}"""),
             isl.Map(f"""[P_I, P_T] -> {{ F0[o0] -> [o0, 0, 1, 0, 0, 0, 0, 0, 11, 1] : {c} and 0 < o0 <= 2;
                                          F0[o0 = 0] -> [0, 0, 0, 0, 0, 1, 1, 0, 14, 1] : {c} }}""")]
    ctx = isl.Set(f"[P_I, P_T] -> {{ : {c} }}")
    order = _execution_order(build_tree(T, frees, ctx, {"I": 3, "T": 2}))
    assert order.index(("free", 0, (0,))) == order.index(("exec", 29, (0,))) + 1
    assert order.index(("free", 16, (2,))) > order.index(("exec", 28, (2,)))
    assert len(order) == len(set(order)) == 3 + 2 + 3 + 2 + 3 + 3


def test_numba_chain_reads_a_smaller_operand_by_its_own_shape():
    # fuzz seed 28 (first generator): abs/relu/relu of a (1,) value, then minimum with a (2,)
    # one and abs: the (2,)-chain read the (1,)-chain's output at index 1 (garbage); fixed
    # on main (bc5e675, operands indexed by their own static shapes)
    def run(backend):
        out = {}
        prog = tl.Program("t")
        with prog:
            x = tl.tensor(np.array([-0.3], "float32"))
            u = tl.tensor(np.array([0.9, 0.1], "float32"))
            tl.sink(tl.abs(tl.minimum(tl.relu(tl.relu(tl.abs(x))), u)), lambda v, p: out.__setitem__("v", v.copy()))
        prog.compile({}, backend=backend).run()
        return out["v"]

    np.testing.assert_array_equal(run("numba"), run("reference"))
    np.testing.assert_array_equal(run("reference"), np.array([0.3, 0.1], "float32"))


@pytest.mark.parametrize("backend", ["reference", "numpy", "numba"])
def test_checking_mode_accepts_the_mean_of_an_empty_slice(backend):
    # fuzz (empty windows): x[t + 1:T].mean() is NaN at t = T - 1 by definition (API: an empty
    # slice's mean is NaN); checking mode's non-finite check raised a RuntimeFault there
    out = {}
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.arange(1, 4, dtype="float32"), domain=(t,))
        tl.sink(x[t + 1:T].mean(axis=0), lambda v, p: out.__setitem__(p["t"], float(v)))
    prog.compile({"T": 3}, backend=backend, check=True).run()
    assert out[0] == 2.5 and out[1] == 3.0 and np.isnan(out[2])


def test_checking_mode_still_faults_on_a_nan_from_finite_inputs():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        x = tl.tensor(np.arange(1, 4, dtype="float32"), domain=(t,))
        tl.sink(tl.log(x - 2.5).mean(), lambda v, p: None)
    with pytest.raises(tl.RuntimeFault, match="non-finite"):
        prog.compile({"T": 3}, backend="numpy", check=True).run()
