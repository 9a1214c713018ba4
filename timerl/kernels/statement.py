"""Statement kernels: the ops of one group statement compiled into one ``numba.njit`` function.

A group statement runs its members at one point. The members this module can render
(static shapes; elementwise ops, matmul, reductions, take, one-hot and movement ops;
see :func:`renderable`) are cut into *segments*: maximal sets, in an order that keeps
every dependence, not separated by a member run by the interpreter (a UDF, a sink, a
placeholder, a read of another statement's store). Each segment becomes one function::

    kernel(x0, x1, ..., c0, c1, ..., o0, o1, ...) -> (out0, out1, ...)

whose parameters are the segment's operands from outside it (C-contiguous arrays of their
static shape; a 0-d value as an array of shape ``(1,)``) and compile-time constants (gather
indices of movement ops), and whose results are the members read outside the segment:
written into the caller's arrays ``o0, o1, ...`` (the rows of the block stores that keep them:
an elementwise run computes such a member in place), or returned as fresh arrays. Members
read only inside the segment never leave it: runs of elementwise
ops of one shape are one loop nest over scalars (NumPy broadcasting: each operand indexed
by its own shape), each a small function of its own so that LLVM vectorizes it (a run of
at most ``INLINE_SIZE`` elements stays in the kernel: nothing to vectorize, and a function
costs numba about 0.15 s to compile); matmuls call BLAS (the gemm numba's ``np.dot`` calls,
through :mod:`~timerl.kernels.scalar`'s intrinsics; tiny ones an inline loop, huge ones
numpy's matmul); reductions accumulate in float64 (one helper per kind of reduction; column
sums of wide matrices through BLAS).

Compile time: numba compiles each function (kernel, run, helper signature, numpy overload) on
its own, about 0.1-0.3 s each, and optimizes a caller's module again with its callees linked
in. The kernels avoid what compiles much and gains nothing at run time: numba's ``np.dot``
(one implementation per combination of operand layouts and read-only flags), slice
assignments (their error message formatting), CPython wrappers of functions only kernels
call, and a generic reduction branching on its op.

Transcendentals: numba lowers ``math.tanh`` on float32 to scalar libm (about 20 ns per
element here, against 0.44 ns for numpy's SIMD loop; pip's llvmlite has no SVML), so float32
``tanh`` (and ``sigmoid``) use the rational approximation of Eigen/XLA in plain arithmetic,
which vectorizes (0.5 ns per element, max error 3.6e-7 or 6 ulp against numpy).
float64 keeps libm.

The source names values by their position, so equal statements share one compiled
kernel; :func:`timerl.kernels.cpu.load` caches it on disk keyed by the source.
"""

from __future__ import annotations

import hashlib
import os
import re

import numpy as np

from . import blas
from ..ir import registry
from ..ir.ops import Op, broadcast
from ..ir.ops import nbytes as ops_nbytes

FLOATS = (np.dtype("float32"), np.dtype("float64"))
#: with numba's BLAS (scipy's, called through numba's ``xxgemm`` wrapper: numpy's OpenBLAS not
#: found), a float matmul of at least this many multiply-adds calls BLAS; fewer, an inline loop.
#: Measured here (one thread, float32, us): 8x64x64 inline 6.7 / BLAS 2.1; 256x64x64 198 / 27.5;
#: 256x64x2 53.6 / 2.9; 8x4x64 1.2 / 1.5. numpy's own ``cblas_sgemm`` called from the kernel
#: (:mod:`timerl.kernels.blas`) wins at every size (2026-12-06, in a numba loop of 20,000 calls,
#: inline / BLAS: 3x5x1 0.040 / 0.023, 8x4x64 0.18 / 0.05, 8x64x1 0.92 / 0.07, 8x64x2 1.00 / 0.08,
#: 256x64x1 27.0 / 0.79: the inline loop's sum over k is one chain of dependent adds), and is then
#: used for every float matmul
BLAS_MACS = 1024
#: an elementwise run of more elements is a function of its own (vectorized by LLVM); of at most
#: this many, inline in the kernel (see Render.elementwise_run)
INLINE_SIZE = 16
#: an elementwise run's function: called only by its kernel, whose cached code holds the run's code
#: (so no cache of its own), and never from Python (so no CPython or C wrappers to compile)
RUN_DECORATOR = ('@numba.njit(fastmath=False, error_model="numpy", boundscheck=False, '
                 'no_cpython_wrapper=True, no_cfunc_wrapper=True)')

# The scalar templates are the registry's (``OpDef.expr``, checked against numpy there, NaN, inf and
# signed zeros included); the kernels replace float32 tanh (and sigmoid, which numpy computes through
# tanh) by the vectorizable rational form
INT_ARITH = frozenset({"add", "sub", "mul", "minimum", "maximum", "neg", "abs"})  # int64 = numpy's, no division

# numba's on-disk cache of a kernel does not notice a change to the helpers it calls (their code is
# compiled into the kernel's): the helpers' source hash is part of every kernel's source
# the helpers are hashed, not imported: numba loads only when a kernel is compiled (the numpy backend never)
_HELPERS = hashlib.sha1(open(os.path.join(os.path.dirname(__file__), "scalar.py"), "rb").read()).hexdigest()[:12]
PRELUDE = f"""# timerl statement kernel; helpers timerl/kernels/scalar.py {_HELPERS}; BLAS {blas.NAME}
import math
import numpy as np
import numba
from timerl.kernels.scalar import (G, LANE, ONE, copy1, gather, gemm_nn, gemm_nt, gemm_tn, gemm_tt,  # noqa: F401
                                   gemv_vm, lse3, matmul_small, maxmin3, mix, move4, permutation, scatter, std3,
                                   sum3, take3, take_along3, tanh32, transpose2, unit)
"""


def _reduce3(fn, x, count, out) -> str:
    """The call of scalar's helper reducing ``x`` (of shape (pre, count, post)) into ``out``."""
    return {"sum": f"sum3({x}, 1, {out})", "mean": f"sum3({x}, {count}, {out})", "max": f"maxmin3({x}, True, {out})",
            "min": f"maxmin3({x}, False, {out})", "std": f"std3({x}, {out})", "logsumexp": f"lse3({x}, {out})"}[fn]


