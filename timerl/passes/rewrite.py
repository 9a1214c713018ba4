"""Tools the rewriting passes share: a copy to edit, forwarding one node's readers to another,
and an :class:`~timerl.ir.analysis.Analysis` that stays consistent with the rewritten graph.

The demanded sets are carried over rather than recomputed (isl's demand analysis costs
about a second on PPO): a pass that removes node ``b`` in favour of ``a`` promises that
``a`` computes ``b``'s value at every point ``b`` was demanded, so ``a``'s demand becomes
the union of both and no other node's demand changes (its readers read the same values
at the same points; its producers are read at no new points).
"""

from __future__ import annotations

from ..ir.analysis import Analysis
from ..ir.ops import Edge
from ..ir.polyhedral import Model, stmt

# node-level flags (beside the record) that passes carry from a removed node to its replacement
CARRIED_FLAGS = ("root",)


def forward(pdg, old, new, out=None):
    """Every reader of ``old`` other than ``old`` itself reads ``new`` instead, at the same index
    (the caller guarantees both have the same domain, so the index stays one entry per dim):
    the same output, or output ``out`` of ``new`` when ``old`` has one output."""
    for c, _, key, d in list(pdg.in_edges(old, keys=True, data=True)):
        if c == old:
            continue
        e = d["edge"]
        pdg.remove_edge(c, old, key)
        pdg.add_dep(c, new, Edge(pos=e.pos, out=e.out if out is None else out, index=e.index, cond=e.cond,
                                 shift=e.shift))
    for flag in CARRIED_FLAGS:
        if pdg.nodes[old].get(flag):
            pdg.nodes[new][flag] = True


def reanalysed(prog, pdg, bounds, analysis, replaced: dict) -> Analysis:
    """The analysis of ``pdg`` after nodes were removed: ``replaced`` maps each removed node
    to the node that now computes its value (or None for a node nobody reads any more)."""
    demand = {}
    for n in analysis.live:
        if n in pdg:
            demand[n] = analysis.demand[n]
    for old, new in replaced.items():
        while new is not None and new not in pdg:
            new = replaced.get(new)
        if new is None or new not in demand or old not in analysis.demand:
            continue
        demand[new] = demand[new].union(analysis.demand[old].set_tuple_name(stmt(new))).coalesce()
    return Analysis(remodel(prog, pdg, bounds, analysis), sorted(demand), demand, analysis.seconds)


def remodel(prog, pdg, bounds, analysis) -> Model:
    """A fresh isl model of the rewritten ``pdg`` (the old one caches per node and reads its
    own graph), reusing the parsed templates, which depend on the program only."""
    model = Model(prog, pdg, bounds)
    model._templates = analysis.model._templates
    return model


__all__ = ["CARRIED_FLAGS", "forward", "reanalysed", "remodel"]
