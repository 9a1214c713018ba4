"""Grouping: which live nodes run together as one isl statement, recorded on the PDG.

The pass joins nodes with :func:`make_groups` (same domain and demand,
joined at the same point by basis edges or siblings at the same points, no join that closes a
chain of reads at one point) and returns a copy of the graph annotated with

- ``pdg.graph["groups"]`` (:data:`GROUPS`): a tuple of ``(gid, members)``, one per statement in
  statement order, ``members`` a tuple of node ids in execution order at one point and ``gid``
  the representative (its smallest id: the statement is ``S<gid>``); every demanded live node is
  in exactly one group;
- ``pdg.graph["group_joins"]`` (:data:`JOINS`): the joins made, in order (pairs of nodes, one of
  each side), which :func:`timerl.schedule.model.refine` redoes in part when the grouping has
  no schedule.

The scheduler (:func:`timerl.schedule.model.build_problem`) builds its statements from the
annotation; with the pass switched off (``compile(passes={"group": False})``) there is none and
every node is a statement of its own. The annotation describes the graph it is on: it must be
the last rewrite of the pipeline (only annotating passes, :mod:`.fuse`, follow it), and
:func:`timerl.passes.run_passes` drops it from the graph a later rewriting pass returns.
"""

from __future__ import annotations

import dataclasses

import networkx as nx
import sympy

from ..ir import registry
from ..ir.ops import Op, Slice, is_basis
from ..ir.polyhedral import stmt
from .views import PER_READER, several_outputs

def _alone(pdg, n) -> bool:
    """Node ``n``'s op always forms a statement of its own."""
    return registry.op(pdg.rec(n).op).has("alone")


# the grouping pass's annotations on the PDG (timerl.passes.group): ((gid, members), ...) in
# statement order, and the joins that made them, in order (for refine)
GROUPS = "groups"
JOINS = "group_joins"
# the fusion pass's (timerl.passes.fuse): {members: [("seg", [n, ...]) | ("glue", n)]}
SEGMENTS = "segments"


@dataclasses.dataclass
class Group:
    gid: int  # the representative node (smallest id)
    members: list  # node ids in execution order at one point
    domain: tuple  # dims shared by all members
    # the fusion pass's kernel segments of the members (timerl.passes.fuse), None without one
    segments: list | None = None

    @property
    def name(self) -> str:
        return stmt(self.gid)


def _renamed(s, name):
    return s.set_tuple_name(name)


def _own_output(pdg, c) -> bool:
    """Whether ``c`` is an access of one output of a several-output UDF at its point, alone."""
    ins = pdg.inputs(c)
    return pdg.rec(c).op is Op.ACCESS and len(ins) == 1 and several_outputs(pdg, ins[0][0])


def _same_point(pdg, c, p, e) -> bool:
    return pdg.rec(c).domain == pdg.rec(p).domain and is_basis(e, pdg.rec(p).domain)


def _reach(pdg, p, e) -> tuple[frozenset, frozenset]:
    """How a read of ``p`` through edge ``e`` reaches along each dim: ``(shifted, forward)``.

    ``shifted``: dims along which the index reads a constant distance away (never the same point
    there). ``forward``: dims along which the read may reach points after the reader's own: a shift
    ``x[t + 1]`` (GAE's ``adv[t + 1]``), an index not provably at most the reader's (``v[T]``), a
    slice whose stop is not provably at most the dim's value plus one (``x[t:t + n]``, ``x[t:T]``)."""
    shifted, forward = set(), set()
    for ent, d in zip(e.index, pdg.rec(p).domain):
        ahead = (ent.stop - d.e - 1) if isinstance(ent, Slice) else sympy.sympify(ent) - d.e
        if not isinstance(ent, Slice) and ahead.is_Integer and ahead != 0:
            shifted.add(d.name)
        if not (ahead.is_number and ahead <= 0):
            forward.add(d.name)
    return frozenset(shifted), frozenset(forward)


