"""Movement ops in statement kernels: expand, permute and slices read through strides (``move4``)
instead of compile-time index arrays, a gather where the map has more than four axes that do not
merge. Oracles: numpy's own indexing and the reference executor."""

import numpy as np
import pytest

import timerl as tl
from timerl.kernels import statement


def _apply(x, base, axes):
    """What ``scalar.move4`` computes, in numpy."""
    out = np.empty([n for n, _ in axes], x.dtype)
    for j in np.ndindex(*out.shape):
        out[j] = x[base + sum(a * s for a, (_, s) in zip(j, axes))]
    return out.ravel()


CASES = [
    ("permute", (2, 3, 4), lambda a: np.transpose(a, (2, 0, 1))),
    ("permute 4-d", (2, 3, 4, 5), lambda a: np.transpose(a, (3, 1, 0, 2))),
    ("expand", (3, 1), lambda a: np.broadcast_to(a, (2, 3, 4))),
    ("expand scalar", (1,), lambda a: np.broadcast_to(a.reshape(()), (5, 7))),
    ("slice, negative step", (4, 6), lambda a: a[::-1, 1:5:2]),
    ("slice and new axis", (3, 5), lambda a: a[1:, None, ::2]),
]


@pytest.mark.parametrize("name, shape, fn", CASES, ids=[c[0] for c in CASES])
def test_strides_reproduce_numpy_indexing(name, shape, fn):
    src = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    idx = np.ascontiguousarray(fn(src)).ravel()
    aff = statement.strides(idx, fn(src).shape)
    assert aff is not None
    base, axes = aff
    assert len(axes) == statement.MOVE_AXES
    np.testing.assert_array_equal(_apply(src.ravel(), base, axes), idx)


def test_strides_decline_maps_that_are_not_affine_or_too_deep():
    assert statement.strides(np.array([0, 2, 1, 3]), (4,)) is None
    src = np.arange(2 * 3 * 2 * 3 * 2).reshape(2, 3, 2, 3, 2)
    deep = np.transpose(src, (4, 3, 2, 1, 0))  # five axes, no two neighbours stepping as one
    assert statement.strides(deep.ravel(), deep.shape) is None


def _program(i):
    rng = np.random.default_rng(3)
    a = tl.tensor(rng.normal(size=(2, 2, 3, 4, 5)).astype("float32"), domain=(i,), name="a")
    b = tl.tensor(rng.normal(size=(2, 2, 3, 2, 3, 2)).astype("float32"), domain=(i,), name="b")
    s = tl.tensor(rng.normal(size=(2,)).astype("float32"), domain=(i,), name="s")
    return [a.transpose(3, 1, 0, 2) * 2.0, (s * 1.0).expand(6, 7) + 1.0, a.spatial[::-1, 1:, ::2] - 1.0,
            b.transpose(4, 3, 2, 1, 0) * 3.0]


def test_movement_ops_match_the_reference_through_strides_and_gathers():
    got = {}
    for backend in ("reference", "numba"):
        prog = tl.Program("i")
        (i,) = prog.dims
        vals = {}
        with prog:
            tl.sink(_program(i), lambda v, p, vals=vals: vals.__setitem__(p["i"], [np.array(x) for x in v]))
        exe = prog.compile(bounds={"I": 2}, backend=backend)
        exe.run()
        got[backend] = vals
    for k in range(2):
        for w, g in zip(got["reference"][k], got["numba"][k]):
            np.testing.assert_array_equal(g, w)
    srcs = "\n".join(exe.plan.kernels.values())
    assert "move4(" in srcs  # the four-axis permute, the expand and the slice
    assert "gather(" in srcs  # the five-axis permute: no four merged axes
