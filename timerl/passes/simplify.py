"""Algebraic simplification: identities that hold bit for bit, and constant folding.

Identities (``identity_rules``, per op) forward a node's readers to one of its operands
when the node's value equals that operand's at every point, with the same domain, shape
and dtype (``x * 1.0`` with an int ``x`` promotes to float and is left alone). What makes
an elementwise function an identity is in its registry entry:

- a constant operand equal to the function's ``unit``: ``x * 1``, ``1 * x``, ``x / 1``,
  ``x ** 1``, ``x - 0`` (``+0``), ``x + 0`` and ``0 + x`` for ints, and for floats only
  with ``-0.0`` (``-0.0 + 0.0`` is ``+0.0``, so adding ``+0.0`` is not an identity);
- ``f(f(x))`` of an ``involution`` (``--x``, ``~~x``), ``f(x)`` of an ``identity``
  (``detach(x)``: autodiff has already run), ``f(x, x)`` of an ``idempotent`` function
  (``min(x, x)``, ``max(x, x)``, ``x & x``, ``x | x``); ``where(c, x, x)``;
- casts to the operand's dtype, reshapes and expands to its shape, identity permutes.

Not rewritten, because floating point does not allow it exactly: ``exp(log(x))`` (``x < 0``
gives NaN, and rounding), ``log(exp(x))`` (overflow), ``x * 0`` (NaN, inf, ``-0.0``),
``x - x``.

A ``where`` whose condition is a constant without dims, all true or all false, takes that
branch: the branch itself when it has the node's shape, else an ``expand`` of it to the node's
shape (``ones_like(x)``, written ``where(True, 1, x)``, so no longer reads ``x``: a gradient seed
of ``mean`` depends on nothing computed, and backward statements need not wait for the loss).

Constant folding: a ``foldable`` op whose operands are all constants without dims is evaluated once
with the reference executor's numpy rule (:func:`timerl.ir.semantics.evaluate`), so its
value is the reference value bit for bit, and becomes a constant. Folding that would make
a constant larger than its inputs (an expand of a scalar) or that raises (an index out of
range: the run reports it) is skipped.

Constants are only dropped from a node's operands, never added, and forwarded operands
have the node's own domain, so every remaining node keeps its points and its demand.
"""

from __future__ import annotations

import numpy as np
import sympy

from ..ir import registry
from ..ir.ops import Edge, Node, Op, frozen
from ..ir.semantics import evaluate
from .rewrite import forward, reanalysed

FOLD_MIN_SIZE = 64  # a folded constant may grow up to this many elements


def _const(pdg, p, e):
    """The value of operand edge ``e`` from ``p`` if it is a constant without dims, else None."""
    node = pdg.rec(p)
    if node.op is Op.CONST and not node.domain:
        return node.attrs["value"]
    return None


def _all(v, test) -> bool:
    return v is not None and v.size > 0 and bool(np.all(test(v)))


def _ones(v):
    return _all(v, lambda a: a == 1)


def _zeros(v, dtype, negative):
    """All zeros, and for floats all with the sign bit given (an exact identity for + or -)."""
    if np.dtype(dtype).kind not in "fc":
        return _all(v, lambda a: a == 0)
    return _all(v, lambda a: (a == 0) & (np.signbit(a) == negative))


def _is_unit(v, unit, dtype) -> bool:
    if unit is None:
        return False
    if unit == 1:
        return _ones(v)
    return _zeros(v, dtype, unit == "-0")


def _binary(pdg, n, node, ins):
    (pa, ea), (pb, eb) = ins
    rule = registry.binary(node.attrs["fn"])
    left, right = rule.unit
    if _is_unit(_const(pdg, pb, eb), right, node.dtype):
        return pa, ea
    if _is_unit(_const(pdg, pa, ea), left, node.dtype):
        return pb, eb
    if rule.has("idempotent") and _same_operand(pa, ea, pb, eb):
        return pa, ea
    return None


def _same_operand(pa, ea, pb, eb) -> bool:
    return pa == pb and ea.out == eb.out and ea.index == eb.index


def _unary(pdg, n, node, ins):
    fn = node.attrs["fn"]
    rule = registry.unary(fn)
    if rule.has("identity"):
        return ins[0]
    (p, e), = ins
    inner = pdg.rec(p)
    if rule.has("involution") and inner.op is Op.UNARY and inner.attrs["fn"] == fn:
        return pdg.inputs(p)[0]
    return None


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(sympy.sympify(x) == sympy.sympify(y) for x, y in zip(a, b))


def _shape_of(pdg, p, e):
    return tuple(pdg.rec(p).shapes[e.out])


