"""Functions of the outside world: UDFs (environments, loggers) and sinks."""

from __future__ import annotations

import inspect

import numpy as np

from ..errors import ShapeError
from ..ir.ops import Op
from .args import as_dtype, as_shape, who
from .ops import as_tensor, make
from .program import current_program
from .tensor import RecurrentTensor


def udf(fn, inputs=(), out_shapes=(), out_dtypes=(), batched=False, state=None, name=None):
    """Call ``fn(*arrays)`` once per demanded point, in schedule order; returns a tuple of tensors.

    ``inputs`` are tensors (or one tensor); the UDF's points are those its inputs share (with
    no inputs it runs once per run). ``out_shapes`` and ``out_dtypes`` give each output's
    spatial shape and dtype; ``fn`` receives numpy arrays and returns one array per output (a
    single array when there is one output). UDFs are never fused; UDFs sharing a ``state``
    key run in program order relative to each other (e.g. an environment's ``reset`` and
    ``step``). ``batched=True`` declares that ``fn`` takes and returns arrays with a leading
    axis of points (a single point arrives with a leading axis of length 1). An ``fn`` that is
    not callable or cannot take one array per input is a ``TypeError`` when the UDF is created;
    unequal ``out_shapes`` / ``out_dtypes`` a :class:`tl.ShapeError`;
    ``fn`` raising, or returning the wrong number or shapes of arrays, a :class:`tl.RuntimeFault`
    naming the UDF and the point.

        (y,) = tl.udf(lambda a: np.sin(a), [x], [x.shape], ["float32"], name="sin")
    """
    if not callable(fn):
        raise TypeError(f"tl.udf: fn must be callable, got {type(fn).__name__}")
    what = who(f"tl.udf {getattr(fn, '__name__', fn)!r}", name)
    inputs = [as_tensor(x, what=lambda k=k: f"{what}: input {k}")
              for k, x in enumerate(inputs if isinstance(inputs, (list, tuple)) else [inputs])]
    if not isinstance(out_shapes, (list, tuple)):
        raise TypeError(f"{what}: out_shapes must be a list of shapes, one per output, got {out_shapes!r}")
    out_shapes = [as_shape(s, what, f"out_shapes[{k}]", symbolic=True) for k, s in enumerate(out_shapes)]
    out_dtypes = [as_dtype(d, what, f"out_dtypes[{k}]")
                  for k, d in enumerate(out_dtypes if isinstance(out_dtypes, (list, tuple)) else [out_dtypes])]
    if len(out_shapes) != len(out_dtypes):
        raise ShapeError(f"{what}: {len(out_shapes)} out_shapes but {len(out_dtypes)} out_dtypes; give one of each "
                         "per output")
    _check_arity(fn, len(inputs), what, f"one array per input, {len(inputs)} input(s)")
    if not inputs:
        current_program()
    outs = make(Op.UDF, inputs, out_shapes or [()], out_dtypes or [np.dtype("bool")],
                {"fn": fn, "state": state, "batched": bool(batched), "n_out": len(out_shapes),
                 "fn_name": getattr(fn, "__name__", repr(fn))}, name=name)
    return tuple(outs[: len(out_shapes)])


def sink(x, fn, name=None):
    """Call ``fn(value, point)`` once per point of ``x``, in schedule order: how values leave a program.

    ``value`` is a numpy array (0-d for shape ``()``), read-only and valid only during the call
    (copy it to keep it); ``point`` is a dict from dim name to int. Sinks demand every point
    ``0 <= d < D`` of every dim of ``x`` (sink ``x[i, T]`` to observe a shift-extension point).
    ``tl.sink([x, y], fn)`` calls ``fn([vx, vy], point)`` at the points they share. A sink keeps
    what it reads alive: what no sink or parameter update needs is dead code. An ``fn`` that is
    not callable or cannot take ``(value, point)`` is a ``TypeError`` when the sink is created.
    An exception raised by ``fn`` during ``exe.run()`` reaches the caller as a ``tl.RuntimeFault``
    naming the sink, its tensor and the point, chained to the original (``err.__cause__``);
    ``KeyboardInterrupt`` passes through unchanged.

        out = {}
        tl.sink(g, lambda v, p: out.__setitem__((p["i"], p["t"]), float(v)))
    """
    if not callable(fn):
        raise TypeError(f"tl.sink: fn must be callable, got {type(fn).__name__}")
    multi = isinstance(x, (list, tuple))
    what = who("tl.sink", name)
    xs = [as_tensor(v, what=lambda k=k: f"{what}: {'input ' + str(k) if multi else 'its input'}")
          for k, v in enumerate(x if multi else [x])]
    for v in xs:
        if not isinstance(v, RecurrentTensor):
            raise TypeError("tl.sink takes tensors")
    _check_arity(fn, 2, what, "value, point")
    make(Op.SINK, xs, [], [], {"fn": fn, "multi": multi, "fn_name": getattr(fn, "__name__", repr(fn)),
                               "of": [v.name for v in xs]}, name=name)


def _check_arity(fn, n, what, expect):
    """``fn`` must accept ``n`` positional arguments; said when the op is created, not at run time."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    try:
        sig.bind(*([None] * n))
    except TypeError:
        raise TypeError(f"{what}: fn {getattr(fn, '__name__', fn)}{sig} cannot be called with {n} positional "
                        f"argument(s) ({expect})") from None