REDUCE3 = ("sum", "mean", "max", "min", "std", "logsumexp")  # reduced by scalar's sum3, maxmin3, std3, lse3


def st(shape) -> tuple:
    """The storage shape inside a kernel: a 0-d value is an array of shape (1,)."""
    return tuple(int(s) for s in shape) if len(shape) else (1,)


def _static(shape) -> bool:
    return all(isinstance(s, int) for s in shape)


def _ins(pdg, n):
    return [(p, e, pdg.rec(p).shapes[e.out], np.dtype(pdg.rec(p).dtypes[e.out])) for p, e in pdg.inputs(n)]


def const_operands(pdg, n):
    """Per operand of node ``n``: the value of a constant without dims, else None."""
    return [pdg.rec(p).attrs["value"] if pdg.rec(p).op is Op.CONST and not pdg.rec(p).domain else None
            for p, _ in pdg.inputs(n)]


def _two(v) -> bool:
    return v is not None and np.size(v) > 0 and bool(np.all(np.asarray(v) == 2))


def scalar_template(node, in_dtypes, consts=()):
    """The scalar expression of an elementwise node over its operands, or None. ``consts``: the
    operands' constant values (:func:`const_operands`) where the expression depends on them: a float
    ``x ** 2`` is ``x * x``, which is numpy's power bit for bit (numba's float32 power is not) and
    needs no call of ``pow`` (PPO's value loss: 20-40 ns a value, not vectorized)."""
    op, fn, dt = node.op, node.attrs.get("fn"), np.dtype(node.dtype)
    if op is Op.BINARY and fn == "pow" and dt in FLOATS and in_dtypes[0] == dt and len(consts) == 2 \
            and _two(consts[1]):
        return "({0} * {0})"
    if op is Op.UNARY or op is Op.BINARY:
        floats = dt in FLOATS and all(d == dt for d in in_dtypes)
        if fn == "tanh" and floats and dt == np.float32:
            return "tanh32({0})"
        if fn == "sigmoid" and floats:
            t = "tanh32(np.float32(0.5) * {0})" if dt == np.float32 else "math.tanh(0.5 * {0})"
            return f"(0.5 * ({t} + 1.0))"
        d = registry.fn_of(op, fn)
        if d.expr is None:
            return None
        if "bool_result" in d.traits:  # comparisons and logical ops: numba compares mixed types as numpy does
            ok = all(x == np.bool_ for x in in_dtypes) if "bool_operands" in d.traits else all(
                x.kind in "fiub" for x in in_dtypes)
            return d.expr if dt == np.bool_ and ok else None
        if dt in FLOATS and all(x in FLOATS for x in in_dtypes):
            return d.expr
        if fn in INT_ARITH and dt == np.int64 and all(x == np.int64 for x in in_dtypes):
            return d.expr
        return None
    if op is Op.WHERE:
        return "({1} if {0} else {2})" if in_dtypes[0] == np.bool_ else None
    if op is Op.CAST:
        if dt == np.bool_:
            return "({0} != 0)"
        if dt.kind == "f" or (dt.kind in "iu" and in_dtypes[0].kind in "iub"):
            return "{0}"
        return None
    return None


def broadcasts_to(shape, target) -> bool:
    """Whether an operand of ``shape`` broadcasts to ``target`` (NumPy's rules)."""
    return all(isinstance(s, int) for s in shape) and broadcast([shape, target]) == tuple(target)


def renderable(pdg, n, dims=None) -> bool:
    """Whether member ``n`` can be computed inside a statement kernel (of a statement over ``dims``)."""
    node = pdg.rec(n)
    if len(node.shapes) != 1 or not _static(node.shape):
        return False
    ins = _ins(pdg, n)
    if not all(_static(s) for _, _, s, _ in ins):
        return False
    dt = np.dtype(node.dtype)
    if dt not in FLOATS and dt not in (np.dtype(np.int64), np.dtype(np.bool_)):
        return False
    op = node.op
    if op in (Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST):
        if not all(broadcasts_to(tuple(s), tuple(node.shape)) for _, _, s, _ in ins):
            return False
        return scalar_template(node, [d for *_, d in ins]) is not None
    if op is Op.MATMUL:
        (_, _, sa, da), (_, _, sb, db) = ins
        # a of any rank (batch dims merged into its rows) against b of rank 1 or 2
        return (dt in FLOATS and da == dt and db == dt and 1 <= len(sa) and (1 <= len(sb) <= 2)
                and (len(sa) <= 2 or len(sb) == 2) and all(int(s) > 0 for s in tuple(sa) + tuple(sb)))
    if op is Op.REDUCE:
        fn = node.attrs["fn"]
        _, _, sx, dx = ins[0]
        if not len(sx) or dx not in FLOATS or fn not in ("sum", "mean", "max", "min", "std", "logsumexp", "argmax"):
            return False
        axes = node.attrs["axis"]
        if any(int(sx[a]) == 0 for a in axes) or not axes:
            return False
        if fn == "argmax":
            return node.attrs.get("flat") is False and len(axes) == 1 and dt == np.int64
        return dt == dx
    if op is Op.TAKE:
        (_, _, sx, dx), (_, _, si, di) = ins
        if di != np.int64 or dx != dt or not len(sx):
            return False
        if node.attrs["along"]:
            return len(si) == len(sx) and all(
                a == node.attrs["axis"] or int(si[a]) in (1, int(node.shape[a])) and int(sx[a]) in (1, int(node.shape[a]))
                for a in range(len(sx)))
        return True
    if op is Op.ONE_HOT:
        return ins[0][3] == np.int64
    if op is Op.RANDOM:
        if dims is None or not {d.name for d in node.domain} <= set(dims):
            return False
        dist = node.attrs["dist"]
        if dist == "categorical":
            return dt == np.int64 and ins[0][3] in FLOATS
        if dist == "permutation":
            return dt == np.int64 and len(node.shape) == 1
        return dist in ("uniform", "normal") and dt in FLOATS
    if op is Op.RESHAPE:
        return ins[0][3] == dt
    if op in (Op.PERMUTE, Op.EXPAND, Op.SLICE, Op.CONCAT):
        if any(d != dt for *_, d in ins):
            return False
        try:
            gathers(pdg, n, probe=True)
        except Exception:  # noqa: BLE001 - an index numpy rejects: the interpreter reports it at run time
            return False
        return True
    return False


