"""The compiler driver: one program in, one executable out.

    bounds -> analysis -> passes (verified in checking mode) -> schedule -> memory plan
           -> lowering -> backend

The passes (:mod:`timerl.passes`) rewrite the graph, then annotate it: ``group`` records the isl
statements (groups of ops joined at the same point), which the scheduler builds its problem
from, and ``fuse`` the statement-kernel segments of each group on the numba backend, which the
lowering reads. When the grouped schedule does not exist, :class:`Plan` falls back to one
statement per node (and the memory-budget search tries that too); those groups get their
segments from :func:`timerl.passes.fuse.annotate_groups`.

:func:`compile_program` is what ``Program.compile`` calls (``timerl.api.compile`` is its thin
entry). Every stage is timed in ``stats["compile_seconds"]``: ``bounds``, ``analysis`` (isl
demand and validation), ``pass_<name>`` per pass (``pass_group`` and ``pass_fuse`` too) and
``passes`` in all (``verify`` when checking), ``schedule`` (isl statements, dependences,
``compute_schedule``), ``memory`` (last readers, frees, donation), ``ast`` (isl AST -> schedule
tree), ``plan`` (the planned peaks, when a budget is given), ``spill`` (choosing swaps to disk,
when the budget needs them, :func:`spill_to_fit`) and ``lower`` (Python source, compiled once).
The reference backend stops after the analysis: it is the oracle and runs the program as
written.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping

from .config import config
from .errors import BudgetError, CompileError
from .ir.analysis import analyze, live_nodes, resolve_bounds
from .kernels import statement
from .passes import PassContext, check_switches, run_passes
from .passes.fuse import annotate_groups
from .runtime.executable import Executable, Schedule
from .runtime.interpreter import Lowering
from .runtime.reference import ReferenceExecutable
from .schedule import memory, spill
from .schedule.model import GROUPS, build_problem, compute_schedule, streams, time_map
from .schedule.tree import build_tree

BACKENDS = ("reference", "numpy", "numba", "cuda")
VARIANTS = ("default", "serialize_sccs", "no_proximity")


def compile_program(prog, bounds, backend="numba", seed=0, memory_budget=None, passes=None, check=None):
    """``prog.compile(...)``: check the arguments, then run every stage (see the module docstring)."""
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
    check_switches(passes)
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
        check = config.check if check is None else bool(check)
        return ReferenceExecutable(prog, pdg.subgraph(analysis.live).copy(), bounds, seed, analysis, times, check)
    return build_executable(prog, pdg, bounds, analysis, times, backend=backend, seed=seed,
                            memory_budget=memory_budget, passes=passes, check=check)


def pass_context(backend) -> PassContext:
    """What the passes learn of ``backend``: numba's kernel generator for the ``fuse`` pass."""
    return PassContext(backend, statement.renderable if backend in ("numba", "cuda") else None)


def cuda_available():
    """Raise a CompileError saying what to do when numba.cuda has neither a GPU nor the simulator."""
    try:
        from numba import cuda  # noqa: PLC0415
        ok = cuda.is_available()
    except Exception as err:  # noqa: BLE001 - numba.cuda missing or broken: say so below
        ok, why = False, f" ({type(err).__name__}: {err})"
    else:
        why = ""
    if not ok:
        raise CompileError("backend 'cuda' needs a CUDA GPU that numba.cuda can use" + why + "; without one, run it "
                           "in numba's CUDA simulator (set NUMBA_ENABLE_CUDASIM=1 before Python starts; tiny sizes "
                           "only) or use backend='numba'")


def optimize(prog, bounds, passes=None, check=True, backend="numba"):
    """``(pdg, analysis)`` of ``prog`` after the bounds, the analysis and the pass pipeline, without
    scheduling or lowering (for structural tests and tools); ``check`` verifies after each pass;
    ``backend``: the one the ``fuse`` pass annotates for."""
    pdg = prog.pdg
    bounds = resolve_bounds(prog, pdg, bounds, live_nodes(pdg))
    return run_passes(prog, pdg, bounds, analyze(prog, pdg, bounds), passes, {}, check=check,
                       ctx=pass_context(backend))


