"""Dead-code elimination: keep only what a sink or a parameter update demands.

A node survives when it is reachable from a root (a sink or a node flagged ``root``)
and some point of it is demanded, or when a survivor reads it (a read of an empty slice
demands no point but keeps the operand); everything else, and the edges into it, goes.
"""

from __future__ import annotations

from ..ir.analysis import Analysis, live_nodes
from .rewrite import remodel


def dce(prog, pdg, bounds, analysis):
    """The subgraph of demanded nodes (see the module docstring)."""
    reach = live_nodes(pdg)
    keep = {n for n in analysis.live if n in reach and not analysis.demand[n].is_empty()}
    stack = list(keep)
    while stack:
        for p, _ in pdg.inputs(stack.pop()):
            if p not in keep:
                keep.add(p)
                stack.append(p)
    if len(keep) == len(pdg):
        return pdg, analysis
    out = pdg.subgraph(keep).copy()
    live = sorted(keep)
    return out, Analysis(remodel(prog, out, bounds, analysis), live, {n: analysis.demand[n] for n in live}, analysis.seconds)


__all__ = ["dce"]
