"""Op constructors: shape and dtype rules, domain union, branches of placeholders.

Each constructor checks its operands when the op is created (``tl.ShapeError`` naming
both operands) and records one node in the current program's PDG.
"""

from __future__ import annotations

import numbers

import numpy as np
import sympy

from ..errors import ArgTypeError, CompileError, ShapeError, user_site
from ..ir import registry
from ..ir.expr import Cond, Dim, Expr, as_cond
from ..ir.ops import Edge, Op, frozen
from .args import as_domain, as_dtype, as_shape, as_size, check_data, check_program, describe, value_array, who
from .program import building_program, current_program
from .tensor import RecurrentTensor

F32 = np.dtype("float32")
I64 = np.dtype("int64")
BOOL = np.dtype("bool")



# -- helpers --------------------------------------------------------------------------


def _is_scalar(x) -> bool:
    return isinstance(x, (bool, numbers.Number)) and not isinstance(x, np.ndarray)


def _prog_of(*xs):
    tensors = [x for x in xs if isinstance(x, RecurrentTensor)]
    if tensors:
        check_program(tensors)
        return tensors[0].prog
    return current_program()


def _eq(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return sympy.sympify(a) == sympy.sympify(b)


def _differ(a, b) -> bool:
    """Lengths that differ whatever the bounds (equality of symbolic ones is checked at compile)."""
    d = sympy.sympify(a) - sympy.sympify(b)
    return d.is_Integer and d != 0


def _is_one(a) -> bool:
    return isinstance(a, int) and a == 1


def broadcast_shapes(shapes, names) -> tuple:
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(nd):
        cur = 1
        for s, nm in zip(shapes, names):
            j = k - (nd - len(s))
            if j < 0:
                continue
            e = s[j]
            if _is_one(cur):
                cur = e
            elif _is_one(e) or _eq(cur, e):
                continue
            elif isinstance(cur, int) and isinstance(e, int):
                raise ShapeError(
                    f"shapes do not broadcast: {' and '.join(f'{n!r} {tuple(sh)}' for n, sh in zip(names, shapes))} "
                    f"(axis {k - nd}: {cur} vs {e})"
                )
            else:
                # symbolic vs other: equal only if the bounds make them so; checked at run time
                cur = cur if not isinstance(cur, int) else e
        out.append(cur)
    return tuple(out)


def result_dtype(*xs) -> np.dtype:
    strong = [x.dtype for x in xs if isinstance(x, RecurrentTensor)]
    strong += [np.asarray(x).dtype for x in xs if isinstance(x, (np.ndarray, np.generic))]
    weak = [x for x in xs if _is_scalar(x) and not isinstance(x, (np.ndarray, np.generic))]
    if not strong:
        if any(isinstance(w, float) for w in weak):
            return F32
        if any(isinstance(w, int) and not isinstance(w, bool) for w in weak):
            return I64
        return BOOL
    r = np.result_type(*strong)
    floats = [d for d in strong if d.kind == "f"]
    if floats and r == np.float64 and np.dtype("float64") not in floats:
        # an int tensor with a float32 one: float64 appears only from float64 data
        r = max(floats, key=lambda d: d.itemsize)
    for w in weak:
        if isinstance(w, bool):
            continue
        if isinstance(w, float) and r.kind in "biu":
            r = F32
        elif isinstance(w, int) and r.kind == "b":
            r = I64
        elif isinstance(w, complex):
            r = np.result_type(r, np.complex64)
    return np.dtype(r)


def as_tensor(x, dtype=None, prog=None, what=None) -> RecurrentTensor:
    """``x`` itself if a tensor, else a constant of it; ``what`` names ``x`` in error messages."""
    if isinstance(x, RecurrentTensor):
        return x
    if isinstance(x, (Expr, Cond)):
        raise TypeError(
            "an index expression or condition is not a tensor; use tl.dim_value(t) for the value of a dim"
        )
    value_array(x, what or (lambda: f"at {user_site()}: an argument"))
    arr = np.asarray(x, dtype=dtype if dtype is not None else (None if not _is_scalar(x) else result_dtype(x)))
    return _const(arr, prog or current_program())


def _const(arr: np.ndarray, prog, domain=(), name=None) -> RecurrentTensor:
    arr = frozen(arr)
    nid = prog.add(Op.CONST, domain, [arr.shape], [arr.dtype], {"value": arr}, name=name)
    return RecurrentTensor(prog, nid)


def basis(t: RecurrentTensor, pos: int) -> tuple[int, Edge]:
    return (t.nid, Edge(pos=pos, out=t.out, index=tuple(d.e for d in t.domain)))


def make(op: Op, operands, shapes, dtypes, attrs=None, name=None, extra_domain=()) -> list[RecurrentTensor]:
    """Record an op over the union of its operands' domains (basis edges)."""
    prog = _prog_of(*operands) if operands else current_program()
    domain = prog.sort_domain([d for x in operands for d in x.domain] + list(extra_domain))
    nid = prog.add(op, domain, shapes, dtypes, attrs, [basis(x, k) for k, x in enumerate(operands)], name=name)
    return [RecurrentTensor(prog, nid, k) for k in range(len(shapes))]


def _promote(xs, what=None):
    """Operands to tensors of their common dtype; ``what(k)`` names operand k in error messages."""
    for k, x in enumerate(xs):
        if isinstance(x, (bool, int, float)) or isinstance(x, (RecurrentTensor, Expr, Cond)):
            continue
        value_array(x, (lambda: what(k)) if what else (lambda: f"at {user_site()}: argument {k}"))
    dt = result_dtype(*xs)
    prog = _prog_of(*xs)
    ts = [as_tensor(x, dtype=dt, prog=prog) if not isinstance(x, RecurrentTensor) else x for x in xs]
    return ts, dt


def _int_axis(axis, who):
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
        raise ArgTypeError(f"axis {describe(axis)} for tensor {who!r} must be an int")
    return int(axis)


def _norm_axis(axis, ndim, who):
    axis = _int_axis(axis, who)
    ax = axis + ndim if axis < 0 else axis
    if not 0 <= ax < ndim:
        raise ShapeError(f"axis {axis} is out of range for {who!r} with {ndim} spatial axes")
    return ax


# -- elementwise ---------------------------------------------------------------------------


def unary(fn: str, x) -> RecurrentTensor:
    d = registry.unary(fn)
    x = x if isinstance(x, RecurrentTensor) else as_tensor(x, what=f"tl.{fn} at {user_site()}: its argument")
    dt = x.dtype
    if d.has("floats") and dt.kind in "biu":
        x, dt = cast(x, F32), F32
    if d.has("bool_operands"):
        if dt != BOOL:
            raise ShapeError(f"{d.symbol} needs a bool tensor, got {x.name!r} of dtype {dt}")
    elif d.has("no_bool") and dt == BOOL:
        raise ShapeError(f"cannot negate bool tensor {x.name!r}; use ~")
    attrs = {"fn": fn}
    return make(Op.UNARY, [x], [x.shape], [d.dtype(attrs, [dt])], attrs)[0]


def _operand_what(fn, xs):
    """How the messages of a binary op name operand k."""

    def what(k):
        named = [x.name for x in xs if isinstance(x, RecurrentTensor)]
        with_ = f" (with tensor {named[0]!r})" if named else ""
        sym = registry.symbol(fn)
        if sym:
            return f"at {user_site()}: the {('left', 'right')[k]} operand of {sym}{with_}"
        return f"tl.{fn} at {user_site()}: argument {k}{with_}"

    return what


def binary(fn: str, a, b) -> RecurrentTensor:
    d = registry.binary(fn)
    (a, b), dt = _promote([a, b], _operand_what(fn, [a, b]))
    shape = broadcast_shapes([a.shape, b.shape], [a.name, b.name])
    if d.has("bool_operands"):
        if a.dtype != BOOL or b.dtype != BOOL:
            raise ShapeError(f"& and | need bool tensors, got {a.name!r} ({a.dtype}) and {b.name!r} ({b.dtype})")
    if d.has("floats") and dt.kind in "biu":
        a, b = cast(a, F32), cast(b, F32)
    attrs = {"fn": fn}
    return make(Op.BINARY, [a, b], [shape], [d.dtype(attrs, [a.dtype, b.dtype])], attrs)[0]


def cast(x, dtype) -> RecurrentTensor:
    """``x`` converted to ``dtype`` (NumPy casting); ``x.astype(dtype)`` is the same."""
    x = x if isinstance(x, RecurrentTensor) else as_tensor(x, what=f"tl.cast at {user_site()}: its argument")
    dtype = as_dtype(dtype, f"astype of tensor {x.name!r}")
    if x.dtype == dtype:
        return x
    return make(Op.CAST, [x], [x.shape], [dtype], {"dtype": dtype})[0]


def where(c, a, b) -> RecurrentTensor:
    """``tl.where(c, a, b)``: ``a`` where the bool tensor ``c`` holds, else ``b`` (NumPy broadcasting).

    Both ``a`` and ``b`` are evaluated wherever it runs: to exclude reads at some points use
    placeholder branches instead. A non-bool ``c`` is a :class:`tl.ShapeError`.
    """
    c = as_tensor(c, what=lambda: f"tl.where at {user_site()}: the condition c")
    if c.dtype != BOOL:
        raise ShapeError(f"tl.where needs a bool condition, got {c.name!r} of dtype {c.dtype}")
    (a, b), dt = _promote([a, b], lambda k: f"tl.where at {user_site()}: argument {'ab'[k]} (with condition "
                                            f"{c.name!r})")
    shape = broadcast_shapes([c.shape, a.shape, b.shape], [c.name, a.name, b.name])
    return make(Op.WHERE, [c, a, b], [shape], [dt])[0]


def minimum(a, b):
    """Elementwise minimum of two tensors (NumPy broadcasting and promotion)."""
    return binary("minimum", a, b)


def maximum(a, b):
    """Elementwise maximum of two tensors (``tl.maximum(-adv * ratio, -adv * clipped)``)."""
    return binary("maximum", a, b)


def clip(x, lo, hi):
    """``x`` clipped elementwise to ``[lo, hi]`` (``tl.clip(ratio, 0.8, 1.2)``)."""
    x = as_tensor(x, what=lambda: f"tl.clip at {user_site()}: its argument x")
    for arg, v in (("lo", lo), ("hi", hi)):
        if not isinstance(v, (RecurrentTensor, Expr, Cond)):
            value_array(v, lambda: f"tl.clip of tensor {x.name!r} at {user_site()}: {arg}")
    return maximum(minimum(x, hi), lo)


# -- reductions and scans ----------------------------------------------------------------


def _axes(axis, ndim, who):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted({_norm_axis(a, ndim, who) for a in axes}))


