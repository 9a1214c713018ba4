"""The op registry: what timerl knows about each op, one entry per op and per function.

``op(Op.X)`` is the :class:`OpDef` of an op. The ops that take a function (``UNARY``,
``BINARY``, ``REDUCE``, ``SCAN``) also have one entry per function: ``unary(fn)``,
``binary(fn)``, ``elementwise(fn)`` (either of those), ``reduction(fn)``, ``scan(fn)``;
``of(node)`` is the most specific entry for a node. A function's entry starts from its
op's (arity, traits, shape rule) and adds its own. An entry holds:

- ``arity``: the operand counts the op takes (None: any);
- ``traits``: names from ``TRAITS``, which says what each promises;
- ``dtype(attrs, dtypes)``: the output dtype from the operands' (as the api casts them:
  ``exp`` of an int reads a float32 cast); raises ``ValueError`` on operands the op does
  not take; None: not stated here;
- ``shape(attrs, shapes)``: the output's spatial shape from the operands' (None where it
  needs symbolic reasoning, e.g. a broadcast of symbolic lengths);
- ``np``: the numpy implementation. An op's is ``np(node, ins, nb, ctx) -> tuple of
  arrays`` (the contract of :mod:`timerl.ir.semantics`); an elementwise function's is the
  numpy function itself (``np.exp``); a reduction's ``np(ins, nb, axes, attrs)`` and a
  scan's ``np(ins, nb, axis)``, on arrays with ``nb`` leading batch axes;
- ``vjp``: the vector-Jacobian product, built with the graph builder ``F`` the caller
  passes in (the api's op constructors: ``F.where``, ``F.const``, ``F.unary``, ...; ir
  does not import the api). An op's is ``vjp(F, node, k, g, ins, out)`` (the adjoint of
  operand ``k``, operand ``k``'s shape), a unary function's ``vjp(F, g, x, y)``, a binary
  function's ``vjp(F, k, g, a, b, y)`` before unbroadcasting; reductions and scans take
  the op's signature. None: no rule (see ``nondiff`` and ``stops``);
- ``expr`` (elementwise functions): a scalar expression over ``{0}``, ``{1}`` in plain
  Python arithmetic and ``math.*`` that numba compiles to the numpy function's values on
  float operands (bool for the logical functions), NaN, inf and signed zeros included;
  None where no scalar form matches. An argument may appear more than once, so substitute
  names, not expressions;
- ``stops``: operand positions that never carry a gradient (``"all"``: none does);
  ``nondiff(node)``: why the node has no gradient, or None; ``symbol``: the Python
  operator, for messages;
- ``unit`` (binary functions): the (left, right) operand values for which the function
  returns its other operand bit for bit, or None: ``1``, or a zero: ``"-0"`` (for floats
  only ``-0.0``: ``-0.0 + 0.0`` is ``+0.0``) or ``"+0"`` (``x - 0.0``).

Every other layer asks here instead of keeping its own table. Adding an elementwise
function is one ``_unary``/``_binary`` entry (see ``sin``) plus its tests.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

import numpy as np
import sympy

from ..errors import CompileError, RuntimeFault
from .ops import Op, broadcast

TRAITS = {
    "source": "no operands: constants, data, dim values, random draws",
    "elementwise": "each output element reads the operands' elements at its position (broadcast)",
    "movement": "moves elements without arithmetic (reshape, permute, expand, concat, slice)",
    "reduction": "reduces spatial axes",
    "scan": "accumulates along a spatial axis",
    "owning": "its output is a fresh array that no other value aliases",
    "non_aliasing": "keeps no reference to an operand beyond its execution",
    "donor": "may write its result into an operand's buffer (when that is the operand's last read)",
    "stateful": "has effects or state (the outside world, a random stream): never merged or folded",
    "unshared": "free to recompute, and never merged: one shared copy read both inside the iteration loop and "
                "after it (i at I - 1) ties statements of different phases into one cycle at the same "
                "iteration, which the scheduler's grouping then cannot order",
    "foldable": "computed once at compile time when its operands are constants without dims",
    "fusable": "may join other ops in one statement",
    "alone": "always a statement of its own",
    "passthrough": "forwards values (placeholder branches, accesses, sinks): checking mode does not check them",
    "floats": "integer and bool operands are cast to float32 first",
    "bool_operands": "takes bool operands only",
    "bool_result": "its result is bool",
    "no_bool": "takes no bool operands",
    "nonempty": "a fault over an empty slice",
    "identity": "its value is its operand's (f(x) = x)",
    "involution": "f(f(x)) = x",
    "idempotent": "f(x, x) = x",
}

F32, I64, BOOL = np.dtype("float32"), np.dtype("int64"), np.dtype("bool")


@dataclasses.dataclass(frozen=True)
class OpDef:
    op: Op
    fn: str | None = None
    arity: frozenset | None = None
    traits: frozenset = frozenset()
    dtype: Callable | None = None
    shape: Callable | None = None
    np: Callable | None = None
    vjp: Callable | None = None
    expr: str | None = None
    stops: Any = frozenset()
    nondiff: Callable | None = None
    symbol: str | None = None
    unit: tuple = (None, None)

    @property
    def name(self) -> str:
        return self.fn or self.op.value

    def has(self, trait: str) -> bool:
        return trait in self.traits

    def stops_at(self, k: int) -> bool:
        return self.stops == "all" or k in self.stops


_OPS: dict = {}
_FNS: dict = {Op.UNARY: {}, Op.BINARY: {}, Op.REDUCE: {}, Op.SCAN: {}}


def op(o: Op) -> OpDef:
    """The entry of op ``o``."""
    try:
        return _OPS[o]
    except KeyError:
        raise NotImplementedError(f"op {o.value} is not in the registry") from None


def fn_of(o: Op, fn: str) -> OpDef:
    """The entry of function ``fn`` of op ``o`` (UNARY, BINARY, REDUCE or SCAN)."""
    try:
        return _FNS[o][fn]
    except KeyError:
        raise NotImplementedError(f"{o.value} has no function {fn!r} in the registry") from None


def unary(fn: str) -> OpDef:
    return fn_of(Op.UNARY, fn)


def binary(fn: str) -> OpDef:
    return fn_of(Op.BINARY, fn)


def reduction(fn: str) -> OpDef:
    return fn_of(Op.REDUCE, fn)


def scan(fn: str) -> OpDef:
    return fn_of(Op.SCAN, fn)


def elementwise(fn: str) -> OpDef:
    """The entry of the unary or binary function ``fn``."""
    d = _FNS[Op.UNARY].get(fn) or _FNS[Op.BINARY].get(fn)
    if d is None:
        raise NotImplementedError(f"no elementwise function {fn!r} in the registry")
    return d


def entries() -> tuple:
    """Every op's entry, in ``Op`` order."""
    return tuple(_OPS[o] for o in Op if o in _OPS)


