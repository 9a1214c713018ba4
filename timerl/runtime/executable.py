"""``build_executable``: passes, isl schedule, memory plan, lowering; the Executable.

Stages (each timed in ``stats["compile_seconds"]``): ``passes`` (PDG -> PDG),
``schedule`` (isl statements, dependences, ``compute_schedule``), ``memory`` (last
readers, frees, donation), ``ast`` (isl AST -> schedule tree), ``lower`` (Python
source, compiled once), ``plan`` (the planned peak, when a budget is given).
"""

from __future__ import annotations

import copy
import sys
import time

import islpy as isl
import numpy as np
import tqdm

from ..config import config
from ..errors import CompileError
from ..passes import run_passes
from ..schedule import memory
from ..schedule.model import build_problem, compute_schedule, time_map
from ..schedule.tree import ScheduleTree, build_tree
from .interpreter import Lowering

VARIANTS = ("default", "serialize_sccs", "no_proximity")


class Schedule(ScheduleTree):
    """The schedule tree, headed by one line per tensor read by slices: its storage kind."""

    def __init__(self, *args, kinds=None, **kw):
        super().__init__(*args, **kw)
        self.kinds = kinds or {}

    def __str__(self):
        head = "".join(st.header() + "\n" for _, st in sorted(self.kinds.items()))
        return head + super().__str__()

    __repr__ = __str__


class Plan:
    """One schedule with its memory plan (frees, donation, storage kinds), lowered to a tree."""

    def __init__(self, prog, pdg, bounds, analysis, grouping, variant, times, storage="default"):
        t0 = time.perf_counter()
        self.problem = build_problem(prog, pdg, analysis, grouping)
        try:
            self.isl_schedule = compute_schedule(prog, pdg, self.problem, variant)
        except CompileError:
            if not grouping:
                raise
            # grouping joined two instances that depend on each other through another
            # statement (a cycle at one point): schedule one statement per node instead
            grouping = False
            self.problem = build_problem(prog, pdg, analysis, grouping)
            self.isl_schedule = compute_schedule(prog, pdg, self.problem, variant)
        T = time_map(self.isl_schedule, self.problem)
        t1 = time.perf_counter()
        last = memory.last_reads(prog, pdg, analysis, self.problem, T)
        self.inline = memory.inline_frees(pdg, analysis, self.problem, T, last)
        inl = {n for ns in self.inline.values() for n, _ in ns}
        frees = memory.free_maps(prog, pdg, analysis, self.problem, T, {p: m for p, m in last.items() if p not in inl})
        self.donated = memory.donations(prog, pdg, analysis, self.problem, T, last)
        self.frees = sorted(p for p in last if p not in inl)
        self._memory_args = (prog, pdg, analysis, self.problem, T, last, frees)
        self.storage = storage
        self.kinds = memory.storage_kinds(*self._memory_args, mode=storage)
        t2 = time.perf_counter()
        self.tree = build_tree(T, frees, analysis.model.ctx, bounds)
        self.schedule = Schedule(self.tree, self.problem.groups, pdg, self.donated, self.inline, kinds=self.kinds)
        t3 = time.perf_counter()
        self.variant, self.grouping = variant, grouping
        for k, v in (("schedule", t1 - t0), ("memory", t2 - t1), ("ast", t3 - t2)):
            times[k] = times.get(k, 0.0) + v

    def with_storage(self, storage):
        """The same schedule with the storage kinds of another mode (memory.STORAGE_MODES)."""
        alt = copy.copy(self)
        alt.storage = storage
        alt.kinds = memory.storage_kinds(*self._memory_args, mode=storage)
        alt.schedule = Schedule(self.tree, self.problem.groups, self.schedule.pdg, dict(self.donated), self.inline,
                                kinds=alt.kinds)
        return alt

    def lower(self, prog, pdg, bounds, seed, mode, backend="numpy"):
        low = Lowering(prog, pdg, bounds, seed, self.problem.groups, self.tree, dict(self.donated), mode, backend,
                       self.inline, self.kinds)
        out = low.build(self.frees)
        self.kernels = low.kernels
        self.progress_units = low.progress_units()
        if mode != "plan":
            self.donated = low.donated  # the lowering may decline a donation it cannot do in place
            self.schedule.donated = low.donated
        return out

    def planned_peak(self, prog, pdg, bounds, seed) -> int:
        _, run, mem, reset, _ = self.lower(prog, pdg, bounds, seed, "plan")
        run()
        return mem()[1]


