"""The on-disk kernel cache: ``<config.cache_dir>/kernels`` (``~/.cache/timerl/kernels``, or
``$TIMERL_CACHE_DIR/kernels``).

It holds each generated kernel's Python source, ``k_<hash of the source>.py`` (the cuda
backend's: ``cu_<hash>.py``; a compiled loop's, :mod:`timerl.runtime.loops`: ``l_<hash>.py``), and numba's
compiled code for it under ``__pycache__`` (``.nbi`` index, ``.nbc`` machine code per
signature; under ``$NUMBA_CACHE_DIR`` instead when that is set), so a program compiled
again, in any process, loads its kernels instead of compiling them. Deleting it is safe:
kernels are rebuilt on the next compile.

    timerl cache info
    timerl cache clear
"""

from __future__ import annotations

import os
import shutil

from ..config import config


def kernel_dir() -> str:
    return os.path.join(config.cache_dir, "kernels")


def info() -> dict:
    """``path``, ``kernels`` (generated sources) and ``bytes`` (sources and numba's files)."""
    d = kernel_dir()
    kernels, size = 0, 0
    for root, _, files in os.walk(d):
        for f in files:
            try:
                size += os.path.getsize(os.path.join(root, f))
            except OSError:  # removed meanwhile by another process
                continue
            kernels += root == d and f.startswith(("k_", "cu_", "l_")) and f.endswith(".py")
    return {"path": d, "kernels": kernels, "bytes": size}


def clear() -> dict:
    """Delete the kernel cache; returns what :func:`info` said before."""
    before = info()
    shutil.rmtree(before["path"], ignore_errors=True)
    return before
