"""Swaps: stored values moved to disk while they wait for a late reader (``memory_budget``).

A swap of a stored node ``p`` takes its points out of memory after their early readers and
brings them back before their late readers, as statements of the schedule placed like the
frees (:mod:`timerl.schedule.memory`):

- the *span* of a point is its coordinates but one dim: the block's dim for a block store, the
  dim its cells run along, else the innermost (a rollout's points of one iteration). A read is
  *late* when it comes after the last write of the point's span and in a later iteration of the
  loop that writes the span (the learner after the acting loop; the returns running backward
  over the rollout), else *early* (the next step reading this one, the environment step
  reading the action just sampled);
- ``O<p>[x]`` (swap-out) runs after the write of ``x`` and its early readers, for every point
  of a unit whose points can all go out before its first late read;
- ``I<p>[u]`` (swap-in) reads one *unit* back: a whole block for a block store (a slice reader
  needs every row), else one point. It runs before the unit's first late reader, or one
  statement earlier (prefetch) when every swap-out of the unit comes before that statement;
  then ``V<p>[u]`` before the reader waits for the read, which overlaps that statement;
- an output of a node with several (a UDF's) that no late reader reads of a point is dropped at
  its swap-out instead of written (an environment step's observation, whose reward the returns
  read later).

In the schedule's time vectors an execution ends with ``(rank, 0)`` and its frees take
``(rank, 1 + k)`` (:func:`timerl.schedule.model.time_map`); a swap-out takes ``(rank, 1 + F + p)``
(``F`` free statements, after them) and a swap-in, prefetch or wait ``(rank, -1 - p)``, before
the execution.

Bytes: a point counts from its write to its swap-out and from its unit's swap-in to its free
(a block from its swap-in to the free of its last point), as the run counts them
(:class:`timerl.runtime.spill.SpillStore`), so the planned peak stays the measured one.
"""

from __future__ import annotations

import dataclasses

import islpy as isl
import numpy as np

from ..ir.ops import Op, Slice
from ..ir.polyhedral import stmt
from .memory import reader_maps
from .model import access_g
from .tree import expr_py

#: swap statements' isl names by kind (the schedule tree's ``Call.kind``)
PREFIX = {"swap_out": "O", "swap_in": "I", "prefetch": "P", "swap_wait": "V"}


@dataclasses.dataclass
class Swap:
    """The swaps of one node: where they run (isl maps) and what the run does."""

    node: int
    name: str
    unit: str  # "block" (a block store: one swap-in per block) | "point"
    pos: int  # the span's dim: the block's dim, the cells' dim, else the innermost
    dims: tuple  # names of the unit's dims (swap-in and wait statements)
    lo: int  # block: first index along its dim
    length: int  # block: rows
    outs: tuple  # ((shape, dtype), ...) per output
    keep: tuple  # per output: Python condition over the point's ``d_<dim>`` whether a swap-out writes it
    maps: list = dataclasses.field(default_factory=list)  # [(kind, isl.Map to time)]

    def kinds(self) -> set:
        return {k for k, _ in self.maps}

    def header(self) -> str:
        what = "blocks" if self.unit == "block" else "points"
        ahead = ", prefetched one statement ahead" if "prefetch" in self.kinds() else ""
        return f"spill S{self.node} {self.name!r}: {what} to disk after their early readers, back before their " \
               f"late ones{ahead}"


def _um(m):
    return isl.UnionMap.from_map(m) if isinstance(m, isl.Map) else m


def _one(u):
    """The one map of a union over one space (None if empty)."""
    ms = []
    u.foreach_map(ms.append)
    return ms[0] if ms else None


def _set_last(n, k):
    a = ", ".join(f"a{j}" for j in range(n))
    b = ", ".join([f"a{j}" for j in range(n - 1)] + [str(k)])
    return isl.UnionMap(f"{{ [{a}] -> [{b}] }}")


def _ndims(T):
    return _one(T).dim(isl.dim_type.out)


