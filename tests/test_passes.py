"""Whole-program passes: structure first (no JIT), then values against the reference executor.

Every pass runs with the verifier on (``check=True``), and tests/conftest.py turns the
verifier on for every compile in the suite (``TIMERL_VERIFY=1``).
"""

import numpy as np
import pytest
from programs import PROGRAMS, Collect, assert_close, run

import timerl as tl
from timerl.api.ops import make
from timerl.compiler import optimize
from timerl.errors import CompileError
from timerl.ir.ops import Op
from timerl.passes import PIPELINE
from timerl.passes.verify import VerifyError, verify

X = np.arange(12, dtype="float32").reshape(4, 3) - 5.5
XI = np.arange(12, dtype="int64").reshape(4, 3) - 5


def optimized(prog, bounds, **switches):
    """The PDG after the pass pipeline (verified after every pass), without scheduling or JIT."""
    out, analysis = optimize(prog, bounds, switches, check=True)
    assert sorted(analysis.live) == sorted(out.nodes)
    return out


def ops(pdg, op, fn=None):
    return [n for n in pdg.nodes if pdg.rec(n).op is op and (fn is None or pdg.rec(n).attrs.get("fn") == fn)]


def one_t(build):
    """A program over ``t`` with float data ``x``, int data ``xi`` and one sink of ``build(x, xi)``."""
    prog = tl.Program("t")
    (t,), c = prog.dims, Collect()
    with prog:
        x = tl.tensor(X, (t,), name="x")
        xi = tl.tensor(XI, (t,), name="xi")
        tl.sink(build(x, xi), c("y"))
    return prog, {"T": 4}, c


def values(build, **kw):
    prog, bounds, c = one_t(build)
    prog.compile(bounds, **kw).run()
    return c


# -- the verifier ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_programs_as_built_are_well_formed(name):
    prog, _, _ = PROGRAMS[name]()
    verify(prog.pdg, prog)


def _broken(mutate):
    prog, _, _ = one_t(lambda x, xi: (x * 2.0).sum(), )
    pdg = prog.pdg.copy()
    (mul,) = ops(pdg, Op.BINARY, "mul")
    mutate(pdg, mul)
    with pytest.raises(VerifyError) as e:
        verify(pdg, prog, after="test")
    return str(e.value)


def _edge_of(pdg, c, pos):
    for _, p, k, d in pdg.out_edges(c, keys=True, data=True):
        if d["edge"].pos == pos:
            return p, k, d["edge"]


def _read_the_sink(pdg):
    import dataclasses

    (sink,) = ops(pdg, Op.SINK)
    n = max(pdg.nodes) + 1
    pdg.add_op(n, dataclasses.replace(pdg.rec(sink), op=Op.UNARY, attrs={"fn": "neg"}))
    pdg.add_dep(n, sink, _edge_of(pdg, sink, 0)[2])


def _replace_edge(pdg, c, at, **changes):
    import dataclasses

    p, k, e = _edge_of(pdg, c, at)
    pdg.remove_edge(c, p, k)
    pdg.add_dep(c, p, dataclasses.replace(e, **changes))


def test_verify_names_the_tensor_and_shows_neighbours():
    msg = _broken(lambda pdg, n: pdg.remove_edge(n, *_edge_of(pdg, n, 1)[:2]))
    assert "after pass 'test'" in msg and "binary takes [2] operands, has 1" in msg
    assert "> %" in msg and "data:x" in msg and "reduce" in msg  # the node, its producer and its reader


@pytest.mark.parametrize("mutate, says", [
    (lambda pdg, n: _replace_edge(pdg, n, 1, pos=2), "operand positions [0, 2]"),
    (lambda pdg, n: _replace_edge(pdg, n, 0, index=()), "has 0 entries for producer domain"),
    (lambda pdg, n: _replace_edge(pdg, n, 0, out=1), "output 1 of a producer with 1 outputs"),
    (lambda pdg, n: _replace_edge(pdg, n, 0, index=(tl.Program("s").dims[0].e,)), "not in the consumer's domain"),
    (lambda pdg, n: _replace_edge(pdg, n, 0, cond=True), "only placeholder branches carry a condition"),
    (lambda pdg, n: _read_the_sink(pdg), "a sink is read by another node"),
])
def test_verify_catches(mutate, says):
    assert says in _broken(mutate)


