"""What generated CUDA statement kernels call (:mod:`timerl.kernels.cuda`): the device pool,
host/device transfers, and the kernels every statement shares (tiled GEMM, reductions,
gathers, the counter-based RNG as device functions).

The device pool (:data:`POOL`) is where every device array of a run comes from: stores,
kernel temporaries, constants and operands moved to the device. It counts bytes by base
allocation (a view or reshape costs nothing): an allocation adds its bytes when made and
removes them when its last reference (view) dies, so ``POOL.peak`` is the run's peak of device
bytes. ``h2d`` and ``d2h`` count the bytes moved each way.

Imported only by the ``cuda`` backend: it imports ``numba.cuda``, which needs a GPU or the
simulator (``NUMBA_ENABLE_CUDASIM=1``, set before numba is first imported).
"""

from __future__ import annotations

import math
import weakref

import numpy as np
from numba import config as numba_config
from numba import cuda, float64, int64, uint64  # noqa: F401 - float64/int64 used by generated kernels

from ..ir import rng

#: numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1): kernels run as Python threads
SIM = bool(getattr(numba_config, "ENABLE_CUDASIM", False))

#: threads per block of elementwise and per-element kernels (the simulator runs each thread as
#: Python, about 100 us: it gets one block of exactly the elements)
TPB = 128
#: the GEMM tile (shared memory TILE x TILE per operand); in the simulator, whose threads of a
#: block are OS threads, a small one
TILE = 4 if SIM else 16

G = rng._G
D = np.uint64(0xD1B54A32D192ED03)
M1 = rng._M1
M2 = rng._M2
ONE = np.uint64(1)
LANE = np.uint64(0x100000000)
S11 = np.uint64(11)
S27 = np.uint64(27)
S30 = np.uint64(30)
S31 = np.uint64(31)


class _IEEEMath:
    """``math`` as a GPU computes it (IEEE: log(0) = -inf, sqrt(-1) = nan, exp(1000) = inf), for the
    simulator, where kernels are Python and ``math`` raises instead."""

    pi, inf = math.pi, math.inf

    def __getattr__(self, name):
        f = getattr(np, {"fabs": "abs"}.get(name, name))

        def call(*a):
            with np.errstate(all="ignore"):
                return f(*a)
        return call


#: the math module of generated kernels' scalar code
M = _IEEEMath() if SIM else math


class Pool:
    """Byte accounting of device allocations (see the module docstring)."""

    def __init__(self):
        self.live = self.peak = self.h2d = self.d2h = self.allocs = 0
        self._const = {}

    def reset(self):
        self.peak = self.live
        self.h2d = self.d2h = self.allocs = 0

    def _track(self, arr):
        nb = int(arr.nbytes)
        self.live += nb
        self.allocs += 1
        if self.live > self.peak:
            self.peak = self.live
        # the memory's owner: views of the array hold it (numba's device pointer, the simulator's numpy array)
        owner = getattr(arr, "_ary", None) if SIM else getattr(arr, "gpu_data", None)
        try:
            weakref.finalize(owner if owner is not None else arr, self._release, nb)
        except TypeError:  # an owner without weak references: the array itself
            weakref.finalize(arr, self._release, nb)
        return arr

    def _release(self, nb):
        self.live -= nb

    def empty(self, shape, dtype):
        return self._track(cuda.device_array(shape, dtype))

    def to_device(self, a):
        a = np.asarray(a)
        if not a.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
            a = a.copy()
        self.h2d += a.nbytes
        return self._track(cuda.to_device(a))

    def const(self, a):
        """A device copy of compile-time constant ``a``, made once (kept while ``a`` lives)."""
        got = self._const.get(id(a))
        if got is None or got[0] is not a:
            got = self._const[id(a)] = (a, cuda.to_device(a if a.flags.c_contiguous else a.copy()))
        return got[1]


POOL = Pool()


def is_device(x) -> bool:
    return hasattr(x, "copy_to_host")  # numba's device arrays (the simulator's too)


def dev(x):
    """``x`` on the device (a host array or scalar is copied there, counted in ``POOL.h2d``)."""
    if is_device(x):
        return x
    return POOL.to_device(np.asarray(x))


def host(x):
    """``x`` on the host (a device array is copied, counted in ``POOL.d2h``); tuples elementwise."""
    if isinstance(x, tuple):
        return tuple(host(v) for v in x)
    if is_device(x):
        POOL.d2h += int(x.nbytes)
        return x.copy_to_host()
    return x


