"""Compiled loops (timerl.runtime.loops): a loop of statement kernels runs as one numba function
with the interpreter's values, byte counts and faults; the loops it declines say why."""

import numpy as np
import pytest
from fuzz import check

import timerl as tl
from timerl.ir.ops import Op
from timerl.runtime import loops

W = np.random.default_rng(0).normal(size=(4, 4)).astype("float32")
J = np.tile(np.array([3, 1, 0, 2], np.int64), (2, 6, 1))


def _recurrence(j, shift=False):
    """x[i, t+1] = tanh(x[i, t][j[i, t]] @ W) + 0.5 over T = 6 steps, its sum over t sunk per i:
    the loop over t holds only statement kernels, constants and data reads."""
    prog = tl.Program("i t")
    (i, t), (_, T) = prog.dims, prog.bounds
    got = {}
    with prog:
        w = tl.tensor(W, name="w")
        jj = tl.tensor(j, (i, t), name="j")
        x = tl.placeholder((4,), "float32", (i, t), name="x")
        x[i, 0] = tl.tensor(np.ones(4, "float32"), name="x0")
        step = tl.tanh(x[i, t].take(jj, axis=0) @ w) + 0.5
        if shift:  # a dim's value inside the loop too
            step = step + tl.dim_value(t).astype("float32") * 0.25
        x[i, t + 1] = step
        tl.sink(x[i, 0:T].sum(axis=0), lambda v, p: got.__setitem__(p["i"], np.array(v)))
    exe = prog.compile(bounds={"I": 2, "T": 6}, backend="numba")
    return exe, got


def _expect(j, shift=False):
    out = {}
    for k in range(2):
        x, acc = np.ones(4, "float32"), np.zeros(4, "float32")
        for s in range(6):
            acc = acc + x
            x = np.tanh(x[j[k, s]] @ W) + np.float32(0.5) + np.float32(0.25 * s if shift else 0.0)
        out[k] = acc
    return out


@pytest.mark.parametrize("shift", [False, True])
def test_a_recurrence_runs_as_a_compiled_loop_with_the_interpreters_values_and_bytes(shift):
    exe, got = _recurrence(J, shift)
    (cl,) = exe.stats["compiled_loops"]
    x_next = [n for n in exe.pdg.nodes if exe.pdg.rec(n).op is Op.MATMUL]
    assert x_next and exe.plan.problem.of[x_next[0]] in cl["statements"]
    exe.run()
    with tl.config.override(compile_loops=False):
        plain, want = _recurrence(J, shift)
    assert plain.stats["compiled_loops"] == []
    plain.run()
    for k in range(2):
        np.testing.assert_array_equal(got[k], want[k])  # the same kernels in the same order
        np.testing.assert_allclose(got[k], _expect(J, shift)[k], rtol=1e-5)
    assert exe.stats["peak_bytes"] == plain.stats["peak_bytes"] > 0  # live bytes counted alike


def test_values_written_and_freed_inside_one_loop_call_stay_inside_it():
    """The loop over t returns only what is read after it (LoopCompiler._inside): the values
    its own statements write, read and free at the same i stay in the function; after the run the
    program holds as many values as the interpreter's, and the same bytes."""
    exe, got = _recurrence(J, True)
    (cl,) = exe.stats["compiled_loops"]
    assert cl["inside"] > 0
    exe.run()
    with tl.config.override(compile_loops=False):
        plain, want = _recurrence(J, True)
    plain.run()
    slots = [len(s) for s in (exe._stores[-1], plain._stores[-1])]
    assert slots[0] == slots[1]
    assert exe._mem() == plain._mem()
    for k in range(2):
        np.testing.assert_array_equal(got[k], want[k])