def test_verify_catches_a_wrong_dtype():
    import dataclasses

    def retype(pdg, n):
        pdg.nodes[n]["node"] = dataclasses.replace(pdg.rec(n), dtypes=(np.dtype("int64"),))

    assert "expected float32" in _broken(retype)


# -- CSE -------------------------------------------------------------------------------------------


def test_cse_merges_a_duplicate():
    prog, bounds, _ = one_t(lambda x, xi: tl.exp(x * 2.0) + tl.exp(x * 2.0))
    before = optimized(prog, bounds, cse=False)
    after = optimized(prog, bounds)
    assert len(ops(before, Op.BINARY, "mul")) == 2 and len(ops(before, Op.UNARY, "exp")) == 2
    assert len(ops(after, Op.BINARY, "mul")) == 1 and len(ops(after, Op.UNARY, "exp")) == 1
    (add,) = ops(after, Op.BINARY, "add")
    assert [p for p, _ in after.inputs(add)] == ops(after, Op.UNARY, "exp") * 2
    assert len(ops(after, Op.CONST)) == 1  # the two 2.0 constants are one


def _recurrence():
    prog = tl.Program("t")
    (t,), c = prog.dims, Collect()
    with prog:
        x = tl.tensor(X, (t,), name="x")
        g = tl.placeholder((3,), "float32", (t,), name="g")
        g[0] = x
        g[t + 1] = g[t] * 0.5 + x[t + 1]
        h = tl.placeholder((3,), "float32", (t,), name="h")
        h[0] = x
        h[t + 1] = h[t] * 0.5 + x[t + 1]
        tl.sink(g + h, c("y"))
    return prog, c


def test_cse_merges_recurrence_readers():
    # the two reads x[t + 1] merge; the two recurrences g and h, equal but separate, stay apart
    prog, _ = _recurrence()
    before, after = optimized(prog, {"T": 4}, cse=False), optimized(prog, {"T": 4})
    assert len(ops(before, Op.ACCESS)) == 2 and len(ops(after, Op.ACCESS)) == 1
    assert len(ops(after, Op.MERGE)) == 2
    got, want = _recurrence(), _recurrence()
    got[0].compile({"T": 4}, backend="numpy").run()
    want[0].compile({"T": 4}, backend="reference").run()
    assert_close(got[1], want[1])


def test_cse_keeps_random_udf_and_distinct_data_apart():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        a = tl.random.uniform((3,), domain=(t,))
        b = tl.random.uniform((3,), domain=(t,))
        d1 = tl.tensor(X, (t,))
        d2 = tl.tensor(X.copy(), (t,))  # equal values, another array: kept (data compares by identity)
        (u1,) = tl.udf(lambda v: v, [d1], [(3,)], ["float32"])
        (u2,) = tl.udf(lambda v: v, [d1], [(3,)], ["float32"])
        z = tl.const(0.0) * a + tl.const(-0.0) * b  # 0.0 and -0.0 are different constants
        tl.sink([a + b, d1 + d2, u1 + u2, z], lambda v, p: None)
    after = optimized(prog, {"T": 4})
    assert len(ops(after, Op.RANDOM)) == 2 and len(ops(after, Op.DATA)) == 2 and len(ops(after, Op.UDF)) == 2
    assert len(ops(after, Op.CONST)) == 2


def test_cse_keeps_the_first_name():
    prog, bounds, _ = one_t(lambda x, xi: x.astype("float64").__add__(x.astype("float64")))
    after = optimized(prog, bounds)
    (cast,) = ops(after, Op.CAST)
    assert after.rec(cast).index == min(n for n in prog.pdg.nodes if prog.pdg.rec(n).op is Op.CAST)