def to_device(x):
    """A value computed on the host, moved to the device (tuples elementwise)."""
    if isinstance(x, tuple):
        return tuple(to_device(v) for v in x)
    return dev(x)


def grid(size):
    """``(blocks, threads)`` covering ``size`` elements."""
    t = min(TPB, max(int(size), 1))
    return (max(int(size), 1) + t - 1) // t, t


def copy_into(dst, src):
    """``dst[...] = src`` (same size), on the device."""
    n = int(np.prod(dst.shape, dtype=np.int64))
    if n:
        _copy1[grid(n)](dev(src).reshape(n), dst.reshape(n))


def dcopy(x):
    """A device copy of ``x`` (a host value: itself, copied)."""
    if not is_device(x):
        return np.array(x)
    out = POOL.empty(x.shape, x.dtype)
    copy_into(out, x)
    return out


def dconcat(a, b):
    """``a`` and ``b`` joined along their first axis, on the device."""
    out = POOL.empty((a.shape[0] + b.shape[0],) + tuple(a.shape[1:]), a.dtype)
    copy_into(out[:a.shape[0]], a)
    copy_into(out[a.shape[0]:], b)
    return out


_FLAG = []


def err_flag():
    """The device flag that take kernels set on an index out of range (one per process, zero
    unless a launch since the last :func:`check_flag` found one)."""
    if not _FLAG:
        _FLAG.append(cuda.to_device(np.zeros(1, np.int64)))
    return _FLAG[0]


def check_flag(flag, what):
    """Raise IndexError when a kernel set ``flag[0]`` (and clear it): one copy to the host per
    statement kernel that takes, after its last launch."""
    if flag.copy_to_host()[0]:
        flag.copy_to_device(np.zeros(1, np.int64))
        raise IndexError(what)


# -- device functions: the RNG of timerl.ir.rng --------------------------------------------------

def _dmix(z):
    z = z ^ (z >> S30)
    z = z * M1
    z = z ^ (z >> S27)
    z = z * M2
    return z ^ (z >> S31)


def _dunit(k, e):
    b = dmix(dmix(k + e * G) ^ D)
    return float64(b >> S11) * (1.0 / 9007199254740992.0)


def _dbits(kb, q):
    return dmix(dmix(kb + uint64(q) * G) ^ D)


if SIM:  # the simulator runs threads as Python on numpy scalars: uint64 wraparound is wanted, not warned of
    def dmix(z):
        with np.errstate(over="ignore"):
            return _dmix(z)

    def dunit(k, e):
        with np.errstate(over="ignore"):
            return _dunit(k, e)

    def dbits(kb, q):
        with np.errstate(over="ignore"):
            return _dbits(kb, q)
else:
    dmix = cuda.jit(device=True)(_dmix)
    dunit = cuda.jit(device=True)(_dunit)
    dbits = cuda.jit(device=True)(_dbits)


def point_key(key, coords):
    """The random op's key at a point (as :func:`timerl.ir.rng.keys`), on the host."""
    with np.errstate(over="ignore"):
        k = np.uint64(key)
        for c in coords:
            k = rng._mix(k + (np.uint64(c) + ONE) * G)
    return k


# -- shared kernels ------------------------------------------------------------------------------

