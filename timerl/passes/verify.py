"""What a well-formed PDG is, checked: :func:`verify` runs after every pass in checking mode.

A PDG is well formed when
- every node is an int carrying a :class:`~timerl.ir.ops.Node` record under ``"node"`` whose
  domain lists distinct dims (in program order when the program is known);
- every edge runs consumer -> producer and carries an :class:`~timerl.ir.ops.Edge` under
  ``"edge"``; its ``index`` has one entry per producer-domain dim and uses only the
  consumer's dims and the bounds; its ``out`` names one of the producer's outputs;
- a consumer's operand positions are ``0..k-1`` with no gap or repeat, and ``k`` is an
  arity its op takes (its registry entry's ``arity``);
- only ``ACCESS`` edges and ``MERGE`` branches read away from the point: every other
  edge is basis (the producer's dims, each read at itself), so the producer's dims are
  among the consumer's;
- ``MERGE`` branches carry a condition and one non-negative shift per merge dim, read
  their value at ``d - shift`` on every value dim, and bring the merge's shape and dtype;
  no other edge carries a condition or shift;
- a ``SINK`` has no outputs and no consumers; a source has no inputs;
- every node has the shape and dtype its registry entry's rules give for its operands and
  attributes (``registry.of(node).shape`` and ``.dtype``; a rule that cannot tell, e.g. a
  broadcast of symbolic lengths, checks nothing): elementwise ops broadcast, reshapes and
  expands produce their attribute's shape, binary ops the promoted dtype (``bool`` for
  comparisons), reductions drop or keep their axes, constants hold their value's.

Annotations (``pdg.graph``), when present:
- ``groups`` (the ``group`` pass): each group ``(gid, members)`` lists existing nodes, ``gid``
  among them, all of ``gid``'s domain, no node twice, in an order where a member reading another
  at the same point comes after it; every node is in at most one group and, with the analysis,
  the grouped nodes are exactly the live nodes with demanded points; ``group_joins`` comes with it;
- ``segments`` (the ``fuse`` pass): one entry per group (per demanded live node without
  ``groups``), each a list of ``("seg", [n, ...])`` and ``("glue", n)`` that holds the group's
  members once each, in an order where a member reading another at the same point comes after it.

Errors are :class:`VerifyError` (a ``CompileError``) naming the user's tensor and the pass
that broke the graph, followed by the node and its neighbours (``pdg.describe``).
"""

from __future__ import annotations

import numpy as np
import sympy

from ..errors import CompileError
from ..ir import registry
from ..ir.expr import symbols_of
from ..ir.ops import Edge, Node, Op, Slice, broadcast, is_basis
from ..ir.registry import promote
from .group import GROUPS, JOINS, SEGMENTS

class VerifyError(CompileError):
    """The PDG broke an invariant of :mod:`timerl.passes.verify` (a compiler bug, not a user error)."""


def _same(a, b) -> bool:
    return len(a) == len(b) and all(sympy.sympify(x) == sympy.sympify(y) for x, y in zip(a, b))


def verify(pdg, prog=None, after=None, analysis=None):
    """Check that ``pdg`` is well formed (see the module docstring); raise :class:`VerifyError` if not.

    ``prog`` (optional) adds the checks that need the program's dims and bounds; ``analysis``
    (optional, describing ``pdg``) the check that the grouping covers the demanded nodes;
    ``after`` names the pass that produced the graph, for the message.
    """
    dim_order = {d.name: k for k, d in enumerate(prog.dims)} if prog is not None else None
    allowed = None
    if prog is not None:
        allowed = {d.e for d in prog.dims} | {b.e for b in prog.bounds}
    for n in pdg.nodes:
        _check_node(pdg, n, dim_order, allowed, after)
    _check_annotations(pdg, analysis, after)


def _annotation_fail(key, msg, after):
    where = f" after pass {after!r}" if after else ""
    raise VerifyError(f"malformed PDG{where}: annotation pdg.graph[{key!r}]: {msg}")


def _same_point_inputs(pdg, n, among):
    """The producers in ``among`` that ``n`` reads at its own point (ordered before it in a statement)."""
    return {p for p, e in pdg.inputs(n) if p in among and p != n and is_basis(e, pdg.rec(p).domain)}


def _check_order(pdg, key, what, order, after):
    among, seen = set(order), set()
    for n in order:
        late = _same_point_inputs(pdg, n, among) - seen
        if late:
            _annotation_fail(key, f"{what}: %{n} comes before %{min(late)}, which it reads at the same point", after)
        seen.add(n)