# -- algebraic simplification -------------------------------------------------------------------

# (name, build, what must be gone after simplify): each an identity that holds bit for bit
IDENTITIES = [
    ("x*1", lambda x, xi: x * 1.0, Op.BINARY),
    ("1*x", lambda x, xi: 1.0 * x, Op.BINARY),
    ("x/1", lambda x, xi: x / 1.0, Op.BINARY),
    ("x**1", lambda x, xi: x**1.0, Op.BINARY),
    ("x-0", lambda x, xi: x - 0.0, Op.BINARY),
    ("x+(-0.0)", lambda x, xi: x + tl.const(-0.0), Op.BINARY),
    ("int x+0", lambda x, xi: xi + 0, Op.BINARY),
    ("int 0+x", lambda x, xi: 0 + xi, Op.BINARY),
    ("int x*1", lambda x, xi: xi * 1, Op.BINARY),
    ("--x", lambda x, xi: -(-x), Op.UNARY),
    ("~~b", lambda x, xi: ~~(x > 0), Op.UNARY),
    ("detach", lambda x, xi: x.detach(), Op.UNARY),
    ("min(x,x)", lambda x, xi: tl.minimum(x, x), Op.BINARY),
    ("where(c,x,x)", lambda x, xi: tl.where(xi > 0, x, x), Op.WHERE),
    ("cast to its dtype", lambda x, xi: make(Op.CAST, [x], [x.shape], [x.dtype], {"dtype": x.dtype})[0], Op.CAST),
    ("reshape to its shape", lambda x, xi: make(Op.RESHAPE, [x], [x.shape], [x.dtype], {"shape": x.shape})[0],
     Op.RESHAPE),
    ("expand to its shape", lambda x, xi: make(Op.EXPAND, [x], [x.shape], [x.dtype], {"shape": x.shape})[0],
     Op.EXPAND),
    ("identity permute", lambda x, xi: make(Op.PERMUTE, [x], [x.shape], [x.dtype], {"axes": (0,)})[0], Op.PERMUTE),
]


@pytest.mark.parametrize("name, build, gone", IDENTITIES, ids=[x[0] for x in IDENTITIES])
def test_simplify_identity(name, build, gone):
    prog, bounds, _ = one_t(build)
    assert ops(optimized(prog, bounds, simplify=False), gone)
    after = optimized(prog, bounds)
    assert not ops(after, gone)
    (sink,) = ops(after, Op.SINK)
    assert {after.rec(p).op for p, _ in after.inputs(sink)} <= {Op.DATA, Op.BINARY}  # reads the data (or x > 0)
    assert_close(values(build, backend="numpy"), values(build, backend="reference"), rtol=0, atol=0)


# not identities in exact arithmetic: they must stay
NOT_IDENTITIES = [
    ("x+0.0", lambda x, xi: x + 0.0),  # -0.0 + 0.0 is +0.0
    ("int x*1.0", lambda x, xi: xi * 1.0),  # promotes to float32
    ("x-(-0.0)", lambda x, xi: x - tl.const(-0.0)),
    ("exp(log(x))", lambda x, xi: tl.exp(tl.log(x))),
    ("x*0", lambda x, xi: x * 0.0),
    ("1/x", lambda x, xi: 1.0 / x),
]


@pytest.mark.parametrize("name, build", NOT_IDENTITIES, ids=[x[0] for x in NOT_IDENTITIES])
def test_simplify_leaves_inexact_rewrites(name, build):
    prog, bounds, _ = one_t(build)
    assert len(optimized(prog, bounds)) == len(optimized(prog, bounds, simplify=False))


def test_constant_folding():
    build = lambda x, xi: x * (tl.const(3.0) - tl.const(2.0)) + tl.exp(tl.const([0.0, 1.0, 2.0]))
    prog, bounds, _ = one_t(build)
    after = optimized(prog, bounds)
    assert not ops(after, Op.UNARY) and len(ops(after, Op.BINARY)) == 1  # only x + exp([...]) is left
    (add,) = ops(after, Op.BINARY)
    (k,) = [p for p, _ in after.inputs(add) if after.rec(p).op is Op.CONST]
    np.testing.assert_array_equal(after.rec(k).attrs["value"], np.exp(np.float32([0.0, 1.0, 2.0])))
    assert_close(values(build, backend="numpy"), values(build, backend="reference"), rtol=0, atol=0)