def build_executable(prog, pdg, bounds, analysis, times, backend="numba", seed=0, memory_budget=None,
                     passes=None, check=None):
    """Passes, schedule, memory plan (the least peak under ``memory_budget``) and the Executable."""
    if backend == "cuda":
        cuda_available()
    times = dict(times)
    check = config.check if check is None else bool(check)
    t0 = time.perf_counter()
    pdg, analysis = run_passes(prog, pdg, bounds, analysis, passes, times, check=check or config.verify,
                               ctx=pass_context(backend))
    times["passes"] = time.perf_counter() - t0
    grouping = GROUPS in pdg.graph  # the group pass ran (compile(passes={"group": False}): one per node)
    plan = Plan(prog, pdg, bounds, analysis, grouping, "default", times)
    planned = None
    if memory_budget is not None:
        t0 = time.perf_counter()
        planned, plan = fit_budget(prog, pdg, bounds, analysis, seed, backend, plan, grouping, memory_budget, times)
        times["plan"] = time.perf_counter() - t0 - times.get("spill", 0.0)
        if planned > memory_budget:
            raise BudgetError(
                f"memory_budget={memory_budget} bytes cannot be met: the least planned peak of live tensor bytes "
                f"over the schedules, storage choices and spills to disk tried is {planned} bytes; "
                f"pass memory_budget>={planned}", planned)
    return Executable(prog, pdg, bounds, seed, analysis, plan, backend, check, times, planned)


#: the most live nodes for which the memory-budget search also tries one statement per node: isl's
#: scheduler on hundreds of statements (a per-step learner's backward pass) runs for many minutes
UNGROUPED_MAX = 200


def fit_budget(prog, pdg, bounds, analysis, seed, backend, plan, grouping, budget, times):
    """``(planned peak, plan)``: the first plan found under ``budget``, else the least peak tried.

    In order: the default schedule with each storage mode (default, blocks without rings, point
    stores only), that schedule with spills to disk (:func:`spill_to_fit`), the other schedule
    variants (and one statement per node, for up to :data:`UNGROUPED_MAX` nodes) with each storage
    mode, and spills on the least of those when it is lower. The default schedule with spills comes before the other schedules: it keeps
    the fused statements that run fastest, and it costs no new isl schedule."""
    tried = []

    def fits(peak, alt):
        tried.append((peak, alt))
        return peak <= budget

    def storages(base):
        yield base
        for st in memory.STORAGE_MODES:
            if st != base.storage:
                alt = base.with_storage(st)
                if alt.kinds != base.kinds:
                    yield alt

    def spilled(base):
        t0 = time.perf_counter()
        got = spill_to_fit(prog, pdg, bounds, analysis, seed, backend, base, budget)
        times["spill"] = times.get("spill", 0.0) + time.perf_counter() - t0
        return got

    for alt in storages(plan):
        if fits(alt.planned_peak(prog, pdg, bounds, seed, backend), alt):
            return tried[-1]
    first = min(tried, key=lambda x: x[0])
    if fits(*spilled(first[1])):
        return tried[-1]
    others = len(tried)
    for g in ((grouping, False) if grouping and len(analysis.live) <= UNGROUPED_MAX else (grouping,)):
        for v in VARIANTS:
            if (g, v) == (grouping, "default") or v == "no_proximity" and streams(pdg, plan.problem):
                continue  # tried; a streaming program's default has no proximity already
            try:
                base = Plan(prog, pdg, bounds, analysis, g, v, times)
            except CompileError:
                continue
            for alt in storages(base):
                if fits(alt.planned_peak(prog, pdg, bounds, seed, backend), alt):
                    return tried[-1]
    if len(tried) > others:
        least = min(tried[others:], key=lambda x: x[0])
        if least[0] < first[0] and fits(*spilled(least[1])):
            return tried[-1]
    return min(tried, key=lambda x: x[0])


def spill_to_fit(prog, pdg, bounds, analysis, seed, backend, plan, budget):
    """``(planned peak, plan)``: ``plan`` with swaps to disk (:mod:`timerl.schedule.spill`) added
    one at a time until the planned peak is under ``budget`` or no swap lowers it. Each round
    weighs the nodes that hold bytes when the peak is reached, most bytes first, and takes the
    first whose swap lowers the peak (a swap elsewhere cannot lower it). Then, if the peak is
    still over, the same swaps without prefetch when that is lower (a prefetch holds a unit one
    statement longer)."""
    candidates = spill.spillable(pdg, plan.problem, plan.buffers, plan.stored_views)
    swaps = {}  # node -> its Swap (None: it has none), made when first weighed

    def swap(n, prefetch=True):
        return spill.plan_swap(pdg, analysis, plan.problem, plan.T, plan.buffers[n], plan.views, len(plan.frees),
                               bounds, prefetch)

    def planned(chosen):
        alt = plan.with_swaps(chosen, analysis, bounds)
        return alt.planned_peak(prog, pdg, bounds, seed, backend, holders=True), alt

    (peak, held), best, chosen = plan.planned_peak(prog, pdg, bounds, seed, backend, holders=True), plan, {}
    while peak > budget:
        for n in sorted((n for n in held if held[n] > 0 and n in candidates and n not in chosen),
                        key=lambda n: (-held[n], n)):
            if n not in swaps:
                swaps[n] = swap(n)
            if swaps[n] is None:
                continue
            (got, got_held), alt = planned({**chosen, n: swaps[n]})
            if got < peak:
                peak, held, best, chosen[n] = got, got_held, alt, swaps[n]
                break
        else:
            break
    if peak > budget and chosen:
        (got, _), alt = planned({n: swap(n, prefetch=False) for n in chosen})
        if got < peak:
            peak, best = got, alt
    return peak, best