def _check_annotations(pdg, analysis, after):
    groups, segs = pdg.graph.get(GROUPS), pdg.graph.get(SEGMENTS)
    if groups is None and segs is None:
        return
    demanded = None
    if analysis is not None:
        demanded = {n for n in analysis.live if n in pdg and not analysis.demand[n].is_empty()}
    if groups is not None:
        if JOINS not in pdg.graph:
            _annotation_fail(GROUPS, f"without {JOINS!r}", after)
        where = {}
        for gid, ms in groups:
            what = f"group %{gid}"
            if gid not in ms:
                _annotation_fail(GROUPS, f"{what} does not hold its representative", after)
            for n in ms:
                if n not in pdg:
                    _annotation_fail(GROUPS, f"{what} holds %{n}, not a node of the graph", after)
                if n in where:
                    _annotation_fail(GROUPS, f"%{n} is in group %{where[n]} and in group %{gid}", after)
                where[n] = gid
                if pdg.rec(n).domain != pdg.rec(gid).domain:
                    _annotation_fail(GROUPS, f"{what}: %{n} has domain {pdg.rec(n).domain}, the group "
                                             f"{pdg.rec(gid).domain}", after)
            _check_order(pdg, GROUPS, what, list(ms), after)
        if demanded is not None and set(where) != demanded:
            miss, extra = sorted(demanded - set(where)), sorted(set(where) - demanded)
            _annotation_fail(GROUPS, f"does not hold every demanded live node once: missing {miss}, "
                                     f"not demanded {extra}", after)
    if segs is None:
        return
    if groups is not None:
        want = [tuple(ms) for _, ms in groups]
    elif demanded is not None:
        want = [(n,) for n in sorted(demanded)]
    else:
        want = list(segs)
    if set(segs) != set(want):
        _annotation_fail(SEGMENTS, "its groups are not the statements': "
                                   f"{len(set(segs) - set(want))} unknown, {len(set(want) - set(segs))} missing", after)
    for ms in want:
        flat = []
        for item in segs[ms]:
            kind, x = item if isinstance(item, tuple) and len(item) == 2 else (None, None)
            if kind == "seg" and isinstance(x, (list, tuple)) and x:
                flat += list(x)
            elif kind == "glue" and isinstance(x, int):
                flat.append(x)
            else:
                _annotation_fail(SEGMENTS, f"group {ms}: {item!r} is neither ('seg', [n, ...]) nor ('glue', n)", after)
        if sorted(flat) != sorted(ms):
            _annotation_fail(SEGMENTS, f"group {ms}: the segments hold {flat}, not the members once each", after)
        _check_order(pdg, SEGMENTS, f"group {ms}", flat, after)


def _fail(pdg, n, msg, after):
    where = f" after pass {after!r}" if after else ""
    try:
        name = repr(pdg.rec(n).name)
    except Exception:  # the record itself is what is broken
        name = "?"
    lines = [f"malformed PDG{where}: tensor {name} (%{n}): {msg}"]
    for p in sorted({p for _, p in pdg.out_edges(n)}):
        lines.append("    " + _describe(pdg, p))
    lines.append("  > " + _describe(pdg, n))
    for c in sorted({c for c, _ in pdg.in_edges(n)}):
        lines.append("    " + _describe(pdg, c))
    raise VerifyError("\n".join(lines))


def _describe(pdg, n) -> str:
    try:
        return pdg.describe(n)
    except Exception:
        return f"%{n} = <unprintable: {pdg.nodes[n]!r}>"


def _check_node(pdg, n, dim_order, allowed, after):
    node = pdg.nodes[n].get("node")
    if not isinstance(n, int) or not isinstance(node, Node):
        _fail(pdg, n, "node without a Node record under 'node'", after)
    names = [d.name for d in node.domain]
    if len(set(names)) != len(names):
        _fail(pdg, n, f"domain {node.domain} repeats a dim", after)
    if dim_order is not None:
        if any(x not in dim_order for x in names):
            _fail(pdg, n, f"domain {node.domain} has a dim the program does not declare", after)
        if names != sorted(names, key=dim_order.__getitem__):
            _fail(pdg, n, f"domain {node.domain} is not in program order", after)
    if len(node.shapes) != len(node.dtypes):
        _fail(pdg, n, f"{len(node.shapes)} output shapes but {len(node.dtypes)} dtypes", after)
    raw = [(p, d.get("edge")) for _, p, d in pdg.out_edges(n, data=True)]
    if any(not isinstance(e, Edge) for _, e in raw):
        _fail(pdg, n, "an input edge without an Edge record under 'edge'", after)
    ins = sorted(raw, key=lambda pe: pe[1].pos)
    if [e.pos for _, e in ins] != list(range(len(ins))):
        _fail(pdg, n, f"operand positions {[e.pos for _, e in ins]} are not 0..{len(ins) - 1}", after)
    ar = registry.op(node.op).arity
    if ar is not None and len(ins) not in ar:
        _fail(pdg, n, f"{node.op.value} takes {sorted(ar)} operands, has {len(ins)}", after)
    if node.op is Op.SINK:
        if node.shapes:
            _fail(pdg, n, "a sink has outputs", after)
        if pdg.in_edges(n):
            _fail(pdg, n, "a sink is read by another node", after)
    if node.op is Op.SINK or node.op is Op.MERGE and not ins:
        pass
    elif not node.shapes:
        _fail(pdg, n, f"{node.op.value} has no outputs", after)
    own = {d.e for d in node.domain}
    for p, e in ins:
        _check_edge(pdg, n, node, p, e, own, allowed, after)
    _check_types(pdg, n, node, ins, after)