def test_folding_does_not_grow_constants():
    build = lambda x, xi: x.sum() + tl.const(1.0).expand((100, 100)).sum()
    prog, bounds, _ = one_t(build)
    after = optimized(prog, bounds)
    assert ops(after, Op.EXPAND) and all(after.rec(n).attrs["value"].size <= 1 for n in ops(after, Op.CONST))


# -- the pipeline -----------------------------------------------------------------------------


def test_passes_are_timed_and_switchable():
    prog, bounds, _ = one_t(lambda x, xi: x * 1.0)
    exe = prog.compile(bounds, backend="numpy", passes={"cse": False})
    cs = exe.stats["compile_seconds"]
    assert "pass_simplify" in cs and "pass_dce" in cs and "pass_cse" not in cs
    with pytest.raises(CompileError, match="unknown pass 'fold'"):
        prog.compile(bounds, backend="numpy", passes={"fold": False})


def test_rl_programs_shrink():
    import importlib

    common = importlib.import_module("timerl.rl.common")
    mod = importlib.import_module("timerl.rl.reinforce")
    args = common.make_args(mod.Args, dict(env="CartPole-v1", num_envs=2, num_steps=4, total_steps=8,
                                           backend="numpy"))
    prog, bounds, _ = mod.build(args)
    off = optimized(prog, bounds, simplify=False, cse=False)
    on = optimized(prog, bounds)
    assert len(on) < 0.8 * len(off)
    assert len(ops(on, Op.CONST)) < len(ops(off, Op.CONST)) / 2


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("switched", [n for n, _ in PIPELINE] + ["all"])
def test_ablation_matches_reference(name, switched):
    off = {n: False for n, _ in PIPELINE} if switched == "all" else {switched: False}
    assert_close(run(name, backend="numpy", passes=off), run(name, backend="reference"))


def test_checking_mode_verifies_after_each_pass(monkeypatch):
    import timerl.passes as passes

    def drop_an_operand(prog, pdg, bounds, analysis):
        out = pdg.copy()
        (mul,) = ops(out, Op.BINARY, "mul")
        out.remove_edge(mul, *_edge_of(out, mul, 1)[:2])
        return out, analysis

    monkeypatch.setattr(passes, "PIPELINE", passes.PIPELINE + [("breaks", drop_an_operand)])
    prog, bounds, _ = one_t(lambda x, xi: x * 2.0)
    with pytest.raises(VerifyError, match="after pass 'breaks'"):
        prog.compile(bounds, backend="numpy", check=True, passes={"cse": False})
    with pytest.raises(CompileError, match="unknown pass 'fold'"):
        prog.compile(bounds, backend="reference", passes={"fold": False})


@pytest.mark.parametrize("bad,match", [
    (["cse"], "pass a dict from pass name"),
    ("dce", "pass a dict from pass name"),
    ({"simplify": 0}, "switch of pass 'simplify' is 0; use True or False"),
    ({"group": None}, "switch of pass 'group' is None"),
])
def test_pass_switches_must_be_a_dict_of_bools(bad, match):
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        tl.sink(tl.tensor(np.ones(3, "float32"), (t,)) * 2.0, lambda v, p: None)
    for backend in ("reference", "numpy"):
        with pytest.raises(tl.CompileError, match=match):
            prog.compile({"T": 3}, backend=backend, passes=bad)


def test_planned_peak_keeps_the_runs_kernels():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.ones((3, 4), "float32"), (t,))
        tl.sink((x * 2.0 + 1.0) * x, lambda v, p: None)
    exe = prog.compile({"T": 3}, backend="numba")
    kernels = dict(exe.plan.kernels)
    assert kernels
    exe.planned_peak()
    assert exe.plan.kernels == kernels