def _reduced(fn, xs, attrs):
    """A REDUCE of ``xs`` with the registry's shape and dtype rules."""
    rule = registry.reduction(fn)
    shape = rule.shape(attrs, [xs[0].shape])
    return make(Op.REDUCE, xs, [shape], [rule.dtype(attrs, [x.dtype for x in xs])], attrs)[0]


def reduce(fn: str, x, axis=None, keepdims=False) -> RecurrentTensor:
    x = as_tensor(x)
    if fn == "argmax" and axis is not None and isinstance(axis, (tuple, list)):
        raise ShapeError(f"argmax of {x.name!r} takes one axis or None")
    axes = _axes(axis, x.ndim, x.name)
    if registry.reduction(fn).has("floats") and x.dtype.kind in "biu":
        x = cast(x, F32)
    return _reduced(fn, [x], {"fn": fn, "axis": axes, "keepdims": bool(keepdims), "flat": axis is None})


def scan(fn: str, x, axis=0) -> RecurrentTensor:
    x = as_tensor(x)
    attrs = {"fn": fn, "axis": _norm_axis(axis, x.ndim, x.name)}
    rule = registry.scan(fn)
    return make(Op.SCAN, [x], [rule.shape(attrs, [x.shape])], [rule.dtype(attrs, [x.dtype])], attrs)[0]


