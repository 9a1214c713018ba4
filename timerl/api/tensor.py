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
    """One spatial array per integer point of ``domain``: the values of a recurrent-tensor program.

    Made by the creation functions (``tl.tensor``, ``tl.const``, ``tl.placeholder``,
    ``tl.random.*``, ...) and by operations on other tensors, inside ``with prog:``. It has a
    ``domain`` (a tuple of dims in program order), a spatial ``shape`` and a numpy ``dtype``.
    Operators follow NumPy (broadcasting, NumPy 2 promotion with weak Python scalars); operands
    of different domains combine over the union of their domains. Nothing is computed until
    the program is compiled and run: values reach Python through ``tl.sink``.

        prog = tl.Program("i t")
        i, t = prog.dims
        with prog:
            x = tl.tensor(np.ones((2, 3, 4), "float32"), domain=(i, t))  # domain (i, t), shape (4,)
            y = (2 * x).sum()                                            # domain (i, t), shape ()
    """

    __slots__ = ("prog", "nid", "out")
    __array_priority__ = 1000  # numpy scalars defer to our operators

    def __init__(self, prog, nid: int, out: int = 0):
        self.prog, self.nid, self.out = prog, nid, out

    # record ----------------------------------------------------------------------
    @property
    def node(self):
        """The PDG record of the op that made this tensor (kind, domain, shapes, dtypes, name)."""
        return self.prog.pdg.rec(self.nid)

    @property
    def domain(self) -> tuple:
        """The tuple of dims this tensor varies over, in program order (``(i, t)``; ``()`` for a constant).

        The tensor denotes one spatial array per integer point of its domain.
        """
        return self.node.domain

    @property
    def shape(self) -> tuple:
        """The spatial shape: a tuple of ints or symbolic lengths (``T``, ``T - 2``, or the variable
        length of a slice such as ``x[i, t:T]``).
        """
        return self.node.shapes[self.out]

    @property
    def dtype(self) -> np.dtype:
        """The element type, a ``numpy.dtype`` (float32 is the default float)."""
        return self.node.dtypes[self.out]

    @property
    def ndim(self) -> int:
        """The number of spatial axes, ``len(self.shape)``."""
        return len(self.shape)

    @property
    def name(self) -> str:
        """The name used in error messages and printouts: ``name=`` if given, else the user source line that created it."""
        n = self.node.name
        return n if self.out == 0 else f"{n}[out {self.out}]"

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to this tensor (``tl.tensor(..., requires_grad=True)`` or a parameter)."""
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
        """Index by the recurrent-tensor rules: one entry per domain dim, then NumPy-style spatial entries.

        Entry k may use only the k-th domain dim, bounds and constants; missing trailing domain
        entries mean "at the current point". For ``x`` over ``(i, t)`` with shape ``S``:

        - ``x[i, t - 1]``, ``x[i, tl.min(t + 5, T - 1)]``: domain ``(i, t)``, shape ``S``;
        - ``x[i, 0]``, ``x[i, T - 1]`` (a constant point): domain ``(i,)``, shape ``S``;
        - ``x[i, 0:T]`` (a constant slice): domain ``(i,)``, shape ``(T,) + S``;
        - ``x[i, t:T]``, ``x[i, 0:t + 1]`` (a variable slice): domain ``(i, t)``, shape ``(len,) + S``;
        - ``x[i, t, 2]``, ``x[i, t, :, 0]``: spatial entries after the domain entries.

        On a tensor with domain ``()`` every entry is spatial. A bad entry is a
        :class:`tl.ShapeError`; a read outside the producer's points is a :class:`tl.CompileError`
        at compile, naming the tensor, the index and the point.

            prev = x[i, t - 1]           # needs a placeholder branch that covers t == 0
            window = r[i, t:tl.min(t + 3, T)]
        """
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
        """An indexer over the spatial axes only, on any tensor: ``x.spatial[0]``, ``x.spatial[:, 1:3]``,
        ``x.spatial[None]``, ``x.spatial[..., -1]`` (NumPy basic indexing; one integer tensor index
        gathers along axis 0, like ``x.take(idx, axis=0)``).
        """
        return _SpatialIndexer(self)

    def __setitem__(self, key, value):
        """``x[key] = value`` adds a branch to placeholder ``x`` (the first branch whose condition holds wins).

        Keys: ``x[i, 0] = a`` (where ``t == 0``), ``x[i, T - 1] = a``, ``x[i, t + 1] = f`` (a shift:
        ``x`` at ``t`` is ``f`` at ``t - 1``), ``x[t > 0] = a`` / ``x[True] = a`` (conditions), and
        ``x[i, t] = a`` (the catch-all). ``value`` broadcasts to the placeholder's shape and is cast
        to its dtype; dims outside its domain, negative shifts, slices or conditions inside a tuple
        are a :class:`tl.CompileError`; a shape that does not broadcast is a :class:`tl.ShapeError`.

            g = tl.placeholder((), "float32", (i, t))
            g[i, T - 1] = r
            g[i, t] = r + 0.99 * g[i, t + 1]
        """
        from .ops import add_branch

        add_branch(self, key, value)

    # operators (implemented in timerl.api.ops) ------------------------------------
    def __add__(self, o):
        """``self + o``: elementwise, NumPy broadcasting over spatial shapes, union of domains."""
        return _ops().binary("add", self, o)

    def __radd__(self, o):
        """``o + self`` (a Python number or array on the left)."""
        return _ops().binary("add", o, self)

    def __sub__(self, o):
        """``self - o``: elementwise (see ``__add__``)."""
        return _ops().binary("sub", self, o)

    def __rsub__(self, o):
        """``o - self``."""
        return _ops().binary("sub", o, self)

    def __mul__(self, o):
        """``self * o``: elementwise (see ``__add__``)."""
        return _ops().binary("mul", self, o)

    def __rmul__(self, o):
        """``o * self``."""
        return _ops().binary("mul", o, self)

    def __truediv__(self, o):
        """``self / o``: elementwise true division; integer and bool operands give float32."""
        return _ops().binary("div", self, o)

    def __rtruediv__(self, o):
        """``o / self``."""
        return _ops().binary("div", o, self)

    def __mod__(self, o):
        """``self % o``: elementwise remainder with the sign of the divisor (NumPy's ``%``)."""
        return _ops().binary("mod", self, o)

    def __rmod__(self, o):
        """``o % self``."""
        return _ops().binary("mod", o, self)

    def __floordiv__(self, o):
        """``self // o``: elementwise floor division."""
        return _ops().binary("floordiv", self, o)

    def __rfloordiv__(self, o):
        """``o // self``."""
        return _ops().binary("floordiv", o, self)

    def __pow__(self, o):
        """``self ** o``: elementwise power."""
        return _ops().binary("pow", self, o)

    def __rpow__(self, o):
        """``o ** self``."""
        return _ops().binary("pow", o, self)

    def __neg__(self):
        """``-self``; a bool tensor raises :class:`tl.ShapeError` (use ``~``)."""
        return _ops().unary("neg", self)

    def __lt__(self, o):
        """``self < o``: a bool tensor (elementwise comparison, NumPy broadcasting)."""
        return _ops().binary("lt", self, o)

    def __le__(self, o):
        """``self <= o``: a bool tensor."""
        return _ops().binary("le", self, o)

    def __gt__(self, o):
        """``self > o``: a bool tensor."""
        return _ops().binary("gt", self, o)

    def __ge__(self, o):
        """``self >= o``: a bool tensor."""
        return _ops().binary("ge", self, o)

    def __eq__(self, o):
        """``self == o``: an elementwise bool tensor (not a Python bool: tensors hash by identity)."""
        return _ops().binary("eq", self, o)

    def __ne__(self, o):
        """``self != o``: an elementwise bool tensor."""
        return _ops().binary("ne", self, o)

    def __and__(self, o):
        """``self & o``: elementwise logical and of bool tensors (else :class:`tl.ShapeError`)."""
        return _ops().binary("logical_and", self, o)

    def __or__(self, o):
        """``self | o``: elementwise logical or of bool tensors (else :class:`tl.ShapeError`)."""
        return _ops().binary("logical_or", self, o)

    def __invert__(self):
        """``~self``: logical not of a bool tensor (else :class:`tl.ShapeError`)."""
        return _ops().unary("logical_not", self)

    def __matmul__(self, o):
        """``self @ o``: matrix product of the last two spatial axes, batched NumPy-style (see :func:`tl.matmul`)."""
        return _ops().matmul(self, o)

    def __rmatmul__(self, o):
        """``o @ self``."""
        return _ops().matmul(o, self)

    # methods -------------------------------------------------------------------------------
    def astype(self, dtype):
        """This tensor converted to ``dtype`` (NumPy casting; the same tensor if it already has it)."""
        return _ops().cast(self, dtype)

    def detach(self):
        """The value of this tensor with no gradient flowing through it (``loss = -(logp * adv.detach()).mean()``)."""
        return _ops().unary("detach", self)

    def sum(self, axis=None, keepdims=False):
        """Sum over spatial ``axis`` (an int, a tuple, or None for all); ``keepdims`` keeps them as length 1.

        Bool and integer tensors sum to int64 (as NumPy). A zero-length slice sums to 0.
        """
        return _ops().reduce("sum", self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        """Mean over spatial ``axis`` (None: all); integer inputs give float32. Empty: NaN."""
        return _ops().reduce("mean", self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        """Maximum over spatial ``axis`` (None: all). Over a zero-length slice: a :class:`tl.RuntimeFault` naming the point."""
        return _ops().reduce("max", self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        """Minimum over spatial ``axis`` (None: all). Over a zero-length slice: a :class:`tl.RuntimeFault` naming the point."""
        return _ops().reduce("min", self, axis, keepdims)

    def std(self, axis=None, keepdims=False):
        """Population standard deviation (``ddof=0``) over spatial ``axis`` (None: all); integer inputs give float32."""
        return _ops().reduce("std", self, axis, keepdims)

    def logsumexp(self, axis=None, keepdims=False):
        """``log(sum(exp(x)))`` over spatial ``axis``, computed stably; integer inputs give float32."""
        return _ops().reduce("logsumexp", self, axis, keepdims)

    def argmax(self, axis=None, keepdims=False):
        """The int64 index of the maximum along ``axis`` (one axis; None: of the flattened array).
        Over a zero-length slice: a :class:`tl.RuntimeFault`.
        """
        return _ops().reduce("argmax", self, axis, keepdims)

    def cumsum(self, axis=0):
        """Cumulative sum along spatial ``axis`` (default 0); the same shape; bool/int give int64."""
        return _ops().scan("cumsum", self, axis)

    def discounted_sum(self, gamma, axis=0):
        """``Σ_k gamma**k · x[k]`` along spatial ``axis`` (default 0), which is removed.

        ``gamma`` is a float or a shape-() tensor. Integer inputs are cast to float32. Over a
        window ``r[i, t:tl.min(t + n, T)]`` this is the n-step return without done masks.
        """
        return _ops().discounted(self, gamma, axis, cumulative=False)

    def discounted_cumsum(self, gamma, axis=0):
        """For each k along ``axis``, ``Σ_{j>=k} gamma**(j-k) · x[j]`` (the same shape).

        Over a rollout slice ``r[i, 0:T]`` (shape ``(T, N)``) this is the Monte-Carlo return of every step.
        """
        return _ops().discounted(self, gamma, axis, cumulative=True)

    def reshape(self, *shape):
        """The same elements in a new spatial shape (``x.reshape(2, -1)`` or ``x.reshape((2, -1))``; one -1 is inferred); a bad shape is a :class:`tl.ShapeError`."""
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _ops().reshape(self, shape)

    def transpose(self, *axes):
        """The spatial axes permuted by ``axes`` (``x.transpose(1, 0)``); with no axes, reversed. ``permute`` is the same method."""
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return _ops().permute(self, axes or None)

    permute = transpose

    @property
    def T(self):
        """The spatial axes reversed (``x.transpose()``)."""
        return _ops().permute(self, None)

    def expand(self, *shape):
        """This tensor broadcast to spatial ``shape`` (NumPy's ``broadcast_to``; length-1 axes stretch). ``broadcast_to`` is the same method."""
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _ops().broadcast_to(self, shape)

    broadcast_to = expand

    def squeeze(self, axis=None):
        """Drop length-1 spatial axes (all of them, or ``axis``); squeezing another length is a :class:`tl.ShapeError`."""
        return _ops().squeeze(self, axis)

    def unsqueeze(self, axis):
        """Insert a length-1 spatial axis at ``axis`` (negative counts from the end of the result)."""
        return _ops().unsqueeze(self, axis)

    def take(self, idx, axis=None):
        """Gather along spatial ``axis`` with integer tensor ``idx`` (``numpy.take``; ``axis=None``
        flattens first). The result's shape is ``x.shape[:axis] + idx.shape + x.shape[axis + 1:]``.
        """
        return _ops().take(self, idx, axis)

    def take_along_axis(self, idx, axis=-1):
        """``numpy.take_along_axis``: ``idx`` has the same rank as ``x``; picks per position along ``axis`` (e.g. the log-probability of each action)."""
        return _ops().take_along_axis(self, idx, axis)

    @property
    def grad(self):
        """The gradient of the last ``backward()`` loss with respect to this tensor, a recurrent tensor
        over this tensor's domain: at each point, the derivative of the loss summed over all its
        points with respect to this tensor at that point. A :class:`tl.CompileError` if no
        ``backward()`` reached it.
        """
        from .autodiff import grad_of

        return grad_of(self)

    def backward(self):
        """Differentiate this shape-() loss with respect to every parameter and every tensor created
        with ``requires_grad=True``; read the results as ``x.grad``.

        Gradients flow through every indexing pattern (shifts, slices, windows, branches). The graph
        is differentiated as it stands now (a later ``opt.step`` is not differentiated through);
        a second ``backward()`` adds to the first. A loss of another shape is a
        :class:`tl.ShapeError`; no tensor requiring a gradient is a :class:`tl.CompileError`.

            loss = ((w * x) ** 2).sum()
            loss.backward()
            tl.sink(w.grad, lambda v, p: print(v))
        """
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

