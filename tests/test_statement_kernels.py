"""Statement kernels (timerl.kernels.statement): every op kind a kernel computes, against numpy
and the reference executor; random draws value for value; errors from inside a kernel named."""

import hashlib

import re

import numpy as np
import pytest

import timerl as tl
from timerl.kernels import blas, cpu, statement
from timerl.runtime import interpreter


def _run(build, bounds, backend, check=False):
    got = {}
    prog = tl.Program("i")
    (i,) = prog.dims
    with prog:
        outs = build(i)
        tl.sink(list(outs), lambda v, p: got.__setitem__(p.get("i", 0), [np.array(a) for a in v]))
    exe = prog.compile(bounds=bounds, backend=backend, check=check)
    exe.run()
    return got, exe


def _ops(i, dtype):
    rng = np.random.default_rng(1)
    a = tl.tensor(rng.normal(size=(2, 5, 3)).astype(dtype), domain=(i,), name="a")        # (5, 3)
    w_small = tl.tensor(rng.normal(size=(3, 4)).astype(dtype), name="w_small")
    big_a = tl.tensor(rng.normal(size=(2, 80, 48)).astype(dtype), domain=(i,), name="big_a")
    w_big = tl.tensor(rng.normal(size=(48, 40)).astype(dtype), name="w_big")            # 80*48*40 MACs: BLAS
    v = tl.tensor(rng.normal(size=(3,)).astype(dtype), name="v")
    idx = tl.tensor(np.array([[4, -1, 0], [2, 2, -5]], dtype=np.int64), domain=(i,), name="idx")
    rows = tl.tensor(np.array([[0, 2, 1, 2, 0], [1, 1, 0, 2, 2]], dtype=np.int64), domain=(i,), name="rows")
    wide = tl.tensor(rng.normal(size=(2, 64, 16)).astype(dtype), domain=(i,), name="wide")  # column sums via BLAS
    cube = tl.tensor(rng.normal(size=(2, 3, 4, 5)).astype(dtype), domain=(i,), name="cube")
    huge_a = tl.tensor(rng.normal(size=(2, 256, 128)).astype(dtype), domain=(i,), name="huge_a")
    huge_w = tl.tensor(rng.normal(size=(128, 128)).astype(dtype), name="huge_w")        # 4.2M MACs
    h = tl.tanh(a @ w_small)                                                            # (5, 4) inline loops
    outs = [
        h, a @ v, v @ w_small, big_a @ w_big,
        a.sum(axis=0), a.mean(axis=1, keepdims=True), a.max(axis=(0, 1)), a.min(axis=0), a.std(axis=1),
        a.logsumexp(axis=1), a.argmax(axis=0), a.sum(),
        a.take(idx, axis=0), a.take_along_axis(rows.reshape(5, 1), axis=1),
        tl.one_hot(rows, 3), a.transpose(1, 0), v.expand(4, 3), a.spatial[1:4, ::2], tl.concat([a, h.spatial[:, :3]], axis=0),
        tl.exp(a) / (1.0 + tl.exp(-a)), tl.where(a > 0.5, a, a * 0.1), tl.sigmoid(a),
        wide.sum(axis=0), wide.mean(axis=0, keepdims=True), wide.max(axis=0), wide.std(axis=0),
        wide.logsumexp(axis=0), wide.argmax(axis=0), cube.sum(axis=(0, 2)), cube.max(axis=(0, 2), keepdims=True),
        huge_a @ huge_w, big_a.transpose(1, 0) @ big_a,                                   # a transpose read by BLAS
        big_a.transpose(1, 0), wide.transpose(1, 0),                      # transposes in 32 x 32 tiles, partial ones
        cube @ tl.tensor(rng.normal(size=(5, 6)).astype(dtype), name="w5"),   # batch dims merged into rows
    ]
    return outs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_kernel_op_matches_the_reference(dtype):
    want, _ = _run(lambda i: _ops(i, dtype), {"I": 2}, "reference")
    got, exe = _run(lambda i: _ops(i, dtype), {"I": 2}, "numba")
    assert exe.stats["kernels"] >= 1
    tol = 1e-5 if dtype == "float32" else 1e-12
    for k in range(2):
        for j, (g, w) in enumerate(zip(got[k], want[k])):
            assert g.dtype == w.dtype and g.shape == w.shape, (j, g.dtype, w.dtype, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {j} at i={k}")


def test_the_ops_run_inside_kernels_not_the_interpreter():
    """Structure: the program's computing ops are all renderable, so the numba lowering calls kernels."""
    prog = tl.Program("i")
    (i,) = prog.dims
    with prog:
        outs = _ops(i, "float32")
        tl.sink(outs, lambda v, p: None)
    exe = prog.compile(bounds={"I": 2}, backend="numba")
    pdg = exe.pdg
    computing = [n for n in pdg.nodes if pdg.rec(n).op.value in (
        "unary", "binary", "matmul", "reduce", "take", "one_hot", "permute", "expand", "slice", "concat", "where")]
    dims = ["i"]
    assert computing and all(statement.renderable(pdg, n, dims) for n in computing)
    assert "evaluate(" not in exe.source  # no op runs through the generic numpy rule


@pytest.mark.parametrize("backend,dtype", [("numba", "float32"), ("numba", "float64"),
                                           pytest.param("cuda", "float32", marks=pytest.mark.gpu)])
def test_a_square_is_a_product_bit_for_bit_as_numpy_computes_it(backend, dtype):
    """``x ** 2`` with a constant 2 is ``x * x`` in a kernel (the CPU's and CUDA's alike): numpy's power
    gives exactly that (numba's float32 power differs in the last bit for some values), without a
    call of pow; ``x ** 3`` stays a power."""
    size = 4096 if backend == "numba" else 64  # the CUDA simulator runs every thread in Python
    x = (np.random.default_rng(3).standard_normal((2, size)) * np.logspace(-12, 12, size)).astype(dtype)

    def build(i):
        a = tl.tensor(x, domain=(i,), name="a")
        return [a ** 2, (a - 1.0) ** 2.0, a ** 3]

    want, _ = _run(build, {"I": 2}, "reference")
    got, exe = _run(build, {"I": 2}, backend)
    for k in range(2):
        np.testing.assert_array_equal(got[k][0], x[k] * x[k])
        for g, w in zip(got[k][:2], want[k][:2]):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_allclose(got[k][2], want[k][2], rtol=1e-6 if dtype == "float32" else 1e-14)
    src = "\n".join(exe.plan.kernels.values())
    assert src.count(" ** ") == 1, "only the cube is a power"


def test_random_draws_equal_the_reference_value_for_value():
    def build(i):
        logits = tl.tensor(np.linspace(-2, 2, 3 * 6 * 5).reshape(3, 6, 5).astype("float32"), domain=(i,))
        return [tl.random.categorical(logits), tl.random.permutation(9, domain=(i,)),
                tl.random.uniform((3, 2), domain=(i,), low=-1.0, high=2.0),
                tl.random.normal((4,), domain=(i,), mean=1.0, std=0.5, dtype="float64")]

    want, _ = _run(build, {"I": 3}, "reference")
    got, exe = _run(build, {"I": 3}, "numba")
    assert "rng.draw" not in exe.source and "draw" not in exe.source.split("def run")[0].split("K")[0]
    for k in range(3):
        np.testing.assert_array_equal(got[k][0], want[k][0])
        np.testing.assert_array_equal(got[k][1], want[k][1])
        np.testing.assert_allclose(got[k][2], want[k][2], rtol=1e-6)
        np.testing.assert_allclose(got[k][3], want[k][3], rtol=1e-13)


def test_long_permutations_equal_the_reference_value_for_value():
    """The kernels' permutation sorts runs of 16 and merges them: lengths past one run, uneven and a
    power of two, against numpy's stable argsort in the reference executor."""
    sizes = (17, 100, 1000, 1024)

    def build(i):
        return [tl.random.permutation(n, domain=(i,)) for n in sizes]

    want, _ = _run(build, {"I": 3}, "reference")
    got, _ = _run(build, {"I": 3}, "numba")
    for k in range(3):
        for n, g, w in zip(sizes, got[k], want[k]):
            np.testing.assert_array_equal(g, w, err_msg=f"permutation({n}) at i={k}")
            assert sorted(g.tolist()) == list(range(n))


def test_take_out_of_range_inside_a_kernel_names_the_tensor_and_point():
    def build(i):
        x = tl.tensor(np.ones((2, 4), "float32"), domain=(i,), name="x")
        j = tl.tensor(np.array([[1, 2], [0, 7]], dtype=np.int64), domain=(i,), name="j")
        return [tl.tanh(x.take(j, axis=0) * 2.0)]

    with pytest.raises(tl.RuntimeFault, match=r"take.*'.*'.*i = 1|i = 1.*take") as e:
        _run(build, {"I": 2}, "numba")
    assert "7" in str(e.value)


def test_nan_propagates_through_kernel_reductions_like_numpy():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]], "float32")

    def build(i):
        t = tl.tensor(x, name="x")
        return [t.max(axis=1), t.min(axis=1), t.argmax(axis=1), t.logsumexp(axis=1), t.max(axis=0)]

    got, _ = _run(build, {"I": 1}, "numba")
    want, _ = _run(build, {"I": 1}, "reference")
    for g, w in zip(got[0], want[0]):
        np.testing.assert_array_equal(g, w)