def discounted(x, gamma, axis=0, cumulative=False) -> RecurrentTensor:
    x = as_tensor(x)
    if x.dtype.kind != "f":
        x = cast(x, F32)
    ax = _norm_axis(axis, x.ndim, x.name)
    g = as_tensor(gamma, dtype=x.dtype, prog=x.prog,
                  what=f"discounted sum of tensor {x.name!r} at {user_site()}: gamma")
    if g.shape != ():
        raise ShapeError(f"discount gamma {g.name!r} must have shape (), got {g.shape}")
    g = cast(g, x.dtype)
    if cumulative:
        return make(Op.SCAN, [x, g], [x.shape], [x.dtype], {"fn": "discounted_cumsum", "axis": ax})[0]
    return _reduced("discounted_sum", [x, g], {"fn": "discounted_sum", "axis": (ax,), "keepdims": False,
                                               "flat": False})


# -- matmul -------------------------------------------------------------------------------


def matmul(a, b) -> RecurrentTensor:
    """``tl.matmul(a, b)`` / ``a @ b``: NumPy's ``matmul`` on the spatial axes (1-d operands are
    promoted and the added axis removed; leading axes broadcast). ``(N, 4) @ (4, 64)`` is
    ``(N, 64)``. Mismatched inner lengths are a :class:`tl.ShapeError`.
    """
    (a, b), dt = _promote([a, b], _operand_what("matmul", [a, b]))
    sa, sb = a.shape, b.shape
    if not sa or not sb:
        raise ShapeError(f"matmul needs at least 1-d operands, got {a.name!r} {sa} and {b.name!r} {sb}")
    a2 = sa if len(sa) > 1 else (1,) + sa
    b2 = sb if len(sb) > 1 else sb + (1,)
    if _differ(a2[-1], b2[-2]):
        raise ShapeError(f"matmul: {a.name!r} {sa} and {b.name!r} {sb} have mismatched inner dims")
    batch = broadcast_shapes([a2[:-2], b2[:-2]], [a.name, b.name])
    shape = batch + ((a2[-2],) if len(sa) > 1 else ()) + ((b2[-1],) if len(sb) > 1 else ())
    return make(Op.MATMUL, [a, b], [shape], [dt])[0]


