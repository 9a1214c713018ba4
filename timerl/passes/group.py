"""Grouping: which live nodes run together as one isl statement, recorded on the PDG.

The pass joins nodes with :func:`timerl.schedule.model.make_groups` (same domain and demand,
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

from ..schedule import model
from ..schedule.model import GROUPS, JOINS, SEGMENTS


def group(prog, pdg, bounds, analysis):
    """A copy of ``pdg`` annotated with its grouping (see the module docstring)."""
    joins = []
    groups, _ = model.make_groups(pdg, analysis, joins=joins)
    out = pdg.copy()
    out.graph[GROUPS] = tuple((g.gid, tuple(g.members)) for g in groups)
    out.graph[JOINS] = tuple(joins)
    out.graph.pop(SEGMENTS, None)  # the fusion of another grouping
    return out, analysis


__all__ = ["GROUPS", "JOINS", "group"]