class Plan:
    """One schedule with its memory plan (frees, donation, storage kinds), lowered to a tree.

    ``grouping``: the statements are the ``group`` pass's groups (``pdg.graph["groups"]``), else
    one per node; a grouping without a schedule is refined (``model.refine``), and failing that
    dropped. Every scheduled group carries its ``fuse`` segments when the graph has them."""

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
        # groups the fuse pass did not see (the fallback, a refined grouping)
        annotate_groups(pdg, self.problem.groups, statement.renderable)
        T = time_map(self.isl_schedule, self.problem)
        t1 = time.perf_counter()
        last = memory.last_reads(prog, pdg, analysis, self.problem, T)
        self.views, last = memory.view_lifetimes(prog, pdg, analysis, self.problem, T, last, storage)
        self.inline = memory.inline_frees(pdg, analysis, self.problem, T, last)
        inl = {n for ns in self.inline.values() for n, _ in ns}
        frees = memory.free_maps(prog, pdg, analysis, self.problem, T, {p: m for p, m in last.items() if p not in inl})
        self.donated = memory.donations(prog, pdg, analysis, self.problem, T, last)
        self.frees = sorted(p for p in last if p not in inl)
        self._live = memory.LivePairs(analysis, self.problem, T, last, frees)
        self.storage = storage
        self.kinds, self.slots, self.single = memory.storage_plan(pdg, analysis, self.problem, self._live,
                                                                  self.inline, storage)
        t2 = time.perf_counter()
        self.T, self.free_stmts, self.swaps = T, frees, {}
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
        alt.kinds, alt.slots, alt.single = memory.storage_plan(self.schedule.pdg, self._live.analysis, self.problem,
                                                               self._live, self.inline, storage)
        # views of these kinds among the run's (only those have their operands' lifetimes extended)
        alt.views = {c: v for c, v in memory.views(self.schedule.pdg, self.problem, alt.kinds).items() if c in self.views}
        alt.schedule = Schedule(self.tree, self.problem.groups, self.schedule.pdg, dict(self.donated), self.inline,
                                kinds=alt.kinds)
        return alt

    def with_swaps(self, swaps: dict, analysis, bounds):
        """The same schedule with the swaps ``swaps`` (node -> :class:`timerl.schedule.spill.Swap`)
        among its statements."""
        alt = copy.copy(self)
        alt.swaps = dict(swaps)
        maps = [(k, n, m) for n, sw in sorted(swaps.items()) for k, m in sw.maps]
        alt.tree = build_tree(self.T, self.free_stmts, analysis.model.ctx, bounds, maps)
        alt.schedule = Schedule(alt.tree, self.problem.groups, self.schedule.pdg, dict(self.donated), self.inline,
                                kinds=self.kinds, spills=alt.swaps)
        return alt

    def lower(self, prog, pdg, bounds, seed, mode, backend="numpy"):
        low = Lowering(prog, pdg, bounds, seed, self.problem.groups, self.tree, dict(self.donated), mode, backend,
                       self.inline, self.kinds, self.slots, self.single, self.views, self.swaps)
        out = low.build(self.frees)
        # what is stored and how, and which of it are views (the candidates of a swap)
        self.buffers, self.stored_views = low.lowered.buffers, low.lowered.views
        if mode == "plan":
            self._plan_ns = low.ns
        if mode != "plan":  # a planning lowering (planned_peak) generates no kernels: keep the run's
            self.kernels = low.kernels
            self.compiled_loops, self.interpreted_loops = low.compiled_loops, low.interpreted_loops
            self.lowered = low.lowered  # the backend-neutral lowered program the run renders
            self.progress_units = low.progress_units()
            self.donated = low.donated  # the lowering may decline a donation it cannot do in place
            self.schedule.donated = low.donated
        return out

    def planned_peak(self, prog, pdg, bounds, seed, backend="numpy", holders=False):
        """The planned peak of live bytes; with ``holders``, ``(peak, {node: bytes held when the peak
        is first reached})``, from a second planning run."""
        _, run, mem, reset, stores = self.lower(prog, pdg, bounds, seed, "plan", backend)
        run()
        peak = mem()[1]
        if not holders:
            return peak
        ns = self._plan_ns
        ns["target"][0] = peak
        for st in stores:
            st.clear()
        reset()
        run()
        return peak, (ns["at_peak"] or [{}])[0]
