"""``Program.compile``: check bounds, analyse demand with isl, hand over to a backend."""

from __future__ import annotations

import time
from collections.abc import Mapping

from ..config import config
from ..errors import CompileError
from ..ir.analysis import analyze, live_nodes, resolve_bounds

BACKENDS = ("reference", "numpy", "numba", "cuda")


def compile_program(prog, bounds, backend="numba", seed=0, memory_budget=None, passes=None, check=None):
    if backend not in BACKENDS:
        raise CompileError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise CompileError(f"seed must be an int, got {seed!r}")
    if memory_budget is not None and (not isinstance(memory_budget, int) or memory_budget <= 0):
        raise CompileError(f"memory_budget must be a positive int of bytes, got {memory_budget!r}")
    if not isinstance(bounds, Mapping):
        names = ", ".join(b.name for b in prog.bounds)
        raise CompileError(
            f"compile(bounds={bounds!r}): bounds must be a dict keyed by tl.Bound objects or their names "
            f"({names}), e.g. bounds={{{', '.join(f'{b.name!r}: 10' for b in prog.bounds)}}}"
        )
    times = {}
    t0 = time.perf_counter()
    pdg = prog.pdg
    live = live_nodes(pdg)
    if not live:
        raise CompileError("the program has no sink or parameter update: nothing would be computed")
    bounds = resolve_bounds(prog, pdg, bounds, live)
    times["bounds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    analysis = analyze(prog, pdg, bounds)
    times["analysis"] = time.perf_counter() - t0
    if backend == "reference":
        from ..runtime.reference import ReferenceExecutable

        check = config.check if check is None else bool(check)
        return ReferenceExecutable(prog, pdg.subgraph(analysis.live).copy(), bounds, seed, analysis, times, check)
    from ..runtime.executable import build_executable

    return build_executable(prog, pdg, bounds, analysis, times, backend=backend, seed=seed,
                            memory_budget=memory_budget, passes=passes, check=check)
