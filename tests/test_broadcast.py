"""Broadcasting inside fused elementwise chains, on every backend, against numpy.

Every pair of operand shapes that NumPy broadcasts (0-d values, size-1 axes, missing
leading axes, both operands stretched) is combined in chains of several elementwise ops,
with operands made inside the chain's group (same domain), in another group (domain ()),
and of a smaller shape than the chain (a chain's output read by a wider one). The numba
backend fuses these into kernels; each value must equal numpy's.
"""

import itertools

import numpy as np
import pytest

import timerl as tl
from timerl.kernels import statement

# 0-d, size-1 axes, missing leading axes, both operands stretched ((4, 1) with (1, 3)), in 1-3 dims
SHAPES = [(), (1,), (3,), (4, 1), (1, 3), (2, 1, 3), (2, 4, 1)]
def _broadcastable(a, b):
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


PAIRS = [(a, b) for a, b in itertools.combinations_with_replacement(SHAPES, 2) if _broadcastable(a, b)]
BACKENDS = ["reference", "numpy", "numba", "cuda"]  # cuda: in the simulator (tests/conftest.py)


def data(shape, k, dtype):
    n = int(np.prod(shape))
    return (np.linspace(-1.5, 2.0, n).reshape(shape) * (0.7 + 0.1 * k) + 0.05 * k).astype(dtype)


def chain_np(a, b):
    """The chain, written once in numpy (the independent expectation)."""
    u = (a * 0.5 + b) * (a - b)                    # both operands stretched to the joint shape
    w = np.sqrt(b * b + 1.0) + 1.0                 # b's own shape, read by the wider chain below
    v = (u / w - np.maximum(a, b)) * np.abs(a - 0.3)
    return np.sqrt(np.abs(v) + 1.0) - np.minimum(v, 0.5) + np.maximum(-a, 0.0) + np.tanh(v) * 0.5


def chain_tl(a, b):
    u = (a * 0.5 + b) * (a - b)
    w = tl.sqrt(b * b + 1.0) + 1.0
    v = (u / w - tl.maximum(a, b)) * tl.abs(a - 0.3)
    return tl.sqrt(tl.abs(v) + 1.0) - tl.minimum(v, 0.5) + tl.relu(-a) + tl.tanh(v) * 0.5  # tanh: numpy's


def build(layout, dtype):
    """One program holding the chain for every pair; returns (prog, bounds, expected, got)."""
    prog = tl.Program("i")
    (i,), (I,) = prog.dims, prog.bounds
    expected, got = {}, {}
    with prog:
        for k, (sa, sb) in enumerate(PAIRS):
            for swap in ((False, True) if sa != sb else (False,)):
                s1, s2 = (sb, sa) if swap else (sa, sb)
                a_np, b_np = data(s1, k, dtype), data(s2, k + 1, dtype)
                if layout == "same":        # both operands in the chain's group (domain (i,))
                    a = tl.tensor(np.stack([a_np, a_np + 1]), domain=(i,), name=f"a{k}")
                    b = tl.tensor(np.stack([b_np, b_np - 1]), domain=(i,), name=f"b{k}")
                    exp = [chain_np(a_np, b_np), chain_np(a_np + 1, b_np - 1)]
                else:                       # b from a group of domain (): read across groups
                    a = tl.tensor(np.stack([a_np, a_np + 1]), domain=(i,), name=f"a{k}")
                    b = tl.tensor(b_np, name=f"b{k}")
                    exp = [chain_np(a_np, b_np), chain_np(a_np + 1, b_np)]
                key = (s1, s2)
                expected[key] = exp
                out = got.setdefault(key, {})
                tl.sink(chain_tl(a, b), lambda v, p, out=out: out.__setitem__(p["i"], v.copy()))
    return prog, {I: 2}, expected, got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout,dtype", [("same", "float32"), ("across", "float32"), ("same", "float64")])
def test_broadcasting_chains_match_numpy(backend, layout, dtype):
    prog, bounds, expected, got = build(layout, dtype)
    exe = prog.compile(bounds, backend=backend, check=backend != "reference")
    exe.run()
    if backend == "numba":  # the chains really run inside statement kernels, no op through numpy
        assert exe.stats["kernels"] >= 1 and "evaluate(" not in exe.source and "uf" not in exe.source
    assert_chains(expected, got, dtype)


def assert_chains(expected, got, dtype):
    """Every chain's value at both points equals numpy's, in the program's dtype."""
    tol = 2e-6 if dtype == "float32" else 1e-12
    for key, exp in expected.items():
        for pt in (0, 1):
            v = got[key][pt]
            assert v.shape == exp[pt].shape and v.dtype == np.dtype(dtype), (key, v.shape, v.dtype)
            np.testing.assert_allclose(v, exp[pt], rtol=tol, atol=tol, err_msg=f"shapes {key} at i = {pt}")


def test_issue_example_x_over_exp_zeros():
    """x (4, 1) / exp(zeros(1,)): the first report (numba gave [1, inf, inf, inf])."""
    for backend in BACKENDS:
        prog = tl.Program("i")
        (i,), (I,) = prog.dims, prog.bounds
        got = []
        with prog:
            x = tl.tensor(np.arange(1, 5, dtype="float32").reshape(1, 4, 1), domain=(i,), name="x")
            y = (x * 1.0 / tl.exp(tl.zeros((1,), domain=(i,)) * 1.0 + 0.0)) + 0.0
            tl.sink(y, lambda v, p: got.append(v.copy()))
        prog.compile({I: 1}, backend=backend).run()
        np.testing.assert_array_equal(got[0], np.arange(1, 5, dtype="float32").reshape(4, 1), err_msg=backend)


@pytest.mark.parametrize("shape,target,ok", [
    ((), (4, 3), True), ((1,), (4, 3), True), ((3,), (4, 3), True), ((4, 1), (4, 3), True),
    ((4,), (4, 3), False), ((2, 4, 3), (4, 3), False), ((1, 4, 3), (4, 3), False), ((3, 1), (4, 3), False),
])
def test_broadcasts_to_follows_numpy(shape, target, ok):
    assert statement.broadcasts_to(shape, target) is ok
    numpy_ok = _broadcastable(shape, target) and np.broadcast_shapes(shape, target) == target
    assert numpy_ok is ok


def test_operand_index_reads_broadcast_axes_at_zero():
    # ranks aligned on the right; missing leading axes dropped, length-1 axes read at 0
    j = ["j0", "j1", "j2"]
    assert statement.operand_index((3,), (2, 4, 3), j) == "j2"
    assert statement.operand_index((4, 1), (2, 4, 3), j) == "j1, 0"
    assert statement.operand_index((2, 1, 3), (2, 4, 3), j) == "j0, 0, j2"
    assert statement.operand_index((2, 4, 3), (2, 4, 3), j) == "j0, j1, j2"
    assert statement.operand_index((1, 1), (1, 1), j[:2]) == "j0, j1"
    assert statement.operand_index((), (2, 4, 3), j) == "0"  # a 0-d value: an array of shape (1,) in a kernel
