"""CUDA statement kernels: a segment of a group statement rendered for ``numba.cuda``.

The same segments as the CPU's statement kernels (:mod:`timerl.kernels.statement`: what
:func:`~timerl.kernels.statement.renderable` accepts, cut by the ``fuse`` pass), and the same
calling convention::

    kernel(x0, x1, ..., c0, c1, ..., d_t, ..., key0, ..., o0, o1, ...) -> (out0, out1, ...)

but every array is a device array from the device pool (:data:`timerl.kernels.cudart.POOL`):
operands not yet on the device (a UDF's output, a host scalar) are moved there first, and
results stay there. The function is host code launching device kernels:

- a run of elementwise ops of one shape is one generated ``@cuda.jit`` kernel, one thread per
  element computing the whole chain in registers (the registry's scalar templates, NumPy's
  broadcasting by index), storing only the members read elsewhere;
- a matmul is the tiled shared-memory GEMM of :mod:`~timerl.kernels.cudart`; reductions one
  thread per output, accumulating in float64 like the CPU kernels; take and one-hot one
  generated per-element kernel each (an index out of range sets a flag the host checks and
  raises as the CPU kernel does); movement ops gather or scatter through compile-time indices
  (on the device once); random draws are timerl.ir.rng's counter-based draws, value for value,
  computed on the device.

Rendered sources are cached like the CPU's (:func:`load`, keyed by the source) and numba's
CUDA dispatchers compile each kernel at its first launch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile

import numpy as np

from ..ir.ops import Op
from . import cache
from .cudart import REDUCE_CODE
from .statement import Render as CpuRender, const_operands, gathers, operand_index, scalar_template, st

PRELUDE = """# timerl CUDA statement kernel
import math
import numpy as np
from numba import cuda, float32, float64, int64, uint64  # noqa: F401
from timerl.kernels.cudart import (M, POOL, REDUCE_CODE, categorical1, check_flag, copy_into, dev, err_flag,  # noqa: F401
                                   gather1, gemm, grid, normal1, permutation, point_key, reduce, reduce3, scatter1,
                                   uniform1)
