"""The numpy rules of timerl.ir.semantics are batch-aware: evaluating B points at once with
``nb = 1`` leading batch axes (of size B, or 1 to broadcast) equals B evaluations with
``nb = 0``. Vectorized backends rely on this; the reference executor uses ``nb = 0``."""

import numpy as np
import pytest

import timerl as tl
from timerl.ir.ops import Op
from timerl.ir.semantics import eval_rules, evaluate

B = 3


class Ctx:
    def resolve(self, e):
        raise AssertionError("int shapes only here")

    def where(self):
        return "test"


def _ops():
    prog = tl.Program("t")
    (t,) = prog.dims
    rng = np.random.default_rng(0)
    with prog:
        a = tl.tensor(rng.normal(size=(B, 2, 3)).astype("float32"), (t,))
        b = tl.tensor(rng.normal(size=(B, 3)).astype("float32"), (t,))
        m = tl.tensor(rng.normal(size=(B, 3, 4)).astype("float32"), (t,))
        j = tl.tensor(rng.integers(0, 2, size=(B, 4)).astype("int64"), (t,))
        jj = tl.tensor(rng.integers(0, 2, size=(B, 2, 1)).astype("int64"), (t,))
        made = [
            tl.exp(a), -a, a + b, a > b, tl.where(a > 0, a, b), a.astype("int32"),
            a.sum(axis=1), a.mean(axis=0, keepdims=True), a.max(), a.min(axis=-1), a.std(axis=1),
            a.logsumexp(axis=1), a.argmax(), a.argmax(axis=1, keepdims=True),
            a.cumsum(axis=1), a.discounted_sum(0.9, axis=1), a.discounted_cumsum(0.5, axis=0),
            a.discounted_sum(b.sum(), axis=0),
            a @ m, b @ m, a @ b, b @ b,
            a.reshape(3, 2), a.transpose(), b.expand(2, 3), tl.concat([a, a], axis=1), tl.stack([b, b]),
            a.spatial[1, ::-1], a.spatial[None, :, 0],
            b.take(j, axis=0), a.take(j, axis=1), a.take_along_axis(jj, axis=1), tl.one_hot(j, 3),
            tl.const(np.ones((2, 2), "float32")),
        ]
    return prog, made


PROG, MADE = _ops()


@pytest.mark.parametrize("k", range(len(MADE)))
def test_batched_rule_equals_pointwise(k):
    pdg = PROG.pdg
    n = MADE[k].nid
    node = pdg.rec(n)
    rng = np.random.default_rng(k)
    per_point = []
    for p, e in pdg.inputs(n):
        pn = pdg.rec(p)
        shape, dt = pn.shapes[e.out], pn.dtypes[e.out]
        if dt.kind == "f":
            v = rng.normal(size=(B,) + shape).astype(dt)
        elif dt.kind == "b":
            v = rng.random(size=(B,) + shape) > 0.5
        else:
            v = rng.integers(0, 2, size=(B,) + shape).astype(dt)
        per_point.append(v)
    if node.op is Op.CONST:
        want = [evaluate(node, [], 0, Ctx())[0]] * B
        got = evaluate(node, [], 1, Ctx())[0]
        assert got.shape == (1,) + want[0].shape
        np.testing.assert_array_equal(got[0], want[0])
        return
    assert node.op in eval_rules
    want = [evaluate(node, [v[b] for v in per_point], 0, Ctx())[0] for b in range(B)]
    got = evaluate(node, per_point, 1, Ctx())[0]
    assert got.shape == (B,) + want[0].shape
    for b in range(B):
        np.testing.assert_allclose(got[b], want[b], rtol=1e-5, atol=1e-6)
        assert got.dtype == want[b].dtype == node.dtype
    # one operand shared by all points (batch size 1) broadcasts against the others
    if len(per_point) > 1:
        shared = [per_point[0][:1]] + per_point[1:]
        got = evaluate(node, shared, 1, Ctx())[0]
        for b in range(B):
            want_b = evaluate(node, [per_point[0][0]] + [v[b] for v in per_point[1:]], 0, Ctx())[0]
            np.testing.assert_allclose(got[b], want_b, rtol=1e-5, atol=1e-6)