# -- movement -------------------------------------------------------------------------------


def _prod(shape):
    p = sympy.Integer(1)
    for s in shape:
        p = p * sympy.sympify(s)
    return p


def reshape(x, shape) -> RecurrentTensor:
    """``x`` with spatial ``shape`` (one -1 is inferred; symbolic lengths allowed); see ``x.reshape``."""
    x = as_tensor(x)
    shape = as_shape(shape, f"reshape of tensor {x.name!r}", symbolic=True, minus_one=True)
    total = _prod(x.shape)
    if sum(1 for s in shape if isinstance(s, int) and s == -1) > 1:
        raise ShapeError(f"reshape of {x.name!r}: at most one -1")
    if any(isinstance(s, int) and s == -1 for s in shape):
        known = _prod([s for s in shape if not (isinstance(s, int) and s == -1)])
        rest = sympy.simplify(total / known)
        if rest.is_Integer:
            rest = int(rest)
        elif rest.is_Rational:
            raise ShapeError(f"cannot reshape {x.name!r} of shape {x.shape} into {shape}")
        shape = tuple(rest if (isinstance(s, int) and s == -1) else s for s in shape)
    if sympy.simplify(_prod(shape) - total) != 0:
        raise ShapeError(f"cannot reshape {x.name!r} of shape {x.shape} into {shape}")
    shape = tuple(int(s) if sympy.sympify(s).is_Integer else s for s in shape)
    if shape == tuple(x.shape):
        return x
    return make(Op.RESHAPE, [x], [shape], [x.dtype], {"shape": shape})[0]


