"""Random ops: per-point deterministic streams keyed by (seed, op stream index, point).

The generator itself lives in :mod:`timerl.ir.rng` so every backend draws the same values.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError, user_site
from ..ir.ops import Op
from .args import as_dtype, as_shape, as_size, value_array, who
from .ops import F32, I64, _domain, as_tensor, make
from .program import current_program


def _shape(shape, what):
    return as_shape(shape, what, symbolic=True)


def _float(v, what, arg):
    value_array(v, lambda: f"{what}: {arg}")
    try:
        return float(v)
    except TypeError:
        raise ShapeError(f"{what}: {arg} must be a number, got an array of shape {getattr(v, 'shape', '?')}") from None


def _random(dist, shape, dtype, domain, operands=(), **params):
    what = who(f"tl.random.{dist}")
    prog = operands[0].prog if operands else current_program()
    dom = _domain(domain, prog, what)
    dtype = as_dtype(dtype, what)
    stream = prog.next_random_stream()
    return make(Op.RANDOM, list(operands), [shape], [np.dtype(dtype)],
                {"dist": dist, "stream": stream, **params}, extra_domain=dom)[0]


def uniform(shape=(), domain=(), low=0.0, high=1.0, dtype="float32"):
    """Uniform samples in ``[low, high)`` of spatial ``shape`` and ``dtype``, independent per point of ``domain``.

    Like every random op, the value at a point depends only on (the compile ``seed``, the op's
    creation index in its program, the point): identical on every backend and across runs.

        noise = tl.random.uniform((3,), domain=(i, t), low=-1.0, high=1.0)
    """
    what = who("tl.random.uniform")
    return _random("uniform", _shape(shape, what), dtype, domain, low=_float(low, what, "low"),
                   high=_float(high, what, "high"))


def normal(shape=(), domain=(), mean=0.0, std=1.0, dtype="float32"):
    """Standard normal samples (scaled by ``std``, shifted by ``mean``), independent per point."""
    what = who("tl.random.normal")
    return _random("normal", _shape(shape, what), dtype, domain, mean=_float(mean, what, "mean"),
                   std=_float(std, what, "std"))


def categorical(logits, domain=()):
    """One sample per row of ``logits`` (along its last axis): int64 of shape ``logits.shape[:-1]``.

    Over the logits' domain (and ``domain``); ``logits`` must be float with at least one axis
    (else :class:`tl.ShapeError`). No gradient flows through a sample.
    """
    logits = as_tensor(logits, what=lambda: f"tl.random.categorical at {user_site()}: logits")
    if logits.ndim < 1:
        raise ShapeError(f"categorical: logits {logits.name!r} need at least one axis")
    if logits.dtype.kind != "f":
        raise ShapeError(f"categorical: logits {logits.name!r} must be float, got {logits.dtype}")
    return _random("categorical", tuple(logits.shape[:-1]), I64, domain, operands=(logits,))


def permutation(n, domain=()):
    """A fresh shuffle of ``range(n)`` per point of ``domain`` (int64, shape ``(n,)``)."""
    n = as_size(n, who("tl.random.permutation"), "n")
    return _random("permutation", (n,), I64, domain, n=n)


__all__ = ["uniform", "normal", "categorical", "permutation", "F32"]
