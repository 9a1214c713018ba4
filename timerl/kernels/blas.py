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


def _loaded_openblas() -> list:
    """Paths of the OpenBLAS libraries loaded in this process (numpy's; scipy's once numba's BLAS
    has loaded it), in load order; empty where ``/proc/self/maps`` cannot be read (not Linux)."""
    try:
        with open("/proc/self/maps") as f:
            return list(dict.fromkeys(ln.split()[-1] for ln in f if "openblas" in ln and ln.rstrip().endswith(".so")))
    except OSError:
        return []


def _numpy_blas():
    """(path, {dtype: address}) of numpy's loaded OpenBLAS, or None."""
    import numpy as np  # noqa: F401  (loads numpy's BLAS into the process)

    for path in _loaded_openblas():
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


def _thread_fns(path):
    """``(get, set)`` of the thread count of the OpenBLAS at ``path``, or None."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for g, p in _PAIRS:
        if hasattr(lib, g) and hasattr(lib, p):
            get, put = getattr(lib, g), getattr(lib, p)
            get.restype, get.argtypes, put.restype, put.argtypes = ctypes.c_int, [], None, [ctypes.c_int]
            return get, put
    return None


_NUMPY_THREADS = _thread_fns(_NUMPY_LIB[0]) if _NUMPY_LIB is not None else None


def thread_counts() -> dict:
    """``{library path: threads}`` of every loaded OpenBLAS whose thread count can be read."""
    fns = {path: _thread_fns(path) for path in _loaded_openblas()}
    return {path: f[0]() for path, f in fns.items() if f is not None}


def set_threads(n: int) -> int | None:
    """Make numpy's OpenBLAS (the one numpy's ``matmul`` and the kernels' ``cblas_?gemm`` call) use
    ``n`` threads; returns the count it had (to restore it with), or None where nothing changed
    (``n`` not positive, or its thread count not found). scipy's OpenBLAS (numba's BLAS, the kernels'
    ``gemv``) keeps its own count: measured on the CI machine, the paper-setting PPO ran at 285-301 ms
    an iteration with it threaded and at 313-333 ms with it at one thread too."""
    if _NUMPY_THREADS is None or n <= 0:
        return None
    get, put = _NUMPY_THREADS
    old = get()
    if old != n:
        put(n)
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
