"""Incrementalization: a sum over a whole dim becomes a running accumulator along that dim.

The opposite move to vectorization, taken where memory wins. A per-step learner (a loss written
``loss[i] = mean(term[i, 0:T])`` over per-step terms) differentiates into per-step gradient
contributions that autodiff sums over the rollout: ``g[i] = sum(X[i, 0:T], axis=0)`` (an access of
the block, then a reduction over its stacked axis). Stored as written, every ``X[i, t]`` lives until
the sum: for a weight gradient that is ``T`` copies of the weight. The pass rewrites it to

    acc[i, 0] = X[i, 0]
    acc[i, t] = acc[i, t - 1] + X[i, t]        (t >= 1)
    g[i]      = acc[i, T - 1]

which adds in the same order as NumPy's sum along a leading axis (row after row), so the value is
the same bit for bit on the reference executor, and each ``X[i, t]`` is freed once added. A
``mean`` becomes that sum divided by the count, as NumPy computes it.

When: the sum is ``sum`` over axis 0 of an access reading ``X`` at ``0:D`` along one dim ``d`` (``D``
the dim's bound or its known value) and at its own point elsewhere, the access read by that sum
alone, and ``X`` *streams* along ``d``: everything ``X[.., t]`` is computed from (through ops over
``d``) reads ``d`` at ``t + c`` or in windows ``t + a : t + b`` (a ``min`` with the bound allowed),
never a whole range (``0:T``, ``t:T``) or a fixed point (``T - 1``), and no recurrence through it
runs backwards (``G[t]`` reading ``G[t + 1]``). Then ``X[.., t]`` exists a bounded number of steps
after ``t``, the scheduler can add it in while the loop over ``d`` runs (learning while acting),
and the planned peak no longer holds ``D`` of anything. Monte-Carlo returns read the future to
the end: there the learner waits for the rollout anyway, and the vectorized learner (one batched
op over the rollout) is both faster and no larger, so the sum is left to vectorization.

Windows become rings of their own: a window ``x[t:t + n]`` of one output of a node with several
(an environment step's reward, next to its observation) reads a copy of that output instead, so
the memory plan's ring along ``d`` holds that output alone and the other outputs are freed once
read (without this, a ring of n steps keeps n observations that only the next step reads; the
``views`` pass does the same for every output of a UDF, after vectorization).

The nodes ``X`` is computed from over ``d``, and the accumulator, are marked ``stream = d`` so the
``vectorize`` pass keeps them per step (the accumulator is a recurrence along ``d``, and a batched
``X`` would be a block of ``D`` again). ``compile(passes={"incrementalize": False})`` turns the pass
off; the values are the same either way.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import sympy

from ..ir.analysis import analyze
from ..ir.ops import Edge, Node, Op, Slice, frozen

STREAM = "stream"  # node attribute: the dim name along which the node is kept per point


def incrementalize(prog, pdg, bounds, analysis, ctx=None):
    """Rewrite every streaming whole-dim sum into an accumulator (see the module docstring); with
    ``compile(passes={"incrementalize_all": True})`` also the sums of values that do not stream."""
    every = bool(ctx is not None and ctx.switches.get("incrementalize_all", False))
    live = set(analysis.live)
    split = _windowed_outputs(pdg, live)
    found = []
    for d in prog.dims[1:]:
        for n in sorted(live):
            hit = _whole_sum(prog, pdg, bounds, n, d)
            if hit is not None:
                found.append((n, d) + hit)
    if not found and not split:
        return pdg, analysis
    out, nxt = with_own_outputs(pdg, split)
    done = set(split)
    for n, d, access, x, stop, count in found:
        streamed = _streams(pdg, x, d, every)
        if streamed is None:
            continue
        nxt = _rewrite(out, n, d, access, x, stop, count, nxt)
        done |= streamed | {n}
        for m in streamed:
            out.nodes[m][STREAM] = d.name
    if not done:
        return pdg, analysis
    return out, analyze(prog, out, bounds)


def _windowed_outputs(pdg, live) -> list:
    """``(node, output)`` pairs: an output of a several-output node read through a window."""
    out = []
    for p in sorted(live):
        if len(pdg.rec(p).shapes) < 2:
            continue
        for k in range(len(pdg.rec(p).shapes)):
            if any(e.out == k and any(isinstance(x, Slice) for x in e.index) for _, e in pdg.consumers(p)):
                out.append((p, k))
    return out


def with_own_outputs(pdg, pairs):
    """``(copy, next free id)``: a copy of ``pdg`` where each ``(node, output)`` of ``pairs`` is read
    through an access of its own (:func:`own_output`)."""
    out = pdg.copy()
    nxt = max(out.nodes) + 1
    for p, k in pairs:
        nxt = own_output(out, p, k, nxt)
    return out, nxt


def own_output(out, p, k, nxt):
    """Readers of output ``k`` of ``p`` read an access of that output alone (a node of its own)."""
    node = out.rec(p)
    out.add_op(nxt, Node(Op.ACCESS, node.domain, (node.shapes[k],), (node.dtypes[k],), {}, node.name, node.index))
    out.add_dep(nxt, p, Edge(pos=0, out=k, index=tuple(y.e for y in node.domain)))
    for c, _, key, data in list(out.in_edges(p, keys=True, data=True)):
        e = data["edge"]
        if e.out == k and c != nxt:
            out.remove_edge(c, p, key)
            out.add_dep(c, nxt, Edge(pos=e.pos, out=0, index=e.index, cond=e.cond, shift=e.shift))
    return nxt + 1


def _whole_sum(prog, pdg, bounds, n, d):
    """``(access, X, stop, count)`` when ``n`` is ``sum(X[.., 0:stop, ..], axis=0)`` (or ``mean``) over all of ``d``."""
    node = pdg.rec(n)
    if node.op is not Op.REDUCE or node.attrs.get("fn") not in ("sum", "mean") or tuple(node.attrs.get("axis", ())) != (0,):
        return None
    if node.attrs.get("keepdims") or node.attrs.get("flat") or len(node.shapes) != 1:
        return None
    ins = pdg.inputs(n)
    if len(ins) != 1:
        return None
    (a, ea), = ins
    acc = pdg.rec(a)
    if acc.op is not Op.ACCESS or ea.index != tuple(x.e for x in node.domain) or acc.domain != node.domain:
        return None
    if len(pdg.consumers(a)) != 1:
        return None
    (x, e), = pdg.inputs(a)
    xn = pdg.rec(x)
    if d not in xn.domain or d in acc.domain or len(xn.shapes) != 1 or e.out != 0:
        return None
    if xn.op in (Op.CONST, Op.DATA):
        return None  # given, not computed per step: nothing to free
    if xn.dtype != node.dtype or tuple(node.shape) != tuple(xn.shape):
        return None
    outer = [y for y in xn.domain if y is not d]
    if tuple(outer) != tuple(acc.domain):
        return None
    for y, ent in zip(xn.domain, e.index):
        if y is d:
            if not isinstance(ent, Slice) or sympy.sympify(ent.start) != 0:
                return None
            stop = sympy.sympify(ent.stop)
            full = {d.bound.e} | ({sympy.Integer(bounds[d.bound.name])} if d.bound.name in bounds else set())
            if stop not in full:
                return None
            count = int(stop) if stop.is_Integer else bounds.get(d.bound.name)
            if node.attrs["fn"] == "mean" and count is None:
                return None
        elif isinstance(ent, Slice) or sympy.sympify(ent) != y.e:
            return None
    return a, x, stop, count


def _offset(ent, d):
    """``c`` when ``ent`` is ``d + c`` for an integer ``c``, else None."""
    c = sympy.sympify(ent) - d.e
    return int(c) if c.is_Integer else None


def _window(ent, d) -> bool:
    """A slice ``d + a : d + b`` (or ``: min(d + b, bound)``): a bounded window that moves with ``d``."""
    if _offset(ent.start, d) is None:
        return False
    stop = sympy.sympify(ent.stop)
    args = stop.args if isinstance(stop, sympy.Min) else (stop,)
    return any(_offset(s, d) is not None for s in args)


def _carried(pdg, c, p, e) -> bool:
    """The read goes to an earlier point of a dim both share outside (``x[i - 1, ...]``)."""
    pdom = pdg.rec(p).domain
    for y, ent in zip(pdom, e.index):
        if y in pdg.rec(c).domain and not isinstance(ent, Slice):
            off = sympy.sympify(ent) - y.e
            if off.is_Integer and off < 0:
                return True
            if off != 0:
                return False
        elif y in pdg.rec(c).domain:
            return False
    return False


def _streams(pdg, x, d, every=False):
    """The nodes over ``d`` that ``x`` is computed from (``x`` included), when all of them read ``d``
    at bounded offsets or windows and no recurrence among them runs backwards; else None. ``every``:
    those nodes whatever they read (the values wait for the end of the loop over ``d``, and are then
    added one step after another)."""
    seen, todo, edges = {x}, [x], []
    while todo:
        c = todo.pop()
        for p, e in pdg.inputs(c):
            if d not in pdg.rec(p).domain:
                continue
            if _carried(pdg, c, p, e):
                continue  # an earlier iteration's value: done before this one starts
            ent = e.index[pdg.rec(p).domain.index(d)]
            if every:
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
                continue
            if isinstance(ent, Slice):
                if not _window(ent, d):
                    return None
                off = 1  # reads ahead: not allowed on a cycle
            else:
                off = _offset(ent, d)
                if off is None:
                    return None
            edges.append((c, p, off))
            if p not in seen:
                seen.add(p)
                todo.append(p)
    g = nx.DiGraph()
    g.add_nodes_from(seen)
    g.add_edges_from((c, p) for c, p, _ in edges)
    comp = {}
    for k, scc in enumerate(nx.strongly_connected_components(g)):
        for m in scc:
            comp[m] = k
    for c, p, off in edges:
        if off > 0 and comp[c] == comp[p]:
            return None  # a backward recurrence (G[t] = r[t] + g G[t + 1]): the end comes first
    return seen


def _rewrite(out, n, d, access, x, stop, count, nxt):
    """``n`` becomes the access ``acc[.., stop - 1, ..]`` of a new accumulator over ``X``'s domain."""
    node, xn = out.rec(n), out.rec(x)
    dom = xn.domain
    here = tuple(y.e for y in dom)
    prev_at = tuple(y.e - 1 if y is d else y.e for y in dom)
    acc, prev, add = nxt, nxt + 1, nxt + 2
    name = f"{node.name} (running)"
    out.add_op(acc, Node(Op.MERGE, dom, node.shapes, node.dtypes, {}, name, node.index))
    out.add_op(prev, Node(Op.ACCESS, dom, node.shapes, node.dtypes, {}, name, node.index))
    out.add_op(add, Node(Op.BINARY, dom, node.shapes, node.dtypes, {"fn": "add"}, name, node.index))
    zero = tuple(0 for _ in dom)
    out.add_dep(acc, x, Edge(pos=0, out=0, index=here, cond=sympy.Eq(d.e, 0), shift=zero))
    out.add_dep(acc, add, Edge(pos=1, out=0, index=here, cond=d.e >= 1, shift=zero))
    out.add_dep(prev, acc, Edge(pos=0, out=0, index=prev_at))
    out.add_dep(add, prev, Edge(pos=0, out=0, index=here))
    out.add_dep(add, x, Edge(pos=1, out=0, index=here))
    for m in (acc, prev, add):
        out.nodes[m][STREAM] = d.name
    # n itself becomes the read of the last point (a mean: that read over the count; readers and id stay)
    out.remove_edges_from(list(out.out_edges(n, keys=True)))
    out.remove_node(access)
    idx = tuple(stop - 1 if y is d else y.e for y in dom)
    last = Node(Op.ACCESS, node.domain, node.shapes, node.dtypes, {}, node.name, node.index)
    if node.attrs["fn"] == "sum":
        out.nodes[n]["node"] = last
        out.add_dep(n, acc, Edge(pos=0, out=0, index=idx))
        return nxt + 3
    read, div = nxt + 3, nxt + 4   # np.mean: the sum (row after row) divided by the count, in the dtype
    out.add_op(read, last)
    out.add_dep(read, acc, Edge(pos=0, out=0, index=idx))
    out.add_op(div, Node(Op.CONST, (), ((),), (node.dtype,), {"value": frozen(np.array(count, dtype=node.dtype))},
                           node.name, node.index))
    out.nodes[n]["node"] = Node(Op.BINARY, node.domain, node.shapes, node.dtypes, {"fn": "div"}, node.name, node.index)
    out.add_dep(n, read, Edge(pos=0, out=0, index=tuple(y.e for y in node.domain)))
    out.add_dep(n, div, Edge(pos=1, out=0, index=()))
    return nxt + 5


incrementalize.takes_context = True

__all__ = ["STREAM", "incrementalize", "own_output", "with_own_outputs"]
