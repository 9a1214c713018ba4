"""The isl model of a PDG for scheduling: statements, dependences, the computed schedule.

Statement ``S<g>`` is a *group* of live nodes (see :func:`make_groups`; the ``group`` pass,
:mod:`timerl.passes.group`, records them on the PDG and :func:`build_problem` reads them): nodes with
the same domain and the same demanded points, joined at the same point by basis
edges, executed together in a fixed topological order. Grouping keeps isl's problem
small (the scheduler's cost grows steeply with statements). Its domain is the group's
demanded set with the bounds as isl parameters fixed by the context.

Dependences (producer instance -> consumer instance) come from every live edge's
access relation (``analysis.model.access``), restricted to both ends' demanded
points, plus an order among UDFs that share a ``state`` key (program order: the
full point, then creation index). They are both validity and proximity constraints.

The iteration loop is not left to isl's search (:func:`_split_outer`): the program's outermost
dim becomes the outer schedule dim, isl schedules one iteration, and the composition is checked
exactly against every dependence; isl schedules the whole problem only when that check or the
split does not apply. isl's cost on the whole problem grows erratically with the iteration count.
"""

from __future__ import annotations

import dataclasses

import islpy as isl
import networkx as nx

from ..errors import CompileError
from ..ir.ops import Op
from ..ir.polyhedral import params_decl, stmt, var
from ..passes.incrementalize import STREAM
from ..passes.group import GROUPS, JOINS, SEGMENTS, Group, _renamed, _same_point, make_groups


def _union(items, cls):
    out = None
    for x in items:
        u = cls.from_set(x) if cls is isl.UnionSet else cls.from_map(x)
        out = u if out is None else out.union(u)
    return out


def access_g(analysis, of, c, p, pos):
    """{ S<group of c>[y] -> S<p>[x] }: what node ``c`` reads of ``p`` at its demanded points."""
    a = analysis.model.access(c, p, pos).intersect_domain(analysis.demand[c])
    return a.set_tuple_name(isl.dim_type.in_, stmt(of[c]))


@dataclasses.dataclass
class Problem:
    groups: list
    of: dict  # node -> group id
    domain: isl.UnionSet  # of the group statements
    deps: isl.UnionMap | None  # producer instance -> consumer instance
    ctx: isl.Set
    # restrict -> the problem grouped with that make_groups argument; None without grouping
    regroup: object = None
    joins: list = dataclasses.field(default_factory=list)  # the joins made, in order (make_groups)
    restrict: tuple | None = None  # make_groups' argument: set when refine() split some groups
    # set by compute_schedule: the outer dim was fixed to the iteration (see _split_outer)
    split: bool = False


def build_problem(prog, pdg, analysis, grouping=True, restrict=None) -> Problem:
    """The statements, their domains and dependences. ``grouping``: the statements are the groups
    the ``group`` pass recorded on ``pdg`` (``pdg.graph["groups"]``; :mod:`timerl.passes.group`),
    or with ``restrict`` (:func:`refine`) :func:`make_groups` redone with that argument; without
    it, one statement per node. Each group carries the kernel segments the ``fuse`` pass recorded
    for its members, if any (:mod:`timerl.passes.fuse`)."""
    if grouping and restrict is None:
        if GROUPS not in pdg.graph:
            raise CompileError("build_problem(grouping=True) on a graph without the group pass's annotation "
                               "(pdg.graph['groups']): run the passes first, or pass grouping=False")
        joins = list(pdg.graph[JOINS])
        groups = [Group(gid, list(ms), pdg.rec(gid).domain) for gid, ms in pdg.graph[GROUPS]]
        of = {n: g.gid for g in groups for n in g.members}
    else:
        joins = []
        groups, of = make_groups(pdg, analysis, grouping, restrict=restrict, joins=joins)
    segs = pdg.graph.get(SEGMENTS) or {}
    for g in groups:
        g.segments = segs.get(tuple(g.members))
    byid = {g.gid: g for g in groups}
    dom = _union([_renamed(analysis.demand[g.gid], g.name) for g in groups], isl.UnionSet)
    deps = []
    for g in groups:
        for c in g.members:
            for p, e in pdg.inputs(c):
                if p not in of:
                    continue
                if of[p] == g.gid and _same_point(pdg, c, p, e):
                    continue  # ordered inside the group
                a = access_g(analysis, of, c, p, e.pos).intersect_range(analysis.demand[p])
                a = a.set_tuple_name(isl.dim_type.out, stmt(of[p]))
                if not a.is_empty():
                    deps.append(a.reverse())
    deps += _state_deps(prog, pdg, analysis, of, byid)
    regroup = (lambda r: build_problem(prog, pdg, analysis, grouping, r)) if grouping else None
    return Problem(groups, of, dom, _union(deps, isl.UnionMap) if deps else None, analysis.model.ctx, regroup,
                   joins, restrict)


