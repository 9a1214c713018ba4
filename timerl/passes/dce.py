"""Dead-code elimination: keep only what a sink or a parameter update demands.

A node survives when it is reachable from a root (a sink or a node flagged ``root``)
and some point of it is demanded, or when a survivor other than a placeholder reads it
(a read of an empty slice demands no point but keeps the operand); everything else, and
the edges into it, goes. A placeholder loses the branches whose values nobody demands
(their condition holds at none of its demanded points, so no earlier or later branch
changes meaning there) and its remaining branches are renumbered in order.
"""

from __future__ import annotations

from ..ir.analysis import Analysis, live_nodes
from ..ir.ops import Edge, Op
from .rewrite import remodel


def dce(prog, pdg, bounds, analysis):
    """The subgraph of demanded nodes (see the module docstring)."""
    reach = live_nodes(pdg)
    keep = {n for n in analysis.live if n in reach and not analysis.demand[n].is_empty()}
    stack = list(keep)
    while stack:
        c = stack.pop()
        if pdg.rec(c).op is Op.MERGE:
            continue
        for p, _ in pdg.inputs(c):
            if p not in keep:
                keep.add(p)
                stack.append(p)
    if len(keep) == len(pdg):
        return pdg, analysis
    out = pdg.subgraph(keep).copy()
    for n in keep:
        if pdg.rec(n).op is Op.MERGE:
            _renumber(out, n)
    live = sorted(keep)
    demand = {n: analysis.demand[n] for n in live}
    return out, Analysis(remodel(prog, out, bounds, analysis), live, demand, analysis.seconds)


def _renumber(pdg, n):
    """Branch positions of merge ``n`` made contiguous again, in their order."""
    edges = sorted(((d["edge"].pos, p, k) for _, p, k, d in pdg.out_edges(n, keys=True, data=True)))
    for pos, (old, p, k) in enumerate(edges):
        if old != pos:
            e = pdg.edges[n, p, k]["edge"]
            pdg.edges[n, p, k]["edge"] = Edge(pos=pos, out=e.out, index=e.index, cond=e.cond, shift=e.shift)


__all__ = ["dce"]