def test_kernels_compile_once_at_compile_time():
    """Every kernel holds exactly one compiled signature after a run: nothing compiled mid-run."""
    _, exe = _run(lambda i: _ops(i, "float32"), {"I": 2}, "numba")
    assert exe.plan.kernels
    for kid in exe.plan.kernels:
        src = exe.plan.kernels[kid]
        kern = cpu._loaded[hashlib.sha1(src.encode()).hexdigest()[:16]]
        assert len(kern.signatures) == 1


def test_nothing_compiles_while_the_program_runs():
    """numba compiles nothing inside ``exe.run()`` (its compile events counted): the kernels, their
    helpers and their BLAS calls are all compiled at ``compile()``. Large matmuls used to enter numpy
    through ``numba.objmode`` blocks, which numba compiles at their first call."""
    from numba.core import event

    prog = tl.Program("i")
    (i,) = prog.dims
    with prog:
        tl.sink(_ops(i, "float32"), lambda v, p: None)
    exe = prog.compile(bounds={"I": 2}, backend="numba")
    with event.install_recorder("numba:compile") as rec:
        exe.run()
    assert rec.buffer == []


@pytest.mark.skipif(not blas.NUMPY, reason="numpy's OpenBLAS not found: the kernels call numba's BLAS")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernel_matmuls_call_numpys_blas_bit_for_bit(dtype):
    """The kernels' BLAS products are numpy's own ``matmul`` to the bit, transposed operands included
    (numba's BLAS is scipy's OpenBLAS build: other values, and 1.5x slower for ``x.T @ g``)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 300, 48)).astype(dtype)
    g = rng.normal(size=(2, 300, 40)).astype(dtype)
    w = rng.normal(size=(40, 48)).astype(dtype)

    def build(i):
        tx, tg = tl.tensor(x, domain=(i,), name="x"), tl.tensor(g, domain=(i,), name="g")
        tw = tl.tensor(w, name="w")
        return [tx.transpose(1, 0) @ tg, tg @ tw]

    got, exe = _run(build, {"I": 2}, "numba")
    assert any("gemm_tn(" in src for src in exe.plan.kernels.values())  # x.T passed as x and a flag
    # numpy's product at the thread count the run used (TIMERL_BLAS_THREADS, default 1): threaded,
    # OpenBLAS splits this x.T @ g otherwise on some machines (12.9% of elements off in the last bits)
    old = blas.set_threads(tl.config.config.blas_threads)
    try:
        wants = [[x[k].T @ g[k], g[k] @ w] for k in range(2)]
    finally:
        if old is not None:
            blas.set_threads(old)
    for k in range(2):
        for a, want in zip(got[k], wants[k]):
            np.testing.assert_array_equal(a, want)


def test_operands_that_are_not_contiguous_or_of_another_dtype_are_converted():
    """Data given as a Fortran-ordered float64 array of a float32 program: the kernel call is
    rejected by numba's signature and made again with converted copies (values unchanged)."""
    x = np.asfortranarray(np.linspace(-2, 2, 2 * 6 * 5).reshape(2, 6, 5))[:, :, ::-1]

    def build(i):
        t = tl.tensor(x, domain=(i,), name="x")            # float64, strided per point
        return [tl.tanh(t * 2.0) + t, (t * t).sum(axis=1)]

    want, _ = _run(build, {"I": 2}, "reference")
    got, calls = {}, []
    prog = tl.Program("i")
    with prog:
        outs = build(prog.dims[0])
        tl.sink(outs, lambda v, p: got.__setitem__(p["i"], [np.array(a) for a in v]))
    exe = prog.compile(bounds={"I": 2}, backend="numba")
    ns = exe._run.__globals__
    conv = ns["conv_call"]
    ns["conv_call"] = lambda *a: calls.append(1) or conv(*a)
    exe.run()
    assert calls  # the converting path really ran
    for k in range(2):
        for g, w in zip(got[k], want[k]):
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_kernels_write_block_outputs_in_place():
    # the acting kernel of PPO writes logits and actions straight into the rollout's block rows;
    # the losses equal the numpy backend's (which assigns each point into its block)
    def build(backend):
        return tl.rl.ppo(total_steps=2 * 4 * 2, env="CartPole-v1", num_envs=2, num_steps=4, epochs=1, minibatches=1,
                         backend=backend, seed=3)

    exe = build("numba")
    low = exe.plan.lowered
    writes = [o for s in low.statements for st in s.steps if st.kind == "kernel" for o in st.outputs
              if low.buffers[o].kind == "block" and low.buffers[o].single]
    assert writes
    for o in writes:
        assert re.search(rf"K\d+\(.*b{o}\[d_t\][,)]", exe.source)  # passed to the kernel
        assert f"b{o}[d_t] = o" not in exe.source  # not assigned after it
    exe.run()
    ref = build("numpy").run()
    keys = ("pg_loss", "v_loss", "entropy", "approx_kl")
    got = [[row[k] for k in keys] for row in exe.history.rows]
    want = [[row[k] for k in keys] for row in ref.history.rows]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_without_numpys_blas_the_kernels_call_numbas():
    """``TIMERL_NUMPY_BLAS=0`` (as where numpy's OpenBLAS is not found): the same kernels call numba's
    BLAS, are cached apart (the BLAS is named in their source), and compute the same products."""
    import os
    import subprocess
    import sys

    code = """
import numpy as np, timerl as tl
from timerl.kernels import blas
rng = np.random.default_rng(0)
x, g = rng.normal(size=(2, 60, 24)).astype("float32"), rng.normal(size=(2, 60, 16)).astype("float32")
got = {}
prog = tl.Program("i")
(i,) = prog.dims
with prog:
    tx, tg = tl.tensor(x, domain=(i,), name="x"), tl.tensor(g, domain=(i,), name="g")
    tl.sink([tx.transpose(1, 0) @ tg], lambda v, p: got.__setitem__(p["i"], np.array(v[0])))
exe = prog.compile(bounds={"I": 2}, backend="numba")
exe.run()
assert blas.NAME == "numba" and all("BLAS numba" in s and "gemm_tn(" in s for s in exe.plan.kernels.values())
for k in range(2):
    np.testing.assert_allclose(got[k], x[k].T @ g[k], rtol=1e-5, atol=1e-5)
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TIMERL_NUMPY_BLAS": "0"}, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.skipif(blas._NUMPY_THREADS is None, reason="numpy's OpenBLAS thread count cannot be set here")
@pytest.mark.parametrize("setting", [1, 0])
def test_a_run_sets_openblas_threads_and_restores_them(setting):
    """``TIMERL_BLAS_THREADS`` (``config.blas_threads``): numpy's OpenBLAS runs the program's
    products with that many threads (read inside the run, from a sink) and has its own count back
    afterwards; 0 leaves it alone; any other OpenBLAS (scipy's, numba's BLAS) keeps its count. The
    products are numpy's either way."""
    npath = blas._NUMPY_LIB[0]
    before = blas.set_threads(3)  # a count that neither the default nor OpenBLAS's own would be
    try:
        seen, got = [], {}
        x = np.random.default_rng(1).normal(size=(2, 200, 64)).astype("float32")
        prog = tl.Program("i")
        (i,) = prog.dims
        with prog:
            tx = tl.tensor(x, domain=(i,), name="x")
            tl.sink([tx.transpose(1, 0) @ tx],
                    lambda v, p: (seen.append(blas.thread_counts()), got.__setitem__(p["i"], np.array(v[0]))))
        with tl.config.override(blas_threads=setting):
            exe = prog.compile(bounds={"I": 2}, backend="numba")
            others = {p: c for p, c in blas.thread_counts().items() if p != npath}  # scipy's, once numba loaded it
            exe.run()
        assert len(seen) == 2 and all(c[npath] == (setting or 3) for c in seen), seen
        assert all({p: c for p, c in counts.items() if p != npath} == others for counts in seen)
        assert blas.thread_counts()[npath] == 3
        for k in range(2):
            np.testing.assert_allclose(got[k], x[k].T @ x[k], rtol=1e-5, atol=1e-4)
    finally:
        blas.set_threads(before)


