"""The op registry (timerl.ir.registry): every op and function has a complete entry, the
scalar templates kernel generators render compute numpy's values under numba, and a
function added as one entry (sin, cos) works on every backend, gradients included."""

import math

import numpy as np
import pytest

import timerl as tl
from programs.collect import Collect
from test_grad_util import ALL_BACKENDS, check_grad, compile_or_skip
from timerl.ir import registry
from timerl.ir.ops import Op

FN_OPS = (Op.UNARY, Op.BINARY, Op.REDUCE, Op.SCAN)


# -- structure ----------------------------------------------------------------------------------


def test_every_op_and_function_has_an_entry_with_known_traits():
    for o in Op:
        rule = registry.op(o)
        assert rule.op is o and rule.traits <= set(registry.TRAITS), (o, rule.traits - set(registry.TRAITS))
    for o in FN_OPS:
        assert registry.fns(o), o
        for fn in registry.fns(o):
            rule = registry.fn_of(o, fn)
            assert rule.fn == fn and rule.np is not None and rule.dtype is not None
            assert registry.op(o).traits - {"donor"} <= rule.traits <= set(registry.TRAITS), fn


def test_unknown_ops_and_functions_are_named():
    with pytest.raises(NotImplementedError, match="no function 'tan'"):
        registry.unary("tan")
    with pytest.raises(NotImplementedError, match="no elementwise function 'tan'"):
        registry.elementwise("tan")


def test_a_function_without_a_gradient_says_why():
    for o in FN_OPS:
        for fn in registry.fns(o):
            rule = registry.fn_of(o, fn)
            assert rule.vjp is not None or rule.nondiff is not None or rule.stops == "all" or fn in (
                "mod", "floordiv"), fn  # mod and floordiv: "no gradient rule", raised when asked


def test_trait_sets_the_other_layers_ask_for():
    assert registry.ops_with("source") == {Op.CONST, Op.DATA, Op.DIM_VALUE, Op.RANDOM}
    assert registry.ops_with("elementwise") == {Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST}
    assert registry.ops_with("owning") == {Op.BINARY, Op.WHERE, Op.CAST, Op.MATMUL}
    assert registry.ops_with("donor") == {Op.UNARY, Op.BINARY}
    assert not registry.unary("detach").has("donor") and registry.unary("exp").has("donor")
    assert registry.ops_with("alone") == {Op.MERGE, Op.UDF}
    assert set(Op) - registry.ops_with("fusable") == {Op.MERGE, Op.UDF, Op.RANDOM, Op.SINK, Op.DATA}
    assert registry.symbol("add") == "+" and registry.symbol("matmul") == "@" and registry.symbol("maximum") is None


# -- scalar templates under numba -----------------------------------------------------------------

# numpy's float32/float64 exp, log, tanh, sin, cos and power are within an ulp or two of the
# correctly rounded result, as is libm's, so the two may differ by a few ulp; every other
# template must give numpy's bits (NaN payloads aside, signed zeros included)
ULP = {"exp": 4, "log": 4, "tanh": 4, "sin": 4, "cos": 4, "pow": 4}
TEMPLATED = [(o, fn) for o in (Op.UNARY, Op.BINARY) for fn in registry.fns(o) if registry.fn_of(o, fn).expr]


def _edges(dt):
    fi = np.finfo(dt)
    edge = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.25, -7.25, 1e-3, 88.0, 89.0, 710.0, 1e5, 123456.7, 2.0**24 + 1,
            1e30, -1e30, fi.max, -fi.max, fi.tiny, -fi.tiny, fi.smallest_subnormal, np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(0)
    spread = rng.normal(size=300) * 10.0 ** rng.integers(-4, 7, size=300)
    return np.array(edge, dt), np.concatenate([np.array(edge, dt), spread.astype(dt)])


def _operands(rule, dt):
    if rule.has("bool_operands"):
        vals = np.array([False, True])
    else:
        edge, vals = _edges(dt)
    if rule.op is Op.UNARY:
        return (vals,)
    if not rule.has("bool_operands"):
        rng = np.random.default_rng(1)
        a, b = np.meshgrid(edge, edge)
        extra = rng.choice(vals, size=(2, 2000))
        return np.concatenate([a.ravel(), extra[0]]), np.concatenate([b.ravel(), extra[1]])
    a, b = np.meshgrid(vals, vals)
    return a.ravel(), b.ravel()


def _compiled(rule, numba):
    args = [f"x{k}" for k in range(1 if rule.op is Op.UNARY else 2)]
    src = (f"def kernel({', '.join(args)}, out):\n"
           f"    for i in range(out.shape[0]):\n"
           f"        out[i] = {rule.expr.format(*[a + '[i]' for a in args])}\n")
    ns = {"math": math}
    exec(src, ns)
    # the flags of timerl's CPU kernels: IEEE division (x / 0 is inf, not an exception)
    return numba.njit(error_model="numpy", fastmath=False)(ns["kernel"])


def _ulps(got, want):
    with np.errstate(all="ignore"):
        g, w = got.astype(np.float64), want.astype(np.float64)
        return np.abs(g - w) / np.spacing(np.abs(want)).astype(np.float64)


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("o,fn", TEMPLATED, ids=[fn for _, fn in TEMPLATED])
def test_expr_template_matches_numpy_under_numba(o, fn, dt):
    numba = pytest.importorskip("numba")
    rule = registry.fn_of(o, fn)
    xs = _operands(rule, np.dtype(dt))
    with np.errstate(all="ignore"):
        want = np.asarray(rule.np(*xs))
    got = np.empty_like(want)
    _compiled(rule, numba)(*xs, got)
    assert got.dtype == want.dtype
    both_nan = np.isnan(got) & np.isnan(want) if want.dtype.kind == "f" else np.zeros(want.shape, bool)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | both_nan
    tol = ULP.get(fn, 0)
    if tol:
        close = np.isfinite(got) & np.isfinite(want) & (_ulps(got, want) <= tol)
        same |= close
    bad = np.nonzero(~same)[0]
    assert not len(bad), f"{fn} on {dt}: " + ", ".join(
        f"{fn}{tuple(x[i] for x in xs)} = {got[i]!r}, numpy {want[i]!r}" for i in bad[:5])


# -- sin and cos: one registry entry each ---------------------------------------------------------

X = np.random.default_rng(2).normal(size=(3, 2, 5)) * 4


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("dt", ["float32", "float64", "int64"])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_values(name, dt, backend):
    x = X.astype(dt)
    prog = tl.Program("t")
    (t,), c = prog.dims, Collect()
    with prog:
        y = getattr(tl, name)(tl.tensor(x, (t,), name="x")) * 2.0 + 1.0
        tl.sink(y, c("y"))
    assert y.dtype == (np.float64 if dt == "float64" else np.float32)
    compile_or_skip(prog, {"T": 3}, backend).run()
    for k in range(3):
        want = getattr(np, name)(x[k].astype(y.dtype)) * 2 + 1
        assert c["y"][(k,)].dtype == y.dtype
        np.testing.assert_allclose(c["y"][(k,)], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_gradients(name, backend):
    f = getattr(tl, name)

    def build(prog, xs):
        y = f(xs["x"]) * f(xs["x"] * 0.5)
        return (y * y).sum()

    check_grad(build, {"x": (X[:2, 0], ("t",))}, {"T": 2}, dims="t", backend=backend)