def fns(o: Op) -> tuple:
    """The names of op ``o``'s functions, in registry order."""
    return tuple(_FNS[o])


def of(node) -> OpDef:
    """The most specific entry for ``node``: its function's, else its op's."""
    return fn_of(node.op, node.attrs["fn"]) if node.op in _FNS else op(node.op)


def ops_with(trait: str) -> frozenset:
    """The ops whose entry has ``trait``."""
    return frozenset(o for o, d in _OPS.items() if trait in d.traits)


def symbol(name: str) -> str | None:
    """The Python operator of a binary function or an op (``"add"`` -> ``+``, ``"matmul"`` -> ``@``)."""
    d = _FNS[Op.BINARY].get(name) or next((d for o, d in _OPS.items() if o.value == name), None)
    return d.symbol if d else None


# -- dtype and shape rules ---------------------------------------------------------------------


def promote(dtypes) -> np.dtype:
    """The dtype of an op over tensors of ``dtypes``: numpy's promotion, except that ints with
    float32 stay float32 (float64 appears only from float64 operands)."""
    r = np.result_type(*dtypes)
    floats = [d for d in dtypes if d.kind == "f"]
    if floats and r == np.float64 and np.dtype("float64") not in floats:
        r = max(floats, key=lambda d: d.itemsize)
    return np.dtype(r)


def sum_dtype(dt) -> np.dtype:
    """numpy's accumulator: bool and small ints sum to int64 (unsigned to uint64)."""
    dt = np.dtype(dt)
    if dt.kind in "bi":
        return I64
    if dt.kind == "u":
        return np.dtype("uint64")
    return dt


def _static(shape) -> bool:
    return all(isinstance(s, (int, np.integer)) for s in shape)


def _first(attrs, dts):
    return dts[0]


def _broadcast_shape(attrs, shapes):
    if not all(map(_static, shapes)):
        return None
    out = broadcast(shapes)
    if out is None:
        raise ValueError(f"operand shapes {list(shapes)} do not broadcast")
    return out


def _same_shape(attrs, shapes):
    return tuple(shapes[0])


def _permute_shape(attrs, shapes):
    axes = tuple(attrs["axes"])
    if sorted(axes) != list(range(len(shapes[0]))):
        raise ValueError(f"{axes} is not a permutation of the axes of {tuple(shapes[0])}")
    return tuple(shapes[0][a] for a in axes)


def _reduce_shape(attrs, shapes):
    x, axes, keep = shapes[0], attrs["axis"], attrs["keepdims"]
    if attrs["fn"] == "argmax" and attrs.get("flat"):
        return (1,) * len(x) if keep else ()
    return tuple(1 if k in axes else s for k, s in enumerate(x) if keep or k not in axes)


def _where_dtype(attrs, dts):
    if dts[0] != BOOL:
        raise ValueError("the condition is not bool")
    return promote(dts[1:])


# -- numpy helpers -----------------------------------------------------------------------------


def _sp(x, nb):
    return x.ndim - nb


def align(xs, nb):
    """Pad spatial ranks (after the ``nb`` batch axes) so the inputs broadcast NumPy-style."""
    r = max(_sp(x, nb) for x in xs)
    out = []
    for x in xs:
        pad = r - _sp(x, nb)
        out.append(x.reshape(x.shape[:nb] + (1,) * pad + x.shape[nb:]) if pad else x)
    return out


