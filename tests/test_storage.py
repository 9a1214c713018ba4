"""Storage kinds: block stores for slice reads, circular buffers for windows, point stores.

Expectations are independent of the planner: the kinds follow from each program's reads
(written out by hand below), values come from the reference executor or numpy loops,
and byte counts from array sizes.
"""

import dataclasses
import re

import numpy as np
import pytest
from programs import EXPECTED, PROGRAMS, assert_close, run

import timerl as tl
from timerl.ir.ops import Op
from timerl.runtime.executable import Executable
from timerl.runtime.interpreter import Lowering
from timerl.runtime.stores import BlockStore
from timerl.schedule.tree import Call, Guard, Loop, Seq

# what each registry program's slice reads call for (programs/recurrences.py, spatial.py):
# (tensor position in the header order) kind, dim, length or slots, spatial shape
KINDS = {
    "const_slices": ["block along t (6 x (3,)) float32"],  # x[i, 0:T], x[i, 1:4]
    "mc": ["block along t (6 x ()) float32"],  # r[i, t:T]: not of constant length
    "mlp": ["block along t (6 x (3,)) float32"],  # x[i, 0:T] @ w1
    "nstep": ["circular along t, 3 slots x () float32"],  # r[i, t:min(t + 3, T)]: points t..t+2 live
    "outer_slice": ["block along i (2 x (3,)) float32"],  # x[0:I, t]
    # h[i, 1:4] (points 1..3 of the ring), l[i, 0:T]; with vectorize on, neither needs a store
    "per_t": ["circular along t, 5 slots x (8,) float32", "block along t (6 x ()) float32"],
    "prefix_mean": ["block along t (6 x (3,)) float32"],  # x[i, 0:t + 1]
}
SLICED = sorted(KINDS)


def headers(exe):
    return [re.sub(r"^store S\d+ '[^']*': ", "", ln) for ln in str(exe.schedule).splitlines()
            if ln.startswith("store ")]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_registry_storage_kind(name):
    prog, bounds, _ = PROGRAMS[name]()
    # the reads as written: vectorize would read x's data whole (x[i, 0:T] needs no store at all), and
    # reuse would have mlp's learner read the acting layer's block instead of x's
    exe = prog.compile(bounds, backend="numpy", passes={"vectorize": False, "reuse": False})
    assert headers(exe) == KINDS.get(name, [])
    if name in KINDS:
        # the generated code reads slices from the block/ring (a BlockStore's gather, or rows of the
        # block's one array when it never holds two blocks), never stacks points
        rows = re.search(r"\bb\d+\[", exe.source) or "ring_rows(" in exe.source
        assert (".gather((" in exe.source or rows) and "gather(s" not in exe.source


def _run_storage(name, storage, backend="numpy", check=False):
    """Run registry program ``name`` with the schedule's storage kinds of mode ``storage``."""
    prog, bounds, collect = PROGRAMS[name]()
    exe = prog.compile(bounds, backend=backend)
    plan = exe.plan.with_storage(storage)
    alt = Executable(exe.prog, exe.pdg, exe.bounds, 0, exe.analysis, plan, backend, check, {}, None)
    alt.run()
    assert alt._mem()[0] == 0  # every allocation was released by the frees
    assert alt.planned_peak() == alt.stats["peak_bytes"]
    return collect, alt


@pytest.mark.parametrize("name", SLICED)
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_slice_programs_match_reference_and_numpy_loops(name, backend):
    got, _ = _run_storage(name, "default", backend)
    assert_close(got, run(name, backend="reference"))
    assert_close(got, EXPECTED[name]())


@pytest.mark.parametrize("name", SLICED)
@pytest.mark.parametrize("storage", ["block", "points"])
def test_every_storage_alternative_gives_the_same_values_checked(name, storage):
    got, alt = _run_storage(name, storage, check=True)
    assert_close(got, EXPECTED[name]())
    assert all(st.kind != "circular" for st in alt.plan.kinds.values())
    if storage == "points":
        assert all(st.kind == "points" for st in alt.plan.kinds.values())