def permute(x, axes=None) -> RecurrentTensor:
    """``x`` with its spatial axes permuted by ``axes`` (None: reversed); see ``x.transpose``."""
    x = as_tensor(x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else tuple(_norm_axis(a, x.ndim, x.name) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"permute of {x.name!r}: {axes} is not a permutation of its {x.ndim} axes")
    if axes == tuple(range(x.ndim)):
        return x
    shape = tuple(x.shape[a] for a in axes)
    return make(Op.PERMUTE, [x], [shape], [x.dtype], {"axes": axes})[0]


def broadcast_to(x, shape) -> RecurrentTensor:
    """``x`` broadcast to spatial ``shape`` (NumPy rules); see ``x.expand``."""
    x = as_tensor(x)
    shape = as_shape(shape, f"broadcast_to of tensor {x.name!r}", symbolic=True)
    if len(shape) < x.ndim:
        raise ShapeError(f"cannot broadcast {x.name!r} of shape {x.shape} to {shape}")
    for k, s in enumerate(x.shape):
        t = shape[len(shape) - x.ndim + k]
        if not (_is_one(s) or _eq(s, t)):
            raise ShapeError(f"cannot broadcast {x.name!r} of shape {x.shape} to {shape}")
    if shape == tuple(x.shape):
        return x
    return make(Op.EXPAND, [x], [shape], [x.dtype], {"shape": shape})[0]


def concat(xs, axis=0) -> RecurrentTensor:
    """Join tensors along spatial ``axis`` (NumPy's ``concatenate``); shapes must agree off the axis
    (else :class:`tl.ShapeError`); dtypes promote; domains combine by union.
    """
    xs = list(xs)
    if not xs:
        raise ShapeError("tl.concat needs at least one tensor")
    ts, dt = _promote(xs, lambda k: f"tl.concat at {user_site()}: entry {k}")
    nd = ts[0].ndim
    ax = _norm_axis(axis, nd, ts[0].name)
    for t in ts[1:]:
        if t.ndim != nd or any(_differ(a, b) for k, (a, b) in enumerate(zip(ts[0].shape, t.shape)) if k != ax):
            raise ShapeError(f"tl.concat: {ts[0].name!r} {ts[0].shape} and {t.name!r} {t.shape} differ off axis {ax}")
    length = sympy.Integer(0)
    for t in ts:
        length = length + sympy.sympify(t.shape[ax])
    length = int(length) if length.is_Integer else length
    shape = tuple(length if k == ax else s for k, s in enumerate(ts[0].shape))
    ts = [cast(t, dt) for t in ts]
    return make(Op.CONCAT, ts, [shape], [dt], {"axis": ax})[0]


def stack(xs, axis=0) -> RecurrentTensor:
    """Stack equal-shape tensors along a new spatial ``axis`` (NumPy's ``stack``)."""
    xs = [as_tensor(x, what=f"tl.stack at {user_site()}: entry {k}") if not isinstance(x, RecurrentTensor) else x
          for k, x in enumerate(xs)]
    if not xs:
        raise ShapeError("tl.stack needs at least one tensor")
    for x in xs[1:]:
        if x.ndim != xs[0].ndim or any(_differ(a, b) for a, b in zip(xs[0].shape, x.shape)):
            raise ShapeError(f"tl.stack: {xs[0].name!r} {xs[0].shape} and {x.name!r} {x.shape} differ in shape")
    nd = xs[0].ndim + 1
    axis = _int_axis(axis, xs[0].name)
    ax = axis + nd if axis < 0 else axis
    if not 0 <= ax < nd:
        raise ShapeError(f"tl.stack: axis {axis} out of range for {nd - 1}-d tensors like {xs[0].name!r}")
    return concat([unsqueeze(x, ax) for x in xs], axis=ax)


def squeeze(x, axis=None) -> RecurrentTensor:
    """``x`` without its length-1 spatial axes (or only ``axis``); see ``x.squeeze``."""
    x = as_tensor(x)
    axes = [k for k, s in enumerate(x.shape) if _is_one(s)] if axis is None else list(_axes(axis, x.ndim, x.name))
    for a in axes:
        if not _is_one(x.shape[a]):
            raise ShapeError(f"cannot squeeze axis {a} of {x.name!r} with shape {x.shape}")
    return reshape(x, tuple(s for k, s in enumerate(x.shape) if k not in axes))


def unsqueeze(x, axis) -> RecurrentTensor:
    """``x`` with a length-1 spatial axis inserted at ``axis``; see ``x.unsqueeze``."""
    x = as_tensor(x)
    axis = _int_axis(axis, x.name)
    ax = axis + x.ndim + 1 if axis < 0 else axis
    if not 0 <= ax <= x.ndim:
        raise ShapeError(f"unsqueeze axis {axis} out of range for {x.name!r} with shape {x.shape}")
    shape = tuple(x.shape[:ax]) + (1,) + tuple(x.shape[ax:])
    return make(Op.RESHAPE, [x], [shape], [x.dtype], {"shape": shape})[0]


def _slice_len(sl: slice, n):
    """Length of ``range(n)[sl]`` for an int or symbolic ``n`` (symbolic: step 1 only)."""
    if isinstance(n, int):
        return len(range(n)[sl])
    if sl.step not in (None, 1):
        raise ShapeError("a symbolic axis can only be sliced with step 1")
    L = sympy.sympify(n)

    def norm(v, default):
        if v is None:
            return default
        return sympy.Min(int(v), L) if v >= 0 else sympy.Max(0, L + int(v))

    out = sympy.Max(0, norm(sl.stop, L) - norm(sl.start, sympy.Integer(0)))
    return int(out) if out.is_Integer else out


def spatial_index(x, key) -> RecurrentTensor:
    """NumPy basic indexing of the spatial axes (ints, slices, None, ...); symbolic axes allowed."""
    x = as_tensor(x)
    key = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, RecurrentTensor) for k in key):
        if len(key) == 1:
            return take(x, key[0], axis=0)
        raise ShapeError(f"tensor {x.name!r}: index with one tensor at a time (use x.take(idx, axis))")
    for k in key:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or (isinstance(k, (int, np.integer))
                                                                      and not isinstance(k, bool))):
            raise ShapeError(f"tensor {x.name!r}: unsupported spatial index entry {k!r}")
        if isinstance(k, slice) and any(v is not None and not isinstance(v, (int, np.integer))
                                        for v in (k.start, k.stop, k.step)):
            raise ShapeError(f"tensor {x.name!r}: spatial slices take int bounds, got {k!r}")
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise ShapeError(f"tensor {x.name!r}: at most one ... in an index")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > x.ndim:
        raise ShapeError(f"tensor {x.name!r} of shape {x.shape}: index {key!r} has too many entries")
    full = []
    for k in key:
        full.extend([slice(None)] * (x.ndim - used) if k is Ellipsis else [k])
    if Ellipsis not in key:
        full.extend([slice(None)] * (x.ndim - used))
    shape, ax = [], 0
    for k in full:
        if k is None:
            shape.append(1)
            continue
        n = x.shape[ax]
        ax += 1
        if isinstance(k, slice):
            try:
                shape.append(_slice_len(k, n))
            except ShapeError as e:
                raise ShapeError(f"tensor {x.name!r} of shape {x.shape}: {e}") from None
        elif isinstance(n, int) and not -n <= int(k) < n:
            raise ShapeError(f"tensor {x.name!r} of shape {x.shape}: index {int(k)} is out of range for axis "
                             f"{ax - 1} of length {n}")
    norm = tuple(int(k) if isinstance(k, (int, np.integer)) else k for k in full)
    return make(Op.SLICE, [x], [tuple(shape)], [x.dtype], {"key": norm})[0]


