"""Fusion: which members of each statement run as one statement kernel, recorded on the PDG.

On a backend that compiles statement kernels the members of a group statement that its
kernel generator accepts (``PassContext.renderable``; numba's is
:func:`timerl.kernels.statement.renderable`) are cut into *segments*, each compiled into one
kernel, and the rest (UDFs, sinks, placeholders, reads of other statements) are *glue* run by
the interpreter (:func:`order`). The pass returns a copy of the
graph annotated with ``pdg.graph["segments"]`` (:data:`SEGMENTS`): a dict from each group's
members (the tuple, as the ``group`` pass recorded them; one node each when grouping is off)
to its list of ``("seg", [n, ...])`` and ``("glue", n)`` in execution order.

It needs the backend's kernel generator (:class:`~timerl.passes.PassContext`, given by the
compiler driver): without one (numpy, or no backend) it records nothing, and the lowering runs every member in the interpreter;
so does numba with the pass switched off (``compile(passes={"fuse": False})``). The lowering
(``Lowering.segments``) only reads the segments; the groups the scheduler makes beyond the
annotated ones (the ungrouped fallback, a refined grouping) get theirs from :func:`annotate_groups`
with the same rule. It follows the ``group`` pass; a later ``group`` or rewriting pass drops it.
"""

from __future__ import annotations

from ..ir.ops import Op, is_basis
from .group import GROUPS, SEGMENTS

#: at most this many members per segment: numba's front end costs grow faster than linearly with a
#: function's size (20 loop nests: 1.2 s, 40: 3.2 s, 160: 23 s to compile)
MAX_MEMBERS = 64


def order(pdg, members, ok) -> list:
    """Members reordered (dependences kept) so that kernel members gather into few segments:
    ``[("glue", n) | ("seg", [n, ...])]``. Reads of other statements (access, placeholders,
    sources) go first, kernel members next as far as they can, other interpreter members
    (UDFs, sinks, random draws) as late as their consumers allow."""
    mem = set(members)
    # same-point dependences only: a placeholder or access reading another point of a member (p[i - 1])
    # reads an earlier execution of the statement
    deps = {n: {p for p, e in pdg.inputs(n) if p in mem and is_basis(e, pdg.rec(p).domain)} for n in members}
    pos = {n: i for i, n in enumerate(members)}
    done, out = set(), []
    early = (Op.ACCESS, Op.MERGE, Op.CONST, Op.DATA, Op.DIM_VALUE)
    judged = {n: ok(n) for n in members}
    ok = judged.__getitem__
    while len(done) < len(members):
        ready = [n for n in members if n not in done and deps[n] <= done]
        first = [n for n in ready if not ok(n) and pdg.rec(n).op in early]
        if first:
            for n in first:
                out.append(("glue", n))
                done.add(n)
            continue
        seg = []
        while True:
            more = [n for n in members if n not in done and ok(n) and deps[n] <= done]
            if not more:
                break
            for n in more:
                seg.append(n)
                done.add(n)
        if seg:
            seg.sort(key=pos.get)  # member order is a topological order: so is each run of it
            out += [("seg", c) for c in _chunks(pdg, seg)]
            continue
        n = min((n for n in members if n not in done and deps[n] <= done), key=pos.get)
        out.append(("glue", n))
        done.add(n)
    return _defer(pdg, out)


#: ops that only view or move data: cut from their readers, each would be materialized as a
#: kernel output (a transpose read by a matmul is otherwise a strided view BLAS reads for free)
MOVEMENT = (Op.PERMUTE, Op.RESHAPE)


def _chunks(pdg, seg) -> list:
    """``seg`` (in a topological order) cut into kernels of at most ``MAX_MEMBERS`` members."""
    return [seg[a:a + MAX_MEMBERS] for a in range(0, len(seg), MAX_MEMBERS)]


