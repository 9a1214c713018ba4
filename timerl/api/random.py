"""Random ops: per-point deterministic streams keyed by (seed, op stream index, point).

The generator itself lives in :mod:`timerl.ir.rng` so every backend draws the same values.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.ops import Op
from .ops import F32, I64, _domain, as_tensor, make
from .program import current_program


def _shape(shape):
    return tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)


def _random(dist, shape, dtype, domain, operands=(), **params):
    prog = operands[0].prog if operands else current_program()
    dom = _domain(domain, prog)
    stream = prog.next_random_stream()
    return make(Op.RANDOM, list(operands), [shape], [np.dtype(dtype)],
                {"dist": dist, "stream": stream, **params}, extra_domain=dom)[0]


def uniform(shape=(), domain=(), low=0.0, high=1.0, dtype="float32"):
    """Uniform samples in ``[low, high)``, independent per point of ``domain``."""
    return _random("uniform", _shape(shape), dtype, domain, low=float(low), high=float(high))


def normal(shape=(), domain=(), mean=0.0, std=1.0, dtype="float32"):
    """Standard normal samples (scaled by ``std``, shifted by ``mean``), independent per point."""
    return _random("normal", _shape(shape), dtype, domain, mean=float(mean), std=float(std))


def categorical(logits, domain=()):
    """One sample per row of ``logits`` (along its last axis): int64 of shape ``logits.shape[:-1]``."""
    logits = as_tensor(logits)
    if logits.ndim < 1:
        raise ShapeError(f"categorical: logits {logits.name!r} need at least one axis")
    if logits.dtype.kind != "f":
        raise ShapeError(f"categorical: logits {logits.name!r} must be float, got {logits.dtype}")
    return _random("categorical", tuple(logits.shape[:-1]), I64, domain, operands=(logits,))


def permutation(n, domain=()):
    """A fresh shuffle of ``range(n)`` per point of ``domain`` (int64, shape ``(n,)``)."""
    return _random("permutation", (int(n),), I64, domain, n=int(n))


__all__ = ["uniform", "normal", "categorical", "permutation", "F32"]
