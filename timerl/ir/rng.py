"""The counter-based generator behind every random op.

A value is a pure function of (seed, the op's stream index, the point, the element):
``key = mix(seed, stream, point...)``, ``bits = mix(key, lane, element)`` with the
splitmix64 finalizer. All backends call :func:`draw`, so values agree everywhere.
"""

from __future__ import annotations

import numpy as np

_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z):
    z = z ^ (z >> np.uint64(30))
    z = z * _M1
    z = z ^ (z >> np.uint64(27))
    z = z * _M2
    return z ^ (z >> np.uint64(31))


def base_key(seed: int, stream: int) -> np.uint64:
    """The key of (seed, stream) before the point's coordinates are mixed in."""
    with np.errstate(over="ignore"):
        return _mix(_mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _G + np.uint64(1)) ^ (np.uint64(stream + 1) * _G))


def origin_key(seed: int, stream: int, origin: int = 0) -> np.uint64:
    """The key of (seed, stream) with ``origin`` added to the first coordinate of every point.

    ``origin`` (a random op's ``attrs["origin"]``, set by :func:`timerl.rl.checkpoint.shift_origin`
    on a resumed run) makes a run resumed at iteration ``i0`` draw at its point ``(i, ...)`` what
    the uninterrupted run draws at ``(i0 + i, ...)``. Mixing the first coordinate adds
    ``(i + 1) * G`` to this key, so the origin folds into it exactly."""
    with np.errstate(over="ignore"):
        return base_key(seed, stream) + np.uint64(int(origin) % (1 << 64)) * _G


def node_key(seed: int, attrs: dict) -> np.uint64:
    """The key of a random op (its ``attrs``) before its point's coordinates are mixed in."""
    return origin_key(seed, attrs["stream"], attrs.get("origin", 0))


def keys(seed: int, stream: int, points, origin: int = 0) -> np.ndarray:
    """One 64-bit key per point; ``points`` is an int array of shape (P, ndims); ``origin`` is added
    to the first coordinate (see :func:`origin_key`)."""
    points = np.asarray(points, dtype=np.int64).reshape(len(points), -1)
    with np.errstate(over="ignore"):
        k = np.full(len(points), origin_key(seed, stream, origin), dtype=np.uint64)
        for c in range(points.shape[1]):
            k = _mix(k + (points[:, c].astype(np.uint64) + np.uint64(1)) * _G)
    return k


def bits(k: np.ndarray, n: int, lane: int = 0) -> np.ndarray:
    """(P, n) uint64 random bits for P keys, one per element; ``lane`` separates streams."""
    with np.errstate(over="ignore"):
        e = np.arange(n, dtype=np.uint64) + np.uint64(lane) * np.uint64(0x100000000)
        return _mix(_mix(k[:, None] + e[None, :] * _G) ^ np.uint64(0xD1B54A32D192ED03))


def _unit(b: np.ndarray) -> np.ndarray:
    """Floats in [0, 1) with 53 random bits."""
    return (b >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def draw(dist: str, seed: int, stream: int, points, shape, dtype, params: dict, logits=None) -> np.ndarray:
    """Values of a random op at ``points`` (P, ndims): an array of shape (P,) + shape."""
    k = keys(seed, stream, points, params.get("origin", 0))
    P = len(k)
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64))
    if dist == "uniform":
        lo, hi = params.get("low", 0.0), params.get("high", 1.0)
        v = (lo + (hi - lo) * _unit(bits(k, n))).astype(dtype)
        if dtype.kind == "f":
            v = np.where(v >= hi, np.nextafter(dtype.type(hi), dtype.type(lo)), v)
        return v.reshape((P,) + shape)
    if dist == "normal":
        u1 = 1.0 - _unit(bits(k, n, 0))  # (0, 1]
        u2 = _unit(bits(k, n, 1))
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        z = params.get("mean", 0.0) + params.get("std", 1.0) * z
        return z.astype(dtype).reshape((P,) + shape)
    if dist == "categorical":
        logits = np.asarray(logits, dtype=np.float64).reshape((P, n, -1))
        A = logits.shape[-1]
        u = (_unit(bits(k, n * A)) + 0.5 / 9007199254740992.0).reshape(P, n, A)
        g = -np.log(-np.log(u))
        return np.argmax(logits + g, axis=-1).astype(dtype).reshape((P,) + shape)
    if dist == "permutation":
        b = bits(k, shape[0])
        return np.argsort(b, axis=-1, kind="stable").astype(dtype)
    raise ValueError(f"unknown distribution {dist!r}")