def build_executable(prog, pdg, bounds, analysis, times, backend="numba", seed=0, memory_budget=None,
                     passes=None, check=None):
    if backend == "cuda":
        raise CompileError("backend 'cuda' is not available yet (numba.cuda kernels come with their own issue); "
                           "use backend='numba' or 'numpy'")
    times = dict(times)
    t0 = time.perf_counter()
    pdg, analysis = run_passes(prog, pdg, bounds, analysis, passes, times)
    times["passes"] = time.perf_counter() - t0
    grouping = (passes or {}).get("group", True)
    plan = Plan(prog, pdg, bounds, analysis, grouping, "default", times)
    planned = None
    if memory_budget is not None:
        t0 = time.perf_counter()
        planned = plan.planned_peak(prog, pdg, bounds, seed)
        tried = [(planned, plan)]
        if planned > memory_budget:
            # the alternatives: storage kinds on each schedule (default, blocks without rings,
            # point stores only), then the other schedule variants
            def storages(base):
                for st in memory.STORAGE_MODES:
                    if st == base.storage:
                        continue
                    alt = base.with_storage(st)
                    if alt.kinds != base.kinds:
                        yield alt

            def candidates():
                yield from storages(plan)
                for g in ((grouping, False) if grouping else (False,)):
                    for v in VARIANTS:
                        if (g, v) == (grouping, "default"):
                            continue
                        try:
                            alt = Plan(prog, pdg, bounds, analysis, g, v, times)
                        except CompileError:
                            continue
                        yield alt
                        yield from storages(alt)

            for alt in candidates():
                tried.append((alt.planned_peak(prog, pdg, bounds, seed), alt))
                if tried[-1][0] <= memory_budget:
                    break
            planned, plan = min(tried, key=lambda x: x[0])
        times["plan"] = time.perf_counter() - t0
        if planned > memory_budget:
            raise CompileError(
                f"memory_budget={memory_budget} bytes cannot be met: the least planned peak of live tensor bytes "
                f"over the schedules and storage choices tried is {planned} bytes; pass memory_budget>={planned}")
    check = config.check if check is None else bool(check)
    return Executable(prog, pdg, bounds, seed, analysis, plan, backend, check, times, planned)


class Executable:
    """A compiled program: ``prog.compile(...)`` returns one; ``exe.run()`` runs it.

    Attributes:
        schedule: the schedule tree; ``print(exe.schedule)`` shows Python-like loops,
            statement executions, frees and swaps (for ``"reference"``, its demand order).
        pdg: the optimized dependence graph (a ``networkx.MultiDiGraph``).
        stats: a dict, filled by ``run()``: ``peak_bytes`` (peak of live tensor bytes),
            ``peak_host_bytes``, ``compile_seconds`` (a dict per stage), ``run_seconds``,
            ``kernels`` (generated kernels), ``swapped_bytes``, ``planned_peak_bytes``,
            ``statements``, ``donations``.
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
        self.stats = {"peak_bytes": 0, "peak_host_bytes": 0, "compile_seconds": times, "run_seconds": 0.0,
                      "kernels": len(plan.kernels), "swapped_bytes": 0, "planned_peak_bytes": planned,
                      "statements": len(plan.problem.groups), "donations": len(plan.donated)}

    def planned_peak(self) -> int:
        """The schedule's peak of live tensor bytes, counted without running the ops."""
        if self.stats["planned_peak_bytes"] is None:
            self.stats["planned_peak_bytes"] = self.plan.planned_peak(self.prog, self.pdg, self.bounds, self.seed)
        return self.stats["planned_peak_bytes"]

    def run(self, progress=False):
        """Run the whole program once; returns ``self``.

        Each call re-runs everything: sinks and UDFs fire again and random values repeat (they
        depend only on the seed, op and point). ``progress=True`` shows a tqdm bar on stderr that
        advances once per iteration of the schedule's outermost loop (RL programs: per training
        iteration).
        Afterwards ``stats`` holds ``peak_bytes`` and ``run_seconds``. An error inside the program
        (e.g. ``max`` over an empty slice) is a :class:`tl.RuntimeFault` naming the tensor and point.
        """
        for s in self._stores:
            s.clear()
        self._reset()
        t0 = time.perf_counter()
        bar = None
        if progress:
            total, dim = self.plan.progress_units
            # a schedule without loops is one step, ticked when it ends
            bar = tqdm.tqdm(total=total or 1, desc=f"timerl ({dim} loop)" if dim else "timerl", unit="it",
                            file=sys.stderr, dynamic_ncols=True)
        old = np.seterr(all="ignore")
        try:
            self._run(bar.update if bar is not None else None)
            if bar is not None and total == 0:
                bar.update()
        finally:
            np.seterr(**old)
            for s in self._stores:
                s.clear()
            if bar is not None:
                bar.close()
        self.stats["run_seconds"] = time.perf_counter() - t0
        self.stats["peak_bytes"] = self._mem()[1]
        return self