def _full(prog, node, pre):
    have = {d.name for d in node.domain}
    return [f"{pre}{d.name}" if d.name in have else "-1" for d in prog.dims]


def _state_deps(prog, pdg, analysis, of, byid):
    """UDFs sharing a ``state`` key run in program order: (full point, creation index)."""
    by_state = {}
    for n in sorted(of):
        node = pdg.rec(n)
        if node.op is Op.UDF and node.attrs.get("state") is not None:
            by_state.setdefault(node.attrs["state"], []).append(n)
    out = []
    for ns in by_state.values():
        for a in ns:
            for b in ns:
                na, nb = pdg.rec(a), pdg.rec(b)
                fa, fb = _full(prog, na, "a_"), _full(prog, nb, "b_")
                alts = []
                for k in range(len(fa)):
                    eq = [f"{x} = {y}" for x, y in zip(fa[:k], fb[:k])]
                    alts.append("(" + " and ".join(eq + [f"{fa[k]} < {fb[k]}"]) + ")")
                if na.index < nb.index:
                    alts.append("(" + " and ".join([f"{x} = {y}" for x, y in zip(fa, fb)] or ["0 = 0"]) + ")")
                if not alts:
                    continue
                ta = ", ".join(f"a_{d.name}" for d in na.domain)
                tb = ", ".join(f"b_{d.name}" for d in nb.domain)
                m = isl.Map(f"{params_decl(prog)} -> {{ {stmt(of[a])}[{ta}] -> {stmt(of[b])}[{tb}] : "
                            f"{' or '.join(alts)} }}")
                m = m.intersect_params(analysis.model.ctx)
                m = m.intersect_domain(_renamed(analysis.demand[a], stmt(of[a])))
                m = m.intersect_range(_renamed(analysis.demand[b], stmt(of[b])))
                if not m.is_empty():
                    out.append(m)
    return out


_OPTIONS = {
    # name -> (isl option setter name, value): alternatives the memory planner may try
    "default": (),
    "serialize_sccs": (("schedule_serialize_sccs", 1),),
    "no_proximity": (),
}


def _isl_schedule(domain, deps, proximity=True):
    """isl's own scheduler (Pluto-like; ``proximity``: minimise the dependences' distances); None if it
    finds none."""
    sc = isl.ScheduleConstraints.on_domain(domain)
    if deps is not None:
        sc = sc.set_validity(deps)
        if proximity:
            sc = sc.set_proximity(deps)
    try:
        return sc.compute_schedule()
    except isl.Error:
        return None


def _project(x, pos, tuple_names):
    """Drop dim ``pos[name]`` of every tuple ``name`` in ``tuple_names`` (a set, or a map's in/out)."""
    if isinstance(x, isl.Set):
        if x.get_tuple_name() in tuple_names:
            x = x.project_out(isl.dim_type.set, pos[x.get_tuple_name()], 1).set_tuple_name(x.get_tuple_name())
        return x
    a, b = x.get_tuple_name(isl.dim_type.in_), x.get_tuple_name(isl.dim_type.out)
    if a in tuple_names:
        x = x.project_out(isl.dim_type.in_, pos[a], 1).set_tuple_name(isl.dim_type.in_, a)
    if b in tuple_names:
        x = x.project_out(isl.dim_type.out, pos[b], 1).set_tuple_name(isl.dim_type.out, b)
    return x