def gathers(pdg, n, probe=False) -> list:
    """Compile-time index arrays of a movement op: per input, where its elements go (CONCAT) or,
    for the single input, which input element each output element reads. ``probe``: only check
    that numpy accepts the op's index and shapes (on zero-stride arrays: nothing allocated)."""
    node = pdg.rec(n)
    ins = _ins(pdg, n)
    out = tuple(int(s) for s in node.shape)
    size = int(np.prod(out, dtype=np.int64))
    if node.op is Op.CONCAT:
        dst = np.broadcast_to(np.int64(0), out) if probe else np.arange(size, dtype=np.int64).reshape(out)
        ax, at, res = node.attrs["axis"], 0, []
        for _, _, s, _ in ins:
            s = tuple(int(x) for x in s)
            if len(s) != len(out) or any(s[a] != out[a] for a in range(len(out)) if a != ax):
                raise ValueError("concat operands broadcast")
            key = (slice(None),) * ax + (slice(at, at + s[ax]),)
            if not probe:
                res.append(np.ascontiguousarray(dst[key]).ravel())
            at += s[ax]
        return res
    sx = tuple(int(x) for x in ins[0][2])
    if probe:
        src = np.broadcast_to(np.int64(0), sx)
    else:
        src = np.arange(int(np.prod(sx, dtype=np.int64)), dtype=np.int64).reshape(sx)
    if node.op is Op.PERMUTE:
        g = np.transpose(src, node.attrs["axes"])
    elif node.op is Op.EXPAND:
        g = np.broadcast_to(src.reshape((1,) * (len(out) - len(sx)) + sx), out)
    else:
        g = src[tuple(node.attrs["key"])]
    if tuple(g.shape) != out:
        raise ValueError("movement shape")
    return [] if probe else [np.ascontiguousarray(g).ravel()]


#: the most axes :func:`strides` merges a movement into (``scalar.move4``'s loop nest)
MOVE_AXES = 4


def strides(idx, shape):
    """``(base, ((n, s), ...))`` when the index array ``idx`` of a movement op with output ``shape``
    (which input element each output element reads, row-major) is affine,
    ``idx[j] = base + sum_a j_a s_a``, on at most :data:`MOVE_AXES` axes once axes of length 1 are
    dropped and neighbours that step as one are merged (``s_a == n_b s_b``); else None (the
    op gathers through ``idx``). Expand, permute and basic slicing are always affine."""
    shape = tuple(int(x) for x in shape)
    g = np.asarray(idx, dtype=np.int64).reshape(shape)
    if g.size == 0:
        return None
    base = int(g.flat[0])
    axes, expect = [], np.full(shape, base, dtype=np.int64)
    for a, n in enumerate(shape):
        if n > 1:  # the step along axis a, and what it adds at every point
            before, after = (0,) * a, (0,) * (len(shape) - a - 1)
            step = int(g[before + (1,) + after]) - base
            axes.append((n, step))
            expect = expect + (np.arange(n, dtype=np.int64) * step).reshape((1,) * a + (n,) + (1,) * len(after))
    if not np.array_equal(expect, g):
        return None
    merged = []
    for n, st_ in axes:
        if merged and merged[-1][1] == n * st_:
            merged[-1] = (merged[-1][0] * n, st_)
        else:
            merged.append((n, st_))
    if len(merged) > MOVE_AXES:
        return None
    return base, tuple([(1, 0)] * (MOVE_AXES - len(merged)) + merged)


def operand_index(shape, target, names) -> str:
    """Index of an operand of ``shape`` at the loop point ``names`` over ``target`` (NumPy's
    broadcasting: ranks aligned on the right, index 0 along a stretched axis)."""
    if not len(shape):
        return "0"
    off = len(target) - len(shape)
    return ", ".join("0" if (int(shape[a]) == 1 and int(target[a + off]) != 1) else names[a + off]
                     for a in range(len(shape)))


