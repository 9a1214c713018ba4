"""The memory plan, folded into the schedule: frees and donation.

Every stored point of a node gets a free statement ``F<n>[x]`` placed at the time of
its last reader under the computed schedule (the lexicographic maximum of its
readers' times: after every reader, and as early as that allows), with the trailing
time dim set past the reader's execution. Donation: an elementwise op may write its
result into an operand's buffer when, under the schedule, it is that point's last
reader (checked with isl for every instance), shapes and dtypes agree, and nothing
else aliases the buffer.
"""

from __future__ import annotations

import islpy as isl
import numpy as np

from ..ir.ops import Op, is_basis
from ..ir.polyhedral import sample, stmt
from .model import access_g

# ops whose output is a fresh array no other value aliases
OWNING = frozenset({Op.BINARY, Op.WHERE, Op.CAST, Op.MATMUL})
# consumers that never keep a reference to an operand beyond their execution
NON_ALIASING = frozenset({Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST, Op.MATMUL, Op.REDUCE, Op.SCAN, Op.SINK,
                          Op.ONE_HOT})
DONORS = frozenset({Op.UNARY, Op.BINARY})


def free_name(n) -> str:
    return f"F{n}"


def _ndims(T: isl.UnionMap) -> int:
    out = []
    T.foreach_map(lambda m: out.append(m.dim(isl.dim_type.out)))
    return out[0]


def _set_last(prog, n, k):
    a = ", ".join(f"a{j}" for j in range(n))
    b = ", ".join([f"a{j}" for j in range(n - 1)] + [str(k)])
    return isl.UnionMap(f"{{ [{a}] -> [{b}] }}")


def last_reads(prog, pdg, analysis, problem, T) -> dict:
    """node -> isl.Map ``S<n>[x] -> time of its last reader`` (stored nodes with readers)."""
    out = {}
    for p in problem.of:
        if pdg.rec(p).op is Op.SINK:
            continue
        rt = None
        for c, e in pdg.consumers(p):
            if c not in problem.of:
                continue
            a = access_g(analysis, problem.of, c, p, e.pos).intersect_range(analysis.demand[p])
            u = isl.UnionMap.from_map(a.reverse()).apply_range(T)
            rt = u if rt is None else rt.union(u)
        if rt is None or rt.is_empty():
            continue
        ms = []
        rt.lexmax().foreach_map(ms.append)
        (out[p],) = ms
    return out


def inline_frees(pdg, analysis, problem, T, last: dict) -> dict:
    """group id -> nodes freed right after that group's execution at the same point.

    When the last reader of every point ``x`` of ``n`` is the instance of one group at
    the same point ``x`` (typical of values used within a statement), the free needs no
    statement of its own: it is the tail of that execution. The others become isl
    statements (:func:`free_maps`).
    """
    rev = T.reverse()
    byname = {g.name: g for g in problem.groups}
    out = {}
    for p, m in last.items():
        who = isl.UnionMap.from_map(m).apply_range(rev)
        maps = []
        who.foreach_map(maps.append)
        if len(maps) != 1:
            continue
        g = byname[maps[0].get_tuple_name(isl.dim_type.out)]
        if not pdg.rec(p).domain:
            # one point, freed after one instance: a guarded tail of that execution
            rng = maps[0].range()
            if rng.is_singleton():
                out.setdefault(g.gid, []).append((p, sample(rng)))
            continue
        if g.domain != pdg.rec(p).domain:
            continue
        # only where the reader's statement runs exactly at p's points (else the tail would
        # free points p never had)
        if not analysis.demand[p].set_tuple_name(g.name).is_equal(analysis.demand[g.gid].set_tuple_name(g.name)):
            continue
        same = analysis.demand[p].identity().set_tuple_name(isl.dim_type.out, g.name)
        if maps[0].is_equal(same):
            out.setdefault(g.gid, []).append((p, None))
    return out


def free_maps(prog, pdg, analysis, problem, T, last: dict) -> list:
    """The free statements' schedule: ``F<n>[x] -> (last reader time..., 1 + k)``."""
    n = _ndims(T)
    maps = []
    for k, (p, m) in enumerate(sorted(last.items())):
        f = isl.UnionMap.from_map(m).apply_range(_set_last(prog, n, 1 + k))
        fm = []
        f.foreach_map(fm.append)
        for x in fm:
            maps.append(x.set_tuple_name(isl.dim_type.in_, free_name(p)))
    return maps


def donations(prog, pdg, analysis, problem, T, last: dict) -> dict:
    """consumer node -> operand position whose buffer it may write its result into."""
    out = {}
    tm = {}
    T.foreach_map(lambda m: tm.__setitem__(m.get_tuple_name(isl.dim_type.in_), m))
    order = {n: k for g in problem.groups for k, n in enumerate(g.members)}
    for c in problem.of:
        node = pdg.rec(c)
        if node.op not in DONORS or node.attrs.get("fn") == "detach":
            continue
        if not all(isinstance(s, int) for s in node.shape) or len(node.shape) == 0:
            continue
        for p, e in pdg.inputs(c):
            pn = pdg.rec(p)
            if p not in last or pn.op not in OWNING or pn.domain != node.domain:
                continue
            if tuple(pn.shapes[e.out]) != tuple(node.shape) or np.dtype(pn.dtypes[e.out]) != np.dtype(node.dtype):
                continue
            if not is_basis(e, pn.domain):
                continue
            if any(pdg.rec(q).op not in NON_ALIASING for q, _ in pdg.consumers(p) if q in problem.of):
                continue
            # another reader in the same group at the same point that runs after c
            if any(q != c and problem.of.get(q) == problem.of[c] and order[q] > order[c]
                   for q, _ in pdg.consumers(p)):
                continue
            a = access_g(analysis, problem.of, c, p, e.pos)
            when = isl.UnionMap.from_map(a).apply_range(isl.UnionMap.from_map(last[p]))
            mine = isl.UnionMap.from_map(tm[stmt(problem.of[c])]).intersect_domain(
                isl.UnionSet.from_set(analysis.demand[c].set_tuple_name(stmt(problem.of[c]))))
            if when.is_equal(mine):
                out[c] = e.pos
                break
    return out
