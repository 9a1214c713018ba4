"""Free functions of the public API (``tl.exp``, ``tl.min``, ...)."""

from __future__ import annotations

from ..ir import expr as _expr
from . import ops as _ops
from .tensor import RecurrentTensor


def _u(fn):
    def f(x):
        return _ops.unary(fn, x)

    f.__name__ = fn
    f.__doc__ = f"Elementwise {fn} of a tensor."
    return f


exp, log, tanh, sigmoid, relu, sqrt, abs, sign, sin, cos = (
    _u(n) for n in ("exp", "log", "tanh", "sigmoid", "relu", "sqrt", "abs", "sign", "sin", "cos"))


def min(a, b):  # noqa: A001
    """``tl.min(a, b)``: of index expressions (``tl.min(t + 5, T - 1)``) or, elementwise, of tensors."""
    if isinstance(a, RecurrentTensor) or isinstance(b, RecurrentTensor):
        return _ops.minimum(a, b)
    return _expr.min(a, b)


def max(a, b):  # noqa: A001
    """``tl.max(a, b)``: of index expressions or, elementwise, of tensors."""
    if isinstance(a, RecurrentTensor) or isinstance(b, RecurrentTensor):
        return _ops.maximum(a, b)
    return _expr.max(a, b)