class Render:
    """The source of one segment's kernel."""

    def __init__(self, pdg, seg, returned, outs=()):
        self.pdg, self.seg, self.returned, self.outs = pdg, list(seg), list(returned), list(outs)
        self.inplace = set()  # members of ``outs`` computed directly in their output parameter
        self.local = {n: j for j, n in enumerate(self.seg)}
        self.ext, self.extkey = [], {}  # [(producer, edge, shape, dtype)]
        self.consts = []  # compile-time arrays passed as parameters
        self.dims = []  # point coordinates passed as parameters (random draws), by dim name
        self.keys = []  # random ops whose base key (of the seed and the op's stream) is a parameter
        self.lines = []
        self.helpers = []  # module-level functions the kernel calls (its elementwise loop nests)
        self.tmp = 0
        self.tview = {}  # transposed views (read by matmuls only): name -> the C-ordered matrix viewed
        # a matmul's product written into the array of the member of a later loop nest that
        # consumes it (:meth:`_epilogue`): that member -> the matmul; its loop nest then reads the
        # product from the member's own array, element by element before writing it
        self.into = {}
        self.alias = {}  # the matmul's name -> that member's (the loop nest reads one array)
        self._plan = None

    # names -------------------------------------------------------------------------
    def arg(self, p, e):
        """The array name of operand (p, e) with its shape and dtype."""
        if p in self.local:
            j = self.local[p]
            node = self.pdg.rec(p)
            return self.alias.get(f"v{j}", f"v{j}"), tuple(node.shape), np.dtype(node.dtype)
        key = (p, e.out)
        if key not in self.extkey:
            self.extkey[key] = len(self.ext)
            pn = self.pdg.rec(p)
            self.ext.append((p, e, tuple(pn.shapes[e.out]), np.dtype(pn.dtypes[e.out])))
        k = self.extkey[key]
        return f"x{k}", self.ext[k][2], self.ext[k][3]

    def const(self, arr):
        self.consts.append(np.ascontiguousarray(arr))
        return f"c{len(self.consts) - 1}"

    def fresh(self):
        self.tmp += 1
        return f"w{self.tmp}"

    def emit(self, line, depth=1):
        self.lines.append("    " * depth + line)

    def loops(self, shape, depth=1, prefix="j"):
        """Loops over ``shape`` (one trip for a 0-d shape); the index names of its axes."""
        names = []
        for a, s in enumerate(st(shape)):
            nm = f"{prefix}{a}"
            self.emit(f"for {nm} in range({s}):", depth + a)
            names.append(nm)
        return names[:len(shape)], depth + len(st(shape))

    # ops ---------------------------------------------------------------------------
    def elementwise_run(self, run, needed):
        """One loop nest over the run's common shape; members needed later stored as arrays."""
        node0 = self.pdg.rec(run[0])
        target = tuple(node0.shape)
        size = int(np.prod(st(target)))
        for n in run:
            if n in self.into:  # its array exists: a matmul wrote its product there (_epilogue)
                continue
            if n in self.outs:  # straight into the caller's array
                self.emit(f"v{self.local[n]} = o{self.outs.index(n)}")
                self.inplace.add(n)
            elif n in needed:
                self.emit(f"v{self.local[n]} = np.empty({st(target)}, np.{np.dtype(self.pdg.rec(n).dtype).name})")
        # flat when every array operand has the run's shape (or is 0-d)
        opers = [self.arg(p, e) for n in run for p, e in self.pdg.inputs(n) if p not in run]
        flat = all(tuple(s) == target or not len(s) for _, s, _ in opers)
        # the loop nest goes to a function of its own (with the runs next to it: Render.call_runs),
        # called by the kernel: there LLVM vectorizes it (checking at run time that outputs and
        # operands do not overlap); inline in a kernel of many arrays it stays scalar (a 256x64
        # tanh run: 10 us against 230)
        params = list(dict.fromkeys([nm for nm, _, _ in opers] + [f"v{self.local[n]}" for n in run if n in needed]))
        body_start = len(self.lines)
        if flat and len(target) > 1:
            # a matmul's product read from a member's own array (_epilogue) is read through that
            # member's flat view: one pointer read and written at the same index, which LLVM's
            # overlap check at the loop's entry lets through
            views = {f"v{self.local[n]}": f"v{self.local[n]}f" for n in run if n in needed}
            for nm, s, _ in opers:
                if len(s) and nm not in views:
                    views[nm] = f"{nm}f{self.fresh()}"
                    self.emit(f"{views[nm]} = {nm}.reshape({size})")
            for n in run:
                if n in needed:
                    self.emit(f"v{self.local[n]}f = v{self.local[n]}.reshape({size})")
        # a run of few elements stays in the kernel (a function of its own costs numba about 0.2 s
        # to compile and gains nothing from SIMD there); one element: no loop, constant indices
        alone = size > INLINE_SIZE
        if size == 1:
            names, depth = ["0"] * len(st(target)), 1
        elif flat:
            self.emit(f"for j0 in range({size}):")
            names, depth = ["j0"], 2
        else:
            names, depth = self.loops(target)
        inrun = {}

        def ref(nm, s):
            if flat:
                return f"{nm}[0]" if not len(s) else (f"{views[nm]}[{names[0]}]" if len(target) > 1 else f"{nm}[{names[0]}]")
            return f"{nm}[{operand_index(s, target, names)}]"

        for n in run:
            node = self.pdg.rec(n)
            args, dts = self.scalar_args(n, inrun, ref)
            t = f"t{self.local[n]}"
            expr = scalar_template(node, dts, const_operands(self.pdg, n)).format(*args)
            dt = np.dtype(node.dtype)
            self.emit(f"{t} = {'np.bool_' if dt == np.bool_ else 'np.' + dt.name}({expr})", depth)
            inrun[n] = t
            if n in needed:
                tgt = (f"v{self.local[n]}f[{names[0]}]" if len(target) > 1 else f"v{self.local[n]}[{names[0]}]") if flat \
                    else f"v{self.local[n]}[{', '.join(names) or '0'}]"
                self.emit(f"{tgt} = {t}", depth)
        if not alone:
            return None
        body = self.lines[body_start:]
        del self.lines[body_start:]
        return params, body

    def scalar_args(self, n, inrun, ref):
        """``(operand expressions, dtypes)`` of elementwise member ``n`` in a loop nest: a member
        computed earlier in the nest by its scalar ``inrun[p]``, an array operand as ``ref(name,
        shape)`` formats it."""
        args, dts = [], []
        for p, e in self.pdg.inputs(n):
            if p in inrun:
                args.append(inrun[p])
                dts.append(np.dtype(self.pdg.rec(p).dtype))
                continue
            nm, s, d = self.arg(p, e)
            dts.append(d)
            args.append(ref(nm, s))
        return args, dts

    def call_runs(self, group):
        """One function of the loop nests ``group`` (consecutive runs: [(params, body)]), called here."""
        if not group:
            return
        params = list(dict.fromkeys(p for ps, _ in group for p in ps))
        name = f"run{len(self.helpers)}"
        self.helpers += ["", "", RUN_DECORATOR, f"def {name}({', '.join(params)}):"] + [
            ln for _, body in group for ln in body]
        self.emit(f"{name}({', '.join(params)})")
        group.clear()

    def matmul(self, n):
        node = self.pdg.rec(n)
        (pa, ea), (pb, eb) = self.pdg.inputs(n)
        a, sa, _ = self.arg(pa, ea)
        b, sb, _ = self.arg(pb, eb)
        dt = np.dtype(node.dtype).name
        k = int(sa[-1])
        m = int(np.prod(sa[:-1], dtype=np.int64)) if len(sa) >= 2 else 1
        nn = int(sb[1]) if len(sb) == 2 else 1
        v = f"v{self.local[n]}"
        if len(sa) > 2:  # batch dims against a shared matrix: one product over the rows merged
            a2 = f"np.ascontiguousarray({a}).reshape(({m}, {k}))"
        else:
            a2 = a if len(sa) == 2 else f"{a}.reshape((1, {k}))"
        b2 = b if len(sb) == 2 else f"{b}.reshape(({k}, 1))"
        if np.dtype(node.dtype) in FLOATS and m * k * nn and (blas.NUMPY or m * k * nn >= BLAS_MACS):
            # BLAS (numpy's own where found: timerl.kernels.blas); a transposed view passed as its matrix
            # and a flag
            ga, ta = (self.tview[a], "t") if a in self.tview else (a2, "n")
            gb, tb = (self.tview[b], "t") if b in self.tview else (b2, "n")
            into = self._epilogue(n)
            if into is not None:  # the product goes where the loop nest reading it writes its result
                u = f"v{self.local[into]}"
                if into in self.outs:
                    self.emit(f"{u} = o{self.outs.index(into)}")
                    self.inplace.add(into)
                else:
                    self.emit(f"{u} = np.empty({st(self.pdg.rec(into).shape)}, np.{dt})")
                self.into[into] = n
                self.alias[v] = u
                self.emit(f"gemm_{ta}{tb}({ga}, {gb}, {u}.reshape(({m}, {nn})))")
                return
            w = self.fresh()
            self.emit(f"{w} = np.empty(({m}, {nn}), np.{dt})")
            self.emit(f"gemm_{ta}{tb}({ga}, {gb}, {w})")
            self.emit(f"{v} = {w}.reshape({st(node.shape)})")
            return
        w = self.fresh()
        self.emit(f"{w} = np.empty(({m}, {nn}), np.{dt})")
        self.emit(f"matmul_small({a2}, {b2}, {w})")
        self.emit(f"{v} = {w}.reshape({st(node.shape)})")

    def reduce(self, n):
        node = self.pdg.rec(n)
        fn, axes, keep = node.attrs["fn"], tuple(node.attrs["axis"]), node.attrs["keepdims"]
        (p, e) = self.pdg.inputs(n)[0]
        x, sx, _ = self.arg(p, e)
        out = tuple(node.shape)
        dt = np.dtype(node.dtype).name
        v = f"v{self.local[n]}"
        count = int(np.prod([int(sx[a]) for a in axes]))
        acc = self.fresh()
        if fn in REDUCE3:
            if list(axes) != list(range(min(axes), max(axes) + 1)):
                # reduced axes apart: gather them last (compile-time indices), reduced over (kept, reduced)
                kept = [a for a in range(len(sx)) if a not in axes]
                src = np.arange(int(np.prod(st(sx))), dtype=np.int64).reshape(tuple(int(s) for s in sx))
                xt = self.fresh()
                self.emit(f"{xt} = np.empty({int(np.prod(st(sx)))}, np.{dt})")
                moved = np.transpose(src, kept + list(axes))
                self.move(x, int(np.prod(st(sx))), moved.ravel(), moved.shape, xt)
                x, pre, post = xt, int(np.prod([int(sx[a]) for a in kept])), 1
            else:
                pre = int(np.prod([int(s) for s in sx[:min(axes)]]))
                post = int(np.prod([int(s) for s in sx[max(axes) + 1:]]))
            if fn in ("sum", "mean") and pre == 1 and post >= 8 and count * post >= BLAS_MACS:
                # column sums of a (count, post) matrix: ones @ x through BLAS (a 128000x64 column sum:
                # 1.3 ms against 45 ms for the row-accumulating loop, whose accumulators stay in memory)
                self.emit(f"{acc} = np.empty({post}, np.{dt})")
                self.emit(f"gemv_vm(np.ones({count}, np.{dt}), {x}.reshape(({count}, {post})), {acc})")
                scale = f" * np.{dt}({1.0 / count!r})" if fn == "mean" else ""
                self.emit(f"{v} = ({acc}{scale}).reshape({st(out)})")
                return
            self.emit(f"{acc} = np.empty(({pre}, {post}), np.{dt})")
            self.emit(_reduce3(fn, f"{x}.reshape(({pre}, {count}, {post}))", count, acc))
            self.emit(f"{v} = {acc}.reshape({st(out)})")
            return
        # argmax along one axis: the first maximum, the first NaN if any (numpy's rule)
        (ax,) = axes
        names = [f"r{a}" for a in range(len(sx))]
        oidx = ", ".join(("0" if keep else None) if a in axes else names[a] for a in range(len(sx))
                         if keep or a not in axes) or "0"
        self.emit(f"{acc} = np.full({st(out)}, -np.inf)")
        self.emit(f"{v} = np.full({st(out)}, -1, np.int64)")
        for a, s_ in enumerate(sx):
            self.emit(f"for {names[a]} in range({int(s_)}):", 1 + a)
        for ln in [f"xv = {x}[{', '.join(names)}]", f"bv = {acc}[{oidx}]",
                   f"if {v}[{oidx}] < 0 or (bv == bv and (xv > bv or xv != xv)):",
                   f"    {acc}[{oidx}] = xv", f"    {v}[{oidx}] = {names[ax]}"]:
            self.emit(ln, 1 + len(sx))

    def take(self, n):
        node = self.pdg.rec(n)
        (px, ex), (pi, ei) = self.pdg.inputs(n)
        x, sx, _ = self.arg(px, ex)
        ix, si, _ = self.arg(pi, ei)
        out = tuple(node.shape)
        ax = node.attrs["axis"]
        v = f"v{self.local[n]}"
        dt = np.dtype(node.dtype).name
        sxi = [int(s) for s in sx]
        pre, nax, post = int(np.prod(sxi[:ax])), sxi[ax], int(np.prod(sxi[ax + 1:]))
        if not node.attrs["along"] or (tuple(si) == out and all(sxi[a] == int(out[a]) for a in range(len(out)) if a != ax)):
            m = int(np.prod([int(s) for s in si])) if not node.attrs["along"] else int(si[ax])
            w = self.fresh()
            self.emit(f"{w} = np.empty(({pre}, {m}, {post}), np.{dt})")
            if node.attrs["along"]:
                self.emit(f"if not take_along3({x}.reshape(({pre}, {nax}, {post})), {ix}.reshape(({pre}, {m}, {post})), {w}):")
            else:
                self.emit(f"if not take3({x}.reshape(({pre}, {nax}, {post})), {ix}.reshape({m}), {w}):")
            self.emit("raise IndexError('take: index out of range')", 2)
            self.emit(f"{v} = {w}.reshape({st(out)})")
            return
        self.emit(f"{v} = np.empty({st(out)}, np.{dt})")
        names, depth = self.loops(out)
        qi = operand_index(si, out, names)
        xent = operand_index(sx, out, names).split(", ")
        xent = [("q" if a == ax else ent) for a, ent in enumerate(xent)]
        self.emit(f"q = {ix}[{qi}]", depth)
        self.emit("if q < 0:", depth)
        self.emit(f"q += {nax}", depth + 1)
        self.emit(f"if q < 0 or q >= {nax}:", depth)
        self.emit("raise IndexError('take: index out of range')", depth + 1)
        self.emit(f"{v}[{', '.join(names) if len(out) else '0'}] = {x}[{', '.join(xent)}]", depth)

    def one_hot(self, n):
        node = self.pdg.rec(n)
        (p, e) = self.pdg.inputs(n)[0]
        ix, si, _ = self.arg(p, e)
        out = tuple(node.shape)
        v = f"v{self.local[n]}"
        dt = "np.bool_" if np.dtype(node.dtype) == np.bool_ else f"np.{np.dtype(node.dtype).name}"
        self.emit(f"{v} = np.zeros({st(out)}, {dt})")
        names, depth = self.loops(si) if len(si) else ([], 1)
        q = f"{ix}[{', '.join(names) or '0'}]"
        self.emit(f"q = {q}", depth)
        self.emit(f"if 0 <= q < {int(out[-1])}:", depth)
        self.emit(f"{v}[{', '.join(names + ['q'])}] = 1", depth + 1)

    def movement(self, n):
        node = self.pdg.rec(n)
        v = f"v{self.local[n]}"
        out = st(node.shape)
        size = int(np.prod(out))
        dt = np.dtype(node.dtype).name
        if node.op is Op.RESHAPE:
            (p, e) = self.pdg.inputs(n)[0]
            x, _, _ = self.arg(p, e)
            self.emit(f"{v} = {x}.reshape({out})")
            return
        if node.op is Op.PERMUTE and tuple(node.attrs["axes"]) == (1, 0) and n not in self.returned and all(
                self.pdg.rec(c).op is Op.MATMUL for c, _ in self.pdg.consumers(n)) and all(
                c in self.local for c, _ in self.pdg.consumers(n)):
            # a transpose read only by matmuls: a view (numba's np.dot hands BLAS the transposed layout)
            (p, e) = self.pdg.inputs(n)[0]
            x, _, _ = self.arg(p, e)
            self.emit(f"{v} = {x}.T")
            self.tview[v] = x
            return
        if node.op is Op.PERMUTE and tuple(node.attrs["axes"]) == (1, 0):  # a matrix transposed, in tiles
            (p, e) = self.pdg.inputs(n)[0]
            x, s, _ = self.arg(p, e)
            self.emit(f"{v} = np.empty({out}, np.{dt})")
            self.emit(f"transpose2({x}.reshape({st(s)}), {v})")
            return
        idx = gathers(self.pdg, n)
        self.emit(f"{v} = np.empty({out}, np.{dt})")
        self.emit(f"{v}f = {v}.reshape({size})")
        if node.op is not Op.CONCAT:
            (p, e) = self.pdg.inputs(n)[0]
            x, s, _ = self.arg(p, e)
            self.move(x, int(np.prod(st(s))), idx[0], out, f"{v}f")
            return
        for kind, x, m, c in self.index_moves(n, idx):
            self.emit(f"{kind}({x}.reshape({m}), {c}, {v}f)")

    def move(self, x, m, idx, out, dst):
        """``dst`` (flat) = ``x`` (``m`` elements) read at ``idx``: through strides (``move4``) when the
        map is affine (:func:`strides`), else a gather of a compile-time index array."""
        aff = strides(idx, out)
        if aff is None:
            self.emit(f"gather({x}.reshape({m}), {self.const(idx)}, {dst})")
            return
        base, axes = aff
        ns, ss = ", ".join(str(n_) for n_, _ in axes), ", ".join(str(s_) for _, s_ in axes)
        self.emit(f"move4({x}.reshape({m}), {base}, {ns}, {ss}, {dst})")

    def index_moves(self, n, idx):
        """``(kind, operand, its size, index constant)`` per operand of movement op ``n``: a
        ``scatter`` of each concat operand into the output, else one ``gather`` from the input."""
        if self.pdg.rec(n).op is Op.CONCAT:
            pairs = list(zip(self.pdg.inputs(n), idx))
        else:
            pairs = [(self.pdg.inputs(n)[0], idx[0])]
        out = []
        for (p, e), g in pairs:
            x, s, _ = self.arg(p, e)
            out.append(("scatter" if self.pdg.rec(n).op is Op.CONCAT else "gather", x, int(np.prod(st(s))),
                        self.const(g)))
        return out

    def random(self, n):
        """timerl.ir.rng.draw at this point, value for value: the key mixes the base key (a
        parameter: of the compile seed and the op's stream) with the point's coordinates."""
        node = self.pdg.rec(n)
        j = self.local[n]
        self.keys.append(n)
        kb = f"kb{j}"
        self.emit(f"{kb} = key{len(self.keys) - 1}")
        for d in node.domain:
            if d.name not in self.dims:
                self.dims.append(d.name)
            self.emit(f"{kb} = mix({kb} + (np.uint64(d_{d.name}) + ONE) * G)")
        dist, attrs = node.attrs["dist"], node.attrs
        dt = np.dtype(node.dtype).name
        out = st(node.shape)
        size = int(np.prod(out))
        v = f"v{j}"
        self.emit(f"{v} = np.empty({out}, np.{dt})")
        self.emit(f"{v}f = {v}.reshape({size})")
        if dist == "uniform":
            lo, hi = float(attrs.get("low", 0.0)), float(attrs.get("high", 1.0))
            below = np.nextafter(np.dtype(dt).type(hi), np.dtype(dt).type(lo))
            self.emit(f"for q in range({size}):")
            self.emit(f"u = np.{dt}({lo!r} + ({hi!r} - {lo!r}) * unit({kb}, np.uint64(q)))", 2)
            self.emit(f"{v}f[q] = u if u < np.{dt}({hi!r}) else np.{dt}({float(below)!r})", 2)
        elif dist == "normal":
            mean, std = float(attrs.get("mean", 0.0)), float(attrs.get("std", 1.0))
            self.emit(f"for q in range({size}):")
            self.emit(f"u1 = 1.0 - unit({kb}, np.uint64(q))", 2)
            self.emit(f"u2 = unit({kb}, np.uint64(q) + LANE)", 2)
            self.emit("z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)", 2)
            self.emit(f"{v}f[q] = np.{dt}({mean!r} + {std!r} * z)", 2)
        elif dist == "permutation":
            self.emit(f"permutation({kb}, {v}f)")
        else:  # categorical: Gumbel-max over the last axis of the logits
            (p, e) = self.pdg.inputs(n)[0]
            lg, sl, _ = self.arg(p, e)
            A = int(sl[-1])
            self.emit(f"{lg}f_ = {lg}.reshape({size * A})")
            self.emit(f"for q in range({size}):")
            self.emit("bi = 0", 2)
            self.emit("best = -np.inf", 2)
            self.emit(f"for a in range({A}):", 2)
            self.emit(f"u = unit({kb}, np.uint64(q * {A} + a)) + 0.5 / 9007199254740992.0", 3)
            self.emit(f"val = np.float64({lg}f_[q * {A} + a]) - math.log(-math.log(u))", 3)
            self.emit("if a == 0 or (best == best and (val > best or val != val)):", 3)
            self.emit("best = val", 4)
            self.emit("bi = a", 4)
            self.emit(f"{v}f[q] = bi", 2)

    # whole segment -----------------------------------------------------------------
    def member(self, n):
        """The code of one member that is not elementwise."""
        op = self.pdg.rec(n).op
        if op is Op.MATMUL:
            self.matmul(n)
        elif op is Op.REDUCE:
            self.reduce(n)
        elif op is Op.TAKE:
            self.take(n)
        elif op is Op.ONE_HOT:
            self.one_hot(n)
        elif op is Op.RANDOM:
            self.random(n)
        else:
            self.movement(n)

    def runs(self, ew):
        """The segment in loop nests: each non-elementwise member alone, elementwise members of one
        shape gathered into as few runs as the dependences allow (every loop nest costs numba about
        50 ms to compile). A list scheduler: ready non-elementwise members first, then one run of the
        shape with the most ready elementwise members, grown while members of that shape get ready."""
        pdg, seg = self.pdg, self.seg
        inseg = set(seg)
        deps = {n: {p for p, _ in pdg.inputs(n) if p in inseg} for n in seg}
        done, runs = set(), []
        while len(done) < len(seg):
            ready = [n for n in seg if n not in done and deps[n] <= done]
            other = [n for n in ready if n not in ew]
            if other:
                for n in other:
                    runs.append([n])
                    done.add(n)
                continue
            shapes = [tuple(pdg.rec(n).shape) for n in ready]
            # the shape with the most ready members first; a run all of whose members would rather be
            # computed later (_later: read only by a later run of their shape) waits while another
            # shape's run can go first, so that they are computed where they are read
            order = sorted(set(shapes), key=lambda s: (-shapes.count(s), shapes.index(s)))
            for shape in order:
                run = self._grow(shape, ew, deps, done)
                late = self._later(run, ew, inseg, shape)
                if len(late) < len(run):
                    run = [n for n in run if n not in late]
                    break
            else:  # every ready run would rather wait: the commonest shape's runs as it is
                run = self._grow(order[0], ew, deps, done)
            done |= set(run)
            runs.append(run)
        return runs

    def _grow(self, shape, ew, deps, done) -> list:
        """The elementwise members of ``shape`` that can run after ``done``, grown while members of that
        shape get ready (without changing ``done``)."""
        run, have, grown = [], set(done), True
        while grown:
            grown = False
            for n in self.seg:
                if n not in have and n in ew and tuple(self.pdg.rec(n).shape) == shape and deps[n] <= have:
                    run.append(n)
                    have.add(n)
                    grown = True
        return run

    def _later(self, run, ew, inseg, shape) -> set:
        """Members of ``run`` to compute in a later run instead: read only by elementwise members of
        the same shape outside this run (and not by the caller), so that they are computed where
        they are read, as scalars in that loop nest, instead of as arrays live from here to there
        (a backward pass's ``1 - h * h`` read by the next layer's run: one array of the batch less)."""
        pdg, late = self.pdg, set()
        keep = set(self.returned) | set(self.outs)
        changed = True
        while changed:
            changed = False
            for n in run:
                if n in late or n in keep:
                    continue
                cons = [c for c, _ in pdg.consumers(n) if c in inseg]
                if cons and all(c in ew and tuple(pdg.rec(c).shape) == shape and (c not in run or c in late)
                                for c in cons):
                    late.add(n)
                    changed = True
        return late

    def _epilogue(self, n):
        """The member whose array matmul ``n`` can write its product into, or None: every reader of
        the product is in one later loop nest of its shape (the product is not returned or stored),
        and the member, of its shape and dtype, is stored as an array and comes in that nest at or
        after the product's last reader. Each iteration then reads the product's element before the
        member's element, the same one, is written: a layer's ``tanh(x @ w + b)`` is computed in the
        array the matmul wrote, and the product needs no array of its own (a batch of the layer's
        width less while the kernel runs)."""
        pdg, (ew, runs, needed) = self.pdg, self._plan
        if n in self.returned or n in self.outs:
            return None
        node = pdg.rec(n)
        shape, dt = tuple(node.shape), np.dtype(node.dtype)
        if not shape:
            return None
        cons = [c for c, _ in pdg.consumers(n)]
        if not cons or any(c not in self.local or c not in ew for c in cons):
            return None
        where = {k for k, r in enumerate(runs) for c in cons if c in r}
        if len(where) != 1:
            return None
        order = runs[where.pop()]
        if tuple(pdg.rec(order[0]).shape) != shape:
            return None
        last = max(order.index(c) for c in cons)
        for m in order[last:]:
            mn = pdg.rec(m)
            if m in needed and m not in self.into and tuple(mn.shape) == shape and np.dtype(mn.dtype) == dt:
                return m
        return None

    def plan_runs(self):
        """``(elementwise members, runs, needed)``: the segment cut into runs (:meth:`runs`) and the
        members that must exist as arrays: read by a non-elementwise member, by another run, or
        returned."""
        pdg, seg = self.pdg, self.seg
        inseg = set(seg)
        ew = {n for n in seg if pdg.rec(n).op in (Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST)}
        runs = self.runs(ew)
        runof = {n: i for i, r in enumerate(runs) for n in r}
        needed = set(self.returned) | set(self.outs)
        for n in seg:
            for p, _ in pdg.inputs(n):
                if p in inseg and (runof[p] != runof[n] or p not in ew or n not in ew):
                    needed.add(p)
        return ew, runs, needed

    def source(self):
        pdg = self.pdg
        ew, runs, needed = self._plan = self.plan_runs()
        group = []  # consecutive runs' loop nests, one function (a function costs numba about 0.1 s)
        for r in runs:
            if r[0] in ew:
                if int(np.prod(st(pdg.rec(r[0]).shape))) <= INLINE_SIZE:
                    self.call_runs(group)  # the inline run may read the group's results
                loop = self.elementwise_run(r, needed)
                if loop is not None:
                    group.append(loop)
                continue
            self.call_runs(group)
            self.member(r[0])
        self.call_runs(group)
        for k, n in enumerate(self.outs):  # outputs computed elsewhere: copied into the caller's array
            if n not in self.inplace:
                size = int(np.prod(st(self.pdg.rec(n).shape)))
                self.emit(f"copy1(v{self.local[n]}.reshape({size}), o{k}.reshape({size}))")
        rets = []
        for n in self.returned:
            # a reshape returns a view of its input, as numpy's reshape does on the other backends:
            # stored values are never written in place (a donation needs readers that do not alias,
            # and a kernel writes only block rows it has not written before)
            rets.append(f"v{self.local[n]}")
        params = ([f"x{k}" for k in range(len(self.ext))] + [f"c{k}" for k in range(len(self.consts))]
                  + [f"d_{d}" for d in self.dims] + [f"key{k}" for k in range(len(self.keys))]
                  + [f"o{k}" for k in range(len(self.outs))])
        sig = []
        for _, _, s, d in self.ext:
            sig.append(f"numba.types.Array(numba.from_dtype(np.dtype('{d.name}')), {len(st(s))}, 'C', readonly=True)")
        for c in self.consts:
            sig.append(f"numba.types.Array(numba.int64, {c.ndim}, 'C', readonly=True)")
        sig += ["numba.int64"] * len(self.dims) + ["numba.uint64"] * len(self.keys)
        for n in self.outs:  # written in place: C-contiguous and writeable
            node = self.pdg.rec(n)
            sig.append(f"numba.types.Array(numba.from_dtype(np.dtype('{np.dtype(node.dtype).name}')), "
                       f"{len(node.shape)}, 'C')")
        head = [PRELUDE, f"SIG = ({', '.join(sig)},)"] + self.helpers + ["", "",
                '@numba.njit(cache=True, fastmath=False, error_model="numpy", boundscheck=False)',
                f"def kernel({', '.join(params)}):"]
        body = self.lines + [f"    return ({''.join(r + ', ' for r in rets)})"]
        return "\n".join(head + body) + "\n"