@cuda.jit
def _copy1(x, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = x[i]


@cuda.jit
def gather1(x, idx, out):
    """out[q] = x[idx[q]] (movement ops through compile-time indices)."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = x[idx[i]]


@cuda.jit
def scatter1(x, idx, out):
    """out[idx[q]] = x[q] (one operand of a concat)."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[idx[i]] = x[i]


def _gemm_kernel(dt):
    @cuda.jit
    def gemm(a, b, out):
        """out[m, n] = a[m, k] @ b[k, n], TILE x TILE tiles through shared memory."""
        sa = cuda.shared.array((TILE, TILE), dt)
        sb = cuda.shared.array((TILE, TILE), dt)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        M, K = a.shape
        N = b.shape[1]
        acc = float64(0.0)
        for t0 in range(0, K, TILE):
            sa[ty, tx] = a[row, t0 + tx] if row < M and t0 + tx < K else 0
            sb[ty, tx] = b[t0 + ty, col] if col < N and t0 + ty < K else 0
            cuda.syncthreads()
            for kk in range(TILE):
                acc += sa[ty, kk] * sb[kk, tx]
            cuda.syncthreads()
        if row < M and col < N:
            out[row, col] = acc
    return gemm


_GEMM = {}


def gemm(a, b, out):
    """``out = a @ b`` for C-contiguous 2-d device arrays of one float dtype."""
    dt = np.dtype(out.dtype)
    k = _GEMM.get(dt)
    if k is None:
        from numba import float32
        k = _GEMM[dt] = _gemm_kernel(float32 if dt == np.float32 else float64)
    M, N = out.shape
    k[((N + TILE - 1) // TILE, (M + TILE - 1) // TILE), (TILE, TILE)](a, b, out)


# reductions of x[a, r, c] over r into out[a, c], one thread per (a, c), float64 accumulators
# (the CPU kernels' helpers, timerl/kernels/scalar.py, element for element); fn: 0 sum, 1 mean,
# 2 max, 3 min, 4 std, 5 logsumexp, 6 argmax (the first index of the maximum; the first NaN if any)
@cuda.jit
def reduce3(x, fn, out):
    i = cuda.grid(1)
    A, R, C = x.shape
    if i >= A * C:
        return
    a = i // C
    c = i - a * C
    if fn == 6:
        best = x[a, 0, c]
        bi = 0
        for r in range(1, R):
            v = x[a, r, c]
            if best == best and (v > best or v != v):
                best = v
                bi = r
        out[a, c] = bi
    elif fn <= 1:
        s = float64(0.0)
        for r in range(R):
            s += x[a, r, c]
        out[a, c] = s / R if fn == 1 else s
    elif fn <= 3:
        m = x[a, 0, c]
        for r in range(1, R):
            v = x[a, r, c]
            if m == m and (v != v or (v > m if fn == 2 else v < m)):
                m = v
        out[a, c] = m
    elif fn == 4:
        s = float64(0.0)
        for r in range(R):
            s += x[a, r, c]
        mu = s / R
        sq = float64(0.0)
        for r in range(R):
            d = x[a, r, c] - mu
            sq += d * d
        out[a, c] = math.sqrt(sq / R)
    else:
        m = -math.inf
        for r in range(R):
            v = float64(x[a, r, c])
            if v > m or v != v:
                m = v
        if math.isinf(m) or m != m:
            m = 0.0
        s = float64(0.0)
        for r in range(R):
            s += math.exp(float64(x[a, r, c]) - m)
        out[a, c] = math.log(s) + m


REDUCE_CODE = {"sum": 0, "mean": 1, "max": 2, "min": 3, "std": 4, "logsumexp": 5, "argmax": 6}

#: threads of a block reducing one output (:func:`reduce3_wide`)
RTPB = 8 if SIM else 256
#: at least this many elements per output (and at most ``WIDE_OUTPUTS`` outputs), a reduction uses one
#: block per output (:func:`reduce3_wide`) instead of one thread (:func:`reduce3`)
WIDE_R = 64 if SIM else 2048
WIDE_OUTPUTS = 4096


@cuda.jit(device=True)
def _block_combine(sh, v, fn):
    """Combine the block's values ``v`` (sum for fn 0/1/4/5-second-pass, max for 2/5-first, min for 3)
    through shared memory ``sh``; every thread gets the result."""
    t = cuda.threadIdx.x
    sh[t] = v
    cuda.syncthreads()
    s = RTPB // 2
    while s > 0:
        if t < s:
            a = sh[t]
            b = sh[t + s]
            if fn == 2:
                sh[t] = a if (a != a or a >= b) else b
            elif fn == 3:
                sh[t] = a if (a != a or a <= b) else b
            else:
                sh[t] = a + b
        cuda.syncthreads()
        s //= 2
    r = sh[0]
    cuda.syncthreads()
    return r


@cuda.jit
def reduce3_wide(x, fn, out):
    """As :func:`reduce3`, one block of ``RTPB`` threads per output (a long reduced axis). Sums are
    added in another order than the CPU's (a tree): equal within float64 rounding."""
    sh = cuda.shared.array(RTPB, float64)
    A, R, C = x.shape
    o = cuda.blockIdx.x
    a = o // C
    c = o - a * C
    t = cuda.threadIdx.x
    if fn == 2 or fn == 3:
        m = float64(x[a, 0, c])
        for r in range(t, R, RTPB):
            v = float64(x[a, r, c])
            if m == m and (v != v or (v > m if fn == 2 else v < m)):
                m = v
        m = _block_combine(sh, m, fn)
        if t == 0:
            out[a, c] = m
        return
    if fn == 5:
        m = -math.inf
        for r in range(t, R, RTPB):
            v = float64(x[a, r, c])
            if v > m or v != v:
                m = v
        m = _block_combine(sh, m, 2)
        if math.isinf(m) or m != m:
            m = 0.0
        s = float64(0.0)
        for r in range(t, R, RTPB):
            s += math.exp(float64(x[a, r, c]) - m)
        s = _block_combine(sh, s, 0)
        if t == 0:
            out[a, c] = math.log(s) + m
        return
    s = float64(0.0)
    for r in range(t, R, RTPB):
        s += x[a, r, c]
    s = _block_combine(sh, s, 0)
    if fn == 4:
        mu = s / R
        sq = float64(0.0)
        for r in range(t, R, RTPB):
            d = x[a, r, c] - mu
            sq += d * d
        sq = _block_combine(sh, sq, 0)
        if t == 0:
            out[a, c] = math.sqrt(sq / R)
        return
    if t == 0:
        out[a, c] = s / R if fn == 1 else s


def reduce(x3, fn, out2):
    """``out2[a, c]`` = reduction ``fn`` (a :data:`REDUCE_CODE`) of ``x3[a, :, c]``."""
    A, R, C = x3.shape
    if R >= WIDE_R and A * C <= WIDE_OUTPUTS and fn != 6:
        reduce3_wide[A * C, RTPB](x3, fn, out2)
    else:
        reduce3[grid(A * C)](x3, fn, out2)


@cuda.jit
def uniform1(kb, lo, hi, below, out):
    q = cuda.grid(1)
    if q < out.shape[0]:
        u = lo + (hi - lo) * dunit(kb, uint64(q))
        out[q] = u
        if out[q] >= hi:
            out[q] = below


@cuda.jit
def normal1(kb, mean, std, out):
    q = cuda.grid(1)
    if q < out.shape[0]:
        u1 = 1.0 - dunit(kb, uint64(q))
        u2 = dunit(kb, uint64(q) + LANE)
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        out[q] = mean + std * z


@cuda.jit
def categorical1(kb, logits, A, out):
    """Gumbel-max over rows of ``A`` logits (timerl.ir.rng's categorical draw)."""
    q = cuda.grid(1)
    if q < out.shape[0]:
        bi = 0
        best = -math.inf
        for a in range(A):
            u = dunit(kb, uint64(q * A + a)) + 0.5 / 9007199254740992.0
            val = float64(logits[q * A + a]) - math.log(-math.log(u))
            if a == 0 or (best == best and (val > best or val != val)):
                best = val
                bi = a
        out[q] = bi


#: threads per block of the permutation's ranking kernel
PTPB = 8 if SIM else 128


@cuda.jit
def _perm_bits(kb, bits):
    q = cuda.grid(1)
    if q < bits.shape[0]:
        bits[q] = dbits(kb, q)


@cuda.jit
def _perm_rank(bits, out):
    """out[rank of q] = q, the rank by (bits, index): the stable argsort, one thread per element,
    every element's bits streamed through shared memory in tiles (n^2 comparisons, in parallel)."""
    sh = cuda.shared.array(PTPB, uint64)
    n = bits.shape[0]
    t = cuda.threadIdx.x
    q = cuda.blockIdx.x * PTPB + t
    mine = bits[q] if q < n else uint64(0)
    rank = 0
    for start in range(0, n, PTPB):
        if start + t < n:
            sh[t] = bits[start + t]
        cuda.syncthreads()
        for j in range(min(PTPB, n - start)):
            b = sh[j]
            if b < mine or (b == mine and start + j < q):
                rank += 1
        cuda.syncthreads()
    if q < n:
        out[rank] = q


def permutation(kb, bits, out):
    """timerl.ir.rng's permutation draw (the stable argsort of one key's bits) into ``out``."""
    n = out.shape[0]
    _perm_bits[grid(n)](kb, bits)
    _perm_rank[(n + PTPB - 1) // PTPB, PTPB](bits, out)
