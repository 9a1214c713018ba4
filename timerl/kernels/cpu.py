"""numba kernels for chains of elementwise ops joined at one point (CPU backend).

A *chain* is a run of UNARY/BINARY ops of one group (same domain, same point) that
share one static shape ``S`` and one float dtype, each reading a chain member. Operands
from outside the chain may have any shape that broadcasts to ``S`` under NumPy's rules
(0-d values, size-1 axes, missing leading axes); a member whose own shape differs from
``S`` starts a new chain, where the old chain's output is such an operand.

A chain becomes one loop nest over ``S`` in which every operand is indexed by its own
shape (NumPy's alignment of trailing axes; index 0 along an axis of length 1 or a
missing leading axis, which the caller pads with length-1 axes). The source is written
to the kernel cache (:mod:`timerl.kernels.cache`, named by the hash of the source) and compiled with
``numba.njit(cache=True, error_model="numpy")`` (IEEE results like numpy's, e.g.
x / 0 = inf, never a Python ZeroDivisionError); the outputs are the members read
outside the chain, arrays of shape ``S``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile

import numpy as np

from ..config import config
from ..ir.ops import Op, broadcast
from . import cache

# exp, log and tanh stay with numpy: numba calls scalar libm for them (no SVML in pip's llvmlite),
# several times slower than numpy's SIMD loops (CartPole PPO: 14.4k env steps/s with a fused
# bias-add + tanh kernel against 17.7k without); vectorizable forms are the compile issue's work
EXPR = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "minimum": "np.minimum({0}, {1})", "maximum": "np.maximum({0}, {1})",
    "neg": "(-{0})", "sqrt": "np.sqrt({0})", "abs": "abs({0})", "relu": "np.maximum({0}, Z)",
}
FLOATS = (np.dtype("float32"), np.dtype("float64"))

_loaded: dict = {}


def kernelable(pdg, n) -> bool:
    node = pdg.rec(n)
    return (node.op in (Op.UNARY, Op.BINARY) and node.attrs.get("fn") in EXPR and np.dtype(node.dtype) in FLOATS
            and all(isinstance(s, int) for s in node.shape) and len(node.shape) >= 1)


def broadcasts_to(shape, target) -> bool:
    """Whether an operand of ``shape`` broadcasts to ``target`` (NumPy's rules)."""
    return all(isinstance(s, int) for s in shape) and broadcast([shape, target]) == tuple(target)


def chains(pdg, members) -> list[list]:
    """Maximal runs of kernelable members of one shape and dtype, each reading the run, in member order."""
    out, cur = [], []
    for n in members:
        node = pdg.rec(n)
        ok = kernelable(pdg, n)
        if ok:
            for p, e in pdg.inputs(n):
                pn = pdg.rec(p)
                if not broadcasts_to(pn.shapes[e.out], node.shape) or np.dtype(pn.dtypes[e.out]) != np.dtype(node.dtype):
                    ok = False
        if ok and cur and (tuple(pdg.rec(cur[0]).shape) != tuple(node.shape)
                           or pdg.rec(cur[0]).dtype != node.dtype
                           or not any(p in cur for p, _ in pdg.inputs(n))):
            out.append(cur)
            cur = []
        if ok:
            cur.append(n)
        else:
            if cur:
                out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return [c for c in out if len(c) >= 2]


def render(pdg, chain, outputs) -> tuple[str, list, bool]:
    """Kernel source, its external operands [(producer, edge, shape)] in parameter order, and
    whether it is *flat*.

    A flat kernel (every array operand has the chain's shape, the common case) is one loop
    over the elements: it takes the element count and each operand as a C-contiguous 1-d
    array (the caller ravels it), so the loop vectorizes. Otherwise the kernel takes the
    chain's shape and each operand as a C-contiguous array of the chain's rank (the caller
    prepends axes of length 1 to one of lower rank), indexed by its own static shape: ``0``
    along its axes of length 1 where the chain's is longer (NumPy's broadcasting), the loop
    index elsewhere. 0-d operands come as Python floats. Extents are parameters, not
    constants, so one kernel serves every shape with the same ops, rank, dtype and
    broadcast pattern.
    """
    node0 = pdg.rec(chain[0])
    target = tuple(node0.shape)
    dt = np.dtype(node0.dtype).name
    ext, names = [], {}
    local = {n: j for j, n in enumerate(chain)}  # names by position, so equal chains share one source
    for n in chain:
        for p, e in pdg.inputs(n):
            if p not in local and (p, e.out) not in names:
                names[(p, e.out)] = len(ext)
                ext.append((p, e, tuple(pdg.rec(p).shapes[e.out])))
    flat = all(s == target for _, _, s in ext if s)
    rank = 1 if flat else len(target)
    at = ", ".join(f"j{a}" for a in range(rank))
    ind = "    " * (rank + 1)
    body = []
    for n in chain:
        args = []
        for p, e in pdg.inputs(n):
            if p in local:
                args.append(f"t{local[p]}")
                continue
            k = names[(p, e.out)]
            shape = ext[k][2]
            args.append(f"x{k}" if not shape else f"x{k}[j0]" if flat else f"x{k}[{operand_index(shape, target)}]")
        body.append(f"{ind}t{local[n]} = np.{dt}({EXPR[pdg.rec(n).attrs['fn']].format(*args)})")
    params = ", ".join(["shape"] + [f"x{k}" for k in range(len(ext))])
    # the types the interpreter passes: the extents, C-contiguous arrays (read-only accepts writable
    # ones too), floats for 0-d
    arr = f"numba.types.Array(numba.{dt}, {rank}, 'C', readonly=True)"
    sig = "(" + ", ".join([f"numba.types.UniTuple(numba.int64, {rank})"]
                          + [arr if s else "numba.float64" for _, _, s in ext]) + ",)"
    src = ["import numpy as np", "import numba", "", f"Z = np.{dt}(0)", f"SIG = {sig}", "",
           "@numba.njit(cache=True, fastmath=False, error_model=\"numpy\")", f"def kernel({params}):"]
    for k, (_, _, s) in enumerate(ext):
        if not s:
            src.append(f"    x{k} = np.{dt}(x{k})")
    for o in outputs:
        src.append(f"    o{local[o]} = np.empty(shape, np.{dt})")
    for a in range(rank):
        src.append("    " * (a + 1) + f"for j{a} in range(shape[{a}]):")
    src += body
    src += [f"{ind}o{local[o]}[{at}] = t{local[o]}" for o in outputs]
    src.append(f"    return ({''.join(f'o{local[o]}, ' for o in outputs)})")
    return "\n".join(src) + "\n", ext, flat


def operand_index(shape, target) -> str:
    """Index of an operand of ``shape`` at the loop point over ``target`` (ranks aligned on the right)."""
    off = len(target) - len(shape)
    return ", ".join("0" if a < off or (shape[a - off] == 1 and target[a] != 1) else f"j{a}"
                     for a in range(len(target)))


def _write(src: str) -> tuple[str, str]:
    """(hash, path) of the kernel file of this source, written to the cache if new."""
    h = hashlib.sha1(src.encode()).hexdigest()[:16]
    d = cache.kernel_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"k_{h}.py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f"k_{h}.", suffix=".tmp")  # unique per process and thread
        with os.fdopen(fd, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    return h, path


def _import(h: str, path: str):
    spec = importlib.util.spec_from_file_location(f"timerl_kernel_{h}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # numba's cache pickles refer to the module by name
    spec.loader.exec_module(mod)
    return mod


def _compile_file(job):
    h, path = job
    _import(h, path).kernel.compile(_import(h, path).SIG)  # writes numba's on-disk cache
    return h


def _compiled(h: str, path: str) -> bool:
    """Whether numba's on-disk cache holds this kernel (its index file next to the source)."""
    d = os.path.join(os.path.dirname(path), "__pycache__")
    return os.path.isdir(d) and any(f.startswith(f"k_{h}.") and f.endswith(".nbi") for f in os.listdir(d))


def prewarm(srcs) -> int:
    """Compile the kernels of ``srcs`` not yet in the on-disk cache in worker processes, one per
    core (numba compiles one kernel at a time per process, 0.1-5 s each); :func:`load` then
    loads them. Returns how many were compiled. With one core or one new kernel: nothing (load
    compiles)."""
    jobs = {}
    for src in srcs:
        h, path = _write(src)
        if h not in _loaded and h not in jobs and not _compiled(h, path):
            jobs[h] = path
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    workers = min(cores, len(jobs), config.compile_workers or cores)
    if workers < 2:
        return 0
    import multiprocessing

    # fork: the workers inherit the imported numba (spawn would import it again, about a second)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_compile_file, sorted(jobs.items(), key=lambda j: -os.path.getsize(j[1])), chunksize=1)
    return len(jobs)


def load(src: str):
    """Compile (or fetch from the on-disk cache) the kernel of this source."""
    h = hashlib.sha1(src.encode()).hexdigest()[:16]
    if h in _loaded:
        return _loaded[h]
    h, path = _write(src)
    if config.debug:
        print(f"# timerl kernel {path}\n{src}")
    mod = _import(h, path)
    # compile (or load from the cache) now, at compile time, not at the first call mid-run
    mod.kernel.compile(mod.SIG)
    # C-contiguous and strided arrays then share this one compiled signature (numba casts the
    # layout) instead of compiling another specialization at their first call, mid-run
    mod.kernel.disable_compile()
    _loaded[h] = mod.kernel
    return mod.kernel