def render(pdg, seg, returned, outs=()):
    """(source, external operands [(producer, edge, shape, dtype)], constant arrays, dim names of
    the point coordinates passed, random ops whose base key is passed) in parameter order; the
    members ``outs`` (of at least one axis) are written into arrays the caller passes last, the
    members ``returned`` are returned as fresh arrays."""
    r = Render(pdg, seg, returned, outs)
    src = r.source()
    return src, r.ext, r.consts, r.dims, r.keys


_ASSIGN = re.compile(r"^\s*(\w+) = (.*)$")
_ALLOC = re.compile(r"^(?:np\.(?:empty|zeros|ones)|POOL\.empty)\(\(([\d, ]*)\),\s*np\.(\w+)\)$")
_VIEW = re.compile(r"^\(?(\w+)\)?(?:\.reshape\(|\.T$|\[)")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_OUT = re.compile(r"^o\d+$")


def transient_bytes(pdg, seg, src) -> int:
    """The most bytes a kernel of this source holds at once in arrays it allocates: its temporaries
    and the arrays it returns (the caller then stores those), each from its allocation to its last
    use (numba frees an array when its last reference dies). Read off the kernel's body: an
    ``np.empty``/``zeros``/``ones`` of a literal shape, or a member's array ``v<j>`` (member
    ``seg[j]``) made by a call (``dot``), with reshapes, transposes and slices sharing their
    base's buffer. Arrays a helper allocates and frees inside itself are not counted."""
    lines = src.split("\ndef kernel(", 1)[1].splitlines()[1:]
    size, base, born, last = {}, {}, {}, {}
    for k, ln in enumerate(lines):
        for nm in _NAME.findall(ln):
            if nm in base:
                last[base[nm]] = k
        m = _ASSIGN.match(ln)
        if m is None:
            continue
        name, expr = m.groups()
        if _OUT.match(expr):  # the caller's array (a store or a slot's own array): counted there
            continue
        a, v = _ALLOC.match(expr), _VIEW.match(expr)
        if a is not None:
            nbytes = ops_nbytes([int(x) for x in a.group(1).replace(" ", "").split(",") if x], a.group(2))
        elif v is not None:  # a view: of an array allocated here, or of an operand (nothing new)
            b = base.get(v.group(1))
            if b is not None:
                base[name] = b
                if size[b] is None:  # a call's result (a matmul in object mode), sized by the member viewing it
                    size[b] = _member_bytes(pdg, seg, name)
            continue
        else:  # a call's result: a member's array, or a temporary sized by the member that views it
            nbytes = _member_bytes(pdg, seg, name)
        base[name] = name
        size[name], born[name], last[name] = nbytes, k, k
    peak = 0
    for k in range(len(lines)):
        peak = max(peak, sum(b for nm, b in size.items() if b and born[nm] <= k <= last[nm]))
    return peak


def _member_bytes(pdg, seg, name):
    """The bytes of member ``seg[j]`` for the kernel variable ``v<j>`` (kernel members have static
    shapes); None for other names."""
    if not re.fullmatch(r"v\d+", name) or int(name[1:]) >= len(seg):
        return None
    node = pdg.rec(seg[int(name[1:])])
    return ops_nbytes(node.shape, node.dtype)
