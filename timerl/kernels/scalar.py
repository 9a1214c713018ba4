"""Scalar helpers that statement kernels call (:mod:`timerl.kernels.statement`).

Compiled once per process and signature instead of once per kernel module; LLVM inlines them
into the kernels' loops, which still vectorize. Kernels alone call them, so they have no CPython
wrappers (``no_cpython_wrapper``: less to compile). The BLAS calls are intrinsics instead
(inlined where called: nothing compiled per signature).

Not cached on disk (no ``cache=True``): a kernel's cached code holds theirs, so a kernel loaded
from the cache needs none of them, and :func:`timerl.kernels.cpu.prewarm`'s worker processes
compiling new signatures of one helper at once raced on numba's index of its cache (each took
the same file number for its own signature; a later process loaded one signature's code for
another's and failed to type the kernel, seen in CI on 2026-12-04).
"""

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind, make_constant_slot

from ..ir import rng
from . import blas

G = rng._G
D = np.uint64(0xD1B54A32D192ED03)  # rng.bits' final xor
ONE = np.uint64(1)
LANE = np.uint64(0x100000000)


# timerl.ir.rng's splitmix64 finalizer itself, compiled for uint64 scalars
mix = numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)(rng._mix)


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def unit(k, e):
    # timerl.ir.rng: _unit(bits(k, .)) at element e (lane folded into e)
    b = mix(mix(k + e * G) ^ D)
    return np.float64(b >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(fastmath={"contract"}, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def tanh32(x):
    # Eigen's rational tanh for float32 (XLA uses the same): |err| < 3e-7, vectorizes. Its multiply-
    # adds may fuse (``contract``, as Eigen's own packet code does): 0.44 against 0.64 ns a value in
    # a 256x64 loop here, the largest error against float64 tanh 2.1e-7 against 2.7e-7
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
@numba.njit(error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def matmul_small(a, b, out):
    """out[m, n] = a[m, k] @ b[k, n], the output column innermost (contiguous rows of b: SIMD)."""
    out[:, :] = 0
    for i in range(a.shape[0]):
        for kk in range(a.shape[1]):
            aik = a[i, kk]
            for j in range(b.shape[1]):
                out[i, j] += aik * b[kk, j]
    return out


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
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


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
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


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def gather(xf, idx, outf):
    """outf[q] = xf[idx[q]] (movement ops: permute, expand, slice, through compile-time indices)."""
    for q in range(idx.shape[0]):
        outf[q] = xf[idx[q]]


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def move4(xf, base, n0, n1, n2, n3, s0, s1, s2, s3, outf):
    """``outf`` (row-major over ``n0 x n1 x n2 x n3``) ``= xf[base + j0 s0 + j1 s1 + j2 s2 + j3 s3]``:
    a movement op (expand, permute, slice) whose element map is affine, read through strides instead
    of a compile-time index array (:meth:`timerl.kernels.statement.KernelGen.movement`); the innermost
    loop vectorizes for strides 0 (a broadcast) and 1 (a copy)."""
    q = 0
    for j0 in range(n0):
        for j1 in range(n1):
            for j2 in range(n2):
                a = base + j0 * s0 + j1 * s1 + j2 * s2
                for j3 in range(n3):
                    outf[q + j3] = xf[a + j3 * s3]
                q += n3


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
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


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def copy1(xf, outf):
    """outf[:] = xf (a member into the caller's array; numba's slice assignment compiles about a
    second of error-message formatting)."""
    for q in range(xf.shape[0]):
        outf[q] = xf[q]


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def scatter(xf, idx, outf):
    """outf[idx[q]] = xf[q] (one operand of a concat)."""
    for q in range(idx.shape[0]):
        outf[idx[q]] = xf[q]


# reductions of x[a, r, c] over r into out[a, c], float64 accumulators; one helper per kind of
# reduction (a generic one branching on the op at run time compiled about four times as much per
# signature). With C == 1 a scalar accumulator along r; with C > 1 the inner loop runs along c
# (contiguous rows, vectorized), accumulating one row of C at a time.
@numba.njit(error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def sum3(x, div, out):
    """The sum over r divided by ``div`` (1: sum, R: mean)."""
    A, R, C = x.shape
    if C == 1:
        for a in range(A):
            s = 0.0
            for r in range(R):
                s += x[a, r, 0]
            out[a, 0] = s / div
        return
    for a in range(A):
        acc = np.zeros(C)
        for r in range(R):
            for c in range(C):
                acc[c] += x[a, r, c]
        for c in range(C):
            out[a, c] = acc[c] / div


@numba.njit(error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def std3(x, out):
    """The standard deviation over r (two passes: the mean, by :func:`sum3` in float64, then the
    squared deviations)."""
    A, R, C = x.shape
    mu = np.empty((A, C))
    sum3(x, R, mu)
    for a in range(A):
        sq = np.zeros(C)
        for r in range(R):
            for c in range(C):
                d = x[a, r, c] - mu[a, c]
                sq[c] += d * d
        for c in range(C):
            out[a, c] = math.sqrt(sq[c] / R)


@numba.njit(error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def maxmin3(x, ismax, out):
    """The maximum (``ismax``) or minimum over r; NaN propagates like numpy."""
    A, R, C = x.shape
    if C == 1:
        for a in range(A):
            m = x[a, 0, 0]
            for r in range(1, R):
                v = x[a, r, 0]
                if m == m and (v != v or (v > m if ismax else v < m)):
                    m = v
            out[a, 0] = m
        return
    for a in range(A):
        acc = np.zeros(C)
        for c in range(C):
            acc[c] = x[a, 0, c]
        for r in range(1, R):
            for c in range(C):
                v = x[a, r, c]
                m = acc[c]
                if m == m and (v != v or (v > m if ismax else v < m)):
                    acc[c] = v
        for c in range(C):
            out[a, c] = acc[c]


@numba.njit(error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def lse3(x, out):
    """log(sum(exp(x))) over r, shifted by the maximum (0 where that is not finite); NaN propagates."""
    A, R, C = x.shape
    if C == 1:
        for a in range(A):
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
        return
    for a in range(A):
        m = np.full(C, -np.inf)
        for r in range(R):
            for c in range(C):
                v = x[a, r, c]
                if v > m[c] or v != v:
                    m[c] = v
        for c in range(C):
            if not np.isfinite(m[c]):
                m[c] = 0.0
        acc = np.zeros(C)
        for r in range(R):
            for c in range(C):
                acc[c] += math.exp(np.float64(x[a, r, c]) - m[c])
        for c in range(C):
            out[a, c] = math.log(acc[c]) + m[c]


@numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
def permutation(k, out):
    """timerl.ir.rng's permutation draw: the stable argsort of one key's bits, as an insertion sort
    of runs of 16 and a bottom-up merge of the (key, index) pairs (the order numpy's stable argsort
    gives; numba's own argsort took about a second to compile in every process that compiled a
    shuffle, this half of that)."""
    n = out.shape[0]
    kb, kd = np.empty(n, np.uint64), np.empty(n, np.uint64)
    ib, idd = np.empty(n, np.int64), np.empty(n, np.int64)
    for q in range(n):
        x = mix(mix(k + np.uint64(q) * G) ^ D)
        j = q  # insertion into the sorted run of 16 it belongs to, after its equal keys
        while j % 16 != 0 and kb[j - 1] > x:
            kb[j], ib[j] = kb[j - 1], ib[j - 1]
            j -= 1
        kb[j], ib[j] = x, q
    w = 16
    while w < n:
        for lo in range(0, n, 2 * w):
            mid, hi = min(lo + w, n), min(lo + 2 * w, n)
            i, j = lo, mid
            for o in range(lo, hi):  # the left run first among equal keys (stable), without a branch
                a, b = min(i, mid - 1), min(j, hi - 1)
                right = (j < hi) & ((i >= mid) | (kb[b] < kb[a]))
                kd[o] = kb[b] if right else kb[a]
                idd[o] = ib[b] if right else ib[a]
                j += right
                i += 1 - right
        kb, kd, ib, idd = kd, kb, idd, ib
        w *= 2
    for q in range(n):  # not out[:] = ib: numba's slice assignment compiles its shape-mismatch message
        out[q] = ib[q]


# BLAS as intrinsics: inlined where called, nothing compiled per signature (numba's np.dot compiles
# about 0.3 s per combination of operand layouts and read-only flags, one per matmul of a kernel)
def _ptr(builder, arr):
    return builder.bitcast(arr.data, ir.IntType(8).as_pointer())


blas.register()


def _gemm(ta, tb):
    @intrinsic
    def gemm(typingctx, a, b, out):
        """``out[m, n] = op(a) @ op(b)``, op a transpose for ``ta``/``tb`` (of C-contiguous matrices:
        ``x.T``, an F-ordered view, is passed as ``x`` and a transposition, as numpy and numba do).
        numpy's own ``cblas_?gemm`` (:mod:`timerl.kernels.blas`) where found, else numba's BLAS."""
        if not all(isinstance(t, types.Array) and t.ndim == 2 and t.layout == "C" for t in (a, b, out)):
            return None
        if not a.dtype == b.dtype == out.dtype or a.dtype not in (types.float32, types.float64):
            return None

        def codegen(context, builder, sig, args):
            x, y, c = (make_array(t)(context, builder, v) for t, v in zip(sig.args, args))
            (_, ka), (_, kb), (m, n) = (cgutils.unpack_tuple(builder, v.shape) for v in (x, y, c))
            k = cgutils.unpack_tuple(builder, x.shape)[0] if ta else ka
            dt = sig.args[0].dtype
            intp = context.get_value_type(types.intp)
            if blas.NUMPY:  # cblas, row-major: C = op(A) @ op(B), lda / ldb the stored matrices' row lengths
                fl, i32 = context.get_value_type(dt), ir.IntType(32)
                fp = fl.as_pointer()
                fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, intp, intp, intp, fl, fp, intp, fp, intp,
                                                       fl, fp, intp])
                fn = cgutils.get_or_insert_function(builder.module, fnty, blas.SYMBOLS[str(dt)])
                op = {False: ir.Constant(i32, blas.NO_TRANS), True: ir.Constant(i32, blas.TRANS)}
                builder.call(fn, (ir.Constant(i32, blas.ROW_MAJOR), op[ta], op[tb], m, n, k, ir.Constant(fl, 1.0),
                                  x.data, ka, y.data, kb, ir.Constant(fl, 0.0), c.data, n))
                return context.get_dummy_value()
            ensure_blas()
            ll_char = ir.IntType(8)
            vp = ll_char.as_pointer()
            fnty = ir.FunctionType(ir.IntType(32), [ll_char, ll_char, ll_char, intp, intp, intp,
                                                    vp, vp, intp, vp, intp, vp, vp, intp])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
            alpha = make_constant_slot(context, builder, dt, 1.0)
            beta = make_constant_slot(context, builder, dt, 0.0)
            # numba's call_xxgemm for a C-ordered result: c.T = op(b).T @ op(a).T in BLAS's column order
            res = builder.call(fn, (ir.Constant(ll_char, ord(get_blas_kind(dt))),
                                    ir.Constant(ll_char, ord("t" if tb else "n")),
                                    ir.Constant(ll_char, ord("t" if ta else "n")), n, m, k,
                                    builder.bitcast(alpha, vp), _ptr(builder, y), kb, _ptr(builder, x), ka,
                                    builder.bitcast(beta, vp), _ptr(builder, c), n))
            check_blas_return(context, builder, res)
            return context.get_dummy_value()

        return types.void(a, b, out), codegen
    return gemm


gemm_nn, gemm_tn, gemm_nt, gemm_tt = _gemm(False, False), _gemm(True, False), _gemm(False, True), _gemm(True, True)


@intrinsic
def gemv_vm(typingctx, v, a, out):
    """``out[n] = v[m] @ a[m, n]`` (a C-contiguous), as numba's np.dot(vector, matrix) calls BLAS."""
    if not (isinstance(v, types.Array) and v.ndim == 1 and isinstance(a, types.Array) and a.ndim == 2
            and a.layout == "C" and isinstance(out, types.Array) and out.ndim == 1 and v.layout in "CF"
            and out.layout in "CF" and v.dtype == a.dtype == out.dtype and a.dtype in (types.float32, types.float64)):
        return None

    def codegen(context, builder, sig, args):
        ensure_blas()
        x, y, c = (make_array(t)(context, builder, v) for t, v in zip(sig.args, args))
        rows, cols = cgutils.unpack_tuple(builder, y.shape)
        ll_char = ir.IntType(8)
        intp = context.get_value_type(types.intp)
        vp = ll_char.as_pointer()
        fnty = ir.FunctionType(ir.IntType(32), [ll_char, ll_char, intp, intp, vp, vp, intp, vp, vp, vp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemv")
        dt = sig.args[1].dtype
        alpha = make_constant_slot(context, builder, dt, 1.0)
        beta = make_constant_slot(context, builder, dt, 0.0)
        # numba's call_xxgemv (dot_3_vm, a C-ordered matrix: no transposition, m = columns, n = rows)
        res = builder.call(fn, (ir.Constant(ll_char, ord(get_blas_kind(dt))), ir.Constant(ll_char, ord("n")),
                                cols, rows, builder.bitcast(alpha, vp), _ptr(builder, y), cols,
                                _ptr(builder, x), builder.bitcast(beta, vp), _ptr(builder, c)))
        check_blas_return(context, builder, res)
        return context.get_dummy_value()

    return types.void(v, a, out), codegen