"""

_CAST = {"float32": "float32", "float64": "float64", "int64": "int64"}


def _unravel(names, shape, flat="i"):
    """Lines computing the multi-index ``names`` of flat index ``flat`` over ``shape``."""
    out, stride = [], 1
    strides = []
    for s in reversed(shape):
        strides.append(stride)
        stride *= int(s)
    strides.reverse()
    for nm, s, k in zip(names, shape, strides):
        out.append(f"{nm} = ({flat} // {k}) % {int(s)}" if k > 1 else f"{nm} = {flat} % {int(s)}")
    return out


class Render(CpuRender):
    """The source of one segment's CUDA kernels and the host function launching them."""

    def __init__(self, pdg, seg, returned, outs=()):
        super().__init__(pdg, seg, returned, outs)
        self.nk = 0
        self.checks = False  # a take kernel may set the error flag

    def device_kernel(self, params, body):
        """A ``@cuda.jit`` kernel of ``body`` (lines at depth 1) at module level; its name."""
        name = f"k{self.nk}"
        self.nk += 1
        self.helpers += ["", "", "@cuda.jit", f"def {name}({', '.join(params)}):"] + ["    " + ln for ln in body]
        return name

    def alloc(self, v, shape, dtype):
        self.emit(f"{v} = POOL.empty({st(shape)}, np.{np.dtype(dtype).name})")

    # ops ---------------------------------------------------------------------------
    def elementwise_run(self, run, needed):
        target = tuple(self.pdg.rec(run[0]).shape)
        shape = st(target)
        size = int(np.prod(shape))
        for n in run:
            if n in needed:
                self.alloc(f"v{self.local[n]}", target, self.pdg.rec(n).dtype)
        names = [f"j{a}" for a in range(len(shape))]
        body = ["i = cuda.grid(1)", f"if i >= {size}:", "    return"] + _unravel(names, shape)
        inrun, params = {}, []
        def ref(nm, s):
            if nm not in params:
                params.append(nm)
            return f"{nm}[{operand_index(s, target, names) if len(s) else '0'}]"

        for n in run:
            node = self.pdg.rec(n)
            args, dts = self.scalar_args(n, inrun, ref)
            expr = cuda_template(node, dts, const_operands(self.pdg, n)).format(*args)
            dt = np.dtype(node.dtype)
            t = f"t{self.local[n]}"
            body.append(f"{t} = {_CAST[dt.name]}({expr})" if dt.name in _CAST else f"{t} = ({expr})")
            inrun[n] = t
            if n in needed:
                v = f"v{self.local[n]}"
                if v not in params:
                    params.append(v)
                body.append(f"{v}[{', '.join(names) or '0'}] = {t}")
        k = self.device_kernel(params, body)
        self.emit(f"{k}[grid({size})]({', '.join(params)})")
        return None

    def matmul(self, n):
        node = self.pdg.rec(n)
        (pa, ea), (pb, eb) = self.pdg.inputs(n)
        a, sa, _ = self.arg(pa, ea)
        b, sb, _ = self.arg(pb, eb)
        k = int(sa[-1])
        m = int(np.prod(sa[:-1], dtype=np.int64)) if len(sa) >= 2 else 1
        nn = int(sb[1]) if len(sb) == 2 else 1
        v = f"v{self.local[n]}"
        w = self.fresh()
        self.alloc(w, (m, nn), node.dtype)
        self.emit(f"gemm({a}.reshape(({m}, {k})), {b}.reshape(({k}, {nn})), {w})")
        self.emit(f"{v} = {w}.reshape({st(node.shape)})")

    def reduce(self, n):
        node = self.pdg.rec(n)
        fn, axes = node.attrs["fn"], tuple(node.attrs["axis"])
        (p, e) = self.pdg.inputs(n)[0]
        x, sx, _ = self.arg(p, e)
        v = f"v{self.local[n]}"
        size = int(np.prod(st(sx)))
        if list(axes) != list(range(min(axes), max(axes) + 1)):
            kept = [a for a in range(len(sx)) if a not in axes]
            src = np.arange(size, dtype=np.int64).reshape(tuple(int(s) for s in sx))
            xt = self.fresh()
            self.alloc(xt, (size,), self.pdg.rec(p).dtypes[e.out])
            c = self.const(np.transpose(src, kept + list(axes)).ravel())
            self.emit(f"gather1[grid({size})]({x}.reshape({size}), POOL.const({c}), {xt})")
            x, pre, post = xt, int(np.prod([int(sx[a]) for a in kept])), 1
        else:
            pre = int(np.prod([int(s) for s in sx[:min(axes)]]))
            post = int(np.prod([int(s) for s in sx[max(axes) + 1:]]))
        count = int(np.prod([int(sx[a]) for a in axes]))
        acc = self.fresh()
        self.alloc(acc, (pre, post), node.dtype)
        x3 = f"{x}.reshape(({pre}, {count}, {post}))"
        self.emit(f"reduce({x3}, {REDUCE_CODE[fn]}, {acc})")  # (argmax: along one axis)
        self.emit(f"{v} = {acc}.reshape({st(node.shape)})")

    def flag(self):
        """The error flag of take kernels, checked once after the segment's launches."""
        self.checks = True
        return "err"

    def take(self, n):
        node = self.pdg.rec(n)
        (px, ex), (pi, ei) = self.pdg.inputs(n)
        x, sx, _ = self.arg(px, ex)
        ix, si, _ = self.arg(pi, ei)
        out = tuple(int(s) for s in node.shape)
        ax = node.attrs["axis"]
        nax = int(sx[ax])
        v = f"v{self.local[n]}"
        self.alloc(v, out, node.dtype)
        size = int(np.prod(st(out)))
        names = [f"j{a}" for a in range(len(out))]
        if node.attrs["along"]:
            qi = operand_index(si, out, names)
            xent = operand_index(sx, out, names).split(", ")
            xent = [("q" if a == ax else ent) for a, ent in enumerate(xent)]
        else:
            k = len(si)
            qi = ", ".join(names[ax:ax + k]) or "0"
            xent = names[:ax] + ["q"] + names[ax + k:]
        body = ["i = cuda.grid(1)", f"if i >= {size}:", "    return"] + _unravel(names, out) + [
            f"q = idx[{qi}]", "if q < 0:", f"    q += {nax}", f"if q < 0 or q >= {nax}:", "    err[0] = 1",
            "    return", f"out[{', '.join(names) or '0'}] = x[{', '.join(xent)}]"]
        kname = self.device_kernel(["x", "idx", "out", "err"], body)
        f = self.flag()
        ixv = ix if len(si) else f"{ix}.reshape(1)"
        self.emit(f"{kname}[grid({size})]({x}, {ixv}, {v}, {f})")

    def one_hot(self, n):
        node = self.pdg.rec(n)
        (p, e) = self.pdg.inputs(n)[0]
        ix, si, _ = self.arg(p, e)
        out = tuple(int(s) for s in node.shape)
        v = f"v{self.local[n]}"
        self.alloc(v, out, node.dtype)
        size = int(np.prod(st(out)))
        names = [f"j{a}" for a in range(len(out))]
        one = "True" if np.dtype(node.dtype) == np.bool_ else "1"
        zero = "False" if np.dtype(node.dtype) == np.bool_ else "0"
        body = ["i = cuda.grid(1)", f"if i >= {size}:", "    return"] + _unravel(names, out) + [
            f"q = idx[{', '.join(names[:-1]) or '0'}]",
            f"out[{', '.join(names)}] = {one} if q == {names[-1]} else {zero}"]
        kname = self.device_kernel(["idx", "out"], body)
        self.emit(f"{kname}[grid({size})]({ix if len(si) else ix + '.reshape(1)'}, {v})")

    def movement(self, n):
        node = self.pdg.rec(n)
        v = f"v{self.local[n]}"
        out = st(node.shape)
        size = int(np.prod(out))
        if node.op is Op.RESHAPE:
            (p, e) = self.pdg.inputs(n)[0]
            x, _, _ = self.arg(p, e)
            self.emit(f"{v} = {x}.reshape({out})")
            return
        idx = gathers(self.pdg, n)
        self.alloc(v, out, node.dtype)
        for kind, x, m, c in self.index_moves(n, idx):  # a scatter's threads cover its operand
            self.emit(f"{kind}1[grid({m if kind == 'scatter' else size})]({x}.reshape({m}), POOL.const({c}), "
                      f"{v}.reshape({size}))")

    def random(self, n):
        node = self.pdg.rec(n)
        j = self.local[n]
        self.keys.append(n)
        for d in node.domain:
            if d.name not in self.dims:
                self.dims.append(d.name)
        kb = f"kb{j}"
        self.emit(f"{kb} = point_key(key{len(self.keys) - 1}, ({''.join(f'd_{d.name}, ' for d in node.domain)}))")
        dist, attrs = node.attrs["dist"], node.attrs
        dt = np.dtype(node.dtype)
        out = st(node.shape)
        size = int(np.prod(out))
        v = f"v{j}"
        self.alloc(v, out, dt)
        vf = f"{v}.reshape({size})"
        if dist == "uniform":
            lo, hi = float(attrs.get("low", 0.0)), float(attrs.get("high", 1.0))
            below = float(np.nextafter(dt.type(hi), dt.type(lo)))
            self.emit(f"uniform1[grid({size})]({kb}, {lo!r}, {hi!r}, {below!r}, {vf})")
        elif dist == "normal":
            self.emit(f"normal1[grid({size})]({kb}, {float(attrs.get('mean', 0.0))!r}, "
                      f"{float(attrs.get('std', 1.0))!r}, {vf})")
        elif dist == "permutation":
            b = self.fresh()
            self.alloc(b, (size,), np.uint64)
            self.emit(f"permutation({kb}, {b}, {vf})")
        else:
            (p, e) = self.pdg.inputs(n)[0]
            lg, sl, _ = self.arg(p, e)
            A = int(sl[-1])
            self.emit(f"categorical1[grid({size})]({kb}, {lg}.reshape({size * A}), {A}, {vf})")

    # whole segment -----------------------------------------------------------------
    def source(self):
        ew, runs, needed = self.plan_runs()
        for r in runs:
            if r[0] in ew:
                self.elementwise_run(r, needed)
                continue
            self.member(r[0])
        # operands not on the device yet (a UDF's output, a host scalar), moved there first (the list of
        # operands is complete once every member is rendered)
        self.lines[:0] = [f"    x{k} = dev(x{k})" for k in range(len(self.ext))] + (
            ["    err = err_flag()"] if self.checks else [])
        if self.checks:  # the host waits for the launches once, not after each take
            self.emit("check_flag(err, 'take: index out of range')")
        for k, n in enumerate(self.outs):  # into the caller's rows (device views of its block array)
            self.emit(f"copy_into(o{k}, v{self.local[n]})")
        rets = [f"v{self.local[n]}" for n in self.returned]
        params = ([f"x{k}" for k in range(len(self.ext))] + [f"c{k}" for k in range(len(self.consts))]
                  + [f"d_{d}" for d in self.dims] + [f"key{k}" for k in range(len(self.keys))]
                  + [f"o{k}" for k in range(len(self.outs))])
        head = [PRELUDE] + self.helpers + ["", "", f"def kernel({', '.join(params)}):"]
        body = self.lines + [f"    return ({''.join(r + ', ' for r in rets)})"]
        return "\n".join(head + body) + "\n"