def take(x, idx, axis=None) -> RecurrentTensor:
    """Gather ``x`` along spatial ``axis`` with the integer tensor ``idx`` (``numpy.take``); see ``x.take``."""
    x = as_tensor(x)
    idx = as_tensor(idx, what=f"take of tensor {x.name!r} at {user_site()}: the index") if not isinstance(
        idx, RecurrentTensor) else idx
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"take: index {idx.name!r} must be an integer tensor, got {idx.dtype}")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    ax = _norm_axis(axis, x.ndim, x.name)
    shape = tuple(x.shape[:ax]) + tuple(idx.shape) + tuple(x.shape[ax + 1 :])
    return make(Op.TAKE, [x, idx], [shape], [x.dtype], {"axis": ax, "along": False})[0]


def take_along_axis(x, idx, axis=-1) -> RecurrentTensor:
    """``numpy.take_along_axis(x, idx, axis)`` on the spatial axes (``idx`` of the same rank)."""
    x = as_tensor(x)
    idx = as_tensor(idx, what=f"take_along_axis of tensor {x.name!r} at {user_site()}: the index") if not \
        isinstance(idx, RecurrentTensor) else idx
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"take_along_axis: index {idx.name!r} must be an integer tensor, got {idx.dtype}")
    if idx.ndim != x.ndim:
        raise ShapeError(f"take_along_axis: {x.name!r} {x.shape} and index {idx.name!r} {idx.shape} differ in rank")
    ax = _norm_axis(axis, x.ndim, x.name)
    shape = list(broadcast_shapes([tuple(s for k, s in enumerate(x.shape) if k != ax),
                                   tuple(s for k, s in enumerate(idx.shape) if k != ax)], [x.name, idx.name]))
    shape.insert(ax, idx.shape[ax])
    return make(Op.TAKE, [x, idx], [tuple(shape)], [x.dtype], {"axis": ax, "along": True})[0]


def one_hot(idx, n: int, dtype="float32") -> RecurrentTensor:
    """``tl.one_hot(idx, n)``: shape ``idx.shape + (n,)``, 1 at each index and 0 elsewhere, in
    ``dtype`` (float32). ``idx`` must be an integer tensor (else :class:`tl.ShapeError`).
    """
    idx = as_tensor(idx, what=lambda: f"tl.one_hot at {user_site()}: the index")
    if idx.dtype.kind not in "iu":
        raise ShapeError(f"one_hot: index {idx.name!r} must be an integer tensor, got {idx.dtype}")
    n = as_size(n, f"tl.one_hot of {idx.name!r}", "n", least=1)
    dtype = as_dtype(dtype, f"tl.one_hot of {idx.name!r}")
    return make(Op.ONE_HOT, [idx], [tuple(idx.shape) + (n,)], [dtype], {"n": n})[0]


# -- sources --------------------------------------------------------------------------------


def _domain(domain, prog, what="a tensor"):
    return as_domain(domain, prog, what)