def test_block_store_views_and_ring_copies():
    # block: a slice read is a view of the preallocated array, not a copy
    b = BlockStore(1, 0, 5, (2,), "float32")
    pts = {(0, t): np.full(2, t, "float32") for t in range(5)}
    added = [b.put(k, v) for k, v in pts.items()]
    assert added == [5 * 2 * 4, 0, 0, 0, 0]  # the whole block is counted when it is allocated
    got = b.gather((0, range(1, 4)))
    assert np.shares_memory(got, b.blocks[(0,)][0])
    np.testing.assert_array_equal(got, np.stack([pts[0, t] for t in range(1, 4)]))
    assert b.gather((0, range(3, 3))).shape == (0, 2)
    assert [b.free((0, t)) for t in range(5)] == [0, 0, 0, 0, 40] and not b
    # ring of 3 slots: a wrapping window reads the right points, as a copy
    r = BlockStore(0, 0, 3, (), "float64", ring=True)
    for t in range(5):
        r.put((t,), np.float64(10 * t))
        if t >= 2:
            w = r.gather((range(t - 2, t + 1),))
            np.testing.assert_array_equal(w, [10 * (t - 2), 10 * (t - 1), 10 * t])
            assert not np.shares_memory(w, r.blocks[()][0])
            r.free((t - 2,))
    assert (4,) in r and (1,) not in r and r.holder((1,)) == 4


def _window_prog(mc, n=3):
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    out = {}
    with prog:
        o = tl.placeholder((4,), "float32", (t,), name="o")
        o[0] = tl.zeros((4,))
        o[t + 1] = tl.tanh(o[t] * 0.9 + 0.1)
        r = tl.placeholder((), "float32", (t,), name="r")
        r[t] = (o[t] * 2.0).sum()
        w = r[t:T] if mc else r[t:tl.min(t + n, T)]
        tl.sink(w.sum(), lambda v, p: out.__setitem__(p["t"], float(v)))
    return prog, out


def _window_expect(mc, T, n=3):
    o = np.zeros(4, "float32")
    r = []
    for _ in range(T):
        r.append(float((o * 2).sum()))
        o = np.tanh(o * np.float32(0.9) + np.float32(0.1))
    return {k: sum(r[k:T if mc else min(k + n, T)]) for k in range(T)}


def test_window_peak_flat_with_a_ring_while_monte_carlo_grows():
    peaks = {}
    for mc in (False, True):
        for T in (40, 320):
            prog, out = _window_prog(mc)
            exe = prog.compile({"T": T}, backend="numpy")
            exe.run()
            want = _window_expect(mc, T)
            assert sorted(out) == sorted(want)
            np.testing.assert_allclose([out[k] for k in want], [want[k] for k in want], rtol=1e-4, atol=1e-4)
            assert exe.planned_peak() == exe.stats["peak_bytes"]
            peaks[mc, T] = exe.stats["peak_bytes"]
            assert headers(exe) == (["block along t (%d x ()) float32" % T] if mc
                                    else ["circular along t, 3 slots x () float32"])
            if mc:  # the whole block of r (T float32) is live at once
                assert exe.stats["peak_bytes"] >= 4 * T
    assert peaks[False, 40] == peaks[False, 320]
    assert peaks[True, 320] > 4 * peaks[True, 40]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ring_slots_follow_the_window(n):
    # the schedule fuses the reader of r[t:t+n] with the writer of r[t+n-1]: n points live
    prog, out = _window_prog(False, n)
    exe = prog.compile({"T": 12}, backend="numpy", check=True)
    exe.run()
    assert headers(exe) == [f"circular along t, {n} slots x () float32"]
    want = _window_expect(False, 12, n)
    np.testing.assert_allclose([out[k] for k in want], [want[k] for k in want], rtol=1e-4, atol=1e-4)


def test_block_alternative_grows_and_the_budget_uses_the_same_accounting():
    peaks = {}
    for T in (40, 80):
        prog, _ = _window_prog(False)
        exe = prog.compile({"T": T}, backend="numpy")
        exe.run()
        ring = exe.stats["peak_bytes"]
        peaks[T] = {s: exe.plan.with_storage(s).planned_peak(exe.prog, exe.pdg, exe.bounds, 0)
                    for s in ("block", "points")}
        peaks[T]["default"] = ring
    # a block of r holds all T points (4 bytes each) where the ring holds 3 slots
    assert peaks[80]["block"] - peaks[40]["block"] == 40 * 4
    assert peaks[80]["default"] == peaks[40]["default"] and peaks[80]["points"] == peaks[40]["points"]
    # a refusal quotes the least planned peak, which a run with that budget meets exactly
    prog, _ = _window_prog(False)
    with pytest.raises(tl.CompileError) as err:
        prog.compile({"T": 40}, backend="numpy", memory_budget=16)
    least = int(str(err.value).split("memory_budget>=")[1].split()[0])
    assert least <= min(peaks[40].values())
    prog, out = _window_prog(False)
    exe = prog.compile({"T": 40}, backend="numpy", memory_budget=least)
    exe.run()
    assert exe.stats["peak_bytes"] == least == exe.stats["planned_peak_bytes"] and len(out) == 40
    want = _window_expect(False, 40)
    np.testing.assert_allclose([out[k] for k in want], [want[k] for k in want], rtol=1e-4, atol=1e-4)


