"""Where kernels compute what, against the reference executor on every backend and pass switch.

Three placements the random programs of ``tests/test_fuzz.py`` do not reach: a transpose read over
more dims, taken in its reader's domain (the ``views`` pass); an elementwise factor whose reader
follows an interpreter member, computed in the reader's kernel (the ``fuse`` pass); a loop nest
read only by a later nest of its shape, deferred while another shape's nest runs (the numba kernel
generator); the outputs of a several-output UDF read in its statement (the ``group`` pass). Each program is first checked to take its path, then run in every configuration of
the fuzz checker (``fuzz.check.CONFIGS``: each backend with its defaults, each pass off, each
option on, checking mode, the least memory budget)."""

import numpy as np
import pytest
from fuzz.check import CONFIGS, label

import timerl as tl
from timerl.compiler import optimize
from timerl.ir.ops import Op

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 64, 8)).astype("float32")
Z = RNG.normal(size=(2, 3, 64, 5)).astype("float32")
H = np.tanh(RNG.normal(size=(2, 64, 16))).astype("float32")
Y = RNG.normal(size=(2, 64, 1)).astype("float32")
W = RNG.normal(size=(1, 16)).astype("float32")
W2 = RNG.normal(size=(16, 3)).astype("float32")
V0 = RNG.normal(size=(1, 2, 4)).astype("float32")


def transposed_block(sink):
    """``x[i]ᵀ @ z[i, k]``: a per-iteration block's transpose read at every update ``k``."""
    prog = tl.Program("i k")
    i, k = prog.dims
    with prog:
        y = tl.tensor(X, (i,), name="x").transpose(1, 0) @ tl.tensor(Z, (i, k), name="z")
        tl.sink(y, sink)
    return prog, {"I": 2, "K": 3}


def factor_after_glue(sink):
    """``(v0 ** 2).take(k % 4)``: the integer ``k % 4`` runs in the interpreter, between the kernel of
    the square (ready at the statement's start) and the take's kernel."""
    prog = tl.Program("i t")
    i, t = prog.dims
    with prog:
        v0 = tl.tensor(V0, domain=(i, t), name="v0")
        k = tl.tensor(np.array([[[1], [3]]], dtype="int64"), domain=(i, t), name="k")
        tl.sink((v0 ** 2).take(k % 4, axis=0), sink)
    return prog, {"I": 1, "T": 2}


def factor_after_matmul(sink):
    """``((u @ w) * (1 - h * h)) @ w2``: the factor's own loop nest would come first, read only by the
    loop after the matmul."""
    prog = tl.Program("i")
    (i,) = prog.dims
    with prog:
        h = tl.tensor(H, (i,), name="h")
        d = 1.0 - h * h
        u = tl.tensor(Y, (i,), name="y") * 2.0 + 1.0
        tl.sink(((u @ tl.tensor(W, name="w")) * d) @ tl.tensor(W2, name="w2"), sink)
    return prog, {"I": 2}


def env_step_outputs(sink):
    """An environment step returning ``(obs, reward)``: the next observation read a step later, the
    rewards by a backward recurrence after the rollout, the observations as a block by a learner
    (the host env's PPO and REINFORCE in small). Each output is read through an access of its own,
    in the step's statement (``split_outputs``) when it is demanded at the same points as the step:
    here every step's observation is read, the last one as ``o[i, T]``."""
    prog = tl.Program("i t")
    (i, t), (_, T) = prog.dims, prog.bounds
    with prog:
        o = tl.placeholder((4, 8), "float32", (i, t), name="obs")
        o[i, 0] = tl.tensor(X[:, :4, :], (i,), name="start")
        nxt, r = tl.udf(lambda x: (np.tanh(x * 0.9 + 0.1).astype("float32"), x.mean(axis=1).astype("float32")),
                        [o], [(4, 8), (4,)], ["float32", "float32"])
        o[i, t + 1] = nxt
        g = tl.placeholder((4,), "float32", (i, t), name="G")
        g[i, T - 1] = r
        g[i, t] = r + 0.9 * g[i, t + 1]
        tl.sink((o[i, 0:6].sum(axis=2) * g[i, 0:6]).sum() + o[i, T].sum(), sink)  # o[T]: as PPO's next start
    return prog, {"I": 2, "T": 6}


PROGRAMS = {"transposed_block": transposed_block, "factor_after_glue": factor_after_glue,
            "factor_after_matmul": factor_after_matmul, "env_step_outputs": env_step_outputs}


def _run(build, backend, **kw):
    got = {}
    prog, bounds = build(lambda v, p: got.__setitem__(tuple(sorted(p.items())), np.array(v)))
    if kw.get("memory_budget") == "least":
        with pytest.raises(tl.CompileError) as err:
            prog.compile(bounds, backend=backend, memory_budget=1)
        least = int(str(err.value).split("memory_budget>=")[1].split()[0].rstrip(".,;:)"))
        got.clear()
        prog, bounds = build(lambda v, p: got.__setitem__(tuple(sorted(p.items())), np.array(v)))
        kw = {**kw, "memory_budget": least}
    prog.compile(bounds, backend=backend, **kw).run()
    return got


def test_each_program_takes_its_path():
    prog, bounds = transposed_block(lambda v, p: None)
    pdg, _ = optimize(prog, bounds, check=True)
    (perm,) = [n for n in pdg.nodes if pdg.rec(n).op is Op.PERMUTE]
    assert [d.name for d in pdg.rec(perm).domain] == ["i", "k"]
    # k % 4 is glue between two kernels, and the square sits in the one after it, with the take
    prog, bounds = factor_after_glue(lambda v, p: None)
    pdg, _ = optimize(prog, bounds, check=True)
    (take,) = [n for n in pdg.nodes if pdg.rec(n).op is Op.TAKE]
    sq, mod = (p for p, _ in pdg.inputs(take))
    (segs,) = [s for ms, s in pdg.graph["segments"].items() if sq in ms]
    at = {n: k for k, (kind, x) in enumerate(segs) for n in (x if kind == "seg" else [x])}
    assert segs[at[mod]][0] == "glue" and at[sq] == at[take] > at[mod]
    # the factor is a scalar of the loop after the matmul, and that loop's product is computed in the
    # array the matmul wrote: one (64, 16) array in the kernel (three before either change)
    prog, bounds = factor_after_matmul(lambda v, p: None)
    exe = prog.compile(bounds, backend="numba")
    (src,) = [s for s in exe.plan.kernels.values() if "gemm" in s or "matmul" in s]
    assert src.split("\ndef kernel(", 1)[1].count("np.empty((64, 16), np.float32)") == 1
    # the step's output accesses run in its statement
    prog, bounds = env_step_outputs(lambda v, p: None)
    pdg, _ = optimize(prog, bounds, check=True)
    (udf,) = [n for n in pdg.nodes if pdg.rec(n).op is Op.UDF]
    outs = {udf} | {c for c, _ in pdg.consumers(udf)}
    assert len(outs) == 3 and any(outs <= set(ms) for _, ms in pdg.graph["groups"])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_configuration_matches_the_reference(name):
    want = _run(PROGRAMS[name], "reference")
    assert want
    for backend, kw in CONFIGS:
        got = _run(PROGRAMS[name], backend, **kw)
        assert sorted(got) == sorted(want), label(backend, kw)
        for p in want:
            np.testing.assert_allclose(got[p], want[p], rtol=2e-5, atol=2e-5, err_msg=f"{label(backend, kw)} at {p}")
