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


_FOUND = None if os.environ.get("TIMERL_NUMPY_BLAS", "1") in ("0", "false", "no") else _numpy_blas()
#: which BLAS the kernels call: "numpy <library file>" or "numba"
NAME = f"numpy {os.path.basename(_FOUND[0])}" if _FOUND else "numba"
NUMPY = _FOUND is not None

_registered = False


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
