"""Gradient rules: ``grad_rules[op](node, k, g, ins, out) -> tensor`` (the vector-Jacobian
product for operand ``k`` at one point of the op's domain).

``g`` is the adjoint of the op's output (a tensor over the op's domain and shape), ``ins``
the forward operands and ``out`` the forward output, all as recurrent tensors; the rule
returns a tensor with operand ``k``'s spatial shape. Summing over the dims the operand
lacks (domain broadcasting) and moving gradients through ACCESS and MERGE edges is done
by :mod:`timerl.api.autodiff` from the isl access relation, not here.

``stop_edge(node, k)`` says which operands never carry a gradient by definition (the
``detach`` stop, a ``where`` condition, integer indices, the world behind a UDF);
``nondiff`` ops raise a clear error when a gradient is requested through them.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import CompileError
from ..ir.ops import Op
from . import ops as O

grad_rules: dict = {}

_NONDIFF_UNARY = {"logical_not"}
_NONDIFF_BINARY = set(O.COMPARISONS)


def rule(op):
    def deco(fn):
        grad_rules[op] = fn
        return fn

    return deco


def stop_edge(node, k) -> bool:
    """Operand ``k`` of ``node`` never carries a gradient (a stop defined by the API)."""
    op = node.op
    if op is Op.UNARY and node.attrs["fn"] == "detach":
        return True
    if op is Op.WHERE and k == 0:
        return True
    if op is Op.TAKE and k == 1:
        return True
    if op in (Op.ONE_HOT, Op.UDF, Op.SINK):
        return True
    return False


def nondiff_reason(node):
    """Why ``node`` has no gradient (None if it is differentiable)."""
    op = node.op
    if op is Op.UNARY and node.attrs["fn"] in _NONDIFF_UNARY:
        return f"logical {node.attrs['fn']}"
    if op is Op.BINARY and node.attrs["fn"] in _NONDIFF_BINARY:
        return f"comparison {node.attrs['fn']}"
    if op is Op.REDUCE and node.attrs["fn"] == "argmax":
        return "argmax"
    if op is Op.RANDOM:
        return f"sampling ({node.attrs['dist']})"
    if op is Op.CAST and node.dtype.kind != "f":
        return f"cast to {node.dtype}"
    if op not in grad_rules and op not in (Op.ACCESS, Op.MERGE):
        return f"op {op.value} has no gradient rule"
    return None


# -- helpers -------------------------------------------------------------------------------


def _eq(a, b):
    return O._eq(a, b)


def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` (NumPy broadcasting in reverse)."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    if lead > 0:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(k for k, s in enumerate(shape) if O._is_one(s) and not O._is_one(g.shape[k]))
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    if tuple(g.shape) != shape:
        g = O.reshape(g, shape)
    return g


def ones_like(x):
    """Ones with the shape (and points) of ``x``; never NaN, whatever ``x`` holds."""
    return O.where(O.const(True), O.const(1, dtype=x.dtype), x)


def _expand_reduced(g, node, x):
    """``g`` (the reduce's output adjoint) broadcast back to ``x``'s shape."""
    axes = node.attrs["axis"]
    if not node.attrs["keepdims"]:
        shape = tuple(1 if k in axes else s for k, s in enumerate(x.shape))
        g = O.reshape(g, shape)
    return g


# -- elementwise -------------------------------------------------------------------------------


def _unary_grad(fn, g, x, out):
    if fn == "neg":
        return -g
    if fn == "exp":
        return g * out
    if fn == "log":
        return g / x
    if fn == "tanh":
        return g * (1 - out * out)
    if fn == "sigmoid":
        return g * out * (1 - out)
    if fn == "relu":
        return O.where(x > 0, g, O.const(0, dtype=g.dtype))
    if fn == "sqrt":
        return g * 0.5 / out
    if fn == "abs":
        return g * O.unary("sign", x)
    if fn == "sign":
        return g * O.const(0, dtype=g.dtype)
    raise CompileError(f"no gradient rule for unary {fn}")


@rule(Op.UNARY)
def _unary(node, k, g, ins, out):
    return _unary_grad(node.attrs["fn"], g, ins[0], out)


@rule(Op.BINARY)
def _binary(node, k, g, ins, out):
    fn = node.attrs["fn"]
    a, b = ins
    x = ins[k]
    if fn == "add":
        r = g
    elif fn == "sub":
        r = g if k == 0 else -g
    elif fn == "mul":
        r = g * (b if k == 0 else a)
    elif fn == "div":
        r = g / b if k == 0 else -g * out / b
    elif fn == "pow":
        if k == 0:
            r = g * b * a ** (b - 1)
        else:
            r = g * out * O.unary("log", a)
    elif fn in ("minimum", "maximum"):
        # ties send the gradient to the first operand (as torch.max picks one)
        pick_a = (a <= b) if fn == "minimum" else (a >= b)
        zero = O.const(0, dtype=g.dtype)
        r = O.where(pick_a, g, zero) if k == 0 else O.where(pick_a, zero, g)
    else:
        raise CompileError(f"no gradient rule for binary {fn}")
    r = O.cast(r, x.dtype) if r.dtype != x.dtype else r
    return unbroadcast(r, x.shape)


@rule(Op.WHERE)
def _where(node, k, g, ins, out):
    c, a, b = ins
    zero = O.const(0, dtype=g.dtype)
    r = O.where(c, g, zero) if k == 1 else O.where(c, zero, g)
    return unbroadcast(O.cast(r, ins[k].dtype), ins[k].shape)


@rule(Op.CAST)
def _cast(node, k, g, ins, out):
    return O.cast(g, ins[0].dtype)


# -- reductions and scans -------------------------------------------------------------------


@rule(Op.REDUCE)
def _reduce(node, k, g, ins, out):
    fn, x = node.attrs["fn"], ins[0]
    axes = node.attrs["axis"]
    if fn == "discounted_sum":
        gamma = ins[1]
        ax = axes[0]
        pw = ones_like(x).cumsum(axis=ax) - 1  # k along the axis
        gb = O.unsqueeze(g, ax)
        if k == 0:
            return gb * gamma ** pw
        return (gb * x * pw * gamma ** (pw - 1)).sum()
    gb = _expand_reduced(g, node, x)
    if fn == "sum":
        return gb * ones_like(x)
    if fn == "mean":
        n = ones_like(x).sum(axis=axes, keepdims=True)
        return gb * ones_like(x) / n
    if fn in ("max", "min"):
        ob = _expand_reduced(out, node, x)
        mask = (x == ob).astype(x.dtype)
        return gb * mask / mask.sum(axis=axes, keepdims=True)
    if fn == "logsumexp":
        ob = _expand_reduced(out, node, x)
        return gb * O.unary("exp", x - ob)
    if fn == "std":
        ob = _expand_reduced(out, node, x)
        n = ones_like(x).sum(axis=axes, keepdims=True)
        m = x.mean(axis=axes, keepdims=True)
        return gb * (x - m) / (n * ob)
    raise CompileError(f"no gradient rule for reduce {fn}")


def _flip(x, axis):
    key = (slice(None),) * axis + (slice(None, None, -1),)
    return x.spatial[key]


@rule(Op.SCAN)
def _scan(node, k, g, ins, out):
    fn, ax, x = node.attrs["fn"], node.attrs["axis"], ins[0]
    if fn == "cumsum":
        if k != 0:
            raise CompileError("cumsum has one operand")
        return g.sum(axis=ax, keepdims=True) - g.cumsum(axis=ax) + g
    if k == 0:
        # out_j = sum_{l >= j} gamma^(l-j) x_l  =>  dx_l = sum_{j <= l} gamma^(l-j) g_j
        return _flip(_flip(g, ax).discounted_cumsum(ins[1], axis=ax), ax)
    raise CompileError(
        f"tensor {node.name!r}: the gradient of discounted_cumsum with respect to its discount "
        "is not supported; pass gamma as a constant or .detach() it"
    )


@rule(Op.MATMUL)
def _matmul(node, k, g, ins, out):
    a, b = ins
    a2 = a if a.ndim > 1 else O.reshape(a, (1,) + tuple(a.shape))
    b2 = b if b.ndim > 1 else O.reshape(b, tuple(b.shape) + (1,))
    gshape = tuple(g.shape)
    if a.ndim == 1:
        gshape = gshape[:-1] + (1,) + gshape[-1:] if b.ndim > 1 else gshape + (1,)
    if b.ndim == 1:
        gshape = gshape + (1,)
    g2 = O.reshape(g, gshape) if gshape != tuple(g.shape) else g
    if k == 0:
        r = g2 @ _swap(b2)
        r = unbroadcast(r, a2.shape)
        return O.reshape(r, a.shape) if a.ndim == 1 else r
    r = _swap(a2) @ g2
    r = unbroadcast(r, b2.shape)
    return O.reshape(r, b.shape) if b.ndim == 1 else r


def _swap(x):
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return O.permute(x, axes)


# -- movement ------------------------------------------------------------------------------------


@rule(Op.RESHAPE)
def _reshape(node, k, g, ins, out):
    return O.reshape(g, ins[0].shape)


@rule(Op.PERMUTE)
def _permute(node, k, g, ins, out):
    inv = tuple(int(j) for j in np.argsort(node.attrs["axes"]))
    return O.permute(g, inv)


@rule(Op.EXPAND)
def _expand(node, k, g, ins, out):
    return unbroadcast(g, ins[0].shape)


@rule(Op.CONCAT)
def _concat(node, k, g, ins, out):
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
    key = (slice(None),) * ax + (slice(start, start + n),)
    return g.spatial[key]


@rule(Op.SLICE)
def _slice(node, k, g, ins, out):
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
    g = O.reshape(g, tuple(shape)) if tuple(shape) != tuple(g.shape) else g
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
        pad = O.concat([g, _zero_slab(g, ax)], axis=ax)
        g = O.take(pad, O.const(idx), axis=ax)
        ax += 1
    return g


def _zero_slab(g, a):
    # a length-1 slab of zeros along axis a, shaped like g elsewhere, never NaN
    key = (slice(None),) * a + (slice(0, 1),)
    one = ones_like(g).spatial[key]
    return one - one


@rule(Op.TAKE)
def _take(node, k, g, ins, out):
    x, idx = ins
    ax = node.attrs["axis"]
    n = x.shape[ax]
    if not isinstance(n, int):
        raise CompileError(f"tensor {node.name!r}: the gradient of take needs an int length on axis {ax}")
    oh = O.one_hot(idx, n, dtype=x.dtype)  # idx.shape + (n,)
    if node.attrs["along"]:
        # oh: idx.shape + (n,) -> move n next to the taken axis, then sum the taken axis
        perm = list(range(idx.ndim))
        perm.insert(ax + 1, idx.ndim)
        ohp = O.permute(oh, perm)  # ... m, n ...
        r = (O.unsqueeze(g, ax + 1) * ohp).sum(axis=ax)
        return unbroadcast(r, x.shape)
    ni = idx.ndim
    # g: A + I + B  ->  (A + B) x I, contract with one-hot I x n
    a_n = ax
    b_n = g.ndim - a_n - ni
    perm = list(range(a_n)) + list(range(a_n + ni, a_n + ni + b_n)) + list(range(a_n, a_n + ni))
    gp = O.permute(g, perm) if perm != list(range(g.ndim)) else g
    lead = tuple(gp.shape[: a_n + b_n])
    isz = sympy.Integer(1)
    for s in idx.shape:
        isz = isz * sympy.sympify(s)
    isz = int(isz) if isz.is_Integer else isz
    g2 = O.reshape(gp, lead + (1, isz))
    oh2 = O.reshape(oh, (isz, n))
    r = O.reshape(g2 @ oh2, lead + (n,))  # A + B + (n,)
    back = list(range(a_n)) + [a_n + b_n] + list(range(a_n, a_n + b_n))
    return O.permute(r, back) if back != list(range(r.ndim)) else r