def _persistent(exe):
    """The slots whose kernel writes them into arrays of their own (``PS<n>`` kernel arguments)."""
    return {int(n) for n in re.findall(r"\bPS(\d+)[ab]?\b", exe.source)}


def test_slots_between_kernels_are_written_into_arrays_of_their_own(monkeypatch):
    # PPO's learner statement runs several kernels one after another (fuse.MAX_MEMBERS): what one
    # hands the next goes through slots, which the kernels write into arrays allocated once per run
    # instead of returning fresh ones; the losses and returns (the acting loop's env state, the
    # parameters after each update) equal those of kernels returning every slot
    def build():
        return tl.rl.ppo(total_steps=3 * 4 * 4, env="CartPole-v1", num_envs=4, num_steps=4, epochs=2, minibatches=2,
                         backend="numba", seed=5)

    exe = build()
    low = exe.plan.lowered
    kept = _persistent(exe)
    assert kept and all(low.buffers[n].kind == "slot" for n in kept)
    assert not any(re.search(rf"\bv{n} = r\[", exe.source) for n in kept)  # never a returned array
    # the optimizer's recurrences (p[k] = merge(p0, p_new[k - 1])) alternate between two arrays
    double = {int(n) for n in re.findall(r"\bq(\d+) = PS\d+a if not", exe.source)}
    assert double and double < kept
    exe.run()
    assert exe.planned_peak() == exe.stats["peak_bytes"]
    with monkeypatch.context() as m:
        m.setattr(interpreter.Render, "PERSIST_BYTES", 0)
        ref = build()
        assert not _persistent(ref)
        ref.run()
    keys = ("pg_loss", "v_loss", "entropy", "approx_kl", "mean_return")
    got = [[row[k] for k in keys] for row in exe.history.rows]
    want = [[row[k] for k in keys] for row in ref.history.rows]
    np.testing.assert_array_equal(got, want)  # the same kernels' arithmetic: bit for bit
    # the slots' arrays count from the run's start to its end: a higher peak
    assert exe.stats["peak_bytes"] > ref.stats["peak_bytes"]