def _sparse_slice_prog():
    # x[t] demanded only at t = 1, 2, 3 (slice) and T - 1: a block spans 0..T-1
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.arange(40 * 8, dtype="float32").reshape(40, 8)
    out = {}
    with prog:
        xt = tl.tensor(x, (t,), name="x")
        v = xt[1:4].sum(axis=0) + xt[T - 1]
        tl.sink(v, lambda a, p: out.__setitem__((), a.copy()))
    return prog, out, x


def test_budget_picks_point_store_where_the_block_costs_more():
    prog, out, x = _sparse_slice_prog()
    exe = prog.compile({"T": 40}, backend="numpy")
    # demanded t = 1..39: the block spans 39 points of 8 float32 though only 4 are read
    assert headers(exe) == ["block along t (39 x (8,)) float32"]
    exe.run()
    block_peak = exe.stats["peak_bytes"]
    assert block_peak >= 39 * 8 * 4
    np.testing.assert_allclose(out[()], x[1:4].sum(0) + x[39])
    points = exe.plan.with_storage("points").planned_peak(exe.prog, exe.pdg, exe.bounds, 0)
    assert points < block_peak
    prog, out, x = _sparse_slice_prog()
    exe = prog.compile({"T": 40}, backend="numpy", memory_budget=points)
    assert headers(exe) == ["points (alternative tried for memory_budget)"]
    exe.run()
    assert exe.stats["peak_bytes"] == points <= 39 * 8 * 4
    np.testing.assert_allclose(out[()], x[1:4].sum(0) + x[39])


def _tampered(exe, tree, kinds=None):
    plan = exe.plan
    low = Lowering(exe.prog, exe.pdg, exe.bounds, 0, plan.problem.groups, tree, {}, "check", "numpy",
                   plan.inline, kinds if kinds is not None else plan.kinds)
    _, run_, _, _, _ = low.build(plan.frees)
    return run_


def test_checking_mode_catches_a_ring_too_small():
    prog, _ = _window_prog(False)
    exe = prog.compile({"T": 8}, backend="numpy", check=True)
    exe.run()
    (node, st), = exe.plan.kinds.items()
    small = {node: dataclasses.replace(st, length=st.length - 1)}
    with pytest.raises(tl.RuntimeFault, match=r"tensor 'r' is read at point \(t = \d\) after its circular-buffer "
                                              r"slot was overwritten by the point at t = \d"):
        _tampered(exe, exe.plan.tree, small)()


def test_checking_mode_catches_a_block_point_freed_before_its_reader():
    prog, _ = _window_prog(True)
    exe = prog.compile({"T": 6}, backend="numpy", check=True)
    exe.run()
    (node, st), = exe.plan.kinds.items()
    assert st.kind == "block"
    # free r at t = 0 right after the first execution that writes it, before its readers
    calls = exe.plan.schedule.calls()
    writer = exe.plan.problem.of[node]
    k = next(j for j, c in enumerate(calls) if c.kind == "exec" and c.ident == writer)

    def splice(tree):
        if isinstance(tree, Call) and tree.kind == "exec" and tree.ident == writer:
            return Seq([tree, Guard(f"{tree.args[0]} == 0", Call("free", node, tree.args))])
        if isinstance(tree, Seq):
            return Seq([splice(c) for c in tree.children])
        if isinstance(tree, Loop):
            return dataclasses.replace(tree, body=splice(tree.body))
        if isinstance(tree, Guard):
            return dataclasses.replace(tree, then=splice(tree.then),
                                       other=None if tree.other is None else splice(tree.other))
        return tree

    assert k >= 0
    with pytest.raises(tl.RuntimeFault, match=r"tensor 'r' is read at point \(t = 0\) after it was freed"):
        _tampered(exe, splice(exe.plan.tree))()