identity_rules = {
    Op.BINARY: _binary,
    Op.UNARY: _unary,
    Op.CAST: lambda pdg, n, node, ins: ins[0],  # kept only when the dtypes agree (below)
    Op.RESHAPE: lambda pdg, n, node, ins: ins[0] if _same_shape(node.attrs["shape"], _shape_of(pdg, *ins[0])) else None,
    Op.EXPAND: lambda pdg, n, node, ins: ins[0] if _same_shape(node.attrs["shape"], _shape_of(pdg, *ins[0])) else None,
    Op.PERMUTE: lambda pdg, n, node, ins: ins[0] if tuple(node.attrs["axes"]) == tuple(
        range(len(node.attrs["axes"]))) else None,
    Op.WHERE: lambda pdg, n, node, ins: ins[1] if _same_operand(*ins[1], *ins[2]) else None,
}


def identity_of(pdg, n):
    """``(producer, output)`` whose value node ``n`` equals at every point, or None."""
    node = pdg.rec(n)
    rule = identity_rules.get(node.op)
    if rule is None or len(node.shapes) != 1:
        return None
    hit = rule(pdg, n, node, pdg.inputs(n))
    if hit is None:
        return None
    p, e = hit
    src = pdg.rec(p)
    if p == n or src.domain != node.domain or src.dtypes[e.out] != node.dtype:
        return None
    if not _same_shape(src.shapes[e.out], node.shape):
        return None
    return p, e.out


class _FoldCtx:
    """What an eval rule may ask at compile time: static lengths only."""

    def resolve(self, e):
        v = sympy.sympify(e)
        if not v.is_Integer:
            raise ValueError(f"symbolic length {e}")
        return int(v)

    def where(self):
        return "compile time"


def folded(pdg, n):
    """The constant value of node ``n`` if all its operands are constants without dims, else None."""
    node = pdg.rec(n)
    ins = pdg.inputs(n)
    if not registry.op(node.op).has("foldable") or node.domain or len(node.shapes) != 1 or not ins:
        return None
    vals = [_const(pdg, p, e) for p, e in ins]
    if any(v is None for v in vals):
        return None
    if not all(isinstance(s, (int, np.integer)) for s in node.shape):
        return None
    size = int(np.prod(node.shape, dtype=np.int64))
    if size > max(FOLD_MIN_SIZE, *(v.size for v in vals)):
        return None
    try:
        with np.errstate(all="ignore"):
            (v,) = evaluate(node, vals, 0, _FoldCtx())
    except Exception:  # the run raises it at the point, as the reference executor does
        return None
    v = np.asarray(v)
    if v.shape != tuple(int(s) for s in node.shape) or v.dtype != node.dtype:
        return None
    return frozen(v)


def chosen_branch(pdg, n):
    """A ``where`` with a constant all-true or all-false condition without dims: ``(producer, edge)`` of
    the branch it takes, when that branch has the node's dtype and a shape that broadcasts to it."""
    node = pdg.rec(n)
    if node.op is not Op.WHERE or len(node.shapes) != 1:
        return None
    ins = sorted(pdg.inputs(n), key=lambda pe: pe[1].pos)
    c = _const(pdg, *ins[0])
    if c is None or c.size == 0 or not (np.all(c) or not np.any(c)):
        return None
    if c.ndim > len(node.shape) or (c.ndim and not _same_shape(c.shape, node.shape[len(node.shape) - c.ndim:])):
        return None  # the condition itself broadcasts the result (left to the general rule)
    p, e = ins[1] if np.all(c) else ins[2]
    if pdg.rec(p).dtypes[e.out] != node.dtype:
        return None
    return p, e


def _take_branch(out, n, p, e):
    """Node ``n`` becomes ``expand(branch, n.shape)``, reading only the branch."""
    node = out.rec(n)
    out.remove_edges_from(list(out.out_edges(n, keys=True)))
    out.nodes[n]["node"] = Node(Op.EXPAND, node.domain, node.shapes, node.dtypes, {"shape": tuple(node.shape)},
                                node.name, node.index)
    out.add_dep(n, p, Edge(pos=0, out=e.out, index=e.index))


def simplify(prog, pdg, bounds, analysis):
    """Apply the identities and fold constants until nothing changes (see the module docstring)."""
    out, replaced = None, {}
    live = set(analysis.live)
    changed = True
    while changed:
        changed = False
        g = out if out is not None else pdg
        for n in sorted(g.nodes):
            if n not in live or n in replaced:
                continue
            hit = identity_of(g, n)
            value = None if hit else folded(g, n)
            branch = None if hit or value is not None else chosen_branch(g, n)
            if hit is None and value is None and branch is None:
                continue
            if out is None:
                out = g = pdg.copy()
            if hit:
                p, k = hit
                forward(out, n, p, out=k)
                out.remove_node(n)
                replaced[n] = p
            elif branch is not None:
                _take_branch(out, n, *branch)  # an expand of the same shape is an identity: the next round
            else:
                node = out.rec(n)
                out.remove_edges_from(list(out.out_edges(n, keys=True)))
                out.nodes[n]["node"] = Node(Op.CONST, (), node.shapes, node.dtypes, {"value": value}, node.name,
                                            node.index)
            changed = True
    if out is None:
        return pdg, analysis
    return out, reanalysed(prog, out, bounds, analysis, replaced)


__all__ = ["chosen_branch", "folded", "identity_of", "identity_rules", "simplify"]