def _join_siblings(pdg, analysis, live, parent, find, group_of, tag, creates_cycle, permit):
    """Join groups that no edge connects but that run at the same points (the per-parameter
    merges, snapshots and optimizer states of an RL program): same dims, equal demand, the
    same recurrence (or none for both: a recurrent group joined with one outside it can tie
    points that need different orders), no edge between them, and no chain of reads between
    them through another group at one point. No UDF joins (their state order is per node)."""
    edges = {}
    for n in live:
        for q, _ in pdg.inputs(n):
            if q in parent and q != n:
                edges.setdefault(n, set()).add(q)
                edges.setdefault(q, set()).add(n)
    buckets = {}
    for r in sorted(group_of):
        if any(pdg.rec(n).op is Op.UDF for n in group_of[r]):
            continue
        buckets.setdefault(tuple(d.name for d in pdg.rec(r).domain), []).append(r)
    for roots in buckets.values():
        reps = []  # groups formed so far in this bucket
        for r in roots:
            dr = _renamed(analysis.demand[r], "X")
            for a in reps:
                a = find(a)
                if a == r:
                    break
                ta, tr = tag.get(a), tag.get(r)
                if ta != tr:
                    continue
                if not _renamed(analysis.demand[a], "X").is_equal(dr):
                    continue
                if any(edges.get(n, set()) & group_of[a] for n in group_of[r]):
                    continue
                if creates_cycle(a, r) or not permit(a, r):
                    continue
                lo, hi = min(a, r), max(a, r)
                parent[hi] = lo
                group_of[lo] |= group_of.pop(hi)
                if tag.get(lo) is None:
                    tag[lo] = tag.get(hi)
                r = lo
                reps = [x for x in reps if find(x) != lo]
                break
            reps.append(r)


