"""Scalar helpers that statement kernels call (:mod:`timerl.kernels.statement`).

Compiled once per process (and cached on disk) instead of once per kernel module; LLVM
inlines them into the kernels' loops, which still vectorize.
"""

import math

import numba
import numpy as np

from ..ir import rng

G = rng._G
D = np.uint64(0xD1B54A32D192ED03)  # rng.bits' final xor
ONE = np.uint64(1)
LANE = np.uint64(0x100000000)


# timerl.ir.rng's splitmix64 finalizer itself, compiled for uint64 scalars
mix = numba.njit(cache=True)(rng._mix)


@numba.njit(cache=True)
def unit(k, e):
    # timerl.ir.rng: _unit(bits(k, .)) at element e (lane folded into e)
    b = mix(mix(k + e * G) ^ D)
    return np.float64(b >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, fastmath=False, error_model="numpy")
def tanh32(x):
    # Eigen's rational tanh for float32 (XLA uses the same): |err| < 3e-7, vectorizes
    if x > 7.90531110763549805:
        x = np.float32(7.90531110763549805)
    elif x < -7.90531110763549805:
        x = np.float32(-7.90531110763549805)
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    p = x * p
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    r = p / q
    if abs(x) < 0.0004:
        r = x
    return r


# array helpers: one loop nest compiled once per dtype and rank, called by every kernel (numba's
# front end costs about 60 ms per loop nest in a kernel, growing with the kernel's size)
@numba.njit(cache=True, error_model="numpy")
def matmul_small(a, b, out):
    """out[m, n] = a[m, k] @ b[k, n], the output column innermost (contiguous rows of b: SIMD)."""
    out[:, :] = 0
    for i in range(a.shape[0]):
        for kk in range(a.shape[1]):
            aik = a[i, kk]
            for j in range(b.shape[1]):
                out[i, j] += aik * b[kk, j]
    return out


@numba.njit(cache=True)
def take3(x, idx, out):
    """out[a, q, c] = x[a, idx[q], c] (negative indices from the end); False when one is out of range."""
    n = x.shape[1]
    for q in range(idx.shape[0]):
        j = idx[q]
        if j < 0:
            j += n
        if j < 0 or j >= n:
            return False
        for a in range(x.shape[0]):
            for c in range(x.shape[2]):
                out[a, q, c] = x[a, j, c]
    return True


@numba.njit(cache=True)
def take_along3(x, idx, out):
    """out[a, q, c] = x[a, idx[a, q, c], c]; False when an index is out of range."""
    n = x.shape[1]
    for a in range(idx.shape[0]):
        for q in range(idx.shape[1]):
            for c in range(idx.shape[2]):
                j = idx[a, q, c]
                if j < 0:
                    j += n
                if j < 0 or j >= n:
                    return False
                out[a, q, c] = x[a, j, c]
    return True


@numba.njit(cache=True)
def gather(xf, idx, outf):
    """outf[q] = xf[idx[q]] (movement ops: permute, expand, slice, through compile-time indices)."""
    for q in range(idx.shape[0]):
        outf[q] = xf[idx[q]]


@numba.njit(cache=True)
def transpose2(x, out):
    """``out[j, i] = x[i, j]`` in 32 x 32 tiles: a tile's rows and columns stay in cache while it
    moves (a gather by index arrays streams an int64 index per element besides the data)."""
    n, m = x.shape
    for i0 in range(0, n, 32):
        i1 = min(i0 + 32, n)
        for j0 in range(0, m, 32):
            j1 = min(j0 + 32, m)
            for i in range(i0, i1):
                for j in range(j0, j1):
                    out[j, i] = x[i, j]


@numba.njit(cache=True)
def scatter(xf, idx, outf):
    """outf[idx[q]] = xf[q] (one operand of a concat)."""
    for q in range(idx.shape[0]):
        outf[idx[q]] = xf[q]


@numba.njit(cache=True, error_model="numpy")
def _reduce_row(x, fn, a, out):
    """reduce3 for one ``a`` with C == 1: a scalar accumulator along r."""
    R = x.shape[1]
    if fn <= 1 or fn == 4:
        s = 0.0
        for r in range(R):
            s += x[a, r, 0]
        mu = s / R
        if fn == 4:
            s = 0.0
            for r in range(R):
                d = x[a, r, 0] - mu
                s += d * d
            out[a, 0] = math.sqrt(s / R)
        else:
            out[a, 0] = mu if fn == 1 else s
    elif fn <= 3:
        m = x[a, 0, 0]
        for r in range(1, R):
            v = x[a, r, 0]
            if m == m and (v != v or (v > m if fn == 2 else v < m)):
                m = v
        out[a, 0] = m
    else:
        m = -np.inf
        for r in range(R):
            v = x[a, r, 0]
            if v > m or v != v:
                m = v
        if not np.isfinite(m):
            m = 0.0
        s = 0.0
        for r in range(R):
            s += math.exp(np.float64(x[a, r, 0]) - m)
        out[a, 0] = math.log(s) + m


@numba.njit(cache=True, error_model="numpy")
def reduce3(x, fn, out):
    """Reduce x[a, r, c] over r into out[a, c] (float64 accumulators). fn: 0 sum, 1 mean, 2 max,
    3 min, 4 std, 5 logsumexp; max/min/logsumexp propagate NaN like numpy. With C > 1 the inner
    loop runs along c (contiguous rows, vectorized), accumulating one row of C at a time."""
    A, R, C = x.shape
    for a in range(A):
        if C == 1:
            _reduce_row(x, fn, a, out)
            continue
        acc = np.zeros(C)
        if fn <= 1 or fn == 4:
            for r in range(R):
                for c in range(C):
                    acc[c] += x[a, r, c]
            for c in range(C):
                acc[c] /= R if fn != 0 else 1
            if fn == 4:
                sq = np.zeros(C)
                for r in range(R):
                    for c in range(C):
                        d = x[a, r, c] - acc[c]
                        sq[c] += d * d
                for c in range(C):
                    acc[c] = math.sqrt(sq[c] / R)
        elif fn <= 3:
            for c in range(C):
                acc[c] = x[a, 0, c]
            for r in range(1, R):
                for c in range(C):
                    v = x[a, r, c]
                    m = acc[c]
                    if m == m and (v != v or (v > m if fn == 2 else v < m)):
                        acc[c] = v
        else:
            m = np.full(C, -np.inf)
            for r in range(R):
                for c in range(C):
                    v = x[a, r, c]
                    if v > m[c] or v != v:
                        m[c] = v
            for c in range(C):
                if not np.isfinite(m[c]):
                    m[c] = 0.0
            for r in range(R):
                for c in range(C):
                    acc[c] += math.exp(np.float64(x[a, r, c]) - m[c])
            for c in range(C):
                acc[c] = math.log(acc[c]) + m[c]
        for c in range(C):
            out[a, c] = acc[c]


@numba.njit(cache=True)
def permutation(k, out):
    """timerl.ir.rng's permutation draw: the stable argsort of one key's bits (numba compiles its
    sort in seconds: here once, not in every kernel)."""
    n = out.shape[0]
    b = np.empty(n, np.uint64)
    for q in range(n):
        b[q] = mix(mix(k + np.uint64(q) * G) ^ D)
    out[:] = np.argsort(b, kind="mergesort")


@numba.njit(cache=True)
def dot(a, b):
    """BLAS through np.dot (numba compiles its wrapper in about a second: here once)."""
    return np.dot(a, b)