def _chain(backend, **kw):
    """x[i, t+1] from x[i, t] through values each read by the next, h read twice and again after
    the loop (its rows, by a sink over 0:T), a take and t's value among them."""
    prog = tl.Program("i t")
    (i, t), (_, T) = prog.dims, prog.bounds
    got = {}
    with prog:
        w, jj = tl.tensor(W, name="w"), tl.tensor(J, (i, t), name="j")
        x = tl.placeholder((4,), "float32", (i, t), name="x")
        x[i, 0] = tl.tensor(np.ones(4, "float32"), name="x0")
        h = tl.tanh(x[i, t] @ w)
        a = h * 0.5 + x[i, t]
        b = a.take(jj, axis=0) + tl.dim_value(t).astype("float32") * 0.25
        x[i, t + 1] = b - h * 0.1
        tl.sink(x[i, 0:T].sum(axis=0), lambda v, p: got.__setitem__(("x", p["i"]), np.array(v)))
        tl.sink(h[i, 0:T].max(axis=0), lambda v, p: got.__setitem__(("h", p["i"]), np.array(v)))
    exe = prog.compile(bounds={"I": 2, "T": 6}, backend=backend, **kw)
    exe.run()
    return exe, got


@pytest.mark.parametrize("kw", [kw for be, kw in check.configs(("numba",)) if be == "numba" and "memory_budget" not in kw],
                         ids=lambda kw: check.label("numba", kw))
def test_compiled_loops_match_the_reference_executor_with_every_pass_switch(kw):
    """The differential check of tests/fuzz (whose random programs have no loop that compiles: a
    sink or a progress tick sits in each) on a program whose loop over t compiles, with values
    kept inside it, under every pass switch of the numba backend."""
    _, want = _chain("reference")
    exe, got = _chain("numba", **kw)
    if not kw:
        assert [cl["inside"] > 0 for cl in exe.stats["compiled_loops"]] == [True], exe.stats["interpreted_loops"]
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=check.TOL["float32"], err_msg=str(key))


def test_a_kernel_fault_inside_a_compiled_loop_names_the_tensor_and_point():
    """The take at i = 1, t = 3 reads index 9 of 4: the compiled loop stops, the interpreter runs it
    again and raises its own fault, and nothing the sink had received is lost."""
    bad = J.copy()
    bad[1, 3, 2] = 9
    exe, got = _recurrence(bad)
    assert exe.stats["compiled_loops"]
    with pytest.raises(tl.RuntimeFault, match=r"take.*i = 1, t = 3.*index 9"):
        exe.run()
    np.testing.assert_allclose(got[0], _expect(J)[0], rtol=1e-5)  # i = 0 (its indices all valid) ran before


def test_the_same_loop_compiled_again_in_one_process_is_reused():
    first, _ = _recurrence(J)
    again, got = _recurrence(J)
    assert again.stats["compiled_loops"] == first.stats["compiled_loops"] != []
    again.run()
    np.testing.assert_allclose(got[1], _expect(J)[1], rtol=1e-5)


def test_a_loop_too_long_to_compile_quickly_stays_interpreted_and_says_why(monkeypatch):
    monkeypatch.setattr(loops, "MAX_LINES", 5)
    exe, got = _recurrence(J)
    assert exe.stats["compiled_loops"] == []
    assert any("lines, more than 5" in d["reason"] for d in exe.stats["interpreted_loops"])
    exe.run()
    np.testing.assert_allclose(got[1], _expect(J)[1], rtol=1e-5)


def test_ppo_acting_loop_runs_compiled_and_logs_the_interpreters_values():
    """Item 4 of the compiled-env issue: PPO's loop over t (policy, sample, compiled CartPole step)
    is one numba function; its logged losses and returns are those of the interpreted loop, bit for
    bit, and its live bytes peak alike."""
    kw = dict(env="CartPole-v1", num_envs=2, num_steps=8, total_steps=48, epochs=2, minibatches=2, hidden=8)
    exe = tl.rl.ppo(**kw)
    pdg, of = exe.pdg, exe.plan.problem.of
    sample = [n for n in of if pdg.rec(n).op is Op.RANDOM and "Categorical.sample" in pdg.rec(n).name]
    assert len(sample) == 1
    assert any(of[sample[0]] in cl["statements"] for cl in exe.stats["compiled_loops"]), \
        exe.stats["interpreted_loops"]
    exe.run()
    with tl.config.override(compile_loops=False):
        plain = tl.rl.ppo(**kw)
    plain.run()
    assert len(exe.history.rows) == len(plain.history.rows) > 0
    for got, want in zip(exe.history.rows, plain.history.rows):
        for key in ("pg_loss", "v_loss", "entropy", "approx_kl", "mean_return", "episodes"):
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)  # nan before an episode ends
    assert exe.stats["peak_bytes"] == plain.stats["peak_bytes"]
