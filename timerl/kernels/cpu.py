"""numba kernels for chains of elementwise ops joined at one point (CPU backend).

A *chain* is a run of UNARY/BINARY ops of one group (same domain, same point) with
one static shape and one float dtype, whose operands are chain members, full arrays
of that shape, or 0-d values. It becomes one loop over the flat elements, rendered as
Python source, written to the kernel cache (:mod:`timerl.kernels.cache`, named by the hash of the source)
and compiled with ``numba.njit(cache=True, error_model="numpy")`` (IEEE results like numpy's, e.g. x / 0 = inf, never a Python ZeroDivisionError); the outputs are the members read outside
the chain.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

import numpy as np

from ..config import config
from ..ir.ops import Op
from . import cache

EXPR = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "minimum": "min({0}, {1})", "maximum": "max({0}, {1})",
    "neg": "(-{0})", "exp": "np.exp({0})", "log": "np.log({0})", "tanh": "np.tanh({0})", "sqrt": "np.sqrt({0})",
    "abs": "abs({0})", "relu": "max({0}, Z)",
}
FLOATS = (np.dtype("float32"), np.dtype("float64"))

_loaded: dict = {}


def kernelable(pdg, n) -> bool:
    node = pdg.rec(n)
    return (node.op in (Op.UNARY, Op.BINARY) and node.attrs.get("fn") in EXPR and np.dtype(node.dtype) in FLOATS
            and all(isinstance(s, int) for s in node.shape) and len(node.shape) >= 1)


def chains(pdg, members) -> list[list]:
    """Maximal runs of kernelable members connected by same-point edges, in member order."""
    out, cur = [], []
    for n in members:
        node = pdg.rec(n)
        ok = kernelable(pdg, n)
        if ok:
            for p, e in pdg.inputs(n):
                pn = pdg.rec(p)
                if p in cur:
                    continue
                shp = tuple(pn.shapes[e.out])
                if not (shp == tuple(node.shape) or shp == ()) or np.dtype(pn.dtypes[e.out]) != np.dtype(node.dtype):
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


def render(pdg, chain, outputs) -> tuple[str, list]:
    """Kernel source and its external operands [(producer, edge, is_scalar)]."""
    node0 = pdg.rec(chain[0])
    dt = np.dtype(node0.dtype).name
    ext, names, body = [], {}, []
    for n in chain:
        args = []
        for p, e in pdg.inputs(n):
            if p in chain:
                args.append(f"t{p}")
                continue
            key = (p, e.out)
            if key not in names:
                scalar = tuple(pdg.rec(p).shapes[e.out]) == ()
                names[key] = f"x{len(ext)}"
                ext.append((p, e, scalar))
            k = list(names).index(key)
            args.append(f"x{k}" if ext[k][2] else f"x{k}[j]")
        body.append(f"        t{n} = np.{dt}({EXPR[pdg.rec(n).attrs['fn']].format(*args)})")
    params = ", ".join([f"x{k}" for k in range(len(ext))] + ["n"])
    # the types the interpreter passes: flat C-contiguous arrays, Python floats, an int length
    sig = "(" + ", ".join("float64" if scalar else f"{dt}[::1]" for _, _, scalar in ext) + ", int64)"
    src = ["import numpy as np", "import numba", "", f"Z = np.{dt}(0)", f"SIG = {sig!r}", "",
           "@numba.njit(cache=True, fastmath=False, error_model=\"numpy\")", f"def kernel({params}):"]
    for k, (_, _, scalar) in enumerate(ext):
        if scalar:
            src.append(f"    x{k} = np.{dt}(x{k})")
    for o in outputs:
        src.append(f"    o{o} = np.empty(n, np.{dt})")
    src.append("    for j in range(n):")
    src += body
    src += [f"        o{o}[j] = t{o}" for o in outputs]
    src.append(f"    return ({''.join(f'o{o}, ' for o in outputs)})")
    return "\n".join(src) + "\n", ext


def load(src: str):
    """Compile (or fetch from the on-disk cache) the kernel of this source."""
    h = hashlib.sha1(src.encode()).hexdigest()[:16]
    if h in _loaded:
        return _loaded[h]
    d = cache.kernel_dir()
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"k_{h}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    if config.debug:
        print(f"# timerl kernel {path}\n{src}")
    spec = importlib.util.spec_from_file_location(f"timerl_kernel_{h}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # numba's cache pickles refer to the module by name
    spec.loader.exec_module(mod)
    # compile (or load from the cache) now, at compile time, not at the first call mid-run;
    # other argument types still dispatch lazily
    mod.kernel.compile(mod.SIG)
    _loaded[h] = mod.kernel
    return mod.kernel
