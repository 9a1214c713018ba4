"""Fusion: which members of each statement run as one statement kernel, recorded on the PDG.

On the numba backend the members of a group statement that
:func:`timerl.kernels.statement.renderable` accepts are cut into *segments*, each compiled into
one kernel, and the rest (UDFs, sinks, placeholders, reads of other statements) are *glue*
run by the interpreter (:func:`timerl.kernels.statement.order`). The pass returns a copy of the
graph annotated with ``pdg.graph["segments"]`` (:data:`SEGMENTS`): a dict from each group's
members (the tuple, as the ``group`` pass recorded them; one node each when grouping is off)
to its list of ``("seg", [n, ...])`` and ``("glue", n)`` in execution order.

It needs the backend (:class:`~timerl.passes.PassContext`): on backends other than numba (and
when none is given) it records nothing, and the lowering runs every member in the interpreter;
so does numba with the pass switched off (``compile(passes={"fuse": False})``). The lowering
(``Lowering.segments``) only reads the segments; the groups the scheduler makes beyond the
annotated ones (the ungrouped fallback, a refined grouping) get theirs from :func:`annotate_groups`
with the same rule. It follows the ``group`` pass; a later ``group`` or rewriting pass drops it.
"""

from __future__ import annotations

from ..kernels import statement
from ..schedule.model import GROUPS, SEGMENTS

FUSING_BACKENDS = ("numba",)


def segments_of(pdg, members, domain) -> list:
    """``statement.order`` of ``members`` (a statement over ``domain``): kernel segments and glue."""
    dims = [d.name for d in domain]
    return statement.order(pdg, list(members), lambda n: statement.renderable(pdg, n, dims))


def fuse(prog, pdg, bounds, analysis, ctx=None):
    """A copy of ``pdg`` annotated with each group's segments for ``ctx.backend`` (module docstring)."""
    if ctx is None or ctx.backend not in FUSING_BACKENDS:
        if SEGMENTS not in pdg.graph:
            return pdg, analysis
        out = pdg.copy()
        del out.graph[SEGMENTS]
        return out, analysis
    if GROUPS in pdg.graph:
        groups = pdg.graph[GROUPS]
    else:  # grouping off: one statement per demanded node
        groups = [(n, (n,)) for n in analysis.live if not analysis.demand[n].is_empty()]
    out = pdg.copy()
    out.graph[SEGMENTS] = {tuple(ms): segments_of(pdg, ms, pdg.rec(gid).domain) for gid, ms in groups}
    return out, analysis


fuse.takes_context = True


def annotate_groups(pdg, groups):
    """Give each scheduled group (:class:`~timerl.schedule.model.Group`) without segments its own,
    when ``pdg`` carries the fusion annotation (the groups the scheduler made beyond the annotated
    ones: the ungrouped fallback, a refined grouping). Groups of a graph without it keep None."""
    if SEGMENTS not in pdg.graph:
        return
    for g in groups:
        if g.segments is None:
            g.segments = segments_of(pdg, g.members, g.domain)


__all__ = ["FUSING_BACKENDS", "SEGMENTS", "annotate_groups", "fuse", "segments_of"]