def make_groups(pdg, analysis, enabled=True, siblings=True, restrict=None, joins=None,
                check_cycles=True) -> tuple[list, dict]:
    """Groups of live nodes and the map node -> group id.

    Joins are made one at a time, in a fixed order. ``restrict``: ``(nodes, pairs)``, a join of a group
    that holds one of ``nodes`` is made only if its pair is in ``pairs`` (the scalar sources'
    statement is always made); ``joins``: a list that receives the pair of each join made (two
    nodes, one from each side), in order (see :func:`refine`). ``check_cycles=False``
    drops the check that a join closes no chain of reads at one point (tests of the fallback).
    """
    live = [n for n in analysis.live if not analysis.demand[n].is_empty()]
    parent = {n: n for n in live}
    made = [] if joins is None else joins
    made.clear()

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    # each group holds at most one recurrence (nontrivial SCC of the node graph): a forward
    # and a backward recurrence in one statement could have no order at all
    sub = pdg.subgraph(live)
    tag = {}
    for k, scc in enumerate(nx.strongly_connected_components(sub)):
        if len(scc) > 1 or any(sub.has_edge(n, n) for n in scc):
            for n in scc:
                tag[n] = k
    # per input: the dims it is shifted along (all other reads may join two instances at the same
    # point) and the dims along which it may read later points (_reach)
    sp = {n: [(q, *_reach(pdg, q, e)) for q, e in pdg.inputs(n) if q in parent] for n in live}
    group_of = {n: {n} for n in live}
    succ_by_dims = {}  # the group's dims -> (node, dims crossed) -> the inputs a walk follows

    def permit(a, b, x=None, y=None):
        """Record the join of groups a and b (nodes x, y: one of each) unless it is refused."""
        x, y = (a, b) if x is None else (x, y)
        if restrict is not None and (x, y) not in restrict[1] and (
                not restrict[0].isdisjoint(group_of[a]) or not restrict[0].isdisjoint(group_of[b])):
            return False
        made.append((x, y))
        return True

    def creates_cycle(a, b):
        """Would joining groups a and b close a chain of reads at one of their points through
        another group? Reads shifted along one of the group's own dims cannot (conservative),
        unless the chain crossed a read of later points along one of them (a window ``x[t:t + n]``
        of n-step returns, GAE's ``adv[t + 1]``): from there it may come back by reads shifted
        along those dims (the n-step returns at ``t`` wait for ``done[t + n - 1]``, which a compiled
        env computes from the action at ``t + n - 2``, which follows the action at ``t``: a group
        of both has no order).

        The walk is over groups, not nodes: a group runs all its members at once, so a chain
        that reaches one member of a group goes on from every member of it (the critic's
        weights and the learner's slice of the rollout in one group at ``i`` tie every acting
        step of that iteration before and after it, though no chain of nodes joins them)."""
        if not check_cycles:
            return False
        both = group_of[a] | group_of[b]
        dims = frozenset(d.name for d in pdg.rec(a).domain)
        nxt = succ_by_dims.setdefault(dims, {})

        def succ(n, crossed):
            """(input, the dims crossed after it) of node ``n`` along a walk that crossed reads of later
            points along the dims ``crossed``: reads shifted along only those dims are followed too."""
            key = (n, crossed)
            if key not in nxt:
                nxt[key] = [(q, crossed | (fw & dims)) for q, sh, fw in sp[n] if not (sh & dims) - crossed - fw]
            return nxt[key]

        for src, dst in ((group_of[a], group_of[b]), (group_of[b], group_of[a])):
            seen = set()
            stack = [(q, c) for n in src for q, c in succ(n, frozenset()) if q not in both or (c and q in dst)]
            while stack:
                q, crossed = stack.pop()
                if crossed and q in dst:
                    return True
                r = find(q)
                if (r, crossed) in seen:
                    continue
                seen.add((r, crossed))
                for n in group_of[r]:
                    for q2, c2 in succ(n, crossed):
                        if q2 in dst:
                            return True
                        if q2 not in both and (find(q2), c2) not in seen:
                            stack.append((q2, c2))
        return False

    if enabled:
        # scalar sources (constants, scalar data: no dims, no live inputs) form one statement:
        # nothing they read can depend on anything, so joining them never closes a cycle, and
        # dozens of one-point statements otherwise dominate isl's AST generation
        src = [n for n in live if not pdg.rec(n).domain and not _alone(pdg, n)
               and not any(p in parent for p, _ in pdg.inputs(n))]
        for n in src[1:]:
            parent[n] = src[0]
            group_of[src[0]] |= group_of.pop(n)
        # a permute or reshape read by one op joins that reader first: where the reader runs in
        # another statement (a backward pass n steps behind acting), the view is taken there from
        # the operand stored anyway, instead of being made and stored by the producer's statement
        # (a transposed copy of each observation, on the numba backend)
        views_first = [(c, p, e) for p in live if pdg.rec(p).op in PER_READER
                       for c, e in [next(iter(pdg.consumers(p)))] if len(pdg.consumers(p)) == 1]
        # the access of one output of a several-output UDF (the ``views`` pass's ``split_outputs``)
        # joins the UDF's statement first: the UDF's tuple is then freed where it is made, and each
        # output lives as long as its own readers (an env step's observation until the next step
        # copies it, its reward and done flags until GAE reads them after the rollout)
        outputs_first = [(c, p, e) for p in live if several_outputs(pdg, p)
                         for c, e in pdg.consumers(p) if _own_output(pdg, c)]
        pairs = outputs_first + views_first + [(c, p, e) for c in live for p, e in pdg.inputs(c)]
        for c, p, e in pairs:
            if c not in parent or _alone(pdg, c) or p not in parent or not _same_point(pdg, c, p, e) \
                    or pdg.rec(p).op is Op.UDF and not _own_output(pdg, c):
                continue
            dc, dp = analysis.demand[c], analysis.demand[p]
            if not _renamed(dp, stmt(c)).is_equal(dc):
                continue
            a, b = find(c), find(p)
            if a != b:
                ta, tb = tag.get(a), tag.get(b)
                if ta is not None and tb is not None and ta != tb:
                    continue
                if creates_cycle(a, b) or not permit(a, b, c, p):
                    continue
                lo, hi = min(a, b), max(a, b)
                parent[hi] = lo
                group_of[lo] |= group_of.pop(hi)
                if tag.get(lo) is None and tag.get(hi) is not None:
                    tag[lo] = tag[hi]
        if siblings:
            _join_siblings(pdg, analysis, live, parent, find, group_of, tag, creates_cycle, permit)
    members = {}
    for n in live:
        members.setdefault(find(n), []).append(n)
    groups, of = [], {}
    for gid, ms in sorted(members.items()):
        if len(ms) > 1:
            g = nx.DiGraph()
            g.add_nodes_from(ms)
            for c in ms:
                for p, e in pdg.inputs(c):
                    if p in ms and p != c and _same_point(pdg, c, p, e):
                        g.add_edge(p, c)
            try:
                order = list(nx.lexicographical_topological_sort(g))
            except nx.NetworkXUnfeasible:
                return make_groups(pdg, analysis, enabled=siblings and enabled, siblings=False,
                                   restrict=restrict, joins=joins, check_cycles=check_cycles)
        else:
            order = ms
        groups.append(Group(gid, order, pdg.rec(gid).domain))
        for n in ms:
            of[n] = gid
    return groups, of



def group(prog, pdg, bounds, analysis):
    """A copy of ``pdg`` annotated with its grouping (see the module docstring)."""
    joins = []
    groups, _ = make_groups(pdg, analysis, joins=joins)
    out = pdg.copy()
    out.graph[GROUPS] = tuple((g.gid, tuple(g.members)) for g in groups)
    out.graph[JOINS] = tuple(joins)
    out.graph.pop(SEGMENTS, None)  # the fusion of another grouping
    return out, analysis


__all__ = ["GROUPS", "JOINS", "SEGMENTS", "Group", "group", "make_groups"]
