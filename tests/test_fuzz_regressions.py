"""Defects found by differential fuzzing (``python -m tests.fuzz``), one minimal program each."""

import re

import numpy as np
import pytest

import timerl as tl


def _least_budget(build, bounds, backend):
    with pytest.raises(tl.CompileError) as err:
        build().compile(bounds, backend=backend, memory_budget=1)
    return int(re.search(r"memory_budget>=(\d+)", str(err.value)).group(1))


def test_least_memory_budget_holds_when_a_ufunc_cannot_write_in_place():
    # fuzz seed 26: (|x| + 0.5) ** n with n int64 runs the ufunc in float64 and casts back,
    # so the run does not write into x's buffer; the planner counted that donation anyway,
    # planned a peak 16 bytes under the run's and chose a schedule that broke the budget
    def build():
        prog = tl.Program("t")
        (t,) = prog.dims
        with prog:
            x = tl.tensor(np.linspace(-1, 1, 8, dtype="float32").reshape(2, 4), domain=(t,))
            n = tl.const(np.array([2], dtype="int64"))
            tl.sink((tl.abs(x) + 0.5) ** n, lambda v, p: None)
            tl.sink(x[1].spatial[1:], lambda v, p: None)
        return prog

    least = _least_budget(build, {"T": 2}, "numpy")
    exe = build().compile({"T": 2}, backend="numpy", memory_budget=least).run()
    assert exe.stats["peak_bytes"] <= least
    assert exe.stats["planned_peak_bytes"] == exe.stats["peak_bytes"]
