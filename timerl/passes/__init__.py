"""Whole-program passes: each a function ``(prog, pdg, bounds, analysis) -> (pdg, analysis)``.

``PIPELINE`` names them in order; ``run_passes`` times each and skips those switched
off with ``compile(passes={name: False})``. Names the scheduler reads (not PDG
rewrites): ``"group"`` (one isl statement per group of ops joined at the same point).
"""

from __future__ import annotations

import time

from ..errors import CompileError


def dce(prog, pdg, bounds, analysis):
    """Dead-code elimination: keep only what a sink or parameter update demands."""
    keep = [n for n in analysis.live if not analysis.demand[n].is_empty()]
    return pdg.subgraph(keep).copy(), analysis


PIPELINE = [("dce", dce)]
SCHEDULER_SWITCHES = ("group",)


def run_passes(prog, pdg, bounds, analysis, switches, times):
    switches = dict(switches or {})
    known = {n for n, _ in PIPELINE} | set(SCHEDULER_SWITCHES)
    for k in switches:
        if k not in known:
            raise CompileError(f"unknown pass {k!r} in compile(passes=...); passes are {', '.join(sorted(known))}")
    for name, fn in PIPELINE:
        if switches.get(name, True) is False:
            continue
        t0 = time.perf_counter()
        pdg, analysis = fn(prog, pdg, bounds, analysis)
        times[f"pass_{name}"] = time.perf_counter() - t0
    return pdg, analysis
