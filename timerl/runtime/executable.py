"""The Executable: a lowered program and its stores, run on demand.

:mod:`timerl.compiler` builds it (passes, schedule, memory plan); the executable lowers
the chosen plan once (``stats["compile_seconds"]["lower"]``) and only runs it.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import tqdm

from ..config import config
from ..kernels import blas
from ..schedule.tree import ScheduleTree
from .spill import SpillSession


class Schedule(ScheduleTree):
    """The schedule tree, headed by one line per tensor read by slices (its storage kind) and one
    per tensor spilled to disk (:class:`timerl.schedule.spill.Swap`)."""

    def __init__(self, *args, kinds=None, spills=None, **kw):
        spills = spills or {}
        super().__init__(*args, swaps={n: sw.dims for n, sw in spills.items()}, **kw)
        self.kinds, self.spills = kinds or {}, spills

    def __str__(self):
        head = "".join(st.header() + "\n" for _, st in sorted(self.kinds.items()))
        head += "".join(sw.header() + "\n" for _, sw in sorted(self.spills.items()))
        return head + super().__str__()

    __repr__ = __str__


class Executable:
    """A compiled program: ``prog.compile(...)`` returns one; ``exe.run()`` runs it.

    Attributes:
        schedule: the schedule tree; ``print(exe.schedule)`` shows Python-like loops,
            statement executions, frees and swaps (for ``"reference"``, its demand order).
        pdg: the optimized dependence graph (a ``networkx.MultiDiGraph``).
        stats: a dict, filled by ``run()``: ``peak_bytes`` (peak of live bytes by base buffer:
            views cost nothing, kernels' temporaries count while they run, a spilled value
            nothing while it is on disk), ``peak_host_bytes`` (cuda: the most bytes swapped off the
            device at once), ``compile_seconds`` (a dict per
            stage), ``run_seconds``, ``kernels`` (generated kernels), ``swapped_bytes`` (bytes
            written to spill files plus bytes read back), ``spilled_bytes`` (the most bytes on
            disk at once), ``swap_seconds`` (time writing spill files and waiting for reads),
            ``planned_peak_bytes``, ``statements``, ``donations``, ``compiled_loops`` (the loops
            running as numba functions: iterator and statements, :mod:`timerl.runtime.loops`),
            ``interpreted_loops`` (loops with a statement kernel left in Python, and why); on ``"cuda"`` also
            ``peak_device_bytes`` (the device pool's peak of base allocations, kernel temporaries
            included), ``h2d_bytes`` and ``d2h_bytes`` (bytes copied to and from the device).
        backend, bounds, seed, source: how it was compiled (``source``: the lowered Python).

        exe = prog.compile(bounds={"T": 4}, backend="numpy")
        exe.run()
        print(exe.stats["peak_bytes"], exe.schedule)
    """

    def __init__(self, prog, pdg, bounds, seed, analysis, plan, backend, check, times, planned):
        self.prog, self.pdg, self.bounds, self.seed = prog, pdg, bounds, seed
        self.analysis, self.plan, self.backend, self.check = analysis, plan, backend, check
        t0 = time.perf_counter()
        self.source, self._run, self._mem, self._reset, self._stores = plan.lower(
            prog, pdg, bounds, seed, "check" if check else "run", backend)
        times["lower"] = time.perf_counter() - t0
        self.schedule = plan.schedule
        self._spill = next((s for s in self._stores if isinstance(s, SpillSession)), None)
        self.stats = {"peak_bytes": 0, "peak_host_bytes": 0, "compile_seconds": times, "run_seconds": 0.0,
                      "kernels": len(plan.kernels), "swapped_bytes": 0, "spilled_bytes": 0, "swap_seconds": 0.0,
                      "planned_peak_bytes": planned, "statements": len(plan.problem.groups),
                      "donations": len(plan.donated),
                      "compiled_loops": list(getattr(plan, "compiled_loops", [])),
                      "interpreted_loops": list(getattr(plan, "interpreted_loops", []))}

    def planned_peak(self) -> int:
        """The schedule's peak of live tensor bytes, counted without running the ops."""
        if self.stats["planned_peak_bytes"] is None:
            self.stats["planned_peak_bytes"] = self.plan.planned_peak(self.prog, self.pdg, self.bounds, self.seed,
                                                                         self.backend)
        return self.stats["planned_peak_bytes"]

    def run(self, progress=False):
        """Run the whole program once; returns ``self``.

        Each call re-runs everything: sinks and UDFs fire again and random values repeat (they
        depend only on the seed, op and point). ``progress=True`` shows a tqdm bar on stderr that
        advances once per iteration of the schedule's outermost loop (RL programs: per training
        iteration).
        Afterwards ``stats`` holds ``peak_bytes`` and ``run_seconds`` (and the swap counters). An
        error inside the program (e.g. ``max`` over an empty slice) is a :class:`tl.RuntimeFault`
        naming the tensor and point. The run's spill files are removed when it ends, however it ends.
        """
        for s in self._stores:
            s.clear()
        self._reset()
        pool = None
        if self.backend == "cuda":
            from ..kernels.cudart import POOL as pool  # noqa: PLC0415 - numba.cuda: only on this backend
            pool.reset()
        if self._spill is not None:
            self._spill.reset()
        t0 = time.perf_counter()
        bar = None
        if progress:
            total, dim = self.plan.progress_units
            # a schedule without loops is one step, ticked when it ends
            # total None: a while loop somewhere, so tqdm counts without a total
            bar = tqdm.tqdm(total=1 if total == 0 else total, desc=f"timerl ({dim} loop)" if dim else "timerl",
                            unit="it", file=sys.stderr, dynamic_ncols=True)
        old = np.seterr(all="ignore")
        threads = blas.set_threads(config.blas_threads)  # TIMERL_BLAS_THREADS, restored after the run
        try:
            self._run(bar.update if bar is not None else None)
            if bar is not None and total == 0:
                bar.update()
        finally:
            np.seterr(**old)
            if threads is not None:
                blas.set_threads(threads)
            for s in self._stores:
                s.clear()
            if bar is not None:
                bar.close()
        self.stats["run_seconds"] = time.perf_counter() - t0
        self.stats["peak_bytes"] = self._mem()[1]
        if pool is not None:
            self.stats.update(peak_device_bytes=int(pool.peak), h2d_bytes=int(pool.h2d), d2h_bytes=int(pool.d2h))
            # what left the device for its spill files: the most bytes held off the device at once
            self.stats["peak_host_bytes"] = self._spill.disk_peak if self._spill is not None else 0
        if self._spill is not None:
            sp = self._spill
            self.stats.update(swapped_bytes=sp.out_bytes + sp.in_bytes, spilled_bytes=sp.disk_peak,
                              swap_seconds=sp.seconds)
        return self
