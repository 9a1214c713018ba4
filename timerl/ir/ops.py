"""The op vocabulary and the records a PDG is made of.

A well-formed PDG (checked by :func:`timerl.passes.verify.verify`, whose docstring has the full list):
- every node carries a :class:`Node` record under the attribute ``"node"``;
- edges run from consumer to producer and carry an :class:`Edge` under ``"edge"``;
  ``edge.index`` has one entry per producer-domain dim, written over the consumer's
  dims and the bounds: a point (sympy expression) or a :class:`Slice`;
- only ``ACCESS`` edges and ``MERGE`` branch edges may be non-basis (a basis entry is
  the producer's dim itself); operand positions of a node are ``0..n-1`` with no gaps;
- a node's domain lists dims in program order and contains its producers' dims along
  basis edges (domain union).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import numpy as np
import sympy


class Op(enum.Enum):
    """The ops; everything known about each (traits, rules, numpy implementation, vjp) is its
    entry in :mod:`timerl.ir.registry`."""

    # sources
    CONST = "const"  # attrs: value (np.ndarray of the spatial shape)
    DATA = "data"  # attrs: array (leading axes = domain dims)
    DIM_VALUE = "dim_value"  # attrs: dim (name)
    RANDOM = "random"  # attrs: dist, stream, params; optional input: logits
    # elementwise
    UNARY = "unary"  # attrs: fn
    BINARY = "binary"  # attrs: fn
    WHERE = "where"
    CAST = "cast"
    # reductions and scans over spatial axes
    REDUCE = "reduce"  # attrs: fn, axis (tuple), keepdims; discounted_sum reads gamma (input 1)
    SCAN = "scan"  # attrs: fn (cumsum | discounted_cumsum), axis; gamma as input 1
    MATMUL = "matmul"
    # movement
    RESHAPE = "reshape"  # attrs: shape
    PERMUTE = "permute"  # attrs: axes
    EXPAND = "expand"  # attrs: shape
    CONCAT = "concat"  # attrs: axis
    SLICE = "slice"  # attrs: key (basic numpy index of ints, slices, None)
    TAKE = "take"  # attrs: axis, along (bool: take_along_axis semantics)
    ONE_HOT = "one_hot"  # attrs: n
    # recurrences
    ACCESS = "access"  # one input; the edge index is the access (x[i, t - 1], x[0:T])
    MERGE = "merge"  # a placeholder: ordered branches, one input each, cond on the edge
    # the outside world
    UDF = "udf"  # attrs: fn, state, batched
    SINK = "sink"  # attrs: fn, multi


@dataclasses.dataclass(frozen=True)
class Slice:
    """A slice index entry ``start:stop`` (sympy expressions over consumer dims and bounds)."""

    start: Any
    stop: Any

    @property
    def length(self):
        return sympy.Max(0, self.stop - self.start)

    def __str__(self):
        return f"{self.start}:{self.stop}"


@dataclasses.dataclass(frozen=True, eq=False)
class Node:
    op: Op
    domain: tuple  # tuple[Dim, ...] in program order
    shapes: tuple  # per output: tuple of int | sympy.Expr
    dtypes: tuple  # per output: np.dtype
    attrs: dict
    name: str  # user-facing: name= or source line
    index: int  # creation index in the program

    @property
    def shape(self):
        return self.shapes[0]

    @property
    def dtype(self):
        return self.dtypes[0]

    def __str__(self):
        return f"{self.op.value}:{self.name}"


@dataclasses.dataclass(frozen=True, eq=False)
class Edge:
    pos: int  # operand position in the consumer
    out: int = 0  # output of the producer
    index: tuple = ()  # one entry per producer dim
    cond: Any = None  # merge branch condition (sympy boolean) or None
    shift: tuple = ()  # merge branches: shift per merge dim (x[t + 1] = f has 1 on t)

    def index_str(self):
        return "[" + ", ".join(str(e) for e in self.index) + "]"


def is_basis(edge: Edge, producer_domain) -> bool:
    return all(
        not isinstance(e, Slice) and sympy.sympify(e) == d.e for e, d in zip(edge.index, producer_domain)
    )


def nbytes(shape, dtype) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n * np.dtype(dtype).itemsize


def broadcast(shapes):
    """NumPy broadcast of static shapes, or None when they do not broadcast."""
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*[tuple(int(x) for x in s) for s in shapes]))
    except ValueError:
        return None


def frozen(value) -> np.ndarray:
    """A constant's array as the graph keeps it: a private copy, read-only and C-ordered. Statement
    kernels take constants as operands, and numba's dispatcher matches only arrays of a kernel's
    layout on its fast path: an F-ordered weight (a transposed initialisation) failed it on every
    call, about 30 us each (the failed match, its error message, a converted copy)."""
    arr = np.array(value, order="C")
    arr.setflags(write=False)
    return arr