def _split_outer(prog, problem, proximity=True):
    """The schedule with the program's outermost dim (the training iteration) as the outer loop.

    isl's scheduler works on concrete bounds here, and its cost grows erratically with them:
    a PPO program took 3 s at 2 iterations, 20 s at 3 and over ten minutes at 4. Every
    dependence of an RL program goes forward or stays within one iteration, so that loop
    needs no search. Statements that run at many iterations are *looped*: their outer time
    is their iteration. The others (no iteration dim, or one fixed iteration) run once, at
    the earliest outer time their inputs allow (-1: before the loop). isl then schedules one
    iteration: the looped statements with that dim projected out, the others as they are,
    and the dependences that stay within one outer time. That problem's size does not grow
    with the iteration count. None (then isl schedules the whole problem) when a dependence
    goes backwards in the outer dim or the composed schedule fails the exact validity check.
    """
    outer = prog.dims[0].name
    names = {g.name: [d.name for d in g.domain] for g in problem.groups}
    sets = {}
    problem.domain.foreach_set(lambda st: sets.__setitem__(st.get_tuple_name(), st))
    pos, looped = {}, set()
    for g in problem.groups:
        if outer in names[g.name] and g.name in sets:
            pos[g.name] = k = names[g.name].index(outer)
            st = sets[g.name]
            if st.dim_max_val(k).to_python() > st.dim_min_val(k).to_python():
                looped.add(g.name)
    if not looped or problem.deps is None:
        return None
    maps = []
    problem.deps.foreach_map(maps.append)
    ends = [(m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)) for m in maps]
    val = {g.name: -1 for g in problem.groups if g.name not in looped}
    for _ in range(len(val) + 1):  # earliest outer time of the run-once statements
        changed = False
        for m, (a, b) in zip(maps, ends):
            if b in looped:
                continue
            t = m.domain().dim_max_val(pos[a]).to_python() if a in looped else val[a]
            if t > val[b]:
                val[b], changed = t, True
        if not changed:
            break
    else:
        return None
    inner_deps = []
    for m, (a, b) in zip(maps, ends):
        if a in looped and b in looped:
            flat = m.wrap()
            ia, ib = pos[a], m.dim(isl.dim_type.in_) + pos[b]
            if not flat.intersect(_cmp(flat, ia, ib, ">")).is_empty():
                return None
            m = flat.intersect(_cmp(flat, ia, ib, "=")).unwrap()
        elif a in looped:
            m = m.fix_val(isl.dim_type.in_, pos[a], val[b])
        elif b in looped:
            m = m.fix_val(isl.dim_type.out, pos[b], val[a])
        elif val[a] != val[b]:
            continue
        if not m.is_empty():
            inner_deps.append(_project(m, pos, looped))
    inner_dom = _union([_project(st, pos, looped) for st in sets.values()], isl.UnionSet)
    inner = _isl_schedule(inner_dom, _union(inner_deps, isl.UnionMap) if inner_deps else None, proximity)
    if inner is None:
        return None
    pre = params_decl(prog)
    to_inner, outer_t = [], []
    for g in problem.groups:
        xs = [f"x{k}" for k in range(len(g.domain))]
        full = f"{g.name}[{', '.join(xs)}]"
        if g.name in looped:
            p = pos[g.name]
            to_inner.append(f"{full} -> {g.name}[{', '.join(xs[:p] + xs[p + 1:])}]")
            outer_t.append(f"{full} -> [({xs[p]})]")
        else:
            to_inner.append(f"{full} -> {full}")
            outer_t.append(f"{full} -> [({val[g.name]})]")
    sched = inner.pullback_union_pw_multi_aff(isl.UnionPwMultiAff(f"{pre} -> {{ {'; '.join(to_inner)} }}"))
    sched = sched.intersect_domain(problem.domain)
    sched = sched.insert_partial_schedule(isl.MultiUnionPwAff(f"{pre} -> [{{ {'; '.join(outer_t)} }}]"))
    # exact check: every dependence goes strictly forward in the composed schedule
    sm = sched.get_map()
    rel = problem.deps.apply_domain(sm).apply_range(sm)
    bad = []
    rel.foreach_map(lambda m: bad.append(m) if not m.is_subset(isl.Map.lex_lt(m.get_space().domain())) else None)
    return None if bad else sched


def _cmp(flat, ia, ib, op):
    """On a wrapped dependence: the set where ``in[ia] = out[ib]`` (op "=") or ``in[ia] > out[ib]``."""
    sp = flat.get_space()
    c = (isl.Constraint.equality_alloc if op == "=" else isl.Constraint.inequality_alloc)(sp)
    c = c.set_coefficient_val(isl.dim_type.set, ia, 1).set_coefficient_val(isl.dim_type.set, ib, -1)
    if op == ">":
        c = c.set_constant_val(-1)  # in - out - 1 >= 0
    return isl.Set.universe(sp).add_constraint(c)