# -- annotations: group and fuse ---------------------------------------------------------------


def _demanded(analysis):
    return {n for n in analysis.live if not analysis.demand[n].is_empty()}


def test_group_annotates_the_statements_the_scheduler_uses():
    prog, bounds, _ = PROGRAMS["mlp"]()
    pdg, analysis = optimize(prog, bounds, check=True)
    groups = pdg.graph["groups"]
    members = [n for _, ms in groups for n in ms]
    assert sorted(members) == sorted(_demanded(analysis))  # every demanded node once
    assert len(groups) < len(members)  # some joined
    assert all(gid in ms for gid, ms in groups) and list(pdg.graph["group_joins"])
    exe = prog.compile(bounds, backend="numpy")
    assert exe.pdg.graph["groups"] == groups and "pass_group" in exe.stats["compile_seconds"]
    plan = exe.plan
    assert plan.grouping and plan.problem.restrict is None
    assert [(g.gid, tuple(g.members)) for g in plan.problem.groups] == list(groups)
    assert exe.stats["statements"] == len(groups)


def test_group_off_is_one_statement_per_node():
    prog, bounds, _ = PROGRAMS["mlp"]()
    pdg, analysis = optimize(prog, bounds, {"group": False}, check=True)
    assert "groups" not in pdg.graph
    exe = prog.compile(bounds, backend="numpy", passes={"group": False})
    assert not exe.plan.grouping and "pass_group" not in exe.stats["compile_seconds"]
    assert all(len(g.members) == 1 for g in exe.plan.problem.groups)
    assert exe.stats["statements"] == len(_demanded(analysis))


def test_fuse_annotates_each_group_with_its_kernel_segments():
    from timerl.kernels import statement
    from timerl.passes.fuse import segments_of

    prog, bounds, _ = PROGRAMS["mlp"]()
    pdg, _ = optimize(prog, bounds, check=True, backend="numba")
    segs = pdg.graph["segments"]
    assert sorted(segs) == sorted(ms for _, ms in pdg.graph["groups"])
    for gid, ms in pdg.graph["groups"]:
        assert segs[ms] == segments_of(pdg, ms, pdg.rec(gid).domain, statement.renderable)
    assert any(kind == "seg" for s in segs.values() for kind, _ in s)
    for backend in ("numpy", None):  # only numba fuses
        other, _ = optimize(prog, bounds, check=True, backend=backend)
        assert "segments" not in other.graph and other.graph["groups"] == pdg.graph["groups"]
    # grouping off: one segment list per node
    alone, analysis = optimize(prog, bounds, {"group": False}, check=True, backend="numba")
    assert sorted(alone.graph["segments"]) == [(n,) for n in sorted(_demanded(analysis))]


def test_the_lowering_reads_the_fuse_annotation():
    prog, bounds, c = PROGRAMS["mlp"]()
    exe = prog.compile(bounds, backend="numba")
    segs = exe.pdg.graph["segments"]
    for g in exe.plan.problem.groups:
        assert g.segments is segs[tuple(g.members)]
    assert exe.stats["kernels"] >= 1
    exe.run()
    assert_close(c, run("mlp"))
    # fuse off: no kernels, every member in the interpreter, same values
    prog, bounds, c = PROGRAMS["mlp"]()
    exe = prog.compile(bounds, backend="numba", passes={"fuse": False})
    assert "segments" not in exe.pdg.graph and exe.stats["kernels"] == 0
    assert all(g.segments is None for g in exe.plan.problem.groups)
    exe.run()
    assert_close(c, run("mlp"))