def cuda_template(node, in_dtypes, consts=()):
    """The scalar expression of an elementwise node in a CUDA kernel: the registry's template
    (:func:`timerl.kernels.statement.scalar_template`), with CUDA's own ``tanh`` for float32
    (the CPU kernels' rational approximation is a CPU vectorization device)."""
    t = scalar_template(node, in_dtypes, consts).replace("math.", "M.")  # (cudart.M: IEEE in the simulator too)
    return t.replace("tanh32(np.float32(0.5) * {0})", "M.tanh(float32(0.5) * {0})").replace(
        "tanh32({0})", "M.tanh({0})")


def render(pdg, seg, returned, outs=()):
    """As :func:`timerl.kernels.statement.render`, for CUDA."""
    r = Render(pdg, seg, returned, outs)
    src = r.source()
    return src, r.ext, r.consts, r.dims, r.keys


_loaded: dict = {}


def load(src: str):
    """The host function ``kernel`` of a rendered source (written to the kernel cache, imported
    once per process)."""
    h = hashlib.sha1(src.encode()).hexdigest()[:16]
    fn = _loaded.get(h)
    if fn is not None:
        return fn
    d = cache.kernel_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"cu_{h}.py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f"cu_{h}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"timerl_cuda_{h}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    fn = _loaded[h] = mod.kernel
    return fn