def _batch_broadcast(xs, nb):
    batch = np.broadcast_shapes(*[x.shape[:nb] for x in xs])
    return [np.broadcast_to(x, batch + x.shape[nb:]) for x in xs]


def _concrete(shape, ctx):
    return tuple(s if isinstance(s, int) else ctx.resolve(s) for s in shape)


def _quiet(f):
    """``f`` without numpy's floating-point warnings (NaN of an empty mean is by design)."""

    def g(*a):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return f(*a)

    return g


# -- vjp helpers (F: the api's op constructors) --------------------------------------------------


def _is_one(s) -> bool:
    return isinstance(s, int) and s == 1


def unbroadcast(F, g, shape):
    """Sum ``g`` down to ``shape`` (NumPy broadcasting in reverse)."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    if lead > 0:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(k for k, s in enumerate(shape) if _is_one(s) and not _is_one(g.shape[k]))
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    if tuple(g.shape) != shape:
        g = F.reshape(g, shape)
    return g


def ones_like(F, x):
    """Ones with the shape (and points) of ``x``; never NaN, whatever ``x`` holds."""
    return F.where(F.const(True), F.const(1, dtype=x.dtype), x)


def _zero(F, g):
    return F.const(0, dtype=g.dtype)


def _expand_reduced(F, g, node, x):
    """``g`` (a reduce's output adjoint) broadcast back to ``x``'s shape."""
    axes = node.attrs["axis"]
    if not node.attrs["keepdims"]:
        g = F.reshape(g, tuple(1 if k in axes else s for k, s in enumerate(x.shape)))
    return g


def _flip(x, axis):
    return x.spatial[(slice(None),) * axis + (slice(None, None, -1),)]


def _swap(F, x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return F.permute(x, axes)


def _zero_slab(F, g, a):
    # a length-1 slab of zeros along axis a, shaped like g elsewhere, never NaN
    one = ones_like(F, g).spatial[(slice(None),) * a + (slice(0, 1),)]
    return one - one


# -- ops: each op's numpy rule and vjp, then its entry ---------------------------------------------


def _define(o, arity, traits=(), dtype=None, shape=None, np_=None, vjp=None, **kw):
    arity = None if arity is None else frozenset(arity)
    _OPS[o] = OpDef(o, None, arity, frozenset(traits), dtype, shape, np_, vjp, **kw)


_ELEMENTWISE = ("elementwise", "non_aliasing", "foldable", "fusable")
_MOVEMENT = ("movement", "foldable", "fusable")


# sources; the executors evaluate the ones that depend on the point (DATA, DIM_VALUE, RANDOM)


def _const_np(node, ins, nb, ctx):
    v = node.attrs["value"]
    return (v.reshape((1,) * nb + v.shape),)


_define(Op.CONST, {0}, ("source", "fusable"), lambda a, d: a["value"].dtype, lambda a, s: tuple(a["value"].shape),
        _const_np)
_define(Op.DATA, {0}, ("source",), lambda a, d: a["array"].dtype)
_define(Op.DIM_VALUE, {0}, ("source", "unshared", "fusable"), lambda a, d: I64, lambda a, s: ())
_define(Op.RANDOM, None, ("source", "stateful"), nondiff=lambda node: f"sampling ({node.attrs['dist']})")


# elementwise: UNARY and BINARY ask their function's entry


def _unary_np(node, ins, nb, ctx):
    with np.errstate(all="ignore"):
        return (np.asarray(unary(node.attrs["fn"]).np(ins[0])).astype(node.dtype, copy=False),)


def _unary_vjp(F, node, k, g, ins, out):
    d = unary(node.attrs["fn"])
    if d.vjp is None:
        raise CompileError(f"no gradient rule for unary {d.fn}")
    return d.vjp(F, g, ins[0], out)


def _binary_np(node, ins, nb, ctx):
    a, b = align(ins, nb)
    with np.errstate(all="ignore"):
        return (np.asarray(binary(node.attrs["fn"]).np(a, b)).astype(node.dtype, copy=False),)


def _binary_vjp(F, node, k, g, ins, out):
    d = binary(node.attrs["fn"])
    if d.vjp is None:
        raise CompileError(f"no gradient rule for binary {d.fn}")
    x = ins[k]
    r = d.vjp(F, k, g, ins[0], ins[1], out)
    r = F.cast(r, x.dtype) if r.dtype != x.dtype else r
    return unbroadcast(F, r, x.shape)


def _where_np(node, ins, nb, ctx):
    c, a, b = align(ins, nb)
    return (np.where(c, a, b).astype(node.dtype, copy=False),)


def _where_vjp(F, node, k, g, ins, out):
    c, zero = ins[0], _zero(F, g)
    r = F.where(c, g, zero) if k == 1 else F.where(c, zero, g)
    return unbroadcast(F, F.cast(r, ins[k].dtype), ins[k].shape)


def _cast_np(node, ins, nb, ctx):
    with np.errstate(all="ignore"):
        return (ins[0].astype(node.dtype),)


# UNARY is not owning: detach returns its operand itself
_define(Op.UNARY, {1}, _ELEMENTWISE + ("donor",), None, _broadcast_shape, _unary_np, _unary_vjp)
_define(Op.BINARY, {2}, _ELEMENTWISE + ("owning", "donor"), None, _broadcast_shape, _binary_np, _binary_vjp)
_define(Op.WHERE, {3}, _ELEMENTWISE + ("owning",), _where_dtype, _broadcast_shape, _where_np, _where_vjp,
        stops=frozenset({0}))
_define(Op.CAST, {1}, _ELEMENTWISE + ("owning",), lambda a, d: np.dtype(a["dtype"]), _broadcast_shape, _cast_np,
        lambda F, node, k, g, ins, out: F.cast(g, ins[0].dtype),
        nondiff=lambda node: f"cast to {node.dtype}" if node.dtype.kind != "f" else None)


# reductions and scans over spatial axes: REDUCE and SCAN ask their function's entry


def _reduce_np(node, ins, nb, ctx):
    d = reduction(node.attrs["fn"])
    axes = tuple(a + nb for a in node.attrs["axis"])
    if d.has("nonempty") and any(ins[0].shape[a] == 0 for a in axes):
        raise RuntimeFault(f"{d.fn} over an empty slice in tensor {node.name!r} at {ctx.where()}")
    return (np.asarray(d.np(ins, nb, axes, node.attrs)).astype(node.dtype, copy=False),)


def _reduce_vjp(F, node, k, g, ins, out):
    d = reduction(node.attrs["fn"])
    if d.vjp is None:
        raise CompileError(f"no gradient rule for reduce {d.fn}")
    return d.vjp(F, node, k, g, ins, out)


def _scan_np(node, ins, nb, ctx):
    d = scan(node.attrs["fn"])
    return (np.asarray(d.np(ins, nb, node.attrs["axis"] + nb)).astype(node.dtype, copy=False),)


def _scan_vjp(F, node, k, g, ins, out):
    return scan(node.attrs["fn"]).vjp(F, node, k, g, ins, out)


_define(Op.REDUCE, {1, 2}, ("reduction", "non_aliasing", "foldable", "fusable"), None, _reduce_shape, _reduce_np,
        _reduce_vjp)  # discounted_sum reads gamma as operand 1
_define(Op.SCAN, {1, 2}, ("scan", "non_aliasing", "foldable", "fusable"), None, _same_shape, _scan_np,
        _scan_vjp)  # discounted_cumsum reads gamma as operand 1


def _matmul_np(node, ins, nb, ctx):
    a, b = ins
    a1, b1 = _sp(a, nb) == 1, _sp(b, nb) == 1
    if a1:
        a = a.reshape(a.shape[:nb] + (1,) + a.shape[nb:])
    if b1:
        b = b.reshape(b.shape + (1,))
    a, b = align([a, b], nb)
    out = np.matmul(a, b)
    if a1:
        out = out.reshape(out.shape[:-2] + out.shape[-1:])
    if b1:
        out = out.reshape(out.shape[:-1])
    return (out.astype(node.dtype, copy=False),)


def _matmul_vjp(F, node, k, g, ins, out):
    a, b = ins
    a2 = a if a.ndim > 1 else F.reshape(a, (1,) + tuple(a.shape))
    b2 = b if b.ndim > 1 else F.reshape(b, tuple(b.shape) + (1,))
    gshape = tuple(g.shape)
    if a.ndim == 1:
        gshape = gshape[:-1] + (1,) + gshape[-1:] if b.ndim > 1 else gshape + (1,)
    if b.ndim == 1:
        gshape = gshape + (1,)
    g2 = F.reshape(g, gshape) if gshape != tuple(g.shape) else g
    if k == 0:
        r = unbroadcast(F, g2 @ _swap(F, b2), a2.shape)
        return F.reshape(r, a.shape) if a.ndim == 1 else r
    sa, sg = tuple(a2.shape), tuple(g2.shape)
    if len(b2.shape) == 2 and len(sa) > 2 and sa[:-1] == sg[:-1] and all(isinstance(s, int) for s in sa + sg):
        # b is shared by every batch: its gradient sums a_j^T g_j over the batch, which is one
        # matrix product over the batch and rows merged (as PyTorch computes it), not a batched
        # product and a sum (numpy would run that as one small matmul per batch element)
        rows = int(np.prod(sa[:-1], dtype=np.int64))
        r = _swap(F, F.reshape(a2, (rows, sa[-1]))) @ F.reshape(g2, (rows, sg[-1]))
    else:
        r = unbroadcast(F, _swap(F, a2) @ g2, b2.shape)
    return F.reshape(r, b.shape) if b.ndim == 1 else r


_define(Op.MATMUL, {2}, ("owning", "non_aliasing", "foldable", "fusable"), lambda a, d: promote(d), None,
        _matmul_np, _matmul_vjp, symbol="@")


# movement


def _reshape_np(node, ins, nb, ctx):
    x = ins[0]
    return (x.reshape(x.shape[:nb] + _concrete(node.attrs["shape"], ctx)),)


def _permute_np(node, ins, nb, ctx):
    return (np.transpose(ins[0], tuple(range(nb)) + tuple(a + nb for a in node.attrs["axes"])),)


def _permute_vjp(F, node, k, g, ins, out):
    return F.permute(g, tuple(int(j) for j in np.argsort(node.attrs["axes"])))


def _expand_np(node, ins, nb, ctx):
    (x,) = align([ins[0], np.zeros((1,) * (nb + len(node.attrs["shape"])))], nb)[:1]
    return (np.broadcast_to(x, x.shape[:nb] + _concrete(node.attrs["shape"], ctx)),)


def _concat_np(node, ins, nb, ctx):
    return (np.concatenate(_batch_broadcast(ins, nb), axis=node.attrs["axis"] + nb),)


def _concat_vjp(F, node, k, g, ins, out):
    ax = node.attrs["axis"]
    start = 0
    for j in range(k):
        n = ins[j].shape[ax]
        if not isinstance(n, int):
            raise CompileError(f"tensor {node.name!r}: the gradient of concat needs int lengths along axis {ax}")
        start += n
    n = ins[k].shape[ax]
    if not isinstance(n, int):
        raise CompileError(f"tensor {node.name!r}: the gradient of concat needs int lengths along axis {ax}")
    return g.spatial[(slice(None),) * ax + (slice(start, start + n),)]


def _slice_np(node, ins, nb, ctx):
    try:
        return (ins[0][(slice(None),) * nb + tuple(node.attrs["key"])],)
    except IndexError as e:
        raise RuntimeFault(f"index out of range in tensor {node.name!r} at {ctx.where()}: {e}") from None


def _slice_vjp(F, node, k, g, ins, out):
    """Scatter ``g`` back into the sliced tensor's shape: a gather from ``g`` padded with a zero."""
    x = ins[0]
    key = list(node.attrs["key"])
    if Ellipsis in key:
        j = key.index(Ellipsis)
        n_real = sum(1 for e in key if e is not None and e is not Ellipsis)
        key = key[:j] + [slice(None)] * (x.ndim - n_real) + key[j + 1:]
    key += [slice(None)] * (x.ndim - sum(1 for e in key if e is not None))
    # drop the new axes, restore the int-indexed ones as length 1
    shape = []
    gi = 0
    for e in key:
        if e is None:
            gi += 1
            continue
        if isinstance(e, slice):
            shape.append(g.shape[gi])
            gi += 1
        else:
            shape.append(1)
    g = F.reshape(g, tuple(shape)) if tuple(shape) != tuple(g.shape) else g
    ax = 0
    for e in key:
        if e is None:
            continue
        n = x.shape[ax]
        if isinstance(e, slice) and e == slice(None):
            ax += 1
            continue
        if not isinstance(n, int):
            raise CompileError(f"tensor {node.name!r}: gradient of a spatial slice needs an int axis length")
        src = np.arange(n)
        sel = src[e] if isinstance(e, slice) else np.array([src[e]])
        m = len(sel)
        idx = np.full(n, m, dtype=np.int64)  # position m is the appended zero
        idx[sel] = np.arange(m)
        pad = F.concat([g, _zero_slab(F, g, ax)], axis=ax)
        g = F.take(pad, F.const(idx), axis=ax)
        ax += 1
    return g


_define(Op.RESHAPE, {1}, _MOVEMENT, _first, lambda a, s: tuple(a["shape"]), _reshape_np,
        lambda F, node, k, g, ins, out: F.reshape(g, ins[0].shape))
_define(Op.PERMUTE, {1}, _MOVEMENT, _first, _permute_shape, _permute_np, _permute_vjp)
_define(Op.EXPAND, {1}, _MOVEMENT, _first, lambda a, s: tuple(a["shape"]), _expand_np,
        lambda F, node, k, g, ins, out: unbroadcast(F, g, ins[0].shape))
_define(Op.CONCAT, None, _MOVEMENT, lambda a, d: promote(d), None, _concat_np, _concat_vjp)
_define(Op.SLICE, {1}, _MOVEMENT, _first, None, _slice_np, _slice_vjp)


# gathers


def _take_np(node, ins, nb, ctx):
    x, idx = ins
    ax = node.attrs["axis"]
    n = x.shape[nb + ax]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise RuntimeFault(f"index out of range in take of tensor {node.name!r} at {ctx.where()} "
                           f"(axis of length {n}, index {int(idx.min() if idx.min() < -n else idx.max())})")
    if node.attrs["along"]:
        x, idx = align([x, idx], nb)
        batch = np.broadcast_shapes(x.shape[:nb], idx.shape[:nb])
        shp_x = list(np.broadcast_shapes(batch + x.shape[nb:], batch + tuple(
            1 if k == ax else s for k, s in enumerate(idx.shape[nb:]))))
        shp_i = list(shp_x)
        shp_x[nb + ax] = x.shape[nb + ax]
        shp_i[nb + ax] = idx.shape[nb + ax]
        return (np.take_along_axis(np.broadcast_to(x, shp_x), np.broadcast_to(idx, shp_i), axis=nb + ax),)
    if nb == 0:
        return (np.take(x, idx, axis=ax),)
    x, idx = _batch_broadcast([x, idx], nb)
    batch = x.shape[:nb]
    xf = x.reshape((-1,) + x.shape[nb:])
    jf = idx.reshape((-1,) + idx.shape[nb:])
    out = np.stack([np.take(xf[k], jf[k], axis=ax) for k in range(len(xf))])
    return (out.reshape(batch + out.shape[1:]),)


def _take_vjp(F, node, k, g, ins, out):
    x, idx = ins
    ax = node.attrs["axis"]
    n = x.shape[ax]
    if not isinstance(n, int):
        raise CompileError(f"tensor {node.name!r}: the gradient of take needs an int length on axis {ax}")
    oh = F.one_hot(idx, n, dtype=x.dtype)  # idx.shape + (n,)
    if node.attrs["along"]:
        # oh: idx.shape + (n,) -> move n next to the taken axis, then sum the taken axis
        perm = list(range(idx.ndim))
        perm.insert(ax + 1, idx.ndim)
        r = (F.unsqueeze(g, ax + 1) * F.permute(oh, perm)).sum(axis=ax)
        return unbroadcast(F, r, x.shape)
    ni = idx.ndim
    # g: A + I + B  ->  (A + B) x I, contract with one-hot I x n
    a_n = ax
    b_n = g.ndim - a_n - ni
    perm = list(range(a_n)) + list(range(a_n + ni, a_n + ni + b_n)) + list(range(a_n, a_n + ni))
    gp = F.permute(g, perm) if perm != list(range(g.ndim)) else g
    lead = tuple(gp.shape[: a_n + b_n])
    isz = sympy.Integer(1)
    for s in idx.shape:
        isz = isz * sympy.sympify(s)
    isz = int(isz) if isz.is_Integer else isz
    g2 = F.reshape(gp, lead + (1, isz))
    oh2 = F.reshape(oh, (isz, n))
    r = F.reshape(g2 @ oh2, lead + (n,))  # A + B + (n,)
    back = list(range(a_n)) + [a_n + b_n] + list(range(a_n, a_n + b_n))
    return F.permute(r, back) if back != list(range(r.ndim)) else r


def _one_hot_np(node, ins, nb, ctx):
    return ((ins[0][..., None] == np.arange(node.attrs["n"])).astype(node.dtype),)


_define(Op.TAKE, {2}, ("foldable", "fusable"), _first, None, _take_np, _take_vjp, stops=frozenset({1}))
_define(Op.ONE_HOT, {1}, ("non_aliasing", "foldable", "fusable"), None, lambda a, s: tuple(s[0]) + (a["n"],),
        _one_hot_np, stops="all")  # the dtype is the caller's choice, not in attrs


# recurrences and the outside world: the executors evaluate them
_define(Op.ACCESS, {1}, ("passthrough", "fusable"), _first)  # the edge index is the access
_define(Op.MERGE, None, ("passthrough", "alone"))  # a placeholder; its branches are checked by the verifier
_define(Op.UDF, None, ("stateful", "alone"), stops="all")
_define(Op.SINK, None, ("stateful", "passthrough", "non_aliasing"), stops="all")


# -- elementwise functions -----------------------------------------------------------------------


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (0.5 * (np.tanh(0.5 * x) + 1.0)).astype(x.dtype)


def _relu(x):
    return np.maximum(x, x.dtype.type(0))


def _detach(x):
    return x


def _default_dtype(o, traits):
    if "bool_result" in traits:
        return lambda attrs, dts: BOOL
    if o is Op.BINARY:
        return lambda attrs, dts: promote(dts)
    return _first


def _fn(o, name, np_, expr=None, vjp=None, traits=(), drop=(), dtype=None, **kw):
    """Enter function ``name`` of op ``o``: the op's traits plus ``traits`` less ``drop``."""
    base = _OPS[o]
    traits = (base.traits | frozenset(traits)) - frozenset(drop)
    kw.setdefault("stops", base.stops)
    _FNS[o][name] = OpDef(o, name, base.arity, traits, dtype or _default_dtype(o, traits), base.shape, np_, vjp,
                          expr, **kw)


def _unary(name, np_, expr, vjp=None, **kw):
    _fn(Op.UNARY, name, np_, expr, vjp, **kw)


def _binary(name, np_, expr, vjp=None, symbol=None, **kw):
    _fn(Op.BINARY, name, np_, expr, vjp, symbol=symbol, **kw)


def _compare(name, np_, sym):
    _binary(name, np_, f"({{0}} {sym} {{1}})", symbol=sym, traits=("bool_result",),
            nondiff=lambda node: f"comparison {name}")


def _pick(fn):
    # ties send the gradient to the first operand (as torch.max picks one)
    def vjp(F, k, g, a, b, y):
        pick_a = (a <= b) if fn == "minimum" else (a >= b)
        return F.where(pick_a, g, _zero(F, g)) if k == 0 else F.where(pick_a, _zero(F, g), g)

    return vjp


_unary("neg", np.negative, "(-{0})", lambda F, g, x, y: -g, traits=("no_bool", "involution"), symbol="-")
_unary("exp", np.exp, "math.exp({0})", lambda F, g, x, y: g * y, traits=("floats",))
_unary("log", np.log, "math.log({0})", lambda F, g, x, y: g / x, traits=("floats",))
_unary("tanh", np.tanh, "math.tanh({0})", lambda F, g, x, y: g * (1 - y * y), traits=("floats",))
# numpy rounds each step of 0.5 * (tanh(0.5 x) + 1) to float32; scalar code in float64 would not
_unary("sigmoid", _sigmoid, None, lambda F, g, x, y: g * y * (1 - y), traits=("floats",))
_unary("relu", _relu, "({0} if ({0} > 0.0 or {0} != {0}) else 0.0)",
       lambda F, g, x, y: F.where(x > 0, g, _zero(F, g)))
_unary("sqrt", np.sqrt, "math.sqrt({0})", lambda F, g, x, y: g * 0.5 / y, traits=("floats",))
_unary("abs", np.abs, "abs({0})", lambda F, g, x, y: g * F.unary("sign", x))
_unary("sign", np.sign, "(1.0 if {0} > 0 else (-1.0 if {0} < 0 else (0.0 if {0} == 0 else {0})))",
       lambda F, g, x, y: g * _zero(F, g))
_unary("sin", np.sin, "math.sin({0})", lambda F, g, x, y: g * F.unary("cos", x), traits=("floats",))
_unary("cos", np.cos, "math.cos({0})", lambda F, g, x, y: -(g * F.unary("sin", x)), traits=("floats",))
# the value of x, returned as itself (an alias: no donation); autodiff stops here
_unary("detach", _detach, "({0})", traits=("identity",), drop=("donor",), stops="all")
_unary("logical_not", np.logical_not, "(not {0})", traits=("bool_operands", "involution"), symbol="~",
       nondiff=lambda node: "logical logical_not")

_binary("add", np.add, "({0} + {1})", lambda F, k, g, a, b, y: g, "+", unit=("-0", "-0"))
_binary("sub", np.subtract, "({0} - {1})", lambda F, k, g, a, b, y: g if k == 0 else -g, "-", unit=(None, "+0"))
_binary("mul", np.multiply, "({0} * {1})", lambda F, k, g, a, b, y: g * (b if k == 0 else a), "*", unit=(1, 1))
_binary("div", np.true_divide, "({0} / {1})", lambda F, k, g, a, b, y: g / b if k == 0 else -g * y / b, "/",
        traits=("floats",), unit=(None, 1))
_binary("mod", np.mod, "({0} % {1})", symbol="%")
_binary("floordiv", np.floor_divide, "({0} // {1})", symbol="//")
_binary("pow", np.power, "({0} ** {1})",
        lambda F, k, g, a, b, y: g * b * a ** (b - 1) if k == 0 else g * y * F.unary("log", a), "**",
        unit=(None, 1))
_compare("lt", np.less, "<")
_compare("le", np.less_equal, "<=")
_compare("gt", np.greater, ">")
_compare("ge", np.greater_equal, ">=")
_compare("eq", np.equal, "==")
_compare("ne", np.not_equal, "!=")
# numpy's minimum/maximum propagate NaN and return the second operand on ties (-0.0 vs 0.0)
_binary("minimum", np.minimum, "({0} if ({0} < {1} or {0} != {0}) else {1})", _pick("minimum"),
        traits=("idempotent",))
_binary("maximum", np.maximum, "({0} if ({0} > {1} or {0} != {0}) else {1})", _pick("maximum"),
        traits=("idempotent",))
_binary("logical_and", np.logical_and, "({0} and {1})", symbol="&",
        traits=("bool_result", "bool_operands", "idempotent"), nondiff=lambda node: "comparison logical_and")
_binary("logical_or", np.logical_or, "({0} or {1})", symbol="|",
        traits=("bool_result", "bool_operands", "idempotent"), nondiff=lambda node: "comparison logical_or")


# -- reductions and scans ------------------------------------------------------------------------


def _numpy_reduce(f):
    return _quiet(lambda ins, nb, axes, attrs: f(ins[0], axis=axes, keepdims=attrs["keepdims"]))


@_quiet
def _argmax_np(ins, nb, axes, attrs):
    x, keep = ins[0], attrs["keepdims"]
    if attrs["flat"]:
        out = np.argmax(x.reshape(x.shape[:nb] + (-1,)), axis=-1)
        return out.reshape(out.shape + (1,) * (x.ndim - nb)) if keep else out
    return np.argmax(x, axis=axes[0], keepdims=keep) if axes else np.zeros(x.shape, np.int64)


@_quiet
def _logsumexp_np(ins, nb, axes, attrs):
    x = ins[0]
    m = np.max(x, axis=axes, keepdims=True) if all(x.shape[a] for a in axes) else np.zeros(
        [1 if k in axes else s for k, s in enumerate(x.shape)], x.dtype)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    if not attrs["keepdims"]:
        out = out.reshape([s for k, s in enumerate(out.shape) if k not in axes])
    return out


def _discounted_sum_np(ins, nb, axes, attrs):
    x = ins[0]
    (ax,) = axes
    g = ins[1].reshape(ins[1].shape[:nb] + (1,) * (x.ndim - nb))
    L = x.shape[ax]
    k = np.arange(L).reshape((L,) + (1,) * (x.ndim - ax - 1))
    return (x * g**k).sum(axis=ax)


def _sum_vjp(F, node, k, g, ins, out):
    return _expand_reduced(F, g, node, ins[0]) * ones_like(F, ins[0])


def _mean_vjp(F, node, k, g, ins, out):
    x = ins[0]
    gb = _expand_reduced(F, g, node, x)
    n = ones_like(F, x).sum(axis=node.attrs["axis"], keepdims=True)
    return gb * ones_like(F, x) / n


def _extremum_vjp(F, node, k, g, ins, out):
    # ties share the gradient equally
    x = ins[0]
    gb, ob = _expand_reduced(F, g, node, x), _expand_reduced(F, out, node, x)
    mask = (x == ob).astype(x.dtype)
    return gb * mask / mask.sum(axis=node.attrs["axis"], keepdims=True)


def _logsumexp_vjp(F, node, k, g, ins, out):
    x = ins[0]
    gb, ob = _expand_reduced(F, g, node, x), _expand_reduced(F, out, node, x)
    return gb * F.unary("exp", x - ob)


def _std_vjp(F, node, k, g, ins, out):
    x, axes = ins[0], node.attrs["axis"]
    gb, ob = _expand_reduced(F, g, node, x), _expand_reduced(F, out, node, x)
    n = ones_like(F, x).sum(axis=axes, keepdims=True)
    m = x.mean(axis=axes, keepdims=True)
    return gb * (x - m) / (n * ob)


def _discounted_sum_vjp(F, node, k, g, ins, out):
    x, gamma, ax = ins[0], ins[1], node.attrs["axis"][0]
    pw = ones_like(F, x).cumsum(axis=ax) - 1  # k along the axis
    gb = F.unsqueeze(g, ax)
    if k == 0:
        return gb * gamma ** pw
    return (gb * x * pw * gamma ** (pw - 1)).sum()


_fn(Op.REDUCE, "sum", _numpy_reduce(np.sum), vjp=_sum_vjp, dtype=lambda a, d: sum_dtype(d[0]))
_fn(Op.REDUCE, "mean", _numpy_reduce(np.mean), vjp=_mean_vjp, traits=("floats",))
_fn(Op.REDUCE, "max", _numpy_reduce(np.max), vjp=_extremum_vjp, traits=("nonempty",))
_fn(Op.REDUCE, "min", _numpy_reduce(np.min), vjp=_extremum_vjp, traits=("nonempty",))
_fn(Op.REDUCE, "std", _numpy_reduce(np.std), vjp=_std_vjp, traits=("floats",))
_fn(Op.REDUCE, "logsumexp", _logsumexp_np, vjp=_logsumexp_vjp, traits=("floats",))
_fn(Op.REDUCE, "argmax", _argmax_np, dtype=lambda a, d: I64, traits=("nonempty",), nondiff=lambda node: "argmax")
_fn(Op.REDUCE, "discounted_sum", _discounted_sum_np, vjp=_discounted_sum_vjp)


def _discounted_cumsum_np(ins, nb, ax):
    x = ins[0]
    g = ins[1].reshape(ins[1].shape[:nb] + (1,) * (x.ndim - nb - 1))
    x = np.broadcast_to(x, np.broadcast_shapes(x.shape[:nb], g.shape[:nb]) + x.shape[nb:])
    xs = np.moveaxis(x, ax, nb)
    out = np.empty_like(xs)
    acc = np.zeros(xs.shape[:nb] + xs.shape[nb + 1 :], dtype=x.dtype)
    for k in range(xs.shape[nb] - 1, -1, -1):
        idx = (slice(None),) * nb + (k,)
        acc = xs[idx] + g * acc
        out[idx] = acc
    return np.moveaxis(out, nb, ax)


def _cumsum_vjp(F, node, k, g, ins, out):
    if k != 0:
        raise CompileError("cumsum has one operand")
    ax = node.attrs["axis"]
    return g.sum(axis=ax, keepdims=True) - g.cumsum(axis=ax) + g


def _discounted_cumsum_vjp(F, node, k, g, ins, out):
    if k == 0:
        # out_j = sum_{l >= j} gamma^(l-j) x_l  =>  dx_l = sum_{j <= l} gamma^(l-j) g_j
        ax = node.attrs["axis"]
        return _flip(_flip(g, ax).discounted_cumsum(ins[1], axis=ax), ax)
    raise CompileError(
        f"tensor {node.name!r}: the gradient of discounted_cumsum with respect to its discount "
        "is not supported; pass gamma as a constant or .detach() it"
    )


_fn(Op.SCAN, "cumsum", lambda ins, nb, ax: np.cumsum(ins[0], axis=ax), vjp=_cumsum_vjp,
    dtype=lambda a, d: sum_dtype(d[0]))
_fn(Op.SCAN, "discounted_cumsum", _discounted_cumsum_np, vjp=_discounted_cumsum_vjp)
