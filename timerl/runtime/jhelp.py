"""Helpers of compiled loops (:mod:`timerl.runtime.loops`), cached on disk by numba once per
machine and types: a loop's compile links them instead of compiling their numpy semantics again.

``put(dst, src)`` writes a value into a row of a block array. numba's array assignment checks the
shapes and formats its message with the shapes (about 3.5 s of compile, once per process, in a
function that assigns an array into a slice); here that code is compiled once and cached.
"""

import numba


@numba.njit(cache=True, error_model="numpy", boundscheck=False)
def put(dst, src):
    dst[...] = src