def _later_iteration(W, span, n):
    """``{ τ -> τ' }``: ``τ'`` runs in a later iteration of the loop that writes the points of a
    span one after another (the first time dim on which two writes of one span differ) than ``τ``:
    a read in the same iteration as the write (the environment step reading the action just
    sampled) is not late, even after the span's last write."""
    pairs = W.reverse().apply_range(span.apply_range(span.reverse())).apply_range(W)
    a, b = [f"a{j}" for j in range(n)], [f"b{j}" for j in range(n)]
    k = n - 1
    for j in range(n):
        eq = " and ".join(f"{x} = {y}" for x, y in zip(a[:j + 1], b[:j + 1]))
        if not pairs.is_subset(isl.UnionMap(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {eq} }}")):
            k = j
            break
    ors = [" and ".join([f"{x} = {y}" for x, y in zip(a[:j], b[:j])] + [f"{a[j]} < {b[j]}"]) for j in range(k + 1)]
    return isl.UnionMap(f"{{ [{', '.join(a)}] -> [{', '.join(b)}] : {' or '.join(f'({c})' for c in ors)} }}")


def spillable(pdg, problem, buffers, views) -> set:
    """Nodes a swap may take out: stored with an owned buffer (not a view), of static shapes, in a
    block store (not a ring), cells or a table of points, on a domain of one dim or more."""
    out = set()
    for n, b in buffers.items():
        node = pdg.rec(n)
        if n in views or n not in problem.of or not node.domain or node.op is Op.SINK:
            continue
        if b.kind in ("block", "cells", "points") and all(isinstance(s, int) for sh in node.shapes for s in sh):
            out.add(n)
    return out


def _reads(pdg, analysis, problem, p, views):
    """``[(output, sliced, direct, through)]`` per reader of ``p``: ``{ S<reader's group>[y] ->
    S<p>[x] }`` of what it reads of output ``output`` (by a slice or not), and when it is a view of
    ``p``, what its own readers read of ``p`` through it."""
    out = []
    for c, e in pdg.consumers(p):
        if c not in problem.of:
            continue
        through = []
        if views.get(c):
            acc = analysis.model.access(c, p, e.pos).intersect_domain(analysis.demand[c])
            through = [a.apply_range(acc) for a in reader_maps(pdg, analysis, problem, c, views)]
        sliced = pdg.rec(c).op in (Op.ACCESS, Op.MERGE) and any(isinstance(x, Slice) for x in e.index)
        out.append((e.out, sliced, access_g(analysis, problem.of, c, p, e.pos), through))
    return out


