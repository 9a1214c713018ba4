"""Functions of the outside world: UDFs (environments, loggers) and sinks."""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.ops import Op
from .ops import as_tensor, make
from .program import current_program
from .tensor import RecurrentTensor


def udf(fn, inputs=(), out_shapes=(), out_dtypes=(), batched=False, state=None, name=None):
    """Call ``fn(*arrays)`` once per demanded point, in schedule order; returns a tuple of tensors.

    ``fn`` returns one array per output (a single array when there is one output).
    UDFs sharing a ``state`` key run in program order relative to each other.
    """
    if not callable(fn):
        raise TypeError(f"tl.udf: fn must be callable, got {type(fn).__name__}")
    inputs = [as_tensor(x) for x in (inputs if isinstance(inputs, (list, tuple)) else [inputs])]
    out_shapes = [tuple(s) for s in out_shapes]
    out_dtypes = [np.dtype(d) for d in (out_dtypes if isinstance(out_dtypes, (list, tuple)) else [out_dtypes])]
    if len(out_shapes) != len(out_dtypes):
        raise ShapeError(f"tl.udf {getattr(fn, '__name__', fn)!r}: {len(out_shapes)} out_shapes but "
                         f"{len(out_dtypes)} out_dtypes")
    if not inputs:
        current_program()
    outs = make(Op.UDF, inputs, out_shapes or [()], out_dtypes or [np.dtype("bool")],
                {"fn": fn, "state": state, "batched": bool(batched), "n_out": len(out_shapes),
                 "fn_name": getattr(fn, "__name__", repr(fn))}, name=name)
    return tuple(outs[: len(out_shapes)])


def sink(x, fn, name=None):
    """Call ``fn(value, point)`` once per demanded point of ``x`` (or of a list of tensors)."""
    if not callable(fn):
        raise TypeError(f"tl.sink: fn must be callable, got {type(fn).__name__}")
    multi = isinstance(x, (list, tuple))
    xs = [as_tensor(v) for v in (x if multi else [x])]
    for v in xs:
        if not isinstance(v, RecurrentTensor):
            raise TypeError("tl.sink takes tensors")
    make(Op.SINK, xs, [], [], {"fn": fn, "multi": multi}, name=name)
