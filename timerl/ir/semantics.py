"""What each op computes, in numpy: ``eval_rules[op](node, ins, nb, ctx) -> tuple of arrays``.

``nb`` leading axes of every input are batch axes (points evaluated together, of size
B or 1, broadcast against each other); the rest are the spatial axes of the node's
operands. The reference executor calls these with ``nb == 0``; vectorized backends with
``nb >= 1``. ``ctx.resolve(entry)`` turns a symbolic shape entry into an int.
Sources that depend on the point (DATA, DIM_VALUE, RANDOM) and the recurrence/world ops
(ACCESS, MERGE, UDF, SINK) are evaluated by the executors themselves.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import RuntimeFault
from .ops import Op

eval_rules: dict = {}


def rule(*ops):
    def deco(fn):
        for op in ops:
            eval_rules[op] = fn
        return fn

    return deco


def _sp(x, nb):
    return x.ndim - nb


def align(xs, nb):
    """Pad spatial ranks (after the batch axes) so the inputs broadcast NumPy-style."""
    r = max(_sp(x, nb) for x in xs)
    out = []
    for x in xs:
        pad = r - _sp(x, nb)
        out.append(x.reshape(x.shape[:nb] + (1,) * pad + x.shape[nb:]) if pad else x)
    return out


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (0.5 * (np.tanh(0.5 * x) + 1.0)).astype(x.dtype)


UNARY = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "sqrt": np.sqrt,
    "abs": np.abs,
    "sign": np.sign,
    "detach": lambda x: x,
    "logical_not": np.logical_not,
}

BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "mod": np.mod,
    "floordiv": np.floor_divide,
    "pow": np.power,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "minimum": np.minimum,
    "maximum": np.maximum,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


@rule(Op.UNARY)
def _unary(node, ins, nb, ctx):
    with np.errstate(all="ignore"):
        return (np.asarray(UNARY[node.attrs["fn"]](ins[0])).astype(node.dtype, copy=False),)


@rule(Op.BINARY)
def _binary(node, ins, nb, ctx):
    a, b = align(ins, nb)
    with np.errstate(all="ignore"):
        return (np.asarray(BINARY[node.attrs["fn"]](a, b)).astype(node.dtype, copy=False),)


@rule(Op.WHERE)
def _where(node, ins, nb, ctx):
    c, a, b = align(ins, nb)
    return (np.where(c, a, b).astype(node.dtype, copy=False),)


@rule(Op.CAST)
def _cast(node, ins, nb, ctx):
    with np.errstate(all="ignore"):
        return (ins[0].astype(node.dtype),)


def _empty_fault(fn, node, ctx):
    raise RuntimeFault(f"{fn} over an empty slice in tensor {node.name!r} at {ctx.where()}")


@rule(Op.REDUCE)
def _reduce(node, ins, nb, ctx):
    fn, keep = node.attrs["fn"], node.attrs["keepdims"]
    x = ins[0]
    axes = tuple(a + nb for a in node.attrs["axis"])
    if fn == "discounted_sum":
        (ax,) = axes
        g = ins[1].reshape(ins[1].shape[:nb] + (1,) * (x.ndim - nb))
        L = x.shape[ax]
        k = np.arange(L).reshape((L,) + (1,) * (x.ndim - ax - 1))
        return ((x * g**k).sum(axis=ax).astype(node.dtype, copy=False),)
    if fn in ("max", "min", "argmax") and any(x.shape[a] == 0 for a in axes):
        _empty_fault(fn, node, ctx)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean/std of an empty slice is NaN by design
        if fn == "argmax":
            if node.attrs["flat"]:
                flat = x.reshape(x.shape[:nb] + (-1,))
                out = np.argmax(flat, axis=-1)
                if keep:
                    out = out.reshape(out.shape + (1,) * (x.ndim - nb))
            else:
                out = np.argmax(x, axis=axes[0], keepdims=keep) if axes else np.zeros(x.shape, np.int64)
        elif fn == "logsumexp":
            m = np.max(x, axis=axes, keepdims=True) if all(x.shape[a] for a in axes) else np.zeros(
                [1 if k in axes else s for k, s in enumerate(x.shape)], x.dtype)
            m = np.where(np.isfinite(m), m, 0)
            out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
            if not keep:
                out = out.reshape([s for k, s in enumerate(out.shape) if k not in axes])
        elif fn == "std":
            out = np.std(x, axis=axes, keepdims=keep)
        else:
            out = getattr(np, fn)(x, axis=axes, keepdims=keep)
    return (np.asarray(out).astype(node.dtype, copy=False),)


@rule(Op.SCAN)
def _scan(node, ins, nb, ctx):
    x = ins[0]
    ax = node.attrs["axis"] + nb
    if node.attrs["fn"] == "cumsum":
        return (np.cumsum(x, axis=ax).astype(node.dtype, copy=False),)
    g = ins[1].reshape(ins[1].shape[:nb] + (1,) * (x.ndim - nb - 1))
    x = np.broadcast_to(x, np.broadcast_shapes(x.shape[:nb], g.shape[:nb]) + x.shape[nb:])
    xs = np.moveaxis(x, ax, nb)
    out = np.empty_like(xs)
    acc = np.zeros(xs.shape[:nb] + xs.shape[nb + 1 :], dtype=x.dtype)
    for k in range(xs.shape[nb] - 1, -1, -1):
        idx = (slice(None),) * nb + (k,)
        acc = xs[idx] + g * acc
        out[idx] = acc
    return (np.moveaxis(out, nb, ax).astype(node.dtype, copy=False),)


@rule(Op.MATMUL)
def _matmul(node, ins, nb, ctx):
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


def _concrete(shape, ctx):
    return tuple(s if isinstance(s, int) else ctx.resolve(s) for s in shape)


@rule(Op.RESHAPE)
def _reshape(node, ins, nb, ctx):
    x = ins[0]
    return (x.reshape(x.shape[:nb] + _concrete(node.attrs["shape"], ctx)),)


@rule(Op.PERMUTE)
def _permute(node, ins, nb, ctx):
    x = ins[0]
    return (np.transpose(x, tuple(range(nb)) + tuple(a + nb for a in node.attrs["axes"])),)


@rule(Op.EXPAND)
def _expand(node, ins, nb, ctx):
    x = ins[0]
    (x,) = align([x, np.zeros((1,) * (nb + len(node.attrs["shape"])))], nb)[:1]
    return (np.broadcast_to(x, x.shape[:nb] + _concrete(node.attrs["shape"], ctx)),)


def _batch_broadcast(xs, nb):
    batch = np.broadcast_shapes(*[x.shape[:nb] for x in xs])
    return [np.broadcast_to(x, batch + x.shape[nb:]) for x in xs]


@rule(Op.CONCAT)
def _concat(node, ins, nb, ctx):
    return (np.concatenate(_batch_broadcast(ins, nb), axis=node.attrs["axis"] + nb),)


@rule(Op.SLICE)
def _slice(node, ins, nb, ctx):
    try:
        return (ins[0][(slice(None),) * nb + tuple(node.attrs["key"])],)
    except IndexError as e:
        raise RuntimeFault(f"index out of range in tensor {node.name!r} at {ctx.where()}: {e}") from None


@rule(Op.TAKE)
def _take(node, ins, nb, ctx):
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


@rule(Op.ONE_HOT)
def _one_hot(node, ins, nb, ctx):
    n = node.attrs["n"]
    return ((ins[0][..., None] == np.arange(n)).astype(node.dtype),)


@rule(Op.CONST)
def _const(node, ins, nb, ctx):
    v = node.attrs["value"]
    return (v.reshape((1,) * nb + v.shape),)


def evaluate(node, ins, nb, ctx):
    try:
        fn = eval_rules[node.op]
    except KeyError:
        raise NotImplementedError(f"no numpy rule for op {node.op.value} (tensor {node.name!r})") from None
    return fn(node, ins, nb, ctx)