def _schedule_once(prog, problem, variant, whole=True, stream=False):
    """The schedule of this grouping, split at the iteration if it can be, else (``whole``) by isl
    on the whole problem; None if there is none.

    ``stream``: the program learns while it acts (the ``incrementalize`` pass kept statements per
    step to add into accumulators): isl schedules each connected component as a whole
    (``schedule_whole_component``) instead of clustering strongly connected parts and merging
    the clusters. The clustering leaves the acting loop and the per-step learner in two loops
    (it does not merge a cluster that needs a shift, here the n - 1 steps an n-step return waits);
    scheduled whole, isl finds the shifted fusion and the learner runs n - 1 steps behind acting.
    A whole component is scheduled with validity alone, in every variant: with the proximity
    objective isl's search on it did not end (n-step REINFORCE on the compiled trivial env at
    512 x 250 and 3 or more iterations: over ten minutes for the one-iteration problem, which
    validity alone schedules in 0.01 s; at 2 iterations, 1.4 s and 0.01 s), and the schedule it
    finds keeps the same fusion (the same planned peak and speed, measured at 2 iterations, where
    both finish)."""
    proximity = variant != "no_proximity" and not stream
    ctx = isl.DEFAULT_CONTEXT
    saved = []
    for opt, val in _OPTIONS[variant] + ((("schedule_whole_component", 1),) if stream else ()):
        saved.append((opt, getattr(ctx, f"get_{opt}")()))
        getattr(ctx, f"set_{opt}")(val)
    try:
        sched = _split_outer(prog, problem, proximity)
        problem.split = sched is not None
        if sched is None and whole:
            sched = _isl_schedule(problem.domain, problem.deps, proximity)
    finally:
        for opt, val in saved:
            getattr(ctx, f"set_{opt}")(val)
    if sched is None or sched.get_domain().is_empty() and not problem.domain.is_empty():
        return None
    return sched


def _split_applies(prog, problem) -> bool:
    """Can :func:`_split_outer` apply to some grouping of this program: does some statement run
    at more than one point of the outermost dim, with no dependence going backwards in it?"""
    outer = prog.dims[0].name if prog.dims else None
    names = {g.name: [d.name for d in g.domain] for g in problem.groups}
    found = []

    def look(st):
        dims = names.get(st.get_tuple_name(), [])
        if outer in dims:
            k = dims.index(outer)
            if st.dim_max_val(k).to_python() > st.dim_min_val(k).to_python():
                found.append(st)

    problem.domain.foreach_set(look)
    if not found or problem.deps is None:
        return False
    return not any(outer_ok and not _across(flat, ia, ib, ">").is_empty()
                   for _, _, outer_ok, flat, ia, ib in _outer_deps(problem, outer))


def _outer_deps(problem, outer):
    """Per dependence map ``a -> b``: ``(a, b, both have the outer dim, the map wrapped into one
    set, the positions of the outer dim of a and of b in it)``."""
    names = {g.name: [d.name for d in g.domain] for g in problem.groups}
    maps = []
    if problem.deps is not None:
        problem.deps.foreach_map(maps.append)
    for m in maps:
        a, b = m.get_tuple_name(isl.dim_type.in_), m.get_tuple_name(isl.dim_type.out)
        if outer in names[a] and outer in names[b]:
            yield a, b, True, m.wrap(), names[a].index(outer), m.dim(isl.dim_type.in_) + names[b].index(outer)
        else:
            yield a, b, False, None, None, None


def _across(flat, ia, ib, op):
    """The part of a wrapped dependence whose outer dims compare by ``op``."""
    return flat.intersect(_cmp(flat, ia, ib, op))


def _stuck(prog, problem, whole=False) -> set:
    """Nodes of the groups on a cycle of dependences within one iteration of the outermost dim
    (``whole``: on any cycle; all nodes when there is none): where a grouping without a schedule
    ties instances."""
    outer = prog.dims[0].name if prog.dims and not whole else None
    g = nx.DiGraph()
    for a, b, outer_ok, flat, ia, ib in _outer_deps(problem, outer):
        if outer_ok and _across(flat, ia, ib, "=").is_empty():
            continue  # only between different iterations
        g.add_edge(a, b)
    on = set()
    for scc in nx.strongly_connected_components(g):
        if len(scc) > 1 or any(g.has_edge(x, x) for x in scc):
            on |= scc
    nodes = {n for gr in problem.groups if gr.name in on for n in gr.members}
    return nodes or set(problem.of)