def plan_swap(pdg, analysis, problem, T, buffer, views, n_frees, bounds, prefetch=True):
    """The :class:`Swap` of the node that ``buffer`` (:class:`timerl.runtime.lowered.Buffer`) stores,
    or None when no point of it waits for a late reader. ``views``: the memory plan's
    (:func:`timerl.schedule.memory.views`); ``n_frees``: its free statements; ``prefetch``: swap-ins
    one statement ahead where they can be."""
    p, node = buffer.node, pdg.rec(buffer.node)
    nd, n = len(node.domain), _ndims(T)
    if buffer.kind == "block":
        unit, pos, lo, length = "block", buffer.storage.pos, buffer.storage.lo, buffer.storage.length
    else:
        unit, pos, lo, length = "point", buffer.pos if buffer.kind == "cells" else nd - 1, 0, 0
    ctx = problem.ctx
    D = analysis.demand[p].intersect_params(ctx)
    W = _um(_write_times(T, D, problem.of[p], p))
    xs = [f"x{k}" for k in range(nd)]
    span = isl.UnionMap(f"{{ {stmt(p)}[{', '.join(xs)}] -> K[{', '.join(x for k, x in enumerate(xs) if k != pos)}] }}")
    lt = _um(isl.Map.lex_lt(_one(T).get_space().range()))

    def when(a):  # x -> the times it is read at
        return isl.UnionMap.from_map(a.intersect_range(D).reverse()).apply_range(T).intersect_params(ctx)

    reads = [(out, sliced, when(a), [when(b) for b in through])
             for out, sliced, a, through in _reads(pdg, analysis, problem, p, views)]
    total = None
    for _, _, r, through in reads:
        for x in [r] + through:
            total = x if total is None else total.union(x)
    if total is None:
        return None
    # late: after the last write of the point's span, in a later iteration of the loop writing it
    last_w = span.apply_range(span.reverse().apply_range(W).lexmax())
    late = total.intersect(last_w.apply_range(lt)).intersect(W.apply_range(_later_iteration(W, span, n)))
    if late.is_empty():
        return None
    # x -> its write or its last early read, for the points read late (the others are freed by then)
    done = W.union(total.subtract(late)).lexmax().intersect_domain(late.domain())
    if unit == "block":
        first = span.reverse().apply_range(late).lexmin()  # block -> its first late read
        out_last = span.reverse().apply_range(done).lexmax()  # block -> when its last row can go out
    else:
        first, out_last = late.lexmin(), done
    # the units each of whose points can go out before their first late read
    ok = out_last.apply_range(lt).intersect(first).domain()
    if ok.is_empty():
        return None
    first, out_last = first.intersect_domain(ok), out_last.intersect_domain(ok)
    B = span.reverse().intersect_domain(ok).range().intersect(D) if unit == "block" else ok  # their points
    X = late.domain().intersect(B)  # the points that go out
    for _, sliced, r, through in reads:
        # a view made early but read late would keep a swapped-out buffer alive; a slice of a block
        # is a view of the swapped-in array, so it must come after the swap-in
        if any(not r.intersect_domain(x.intersect(late).domain()).is_subset(late) for x in through) or \
                (sliced and unit == "block" and not r.intersect_domain(B).is_subset(late)):
            return None
    maps = [("swap_out", done.intersect_domain(X).apply_range(_set_last(n, 1 + n_frees + p)))]
    sync = first
    if prefetch:  # the execution just before the first late reader, if every swap-out of the unit ran by then
        prev = first.apply_range(lt.reverse()).intersect_range(T.range()).lexmax()
        ahead = prev.intersect(out_last.apply_range(lt)).domain()
        maps += [("prefetch", prev.intersect_domain(ahead).apply_range(_set_last(n, -1 - p))),
                 ("swap_wait", first.intersect_domain(ahead).apply_range(_set_last(n, -1 - p)))]
        sync = first.subtract_domain(ahead)
    maps.append(("swap_in", sync.apply_range(_set_last(n, -1 - p))))
    maps = [(k, _one(m).set_tuple_name(isl.dim_type.in_, PREFIX[k] + str(p))) for k, m in maps if not m.is_empty()]
    dims = tuple(d.name for k, d in enumerate(node.domain) if unit == "point" or k != pos)
    outs = tuple((tuple(sh), str(np.dtype(dt))) for sh, dt in zip(node.shapes, node.dtypes))
    keep = _kept(reads, late, isl.Set.from_union_set(X), len(outs), unit, node.domain, bounds)
    return Swap(p, node.name, unit, pos, dims, lo, length, outs, keep, maps)


def _write_times(T, D, g, p):
    """``{ S<p>[x] -> time }``: when each point of node ``p`` (in group ``g``) is written."""
    return _one(T.intersect_domain(isl.UnionSet.from_set(D.set_tuple_name(stmt(g))))).set_tuple_name(
        isl.dim_type.in_, stmt(p))


def _kept(reads, late, X, n_outs, unit, domain, bounds) -> tuple:
    """Per output, whether a swap-out writes it: a Python condition over the point's ``d_<dim>``
    that holds where a late reader reads that output of the point (of any point, for a block)."""
    keep = []
    for j in range(n_outs):
        got = None
        for o, _, r, through in reads:
            for x in [r] + through if o == j else []:
                d = x.intersect(late).domain()
                got = d if got is None else got.union(d)
        if got is None or got.is_empty():
            keep.append("False")
        elif unit == "block":
            keep.append("True")
        else:
            got = isl.Set.from_union_set(got).intersect(X)
            keep.append("True" if X.is_subset(got) else "False" if got.is_empty() else
                        _py_cond(got, X, domain, bounds))
    return tuple(keep)


def _py_cond(s, within, domain, bounds):
    """Python condition over ``d_<dim>`` that holds at the points of ``s`` among those of ``within``."""
    names = [f"d_{d.name}" for d in domain]

    def plain(x):
        x = x.reset_tuple_id()
        for k, nm in enumerate(names):
            x = x.set_dim_name(isl.dim_type.set, k, nm)
        return x

    build = isl.AstBuild.from_context(plain(within))
    return expr_py(build.expr_from_set(plain(s).gist(plain(within))), {f"P_{k}": v for k, v in bounds.items()})