def _check_edge(pdg, n, node, p, e, own, allowed, after):
    prod = pdg.rec(p)
    what = f"operand {e.pos} (reads {prod.name!r}, %{p})"
    if len(e.index) != len(prod.domain):
        _fail(pdg, n, f"{what}: index {e.index_str()} has {len(e.index)} entries for producer domain "
                      f"{prod.domain}", after)
    if not 0 <= e.out < len(prod.shapes):
        _fail(pdg, n, f"{what}: output {e.out} of a producer with {len(prod.shapes)} outputs", after)
    syms = set()
    for ent in e.index:
        syms |= (symbols_of(ent.start) | symbols_of(ent.stop)) if isinstance(ent, Slice) else symbols_of(ent)
    dims_used = syms - (allowed - own) if allowed is not None else set()
    if allowed is not None and not dims_used <= own:
        extra = ", ".join(sorted(str(s) for s in dims_used - own))
        _fail(pdg, n, f"{what}: index {e.index_str()} uses {extra}, not in the consumer's domain", after)
    if node.op is Op.MERGE:
        _check_branch(pdg, n, node, prod, e, what, after)
        return
    if e.cond is not None or tuple(e.shift):
        _fail(pdg, n, f"{what}: only placeholder branches carry a condition or shift", after)
    if node.op is Op.ACCESS:
        return
    if not is_basis(e, prod.domain) or not own >= {d.e for d in prod.domain}:
        _fail(pdg, n, f"{what}: a {node.op.value} must read its operand at the same point, "
                      f"reads {e.index_str()}", after)


def _check_branch(pdg, n, node, prod, e, what, after):
    if e.cond is None:
        _fail(pdg, n, f"{what}: a placeholder branch without a condition", after)
    shift = tuple(e.shift)
    if shift and (len(shift) != len(node.domain) or any(int(k) < 0 for k in shift)):
        _fail(pdg, n, f"{what}: shift {shift} must have one entry >= 0 per dim of {node.domain}", after)
    if not {d.name for d in prod.domain} <= {d.name for d in node.domain}:
        _fail(pdg, n, f"{what}: branch value has dims outside the placeholder's domain", after)
    sh = dict(zip([d.name for d in node.domain], shift or (0,) * len(node.domain)))
    for ent, d in zip(e.index, prod.domain):
        if isinstance(ent, Slice) or sympy.sympify(ent) != d.e - sh[d.name]:
            _fail(pdg, n, f"{what}: branch reads {e.index_str()}, expected its value at the point less the shift "
                          f"{shift}", after)
    if not _same(prod.shapes[e.out], node.shape) or prod.dtypes[e.out] != node.dtype:
        _fail(pdg, n, f"{what}: branch value {tuple(prod.shapes[e.out])} {prod.dtypes[e.out]} is not the "
                      f"placeholder's {tuple(node.shape)} {node.dtype}", after)


def _check_types(pdg, n, node, ins, after):
    rule = registry.of(node)
    shapes = [tuple(pdg.rec(p).shapes[e.out]) for p, e in ins]
    dtypes = [np.dtype(pdg.rec(p).dtypes[e.out]) for p, e in ins]
    try:
        shape = rule.shape(node.attrs, shapes) if rule.shape else None
        dtype = rule.dtype(node.attrs, dtypes) if rule.dtype else None
    except ValueError as e:
        _fail(pdg, n, f"{rule.name} of {shapes} {[str(d) for d in dtypes]}: {e}", after)
    if shape is not None and not _same(node.shape, shape):
        _fail(pdg, n, f"{rule.name} of {shapes} has shape {tuple(node.shape)}, expected {tuple(shape)}", after)
    if dtype is not None and node.dtype != dtype:
        _fail(pdg, n, f"{rule.name} of {[str(d) for d in dtypes]} has dtype {node.dtype}, expected {dtype}", after)


__all__ = ["VerifyError", "broadcast", "promote", "verify"]