def _defer(pdg, out) -> list:
    """``out`` (:func:`order`'s list) with each movement op whose readers in the statement all sit
    in later kernels moved to the first of those when it is a kernel (readers first, so chains of
    them move together): it stays a view there; and so each elementwise op whose operands are
    stored anyway (:func:`_operands_kept`): a backward pass's ``1 - h * h`` made ready by the
    statement's first reads is computed in the kernel of the layer that reads it, not in the
    statement's first kernel, live through every kernel between (the actor's factors held through
    the critic's backward pass when both share a statement)."""
    where, glue = {}, set()
    for k, (kind, x) in enumerate(out):
        for n in (x if kind == "seg" else [x]):
            where[n] = k
        if kind == "glue":
            glue.add(x)
    for k in reversed(range(len(out))):
        kind, seg = out[k]
        if kind != "seg":
            continue
        for n in reversed(list(seg)):
            op = pdg.rec(n).op
            if op not in MOVEMENT and not (op in ELEMENTWISE and _operands_kept(pdg, n, where, glue)):
                continue
            readers = [where[c] for c, _ in pdg.consumers(n) if c in where]
            if readers and min(readers) > k and out[min(readers)][0] == "seg":
                seg.remove(n)
                out[min(readers)][1].insert(0, n)
                where[n] = min(readers)
    return [(kind, x) for kind, x in out if kind != "seg" or x]


ELEMENTWISE = (Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST)


def _operands_kept(pdg, n, where, glue, depth=0) -> bool:
    """Whether moving elementwise ``n`` to a later kernel stores nothing new: each operand is from
    another statement or an interpreter member of this one (stored), read by a later kernel anyway
    (so stored already), or an elementwise operand or a view read by ``n`` alone that moves with it
    under the same rule. Then ``n`` (a
    backward pass's ``1 - h * h``) is computed where it is read, as a scalar of that kernel's loop
    nest, and its array is never stored between the kernels."""
    for p, _ in pdg.inputs(n):
        if p not in where or p in glue:  # from another statement, or the interpreter's: stored
            continue
        if any(q != n and q in where and where[q] > where[p] for q, _ in pdg.consumers(p)):
            continue
        # an elementwise operand read by ``n`` alone moves with it (``h * h`` under ``1 - h * h``), and
        # so does a view (the reshape of a stored activation under it)
        if depth < 8 and pdg.rec(p).op in ELEMENTWISE + MOVEMENT and {q for q, _ in pdg.consumers(p)} == {n} and \
                _operands_kept(pdg, p, where, glue, depth + 1):
            continue
        return False
    return True


def segments_of(pdg, members, domain, renderable) -> list:
    """:func:`order` of ``members`` (a statement over ``domain``) for a kernel generator that
    accepts node ``n`` when ``renderable(pdg, n, dims)``: kernel segments and glue."""
    dims = [d.name for d in domain]
    return order(pdg, list(members), lambda n: renderable(pdg, n, dims))


def fuse(prog, pdg, bounds, analysis, ctx=None):
    """A copy of ``pdg`` annotated with each group's segments for ``ctx.backend`` (module docstring)."""
    if ctx is None or ctx.renderable is None:
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
    out.graph[SEGMENTS] = {tuple(ms): segments_of(pdg, ms, pdg.rec(gid).domain, ctx.renderable) for gid, ms in groups}
    return out, analysis


fuse.takes_context = True


def annotate_groups(pdg, groups, renderable):
    """Give each scheduled group (:class:`~timerl.schedule.model.Group`) without segments its own,
    when ``pdg`` carries the fusion annotation (the groups the scheduler made beyond the annotated
    ones: the ungrouped fallback, a refined grouping). Groups of a graph without it keep None."""
    if SEGMENTS not in pdg.graph:
        return
    for g in groups:
        if g.segments is None:
            g.segments = segments_of(pdg, g.members, g.domain, renderable)


__all__ = ["MAX_MEMBERS", "SEGMENTS", "annotate_groups", "fuse", "order", "segments_of"]