def test_numba_planned_peak_counts_what_its_kernels_store():
    """Statement kernels store only their outputs and never write in place: the plan (and so a
    memory_budget) counts the same bytes as the numba run, not the numpy run's."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.linspace(-1, 1, 6 * 64, dtype="float32").reshape(6, 64)
    with prog:
        xt = tl.tensor(x, (t,), name="x")
        y = (xt * 2.0 + 1.0) * xt - 0.5          # members read only inside the kernel: never stored
        z = tl.exp(y) * y + y
        tl.sink(z.sum(), lambda v, p: None)
    exe = prog.compile({"T": 6}, backend="numba")
    exe.run()
    assert exe.stats["kernels"] >= 1 and "evaluate(" not in exe.source
    assert exe.planned_peak() == exe.stats["peak_bytes"]


# -- slots: one variable for a tensor that never holds two live points ----------------------------


def _pair_prog():
    """``y[t] = x[t] + x[t - 1]``: ``x`` holds two live points (t - 1 and t) when ``y[t]`` runs;
    the returns program ``g[t] = r[t] + gamma g[t + 1]`` never does (``g[t + 1]`` is read and
    freed before ``g[t]`` is written)."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    d = np.linspace(0, 1, 5 * 3, dtype="float32").reshape(5, 3)
    out = {}
    with prog:
        x = tl.exp(tl.tensor(d, (t,), name="d"))
        y = tl.placeholder((3,), "float32", (t,), name="y")
        y[0] = x
        y[t] = x + x[t - 1]
        tl.sink(y, lambda v, p: out.__setitem__(p["t"], v.copy()))
    want = np.exp(d)
    want[1:] += np.exp(d[:-1])
    return prog, out, want


def _node(exe, name):
    if name == "x":  # the pair program's exp
        return next(n for n in exe.pdg.nodes if exe.pdg.rec(n).attrs.get("fn") == "exp")
    return next(n for n in exe.pdg.nodes if exe.pdg.rec(n).name == name)


def test_slots_are_the_tensors_with_one_live_point_and_keep_values():
    prog, bounds, _ = PROGRAMS["returns"]()
    exe = prog.compile(bounds, backend="numpy", check=True)
    assert _node(exe, "g") in exe.plan.slots
    prog, out, want = _pair_prog()
    exe = prog.compile({"T": 5}, backend="numpy", check=True)
    x = _node(exe, "x")
    # x[t - 1] and x[t] are live together when y[t] runs: two cells along t, indexed by t % 2
    assert exe.plan.slots[x] == (0, 2) and f"c{x}[(d_t) % 2]" in exe.source
    for n, (_, count) in exe.plan.slots.items():  # a slot is one variable: no point key is looked up
        assert (f"v{n} = o" if count == 1 else f"c{n}[") in exe.source and f"s{n}[" not in exe.source
    exe.run()
    np.testing.assert_allclose(np.stack([out[k] for k in range(5)]), want, rtol=1e-6)
    for name in ("returns", "env", "nstep", "mlp"):
        assert_close(run(name, backend="numpy"), run(name, backend="reference"))


def test_checking_mode_catches_a_slot_that_holds_two_live_points():
    prog, _, _ = _pair_prog()
    exe = prog.compile({"T": 5}, backend="numpy", check=True)
    plan, x = exe.plan, _node(exe, "x")
    low = Lowering(exe.prog, exe.pdg, exe.bounds, 0, plan.problem.groups, plan.tree, {}, "check", "numpy",
                   plan.inline, plan.kinds, {**plan.slots, x: (-1, 1)})
    _, run_, _, _, _ = low.build(plan.frees)
    with pytest.raises(tl.RuntimeFault, match=r"tensor '[^']+' is (read|freed) at point \(t = \d\) after its "
                                              r"slot was overwritten by the point \(t = \d\)"):
        run_()


def test_a_block_store_that_never_holds_two_blocks_is_one_array():
    # const_slices reads x[i, 0:T] and x[i, 1:4]: one block along t per i, and iteration i's block
    # is freed before i + 1 writes; outer_slice reads x[0:I, t]: the writer runs i outer, t inner,
    # so every t's block along i is live at once
    for name, single in (("const_slices", True), ("outer_slice", False)):
        prog, bounds, _ = PROGRAMS[name]()
        exe = prog.compile(bounds, backend="numpy", passes={"vectorize": False, "reuse": False})
        (node, st), = exe.plan.kinds.items()
        assert (node in exe.plan.single) == single
        assert (f"b{node}[" in exe.source) == single and (f"s{node}.put(" in exe.source) == (not single)
        exe.run()
        assert exe._mem()[0] == 0 and exe.planned_peak() == exe.stats["peak_bytes"]
        got = run(name, backend="numpy", passes={"vectorize": False, "reuse": False})
        assert_close(got, run(name, backend="reference"))