def tensor(array, domain=(), requires_grad=False, name=None) -> RecurrentTensor:
    """Data in: a tensor from a numpy array (or anything ``np.array`` accepts).

    The leading ``len(domain)`` axes of ``array`` are the domain dims, in program order; the rest
    are the spatial shape. At compile their lengths must equal the bounds (else
    :class:`tl.CompileError`). The dtype is kept (bool stays bool, float64 stays float64).
    ``requires_grad=True`` makes ``loss.backward()`` compute ``x.grad``; ``name`` is used in
    errors and printouts.

        r = tl.tensor(np.random.rand(3, 50).astype("float32"), domain=(i, t), name="r")  # shape ()
    """
    prog = current_program()
    what = who("tl.tensor", name)
    if isinstance(array, RecurrentTensor):
        raise ArgTypeError(f"{what}: the data is already a tensor ({array.name!r}); use it directly")
    arr = value_array(array, lambda: f"{what}: the data") if not isinstance(array, np.ndarray) else np.asarray(array)
    check_data(arr, what)
    arr = np.array(arr)
    as_domain(domain, prog, what)
    domain = tuple(domain) if isinstance(domain, (tuple, list)) else (domain,)
    if arr.ndim < len(domain):
        raise ShapeError(f"tl.tensor {name or ''}: array of {arr.ndim} axes cannot cover domain {domain}")
    if prog.sort_domain(domain) != domain:
        raise ShapeError(f"tl.tensor {name or ''}: domain {domain} must list dims in program order")
    arr.setflags(write=False)
    nid = prog.add(Op.DATA, domain, [arr.shape[len(domain):]], [arr.dtype], {"array": arr}, name=name)
    if requires_grad:
        prog.pdg.nodes[nid]["requires_grad"] = True
    return RecurrentTensor(prog, nid)


def const(value, shape=(), dtype=None, domain=(), name=None) -> RecurrentTensor:
    """A constant: ``value`` broadcast to ``shape`` (default: ``value``'s own), constant over ``domain``.

    ``dtype`` defaults to float32 for floats, int64 for ints and bool for bools.
    """
    return _const_of(value, shape, dtype, domain, name, who("tl.const", name))


def _const_of(value, shape, dtype, domain, name, what) -> RecurrentTensor:
    prog = current_program()
    if isinstance(value, RecurrentTensor):
        raise ArgTypeError(f"{what}: the value is already a tensor ({value.name!r}); use it directly")
    value_array(value, lambda: f"{what}: the value")
    shape = as_shape(shape, what)
    domain = as_domain(domain, prog, what)
    if dtype is not None:
        dtype = as_dtype(dtype, what)
    if dtype is None:
        dtype = result_dtype(value) if _is_scalar(value) else np.asarray(value).dtype
        if np.dtype(dtype) == np.float64 and not isinstance(value, np.ndarray):
            dtype = F32
    try:
        arr = np.broadcast_to(np.asarray(value, dtype=dtype), tuple(shape) if shape else np.shape(value))
    except ValueError:
        raise ShapeError(f"{what}: a value of shape {np.shape(value)} does not broadcast to shape={shape}") from None
    return _const(arr, prog, domain, name=name)


def zeros(shape, dtype="float32", domain=(), name=None):
    """A constant tensor of zeros, spatial ``shape``, in ``dtype`` (float32), over ``domain``."""
    return _const_of(0, shape, dtype, domain, name, who("tl.zeros", name))


def ones(shape, dtype="float32", domain=(), name=None):
    """A constant tensor of ones, spatial ``shape``, in ``dtype`` (float32), over ``domain``."""
    return _const_of(1, shape, dtype, domain, name, who("tl.ones", name))


def arange(n, dtype="int64", name=None):
    """The constant ``0, 1, ..., n - 1`` (int64, shape ``(n,)``)."""
    what = who("tl.arange", name)
    n, dtype = as_size(n, what), as_dtype(dtype, what)
    return _const_of(np.arange(n, dtype=dtype), (), dtype, (), name, what)


def dim_value(d, name=None) -> RecurrentTensor:
    """The current value of dim ``d`` as an int64 scalar tensor over ``(d,)``: ``tl.dim_value(t) > 0``
    is a bool tensor; ``tl.dim_value(k) % M`` picks a minibatch. Not a dim: a ``TypeError``.
    """
    if not isinstance(d, Dim):
        raise ArgTypeError(f"{who('tl.dim_value', name)}: {describe(d)} is not a dim; pass one of prog.dims")
    prog = d.program
    cur = building_program()
    if cur is not None and cur is not prog:
        raise CompileError(f"{who('tl.dim_value', name)}: dim {d.name} belongs to another tl.Program than the one "
                           "of the enclosing `with`")
    nid = prog.add(Op.DIM_VALUE, (d,), [()], [I64], {"dim": d.name}, name=name)
    return RecurrentTensor(prog, nid)


