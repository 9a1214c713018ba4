"""numpy's own BLAS for the statement kernels' matrix products.

numba's BLAS calls go to scipy's OpenBLAS; numpy's wheels bundle another OpenBLAS build. Measured
on the CI machine (one thread, float32, ms, best of 5), the learner's weight gradient ``x.T @ g``
over a 128000-row rollout: numpy 10.2 / 13.3 (k = 48 / 64), numba's BLAS 16.3 / 17.9; the other
products of that learner are within 5%. The kernels used to reach numpy's matmul through
``numba.objmode`` for large products, and numba compiles an objmode block at its first call in
each process (16 blocks of the paper-setting PPO: 0.9 s in its first iteration).

So the kernels call numpy's bundled OpenBLAS directly: ``cblas_?gemm`` found in the library numpy
loaded (64-bit integers, ``scipy_`` prefix and ``64_`` suffix, as numpy's wheels build it), given to
LLVM under a fixed name (:func:`register`), so cached kernels link against it in any process. Where
numpy was built against another BLAS (not found here), the kernels call numba's (``NAME`` is part
of every kernel's source, so a kernel cached with one is never loaded with the other).

Nothing here imports numba: the kernel renderer reads ``NAME`` without loading numba.
"""

from __future__ import annotations

import ctypes
import os

#: the names the kernels' code calls (registered with LLVM by :func:`register`)
SYMBOLS = {"float32": "timerl_cblas_sgemm", "float64": "timerl_cblas_dgemm"}
_EXPORTS = {"float32": "scipy_cblas_sgemm64_", "float64": "scipy_cblas_dgemm64_"}
# cblas.h's enums
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _numpy_blas():
    """(path, {dtype: address}) of numpy's loaded OpenBLAS, or None."""
    import numpy as np  # noqa: F401  (loads numpy's BLAS into the process)

    try:
        with open("/proc/self/maps") as f:
            paths = list(dict.fromkeys(ln.split()[-1] for ln in f if "openblas" in ln and ln.rstrip().endswith(".so")))
    except OSError:  # not Linux
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            return path, {dt: ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value for dt, sym in _EXPORTS.items()}
        except (OSError, AttributeError):
            continue
    return None


_NUMPY_LIB = _numpy_blas()  # (path, addresses) of numpy's OpenBLAS, or None
_FOUND = None if os.environ.get("TIMERL_NUMPY_BLAS", "1") in ("0", "false", "no") else _NUMPY_LIB
#: which BLAS the kernels call: "numpy <library file>" or "numba"
NAME = f"numpy {os.path.basename(_FOUND[0])}" if _FOUND else "numba"
NUMPY = _FOUND is not None

_registered = False


_PAIRS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),  # numpy's wheels
          ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),  # scipy's (numba's BLAS)
          ("openblas_get_num_threads", "openblas_set_num_threads"))
_thread_fns = {}  # library path -> (get, set) of its thread count, or None


def _openblas_threads():
    """``{path: (get, set)}`` of the thread counts of every OpenBLAS loaded now: numpy's, and
    scipy's once numba's BLAS has loaded it."""
    try:
        with open("/proc/self/maps") as f:
            paths = dict.fromkeys(ln.split()[-1] for ln in f if "openblas" in ln and ln.rstrip().endswith(".so"))
    except OSError:  # not Linux
        return {}
    for path in paths:
        if path in _thread_fns:
            continue
        _thread_fns[path] = None
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for g, p in _PAIRS:
            if hasattr(lib, g) and hasattr(lib, p):
                get, put = getattr(lib, g), getattr(lib, p)
                get.restype, get.argtypes, put.restype, put.argtypes = ctypes.c_int, [], None, [ctypes.c_int]
                _thread_fns[path] = (get, put)
                break
    return {path: fns for path, fns in _thread_fns.items() if fns is not None and path in paths}


def thread_counts() -> dict:
    """``{library path: threads}`` of every loaded OpenBLAS whose thread count can be read."""
    return {path: get() for path, (get, _) in _openblas_threads().items()}


def set_threads(n):
    """Make numpy's OpenBLAS (the one numpy's ``matmul`` and the kernels' ``cblas_?gemm`` call) use
    ``n`` threads, or, given a dict from an earlier call, the counts it holds; returns
    ``{path: count it had}`` to restore them with, or None (nothing changed) for a count that is not
    positive. scipy's OpenBLAS (numba's BLAS, the kernels' ``gemv``) keeps its own count: measured on
    the CI machine, the paper-setting PPO ran at 285-301 ms an iteration with it threaded and at
    313-333 ms with it at one thread too."""
    if not isinstance(n, dict) and n <= 0:
        return None
    old = {}
    for path, (get, put) in _openblas_threads().items():
        want = n.get(path) if isinstance(n, dict) else (n if _NUMPY_LIB is not None and path == _NUMPY_LIB[0] else None)
        if want is None:
            continue
        old[path] = get()
        if old[path] != want:
            put(want)
    return old


def register() -> None:
    """Give LLVM numpy's ``cblas_?gemm`` under :data:`SYMBOLS`' names (once per process, before any
    kernel is compiled or loaded)."""
    global _registered
    if _registered or not NUMPY:
        return
    from llvmlite import binding

    for dt, addr in _FOUND[1].items():
        binding.add_symbol(SYMBOLS[dt], addr)
    _registered = True