@pytest.mark.parametrize("algo,kw", [("ppo", {}), ("reinforce", {}), ("reinforce", {"nstep": 3})])
def test_builtin_algorithms_address_every_buffer_by_an_integer(algo, kw):
    exe = getattr(tl.rl, algo)(total_steps=2 * 6 * 2, env="CartPole-v1", num_envs=2, num_steps=6, backend="numpy",
                               compiled_env=False, **kw)   # the host env's step UDF and its outputs' stores
    low = exe.plan.lowered
    kinds = {b.kind + ("+single" if b.single else "") for b in low.buffers.values()}
    assert kinds <= {"slot", "cells", "block+single", "circular+single"}, kinds
    assert ".put(" not in exe.source and ".gather(" not in exe.source
    if "nstep" in kw:  # the env step's (obs, reward, done): the window reads the reward's own ring
        (udf,) = [n for n in low.buffers if exe.pdg.rec(n).op is Op.UDF and len(exe.pdg.rec(n).shapes) == 3]
        assert low.buffers[udf].kind in ("slot", "cells")  # the observation is not kept for the window
        (rew,) = [c for c, e in exe.pdg.consumers(udf) if e.out == 1 and exe.pdg.rec(c).op is Op.ACCESS]
        assert low.buffers[rew].kind == "circular" and len(exe.pdg.rec(rew).shapes) == 1


def test_a_window_of_one_output_gets_a_ring_of_its_own():
    prog, out, want = _two_output_prog(True)
    exe = prog.compile({"T": 8}, backend="numpy")
    (node, st), = exe.plan.kinds.items()
    assert st.kind == "circular" and len(st.outs) == 1 and exe.pdg.rec(node).op is Op.ACCESS
    (udf,) = [n for n in exe.pdg.nodes if exe.pdg.rec(n).op is Op.UDF]
    assert exe.plan.lowered.buffers[udf].kind in ("slot", "cells")
    exe.run()
    np.testing.assert_allclose([out[k] for k in range(8)], want, rtol=1e-6)
    assert exe.planned_peak() == exe.stats["peak_bytes"]


def _two_output_prog(window):
    """A UDF of two outputs per step ``(2 x, x + 1)``; its second output read by the slices
    ``b[t:min(t + 3, T)]`` (a window: a ring) or ``b[0:T]`` (a block), its first at points."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    d = np.linspace(-1, 1, 8, dtype="float32")
    out = {}

    def two(x):
        return np.float32(2) * x, x + np.float32(1)

    with prog:
        x = tl.tensor(d, (t,), name="d")
        a, b = tl.udf(two, [x], [(), ()], ["float32", "float32"], name="two")
        s = b[t:tl.min(t + 3, T)].sum() if window else b[0:T].sum()
        tl.sink([a, s], lambda v, p: out.__setitem__(p["t"], (float(v[0]), float(v[1]))))
    b = d + 1
    want = [(2 * d[k], b[k:k + 3].sum() if window else b.sum()) for k in range(8)]
    return prog, out, want


@pytest.mark.parametrize("window", [True, False], ids=["ring", "block"])
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_several_outputs_read_by_slices_get_one_array_each(window, check, backend):
    prog, out, want = _two_output_prog(window)
    # the incrementalize pass gives a windowed output a ring of its own (the next test): off here,
    # the node's two outputs share one store
    exe = prog.compile({"T": 8}, backend=backend, check=check, passes={"incrementalize": False})
    (node, st), = exe.plan.kinds.items()
    assert st.kind == ("circular" if window else "block") and len(st.outs) == 2
    assert headers(exe) == [("circular along t, 3 slots x " if window else "block along t (8 x ")
                            + "[() float32, () float32]" + ("" if window else ")")]
    # a run keeps one array per output (the checking run, a BlockStore of two arrays per block)
    assert (f"b{node}_1[" in exe.source) == (not check) and (f"s{node}.gather(" in exe.source) == check
    exe.run()
    np.testing.assert_allclose([out[k] for k in range(8)], want, rtol=1e-6)
    assert exe._mem()[0] == 0 and exe.planned_peak() == exe.stats["peak_bytes"]
