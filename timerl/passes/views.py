"""A view read by several ops becomes one view per reader; each read output of a UDF with several
becomes a node of its own.

A ``permute`` or ``reshape`` costs nothing to take again, but one stored view keeps its operand's
buffer alive until the view's last reader, and it is made where its first reader runs. A per-step
learner reads the acting step's flattened observation ``reshape(o[i, t])`` a whole rollout later
(Monte-Carlo returns): the one shared view pins each observation in memory, so a swap to disk
under ``memory_budget`` cannot take it out. With a view per reader, the ``group`` pass puts each
one in its reader's statement, the acting step's view is gone with the acting step, and the
learner takes its own from the stored (or swapped-back) observation.

An environment step returns its observation, reward and done flags as one node, freed after its
last reader: returns read each step's reward and done flags after the rollout (GAE's delta, a
Monte-Carlo return), so every step's observation (already copied into ``o`` by the next step) would
be held that long too. So each read output of a UDF with several is read through an access of its
own (:func:`timerl.passes.incrementalize.with_own_outputs`, as a window of one output gets its ring
there); the ``group`` pass joins those accesses to the UDF's statement first, so the UDF's tuple is
freed where it is made and each output lives as long as its own readers. The memory plan counts such
an access as owning its output (:func:`timerl.schedule.memory.views`). PPO on the host trivial env
at 64 x 500, obs 3x16x16, plans 152.3 MB instead of 233.2. ``compile(passes={"split_outputs":
False})`` reads the outputs from the UDF's node (the values are the same).

A transpose read by one op over more dims than its own, at its own point, moves into its reader's
domain: the learner's ``x[i]ᵀ`` read by the weight gradient at every update ``k`` of PPO's
iteration ``i``, made once at ``i``, was a copy its statement returned and stored through every
update (two of them, actor and critic: 49 MB at the paper's setting); taken at ``(i, k)`` it joins
the matmul's statement and is a strided view there.

Each copy is demanded where its reader reads it (the analysis is rerun), so a copy never runs at
points only another reader reads. ``compile(passes={"views": False})`` keeps shared views; the
values are the same either way.
"""

from __future__ import annotations

import dataclasses

from ..ir.analysis import analyze
from ..ir.ops import Edge, Op, is_basis
from .incrementalize import with_own_outputs

#: the views this pass copies per reader (and the ``group`` pass joins to their reader first); the
#: memory plan's wider :data:`timerl.schedule.memory.VIEW_OPS` also counts broadcasts and slices
PER_READER = (Op.PERMUTE, Op.RESHAPE)


def views(prog, pdg, bounds, analysis, ctx=None):
    """Each reader but the first of a shared permute or reshape reads a copy of its own; with the
    ``split_outputs`` switch on (the default of :func:`timerl.passes.run_passes`), each read output of a several-output UDF an access of its own."""
    shared = [n for n in analysis.live if pdg.rec(n).op in PER_READER and len({c for c, _ in pdg.consumers(n)}) > 1]
    split = ctx is not None and ctx.switches.get("split_outputs", False)
    outputs = _udf_outputs(pdg, analysis.live) if split else []
    inward = [n for n in analysis.live if _takes_inward(pdg, n)]
    if not shared and not outputs and not inward:
        return pdg, analysis
    out, nxt = with_own_outputs(pdg, outputs)
    # a view of a view: copies of the inner one first would leave the outer's copies sharing it
    for n in sorted(shared, key=lambda m: -_depth(pdg, m)):
        readers = sorted({c for c, _ in out.consumers(n)})
        for c in readers[1:]:
            out.add_node(nxt, **dict(out.nodes[n]))
            for p, e in out.inputs(n):
                out.add_dep(nxt, p, e)
            for _, _, key, d in [x for x in out.in_edges(n, keys=True, data=True) if x[0] == c]:
                e = d["edge"]
                out.remove_edge(c, n, key)
                out.add_dep(c, nxt, Edge(pos=e.pos, out=e.out, index=e.index, cond=e.cond, shift=e.shift))
            nxt += 1
    _move_inward(out)
    return out, analyze(prog, out, bounds)


def _takes_inward(pdg, n) -> bool:
    """Whether view ``n`` is read by one op only, over more dims than its own, at its own point: the
    learner's transposed rollout block ``permute(x[i])`` read by the weight gradient at every update
    ``k`` of iteration ``i``. Made once at ``i`` it is a stored copy (a statement returns its
    members as arrays) held through every update; taken at ``(i, k)`` it joins its reader's statement
    and is a strided view there (BLAS reads a transpose for free)."""
    node = pdg.rec(n)
    if node.op is not Op.PERMUTE:  # a reshape of a stored array is a view wherever it is taken
        return False
    cons = pdg.consumers(n)
    if len({c for c, _ in cons}) != 1:
        return False
    dc = pdg.rec(cons[0][0]).domain
    names = {d.name for d in dc}
    return len(dc) > len(node.domain) and all(d.name in names for d in node.domain) and \
        all(e.cond is None and not e.shift and is_basis(e, node.domain) for _, e in cons)


def _move_inward(out):
    """Each view :func:`_takes_inward` moved to its reader's domain, read there at the same point
    (repeated: a transpose of a transpose follows its reader in)."""
    moved = True
    while moved:
        moved = False
        for n in sorted(out.nodes):
            if not _takes_inward(out, n):
                continue
            c = out.consumers(n)[0][0]
            dc = out.rec(c).domain
            out.nodes[n]["node"] = dataclasses.replace(out.rec(n), domain=dc)
            for _, _, key, d in list(out.in_edges(n, keys=True, data=True)):
                e = d["edge"]
                out.remove_edge(c, n, key)
                out.add_dep(c, n, Edge(pos=e.pos, out=e.out, index=tuple(x.e for x in dc)))
            moved = True


views.takes_context = True


def several_outputs(pdg, p) -> bool:
    """Whether ``p`` is a UDF with several outputs (an environment step's observation, reward, done)."""
    node = pdg.rec(p)
    return node.op is Op.UDF and len(node.shapes) > 1


def _udf_outputs(pdg, live) -> list:
    """``(udf, output)``: the outputs of a UDF with several that something other than an access of
    that output alone reads."""
    out = []
    for p in sorted(live):
        if not several_outputs(pdg, p):
            continue
        for k in range(len(pdg.rec(p).shapes)):
            readers = [(c, e) for c, e in pdg.consumers(p) if e.out == k]
            if any(pdg.rec(c).op is not Op.ACCESS or len(pdg.inputs(c)) != 1 for c, _ in readers):
                out.append((p, k))
    return out


def _depth(pdg, n) -> int:
    """How many view ops ``n`` is taken through (its own included)."""
    d = 0
    while pdg.rec(n).op in PER_READER:
        d += 1
        n = pdg.inputs(n)[0][0]
    return d


__all__ = ["PER_READER", "several_outputs", "views"]
