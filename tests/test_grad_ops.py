"""Gradients of every differentiable op against float64 central differences."""

import numpy as np
import pytest

import timerl as tl
from test_grad_util import BACKENDS, check_grad

rng = np.random.default_rng(1)
T = 2


def arr(*shape, lo=None):
    a = rng.normal(size=(T,) + shape)
    return np.abs(a) + lo if lo is not None else a


def loss_of(y):
    """A loss that weighs every element differently."""
    w = tl.const(np.linspace(0.5, 1.5, int(np.prod(y.shape)) or 1).reshape(y.shape), dtype="float64")
    return (y * w).sum() + 0.3 * (y * y).sum()


def run(fn, *arrays, backend="reference", **kw):
    data = {f"x{k}": (a, ("t",)) for k, a in enumerate(arrays)}

    def build(prog, xs):
        return loss_of(fn(*[xs[f"x{k}"] for k in range(len(arrays))]))

    return check_grad(build, data, {"T": T}, dims="t", backend=backend, **kw)


UNARY = [
    ("neg", lambda x: -x, None),
    ("exp", tl.exp, None),
    ("log", tl.log, 0.5),
    ("tanh", tl.tanh, None),
    ("sigmoid", tl.sigmoid, None),
    ("relu", tl.relu, None),
    ("sqrt", tl.sqrt, 0.5),
    ("abs", tl.abs, None),
    ("sin", tl.sin, None),
    ("cos", tl.cos, None),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn,lo", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, fn, lo, backend):
    run(fn, arr(2, 3, lo=lo), backend=backend)


BINARY = [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("pow", lambda a, b: a ** b),
    ("minimum", tl.minimum),
    ("maximum", tl.maximum),
    ("where", lambda a, b: tl.where(a > b, a * 2, b)),
    ("scalar", lambda a, b: 2.0 * a - b / 3.0 + 1.0),
    ("square", lambda a, b: a ** 2 + b ** 3),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcast(name, fn, backend):
    # spatial broadcasting: (2, 3) with (3,)
    run(fn, arr(2, 3, lo=0.5), arr(3, lo=0.5), backend=backend)


def test_domain_broadcast():
    # an operand of domain () against one over (t,): the gradient sums over t
    a, b = rng.normal(size=(T, 3)), rng.normal(size=(3,))

    def build(prog, xs):
        return loss_of(xs["a"] * xs["b"] + tl.tanh(xs["b"]))

    check_grad(build, {"a": (a, ("t",)), "b": (b, ())}, {"T": T}, dims="t")


def test_domain_broadcast_two_dims():
    a, b = rng.normal(size=(2, 3, 2)), rng.normal(size=(3, 2))

    def build(prog, xs):
        return loss_of(xs["a"] * xs["b"])

    check_grad(build, {"a": (a, ("i", "t")), "b": (b, ("t",))}, {"I": 2, "T": 3})
    check_grad(build, {"a": (a, ("i", "t")), "b": (rng.normal(size=(2, 2)), ("i",))}, {"I": 2, "T": 3})


REDUCE = [
    ("sum", lambda x: x.sum()),
    ("sum0", lambda x: x.sum(axis=0)),
    ("sum_keep", lambda x: x.sum(axis=1, keepdims=True) * x),
    ("mean", lambda x: x.mean(axis=1)),
    ("max", lambda x: x.max(axis=1)),
    ("min", lambda x: x.min()),
    ("std", lambda x: x.std(axis=0)),
    ("logsumexp", lambda x: x.logsumexp(axis=-1)),
    ("discounted_sum", lambda x: x.discounted_sum(0.7, axis=1)),
    ("cumsum", lambda x: x.cumsum(axis=1)),
    ("discounted_cumsum", lambda x: x.discounted_cumsum(0.8, axis=1)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn", REDUCE, ids=[r[0] for r in REDUCE])
def test_reduce_scan(name, fn, backend):
    run(fn, arr(2, 4), backend=backend)


def test_discounted_sum_gamma_tensor():
    run(lambda x, g: x.discounted_sum(tl.sigmoid(g), axis=0), arr(4), arr())


MATMUL = [
    ("mm", (2, 3), (3, 4)),
    ("vm", (3,), (3, 4)),
    ("mv", (2, 3), (3,)),
    ("vv", (3,), (3,)),
    ("batched", (2, 2, 3), (3, 2)),
    ("batched4", (2, 2, 2, 3), (3, 2)),  # two batch dims merged into the rows of b's gradient
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,sa,sb", MATMUL, ids=[m[0] for m in MATMUL])
def test_matmul(name, sa, sb, backend):
    run(lambda a, b: a @ b, arr(*sa), arr(*sb), backend=backend)


MOVEMENT = [
    ("reshape", lambda x: x.reshape(4, 2) * tl.arange(2).astype("float64")),
    ("permute", lambda x: x.transpose(1, 0) @ tl.const(np.arange(2.0).reshape(2, 1), dtype="float64")),
    ("expand", lambda x: x.sum(axis=1, keepdims=True).expand(2, 5)),
    ("concat", lambda x: tl.concat([x, x * 2, tl.tanh(x)], axis=1)),
    ("stack", lambda x: tl.stack([x, x ** 2], axis=0)),
    ("squeeze", lambda x: x.unsqueeze(1).squeeze(1) * x),
    ("slice", lambda x: x.spatial[1:, ::2] * x.spatial[0:1, 1:3]),
    ("slice_int", lambda x: x.spatial[1] + x.spatial[:, -1].sum()),
    ("slice_rev", lambda x: x.spatial[:, ::-1] * x),
    ("newaxis", lambda x: x.spatial[None, 0] * 3),
    ("take", lambda x: x.take(tl.const(np.array([2, 0, 2])), axis=1)),
    ("take_flat", lambda x: x.take(tl.const(np.array([[5, 1], [1, 1]])))),
    ("take_along", lambda x: x.take_along_axis(tl.const(np.array([[1, 1, 0], [3, 2, 2]])), axis=1)),
    ("index_tensor", lambda x: x.spatial[tl.const(np.array([1, 1, 0]))]),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,fn", MOVEMENT, ids=[m[0] for m in MOVEMENT])
def test_movement(name, fn, backend):
    run(fn, arr(2, 4), backend=backend)


def test_cast_float():
    run(lambda x: x.astype("float32").astype("float64") * x, arr(3), eps=1e-2, rtol=1e-3, atol=1e-3)


def test_categorical_log_prob_and_entropy():
    from timerl.distributions import Categorical

    def fn(logits):
        d = Categorical(logits)
        return d.log_prob(tl.const(np.array([1, 0]))) + d.entropy() * 0.5

    run(fn, arr(2, 3))


def test_normal_log_prob_and_entropy():
    from timerl.distributions import Normal

    def fn(mean, log_std, a):
        d = Normal(mean, log_std)
        return d.log_prob(a).sum() + d.entropy().sum()

    run(fn, arr(3), arr(3) * 0.3, arr(3))
