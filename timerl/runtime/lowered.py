"""The lowered program: what a backend renders, independent of the backend.

The compiler's plan (groups, schedule tree, frees, donation, storage kinds) becomes one
:class:`Lowered`:

- ``buffers``: one :class:`Buffer` per stored node: how its points are kept. ``"slot"``
  (the memory plan proved that at most one point is live at a time: one variable, no key),
  ``"cells"`` (live points differ along one dim, by less than ``length``: a list indexed by
  that coordinate modulo ``length``),
  ``"block"``/``"circular"`` (points along one dim in one preallocated array or ring,
  :mod:`timerl.runtime.stores`) or ``"points"`` (a table of points, the general case);
- ``statements``: per group, its :class:`Step` list in execution order. A step is one op
  evaluated by the backend's op rule, or a ``"kernel"`` step computing a run of members
  in one generated function (the fusion annotation of the group) and storing the
  members read elsewhere;
- ``tails``: the frees that end a statement's execution; ``frees``: the nodes freed by
  free statements of the schedule tree;
- ``tree``: the schedule tree (loops, executions, frees, progress ticks);
- ``views``: stored nodes whose values share their operands' buffers (a point or a block's rows
  read as they are, a reshape): byte accounting gives them none of their own, and the memory
  plan keeps the operands alive as long as they are read
  (:func:`timerl.schedule.memory.views`);
- a buffer's ``spill``: the node's points go to disk and back by swap statements of the tree
  (:mod:`timerl.schedule.spill`); such a buffer is a :class:`timerl.runtime.spill.SpillStore`
  whatever its kind.

A renderer (:mod:`timerl.runtime.interpreter`) turns it into code; checking and
planning are instrumentations of that rendering, not a different program.
"""

from __future__ import annotations

import dataclasses

from ..ir.ops import Op


@dataclasses.dataclass(frozen=True)
class Buffer:
    node: int
    kind: str  # "points" | "slot" | "cells" | "block" | "circular"
    outputs: int = 1  # values per point (a UDF may return several)
    storage: object = None  # memory.Storage for block and circular buffers
    pos: int = -1  # cells: the domain position of the dim that indexes them
    length: int = 1  # cells: how many
    single: bool = False  # block/circular: never two blocks at once (one array, no table of blocks)
    spill: object = None  # timerl.schedule.spill.Swap: the node's points go to disk and back


@dataclasses.dataclass
class Step:
    kind: str  # "op" | "kernel"
    node: int  # the op, or a kernel's first member
    members: tuple = ()  # kernel: the members it computes, in order
    outputs: tuple = ()  # the nodes stored (an op: itself, a sink nothing; a kernel: members read outside it)
    donate: int | None = None  # op: the operand whose buffer it writes its result into


@dataclasses.dataclass
class Statement:
    gid: int
    domain: tuple
    steps: list
    tails: list  # (node, None or the one point) freed at the end of each execution


@dataclasses.dataclass
class Lowered:
    buffers: dict
    statements: list
    frees: list
    tree: object

    def stored(self) -> set:
        """Nodes whose values some step stores."""
        return {n for s in self.statements for st in s.steps for n in st.outputs}


def lower(pdg, groups, tree, donated, inline, kinds, frees, slots=(), segments=None, can_donate=None,
          single=(), views=(), swaps=None) -> Lowered:
    """The lowered program of one plan.

    ``segments(group)`` gives the group's fusion: ``[("seg", members) | ("glue", node)]``
    (None: every member is its own op step); ``can_donate(node)`` says whether the backend
    evaluates ``node`` in place (a plain ufunc call) so a donation is kept; ``slots``: the
    memory plan's point stores addressed by an integer (node -> ``(pos, n)``,
    :func:`timerl.schedule.memory.slot_nodes`; a set: one slot each); ``single``: the block
    stores that never hold two blocks at once (:func:`timerl.schedule.memory.single_blocks`);
    ``swaps``: node -> :class:`timerl.schedule.spill.Swap`.
    """
    swaps = swaps or {}
    if not isinstance(slots, dict):
        slots = {n: (-1, 1) for n in slots}
    kinds = {n: st for n, st in (kinds or {}).items() if st.kind != "points"}
    # an op never writes in place into a block or ring (other points share the array)
    donated = {c: pos for c, pos in donated.items() if pdg.inputs(c)[pos][0] not in kinds}
    statements = []
    for g in groups:
        steps = []
        parts = segments(g) if segments is not None else [("glue", n) for n in g.members]
        for kind, x in parts:
            if kind == "glue":
                node = pdg.rec(x)
                pos = donated.get(x)
                if pos is not None and (can_donate is None or not can_donate(x)):
                    del donated[x]
                    pos = None
                steps.append(Step("op", x, outputs=() if node.op is Op.SINK else (x,), donate=pos))
            else:
                inseg = set(x)
                outputs = tuple(n for n in x if any(c not in inseg for c, _ in pdg.consumers(n)))
                for n in x:  # a kernel writes fresh outputs: no member writes into an operand's buffer
                    donated.pop(n, None)
                steps.append(Step("kernel", x[0], members=tuple(x), outputs=outputs))
        statements.append(Statement(g.gid, tuple(g.domain), steps, list(inline.get(g.gid, ()))))
    low = Lowered({}, statements, sorted(frees), tree)
    low.donated = donated
    stored = low.stored()
    # values that share their operands' buffers (memory.views) and are kept as they are (a block
    # or ring copies its rows): no bytes of their own
    # a kernel's members are its own arrays, but for a reshape of an operand (or of such a reshape)
    own = set()
    for s in statements:
        for st in s.steps:
            ext, members = set(), set(st.members)
            for n in st.members:
                if pdg.rec(n).op is Op.RESHAPE and (pdg.inputs(n)[0][0] in ext or pdg.inputs(n)[0][0] not in members):
                    ext.add(n)
                else:
                    own.add(n)
    low.views = {n for n in views if n in stored and n not in kinds and n not in own}
    for n in stored:
        node = pdg.rec(n)
        if n in kinds:
            low.buffers[n] = Buffer(n, kinds[n].kind, len(node.shapes), kinds[n], single=n in single,
                                    spill=swaps.get(n))
        else:
            pos, length = slots.get(n, (-1, 0))
            kind = "points" if length == 0 else "slot" if length == 1 else "cells"
            low.buffers[n] = Buffer(n, kind, len(node.shapes), pos=pos, length=max(length, 1), spill=swaps.get(n))
    return low