def test_ungrouped_fallback_gets_segments_for_its_own_statements(monkeypatch):
    import timerl.compiler as compiler

    real = compiler.compute_schedule

    def no_grouped_schedule(prog, pdg, problem, variant="default"):
        if problem.regroup is not None:  # the grouped problem: as if isl found no schedule
            raise CompileError("no schedule (test)")
        return real(prog, pdg, problem, variant)

    monkeypatch.setattr(compiler, "compute_schedule", no_grouped_schedule)
    prog, bounds, c = PROGRAMS["mlp"]()
    exe = prog.compile(bounds, backend="numba")
    assert not exe.plan.grouping and "groups" in exe.pdg.graph
    assert all(len(g.members) == 1 and g.segments is not None for g in exe.plan.problem.groups)
    assert exe.stats["kernels"] >= 1
    exe.run()
    monkeypatch.undo()
    assert_close(c, run("mlp"))


def _annotated():
    prog, bounds, _ = PROGRAMS["mlp"]()
    pdg, analysis = optimize(prog, bounds, check=True, backend="numba")
    verify(pdg, prog, analysis=analysis)
    return prog, pdg, analysis


def _joined(pdg):
    """A group of two or more members, one of which reads another at the same point."""
    for k, (gid, ms) in enumerate(pdg.graph["groups"]):
        for n in ms:
            if any(p in ms and p != n for p, _ in pdg.inputs(n)):
                return k, gid, ms, n
    raise AssertionError("no joined group")


def _corrupt_groups(pdg, analysis):
    k, gid, ms, n = _joined(pdg)
    gs = list(pdg.graph["groups"])
    yield "not a node of the graph", gs[:k] + [(gid, ms + (10 ** 6,))] + gs[k + 1:]
    other = gs[(k + 1) % len(gs)]
    yield "is in group", gs + [(other[0], other[1])]
    yield "missing", gs[:k] + gs[k + 1:]
    yield "representative", gs[:k] + [(10 ** 6, ms)] + gs[k + 1:]
    p = next(p for p, _ in pdg.inputs(n) if p in ms and p != n)
    order = [n] + [m for m in ms if m != n]  # n before the member it reads
    assert order.index(n) < order.index(p)
    yield "which it reads at the same point", gs[:k] + [(gid, tuple(order))] + gs[k + 1:]


def test_verify_rejects_a_corrupt_grouping():
    prog, pdg, analysis = _annotated()
    for says, groups in _corrupt_groups(pdg, analysis):
        bad = pdg.copy()
        bad.graph["groups"] = tuple(groups)
        bad.graph.pop("segments")
        with pytest.raises(VerifyError, match=says):
            verify(bad, prog, after="group", analysis=analysis)
    bad = pdg.copy()
    del bad.graph["group_joins"]
    with pytest.raises(VerifyError, match="without 'group_joins'"):
        verify(bad, prog, analysis=analysis)


def test_verify_rejects_corrupt_segments():
    prog, pdg, analysis = _annotated()
    _, _, ms, _ = _joined(pdg)
    cases = [
        ("not the members once each", lambda s: s[ms].pop()),
        ("neither", lambda s: s[ms].append(("kernel", ms[0]))),
        ("unknown", lambda s: s.__setitem__((10 ** 6,), [("glue", 10 ** 6)])),
        ("missing", lambda s: s.pop(ms)),
        ("which it reads at the same point", lambda s: s.__setitem__(ms, [("glue", n) for n in reversed(ms)])),
    ]
    for says, mutate in cases:
        bad = pdg.copy()
        bad.graph["segments"] = {k: list(v) for k, v in pdg.graph["segments"].items()}
        mutate(bad.graph["segments"])
        with pytest.raises(VerifyError, match=says):
            verify(bad, prog, after="fuse", analysis=analysis)


def test_a_rewrite_after_the_annotating_passes_drops_their_annotations(monkeypatch):
    import timerl.passes as passes

    def rewrite(prog, pdg, bounds, analysis):
        return pdg.copy(), analysis  # a new graph: the groups on it may not describe it

    monkeypatch.setattr(passes, "PIPELINE", passes.PIPELINE + [("late", rewrite)])
    prog, bounds, _ = PROGRAMS["mlp"]()
    pdg, _ = optimize(prog, bounds, check=True, backend="numba")
    assert not any(k in pdg.graph for k in passes.ANNOTATIONS)
    assert "groups" not in prog.pdg.graph  # the input is never annotated