def test_a_kernel_value_a_sink_keeps_gets_a_fresh_array_each_point():
    # the sink keeps each point's array as it gets it (no copy): a slot written into one array
    # of its own would leave every kept entry equal to the last point's
    kept = []
    prog = tl.Program("i")
    (i,) = prog.dims
    rng = np.random.default_rng(2)
    data = rng.normal(size=(4, 8, 3)).astype("float32")
    w = rng.normal(size=(3, 5)).astype("float32")
    with prog:
        x = tl.tensor(data, domain=(i,), name="x")
        y = tl.tanh(x @ tl.tensor(w, name="w")) * 2.0
        tl.sink(y, lambda v, p: kept.append(v))
        tl.sink((y * y).sum(), lambda v, p: None)
    exe = prog.compile(bounds={"I": 4}, backend="numba")
    exe.run()
    want = [np.tanh(data[k] @ w) * 2.0 for k in range(4)]
    assert len(kept) == 4
    for got, ref in zip(kept, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _backward_layer(n=4096):
    """At each ``i``: ``((u @ w) * (1 - H * H)) @ w2`` with ``H`` stored (a backward pass's tanh factor
    over activations another statement kept) and ``u`` an elementwise chain of another shape."""
    rng = np.random.default_rng(0)
    H = np.tanh(rng.normal(size=(2, n, 64))).astype("float32")
    Y = rng.normal(size=(2, n, 1)).astype("float32")
    w = rng.normal(size=(1, 64)).astype("float32")
    w2 = rng.normal(size=(64, 3)).astype("float32")
    want = [((Y[k] * 2.0 + 1.0) @ w * (1.0 - H[k] * H[k])) @ w2 for k in range(2)]

    def build(i):
        h = tl.tensor(H, domain=(i,), name="H")
        d = 1.0 - h * h  # ready first, read only after the matmul
        u = tl.tensor(Y, domain=(i,), name="Y") * 2.0 + 1.0
        return [((u @ tl.tensor(w, name="w")) * d) @ tl.tensor(w2, name="w2")]

    return build, want


def test_a_factor_read_only_after_a_matmul_is_computed_in_its_readers_loop():
    # the kernel's first ready run would be 1 - H * H alone (read only by the run after the matmul):
    # the (n, 1) chain goes first, and the factor is a scalar of the loop that reads it, never an array
    n = 4096
    build, want = _backward_layer(n)
    got, exe = _run(build, {"I": 2}, "numba")
    for k in range(2):
        np.testing.assert_allclose(got[k][0], want[k], rtol=1e-4, atol=1e-3)
    (src,) = [s for s in exe.plan.kernels.values() if "gemm" in s]
    body = src.split("\ndef kernel(", 1)[1]
    # the product the next matmul reads is computed in the array the first matmul wrote: one (n, 64)
    # array (two with the matmul's result in an array of its own, three before the factor moved)
    assert body.count(f"np.empty(({n}, 64), np.float32)") == 1


def test_a_matmul_writes_its_product_where_the_loop_reading_it_writes_its_result():
    """``tanh(x @ w + b)`` and ``(x @ w) * 3``, both returned: the matmul's product gets no array
    of its own; it is written into the array of a member of the loop nest that reads it, at or after
    the product's last reader in that nest (each element is read before it is overwritten). The
    values are numpy's; the kernel allocates the two returned (n, 64) arrays and nothing else of
    that shape."""
    n = 512
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2, n, 16)).astype("float32")
    W = rng.normal(size=(16, 64)).astype("float32")
    B = rng.normal(size=(64,)).astype("float32")

    def build(i):
        y = tl.tensor(X, domain=(i,), name="x") @ tl.tensor(W, name="w")
        return [tl.tanh(y + tl.tensor(B, name="b")), y * 3.0]

    got, exe = _run(build, {"I": 2}, "numba")
    for k in range(2):
        y = X[k] @ W
        np.testing.assert_allclose(got[k][0], np.tanh(y + B), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[k][1], y * 3.0, rtol=1e-4, atol=1e-4)
    (src,) = [s for s in exe.plan.kernels.values() if "gemm" in s]
    body = src.split("\ndef kernel(", 1)[1]
    assert body.count(f"np.empty(({n}, 64), np.float32)") == 2 and "reshape((512, 64)))" in body
