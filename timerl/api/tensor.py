"""Recurrent tensors: indexing (the recurrent-tensor rules) and placeholder branches."""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import ShapeError
from ..ir.expr import Cond, Expr, is_index_like
from ..ir.ops import Edge, Op, Slice
from .args import check_program


def _entry_sym(x):
    if isinstance(x, Expr):
        return x.e
    return sympy.Integer(int(x))


class RecurrentTensor:
    """One spatial array per integer point of ``domain``; see API.md."""

    __slots__ = ("prog", "nid", "out")
    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, prog, nid: int, out: int = 0):
        self.prog, self.nid, self.out = prog, nid, out

    # record ----------------------------------------------------------------------
    @property
    def node(self):
        return self.prog.pdg.rec(self.nid)

    @property
    def domain(self) -> tuple:
        return self.node.domain

    @property
    def shape(self) -> tuple:
        return self.node.shapes[self.out]

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtypes[self.out]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def name(self) -> str:
        n = self.node.name
        return n if self.out == 0 else f"{n}[out {self.out}]"

    @property
    def requires_grad(self) -> bool:
        return bool(self.prog.pdg.nodes[self.nid].get("requires_grad"))

    def __repr__(self):
        dom = ", ".join(d.name for d in self.domain)
        return f"RecurrentTensor({self.name!r}, domain=({dom}), shape={self.shape}, dtype={self.dtype})"

    def __bool__(self):
        raise TypeError(f"tensor {self.name!r} has no truth value while the program is being built")

    def __hash__(self):
        return hash((id(self.prog), self.nid, self.out))

    def __iter__(self):
        raise TypeError(f"tensor {self.name!r} is not iterable; index its spatial axes explicitly")

    # indexing --------------------------------------------------------------------------
    def __getitem__(self, key):
        if not self.domain:
            return self.spatial[key]
        key = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, (Cond, bool)) for k in key[: len(self.domain)]):
            raise ShapeError(
                f"tensor {self.name!r}: a condition selects placeholder branches (x[t > 0] = ...); "
                "it cannot be read with one"
            )
        dom_key, spatial_key = key[: len(self.domain)], key[len(self.domain) :]
        dom_key = tuple(dom_key) + tuple(self.domain[len(dom_key) :])
        entries, kept, lengths, trivial = [], [], [], True
        for k, (d, ent) in enumerate(zip(self.domain, dom_key)):
            bound_syms = set(self.prog._sym_to_bound)
            if isinstance(ent, slice):
                if ent.step not in (None, 1):
                    raise ShapeError(f"tensor {self.name!r}: slice steps along dim {d.name} are not supported")
                start = _entry_sym(0 if ent.start is None else ent.start)
                stop = _entry_sym(d.bound if ent.stop is None else ent.stop)
                self._check_entry(k, d, start, bound_syms)
                self._check_entry(k, d, stop, bound_syms)
                varying = [s for s in self.shape if not isinstance(s, int) and d.e in sympy.sympify(s).free_symbols]
                if varying:
                    raise ShapeError(
                        f"tensor {self.name!r} has shape {tuple(self.shape)}, which varies along dim {d.name}; "
                        f"a slice along {d.name} would stack arrays of different shapes (reduce it first)"
                    )
                sl = Slice(start, stop)
                entries.append(sl)
                lengths.append(sl.length)
                if d.e in start.free_symbols | stop.free_symbols:
                    kept.append(d)
                trivial = False
            elif is_index_like(ent):
                e = _entry_sym(ent)
                self._check_entry(k, d, e, bound_syms)
                entries.append(e)
                if d.e in e.free_symbols:
                    kept.append(d)
                if e != d.e:
                    trivial = False
            else:
                raise ShapeError(
                    f"tensor {self.name!r}: index entry {k} ({ent!r}) must be an index expression "
                    f"over dim {d.name} or a slice"
                )
        if trivial:
            base = self
        else:
            check_program([self])
            shape = tuple(_simplify_len(L) for L in lengths) + tuple(self.shape)
            nid = self.prog.add(
                Op.ACCESS, tuple(kept), [shape], [self.dtype],
                inputs=[(self.nid, Edge(pos=0, out=self.out, index=tuple(entries)))],
            )
            base = RecurrentTensor(self.prog, nid)
        return base.spatial[spatial_key] if spatial_key else base

    def _check_entry(self, k, d, e, bound_syms):
        other = {s for s in e.free_symbols if s != d.e and s not in bound_syms}
        if other:
            names = ", ".join(sorted(str(s) for s in other))
            raise ShapeError(
                f"tensor {self.name!r}: index entry {k} is for dim {d.name} and may use only "
                f"{d.name}, bounds and constants, but uses {names}; write one entry per domain dim "
                f"({', '.join(x.name for x in self.domain)})"
            )

    @property
    def spatial(self):
        return _SpatialIndexer(self)

    def __setitem__(self, key, value):
        from .ops import add_branch

        add_branch(self, key, value)

    # operators (implemented in timerl.api.ops) ------------------------------------
    def __add__(self, o):
        return _ops().binary("add", self, o)

    def __radd__(self, o):
        return _ops().binary("add", o, self)

    def __sub__(self, o):
        return _ops().binary("sub", self, o)

    def __rsub__(self, o):
        return _ops().binary("sub", o, self)

    def __mul__(self, o):
        return _ops().binary("mul", self, o)

    def __rmul__(self, o):
        return _ops().binary("mul", o, self)

    def __truediv__(self, o):
        return _ops().binary("div", self, o)

    def __rtruediv__(self, o):
        return _ops().binary("div", o, self)

    def __mod__(self, o):
        return _ops().binary("mod", self, o)

    def __rmod__(self, o):
        return _ops().binary("mod", o, self)

    def __floordiv__(self, o):
        return _ops().binary("floordiv", self, o)

    def __rfloordiv__(self, o):
        return _ops().binary("floordiv", o, self)

    def __pow__(self, o):
        return _ops().binary("pow", self, o)

    def __rpow__(self, o):
        return _ops().binary("pow", o, self)

    def __neg__(self):
        return _ops().unary("neg", self)

    def __lt__(self, o):
        return _ops().binary("lt", self, o)

    def __le__(self, o):
        return _ops().binary("le", self, o)

    def __gt__(self, o):
        return _ops().binary("gt", self, o)

    def __ge__(self, o):
        return _ops().binary("ge", self, o)

    def __eq__(self, o):
        return _ops().binary("eq", self, o)

    def __ne__(self, o):
        return _ops().binary("ne", self, o)

    def __and__(self, o):
        return _ops().binary("logical_and", self, o)

    def __or__(self, o):
        return _ops().binary("logical_or", self, o)

    def __invert__(self):
        return _ops().unary("logical_not", self)

    def __matmul__(self, o):
        return _ops().matmul(self, o)

    def __rmatmul__(self, o):
        return _ops().matmul(o, self)

    # methods -------------------------------------------------------------------------------
    def astype(self, dtype):
        return _ops().cast(self, dtype)

    def detach(self):
        return _ops().unary("detach", self)

    def sum(self, axis=None, keepdims=False):
        return _ops().reduce("sum", self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops().reduce("mean", self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _ops().reduce("max", self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return _ops().reduce("min", self, axis, keepdims)

    def std(self, axis=None, keepdims=False):
        return _ops().reduce("std", self, axis, keepdims)

    def logsumexp(self, axis=None, keepdims=False):
        return _ops().reduce("logsumexp", self, axis, keepdims)

    def argmax(self, axis=None, keepdims=False):
        return _ops().reduce("argmax", self, axis, keepdims)

    def cumsum(self, axis=0):
        return _ops().scan("cumsum", self, axis)

    def discounted_sum(self, gamma, axis=0):
        return _ops().discounted(self, gamma, axis, cumulative=False)

    def discounted_cumsum(self, gamma, axis=0):
        return _ops().discounted(self, gamma, axis, cumulative=True)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _ops().reshape(self, shape)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return _ops().permute(self, axes or None)

    permute = transpose

    @property
    def T(self):
        return _ops().permute(self, None)

    def expand(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _ops().broadcast_to(self, shape)

    broadcast_to = expand

    def squeeze(self, axis=None):
        return _ops().squeeze(self, axis)

    def unsqueeze(self, axis):
        return _ops().unsqueeze(self, axis)

    def take(self, idx, axis=None):
        return _ops().take(self, idx, axis)

    def take_along_axis(self, idx, axis=-1):
        return _ops().take_along_axis(self, idx, axis)

    @property
    def grad(self):
        from .autodiff import grad_of

        return grad_of(self)

    def backward(self):
        from .autodiff import backward

        return backward(self)


def _simplify_len(L):
    L = sympy.sympify(L)
    return int(L) if L.is_Integer else L


class _SpatialIndexer:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    def __getitem__(self, key):
        return _ops().spatial_index(self.x, key)


def _ops():
    from . import ops

    return ops