def test_fuse_computes_an_elementwise_factor_in_the_kernel_of_its_reader():
    # ``1 - H * H`` is ready at the statement's start, but its one reader follows an interpreter member
    # (here the matmul, judged not renderable): it goes to its reader's kernel, not the first one,
    # where its array would live through everything between
    from timerl.kernels import statement
    from timerl.passes.fuse import order

    prog = tl.Program("i")
    (i,) = prog.dims
    rng = np.random.default_rng(0)
    with prog:
        h = tl.tensor(np.tanh(rng.normal(size=(2, 8, 4))).astype("float32"), domain=(i,), name="H")
        d = 1.0 - h * h
        u = tl.tensor(rng.normal(size=(2, 8, 1)).astype("float32"), domain=(i,), name="Y") * 2.0
        g = u @ tl.tensor(rng.normal(size=(1, 4)).astype("float32"), name="w")
        tl.sink((g * d).sum(), lambda v, p: None)
    pdg, _ = optimize(prog, {"I": 2}, check=True)
    (mm,) = [n for n in pdg.nodes if pdg.rec(n).op is Op.MATMUL]
    (prod,) = [c for c, _ in pdg.consumers(mm)]
    (factor,) = [p for p, _ in pdg.inputs(prod) if p != mm]
    (ms,) = [ms for _, ms in pdg.graph["groups"] if factor in ms]
    assert mm in ms and prod in ms
    out = order(pdg, list(ms), lambda n: n != mm and statement.renderable(pdg, n, ["i"]))
    kernel_of = {n: k for k, (kind, x) in enumerate(out) if kind == "seg" for n in x}
    glue = [k for k, (kind, x) in enumerate(out) if kind == "glue" and x == mm]
    assert glue and kernel_of[prod] > glue[0]  # the product after the matmul
    assert kernel_of[factor] == kernel_of[prod]  # and its factor with it
    (square,) = [p for p, _ in pdg.inputs(factor) if pdg.rec(p).op is Op.BINARY]
    assert kernel_of[square] == kernel_of[prod]  # h * h moves with 1 - h * h


def _transposed_block_program(got):
    """``y[i, k] = x[i]ᵀ @ z[i, k]``: a per-iteration block's transpose read at every update ``k``
    (a learner's weight gradient over the rollout)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 4096, 8)).astype("float32")
    Z = rng.normal(size=(2, 3, 4096, 5)).astype("float32")
    prog = tl.Program("i k")
    i, k = prog.dims
    with prog:
        y = tl.tensor(X, (i,), name="x").transpose(1, 0) @ tl.tensor(Z, (i, k), name="z")
        tl.sink(y, lambda v, p: got.__setitem__((p["i"], p["k"]), np.array(v)))
    return prog, [[X[a].T @ Z[a, b] for b in range(3)] for a in range(2)]


def test_views_take_a_transpose_where_its_reader_runs():
    # made once at i, the transpose is a copy its statement returns and stores through every update;
    # taken at (i, k) it is a strided view of x[i] in the matmul's kernel: one (8, 4096) array less
    got = {}
    prog, want = _transposed_block_program(got)
    pdg, _ = optimize(prog, {"I": 2, "K": 3}, check=True)
    (perm,) = [n for n in pdg.nodes if pdg.rec(n).op is Op.PERMUTE]
    assert [d.name for d in pdg.rec(perm).domain] == ["i", "k"]
    peaks = {}
    for on in (True, False):
        got.clear()
        prog, _ = _transposed_block_program(got)
        exe = prog.compile(bounds={"I": 2, "K": 3}, backend="numba", passes={"views": on})
        exe.run()
        for a in range(2):
            for b in range(3):
                np.testing.assert_allclose(got[(a, b)], want[a][b], rtol=1e-4, atol=1e-3)
        peaks[on] = exe.planned_peak()
    assert peaks[False] - peaks[True] >= 8 * 4096 * 4