def placeholder(shape, dtype="float32", domain=(), name=None) -> RecurrentTensor:
    """A tensor defined by branches assigned afterwards: how recurrences are written.

    ``shape`` is the spatial shape (ints or bound expressions), ``dtype`` its element type,
    ``domain`` its dims. Assign branches in order with ``x[key] = value`` (see
    :meth:`RecurrentTensor.__setitem__`); at each point the first branch whose condition holds
    is taken. A point that is read but covered by no branch, or a cycle of reads with no valid
    order, is a :class:`tl.CompileError` at compile.

        o = tl.placeholder((4,), "float32", (i, t), name="o")
        o[i, 0] = o0                 # where t == 0
        o[i, t + 1] = step(o)        # o at t is step(o) at t - 1
    """
    prog = current_program()
    what = who("tl.placeholder", name)
    shape = as_shape(shape, what, symbolic=True)
    dtype = as_dtype(dtype, what)
    nid = prog.add(Op.MERGE, as_domain(domain, prog, what), [shape], [dtype], {}, name=name)
    return RecurrentTensor(prog, nid)


# -- placeholder branches --------------------------------------------------------------------


def add_branch(x: RecurrentTensor, key, value):
    """``x[key] = value``: append a branch to placeholder ``x`` (first true branch wins)."""
    if x.node.op is not Op.MERGE or x.out != 0:
        raise CompileError(f"tensor {x.name!r} is not a placeholder; only placeholders take branch assignments")
    prog, dom = x.prog, x.domain
    conds, shift = [], [0] * len(dom)
    if isinstance(key, (Cond, bool)):
        conds.append(as_cond(key).c)
    else:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > len(dom):
            raise CompileError(
                f"placeholder {x.name!r}: branch key {key} has more entries than its domain "
                f"({', '.join(d.name for d in dom)})"
            )
        for k, (d, ent) in enumerate(zip(dom, tuple(key) + tuple(dom[len(key):]))):
            if isinstance(ent, (Cond, bool, slice)) or not (isinstance(ent, Expr) or isinstance(ent, int)):
                raise CompileError(
                    f"placeholder {x.name!r}: branch key entry {k} ({ent!r}) must be {d.name}, "
                    f"{d.name} + k (k >= 1) or a constant; conditions go alone (x[t > 0] = ...)"
                )
            e = sympy.sympify(ent.e if isinstance(ent, Expr) else int(ent))
            others = {s for s in e.free_symbols if s != d.e and s not in prog._sym_to_bound}
            if others:
                raise CompileError(f"placeholder {x.name!r}: branch key entry {k} ({e}) may only use dim {d.name}")
            if d.e in e.free_symbols:
                k_shift = sympy.simplify(e - d.e)
                if not k_shift.is_Integer or int(k_shift) < 0:
                    raise CompileError(
                        f"placeholder {x.name!r}: branch key entry {k} ({e}) must be {d.name} or "
                        f"{d.name} + k with an int k >= 1 (no negative shifts)"
                    )
                if int(k_shift) > 0:
                    shift[k] = int(k_shift)
                    conds.append(sympy.Ge(d.e, int(k_shift)))
            else:
                conds.append(sympy.Eq(d.e, e))
    cond = sympy.And(*conds) if conds else sympy.true
    if isinstance(value, RecurrentTensor):
        if value.prog is not x.prog:
            raise CompileError(f"placeholder {x.name!r}: the branch value {value.name!r} belongs to another "
                               "tl.Program; assign values built in the placeholder's program")
        check_program([x, value], f"placeholder {x.name!r}")
    else:
        value = as_tensor(value, dtype=x.dtype, prog=prog, what=f"placeholder {x.name!r}: the branch value")
    extra = [d for d in value.domain if d not in dom]
    if extra:
        raise CompileError(
            f"placeholder {x.name!r}: the right-hand side {value.name!r} has dims "
            f"{', '.join(d.name for d in extra)} outside the placeholder's domain "
            f"({', '.join(d.name for d in dom)})"
        )
    try:
        broadcast_shapes([value.shape, x.shape], [value.name, x.name])
        if len(value.shape) > len(x.shape) or broadcast_shapes([value.shape, x.shape], [value.name, x.name]) != tuple(
            x.shape
        ):
            raise ShapeError("")
    except ShapeError:
        raise ShapeError(
            f"placeholder {x.name!r} of shape {x.shape}: branch value {value.name!r} of shape "
            f"{value.shape} does not broadcast to it"
        ) from None
    value = cast(value, x.dtype)
    if tuple(value.shape) != tuple(x.shape):
        value = broadcast_to(value, x.shape)
    index = tuple(d.e - shift[dom.index(d)] for d in value.domain)
    pos = len(prog.pdg.inputs(x.nid))
    prog.pdg.add_dep(x.nid, value.nid, Edge(pos=pos, out=value.out, index=index, cond=cond, shift=tuple(shift)))
