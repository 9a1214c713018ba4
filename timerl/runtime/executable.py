"""The Executable: a lowered program and its stores, run on demand.

:mod:`timerl.compiler` builds it (passes, schedule, memory plan); the executable lowers
the chosen plan once (``stats["compile_seconds"]["lower"]``) and only runs it.
"""

from __future__ import annotations

import time

import numpy as np

from ..schedule.tree import ScheduleTree


class Schedule(ScheduleTree):
    """The schedule tree, headed by one line per tensor read by slices: its storage kind."""

    def __init__(self, *args, kinds=None, **kw):
        super().__init__(*args, **kw)
        self.kinds = kinds or {}

    def __str__(self):
        head = "".join(st.header() + "\n" for _, st in sorted(self.kinds.items()))
        return head + super().__str__()

    __repr__ = __str__


class Executable:
    def __init__(self, prog, pdg, bounds, seed, analysis, plan, backend, check, times, planned):
        self.prog, self.pdg, self.bounds, self.seed = prog, pdg, bounds, seed
        self.analysis, self.plan, self.backend, self.check = analysis, plan, backend, check
        t0 = time.perf_counter()
        self.source, self._run, self._mem, self._reset, self._stores = plan.lower(
            prog, pdg, bounds, seed, "check" if check else "run", backend)
        times["lower"] = time.perf_counter() - t0
        self.schedule = plan.schedule
        self.stats = {"peak_bytes": 0, "peak_host_bytes": 0, "compile_seconds": times, "run_seconds": 0.0,
                      "kernels": len(plan.kernels), "swapped_bytes": 0, "planned_peak_bytes": planned,
                      "statements": len(plan.problem.groups), "donations": len(plan.donated)}

    def planned_peak(self) -> int:
        """The schedule's peak of live tensor bytes, counted without running the ops."""
        if self.stats["planned_peak_bytes"] is None:
            self.stats["planned_peak_bytes"] = self.plan.planned_peak(self.prog, self.pdg, self.bounds, self.seed)
        return self.stats["planned_peak_bytes"]

    def run(self, progress=False):
        for s in self._stores:
            s.clear()
        self._reset()
        t0 = time.perf_counter()
        if progress:
            print(f"timerl: running {len(self.plan.problem.groups)} statements ({self.backend})", flush=True)
        old = np.seterr(all="ignore")
        try:
            self._run()
        finally:
            np.seterr(**old)
            for s in self._stores:
                s.clear()
        self.stats["run_seconds"] = time.perf_counter() - t0
        self.stats["peak_bytes"] = self._mem()[1]
        if progress:
            print(f"timerl: done in {self.stats['run_seconds']:.3f}s", flush=True)
        return self