def refine(prog, problem, variant="default", budget=None):
    """Finer groups for a grouping that has no schedule, split only where they must be.

    The grouping is a sequence of joins, each coarsening the partition before it (a finer
    partition keeps every schedule of a coarser one). The search redoes only the joins inside
    the groups on a cycle within one iteration (:func:`_stuck`; the other joins are kept): it
    takes them in order, and bisection finds the first one after which there is no schedule;
    that one is refused, the ones before it kept, and the search goes on after it. The result
    is the last grouping tried that has a schedule. Each refused join costs about log2(joins)
    isl calls on problems a little larger than the grouped one. isl's cost grows faster than
    its statement count: a problem of ``s`` statements is charged ``s**2 / nodes`` against
    ``budget`` (default: 3 x the nodes, about three ungrouped schedules). With an iteration
    dim that the split can apply to, a probe is only the split schedule (isl on the whole
    problem can take minutes for one answer). Returns ``(problem, schedule)``, or None when
    the budget ran out first.
    """
    if not problem.joins:
        return None
    budget = 3 * len(problem.of) if budget is None else budget
    whole = not _split_applies(prog, problem)
    spent, best = 0, None
    nodes = _stuck(prog, problem, whole)

    def probe(keys):
        nonlocal spent, best
        cand = problem.regroup((frozenset(nodes), frozenset(keys)))
        spent += len(cand.groups) ** 2 / len(problem.of)
        if spent > budget:
            raise _OutOfBudget
        sched = _schedule_once(prog, cand, variant, whole)
        if sched is not None:
            best = cand, sched
        return sched is not None

    rest, kept = [j for j in problem.joins if j[0] in nodes], []
    try:
        if len(nodes) < len(problem.of) and not probe(()):
            nodes = set(problem.of)  # not there: redo every join
            rest = list(problem.joins)
        while rest:
            if kept and probe(kept + rest):
                break
            lo, hi = 0, len(rest)  # kept + rest[:lo] schedules, kept + rest[:hi] does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if probe(kept + rest[:mid]) else (lo, mid)
            kept += rest[:hi - 1]
            rest = rest[hi:]
    except _OutOfBudget:
        return None
    return best


class _OutOfBudget(Exception):
    pass


def streams(pdg, problem) -> bool:
    """Whether the program learns while it acts (statements the ``incrementalize`` pass kept per
    step): :func:`_schedule_once` then schedules whole components, without proximity in every
    variant (so ``no_proximity`` is the default variant there)."""
    return any(pdg.nodes[n].get(STREAM) for g in problem.groups for n in g.members if n in pdg)


def compute_schedule(prog, pdg, problem: Problem, variant="default") -> isl.Schedule:
    """isl's schedule for the problem; a ``tl.CompileError`` naming the tensors if none exists.

    When the grouping has none, :func:`refine` looks for finer groups that split only the
    joins that tie instances needing different orders; ``problem`` then holds those groups.
    """
    sched = _schedule_once(prog, problem, variant, stream=streams(pdg, problem))
    if sched is None and problem.regroup is not None:
        found = refine(prog, problem, variant)
        if found is not None:
            finer, sched = found
            for f in dataclasses.fields(Problem):
                setattr(problem, f.name, getattr(finer, f.name))
    if sched is None:
        raise CompileError(_unschedulable(pdg, problem))
    return sched


def _unschedulable(pdg, problem) -> str:
    g = nx.DiGraph()
    for gr in problem.groups:
        g.add_node(gr.gid)
    if problem.deps is not None:
        def add(m):
            a = int(m.get_tuple_name(isl.dim_type.in_)[1:])
            b = int(m.get_tuple_name(isl.dim_type.out)[1:])
            g.add_edge(a, b)
        problem.deps.foreach_map(add)
    byid = {gr.gid: gr for gr in problem.groups}
    names = []
    for scc in nx.strongly_connected_components(g):
        if len(scc) > 1 or any(g.has_edge(n, n) for n in scc):
            for gid in sorted(scc):
                names += [pdg.rec(n).name for n in byid[gid].members]
    names = list(dict.fromkeys(names))
    return ("isl found no schedule that computes every point before it is read; tensors involved: "
            + ", ".join(repr(n) for n in names or [pdg.rec(gr.gid).name for gr in problem.groups]))


def time_map(schedule: isl.Schedule, problem: Problem) -> isl.UnionMap:
    """Statement instance -> time vector ``(isl schedule..., rank of the group, 0)``.

    The two trailing dims make the order total and leave room for memory statements
    placed right after an execution (same prefix, last dim >= 1).
    """
    rank = {g.name: k for k, g in enumerate(problem.groups)}
    maps = []
    sm = schedule.get_map().intersect_domain(problem.domain)

    def add(m):
        n = m.dim(isl.dim_type.out)
        m = m.add_dims(isl.dim_type.out, 2)
        m = m.fix_val(isl.dim_type.out, n, rank[m.get_tuple_name(isl.dim_type.in_)])
        m = m.fix_val(isl.dim_type.out, n + 1, 0)
        maps.append(m)

    sm.foreach_map(add)
    return _union(maps, isl.UnionMap)


__all__ = ["GROUPS", "JOINS", "SEGMENTS", "Group", "Problem", "build_problem", "compute_schedule", "make_groups",
           "refine", "time_map", "var"]
