"""Gradient rules as the api builds them: the registry's vector-Jacobian products
(``registry.op(op).vjp``, one per op and per function) given the api's op constructors.

``vjp(node, k, g, ins, out)`` is the adjoint of operand ``k`` at one point of the op's
domain: ``g`` is the adjoint of the op's output (a tensor over the op's domain and
shape), ``ins`` the forward operands and ``out`` the forward output, all as recurrent
tensors; the result has operand ``k``'s spatial shape. Summing over the dims the operand
lacks (domain broadcasting) and moving gradients through ACCESS and MERGE edges is done
by :mod:`timerl.api.autodiff` from the isl access relation, not here.

``stop_edge(node, k)`` says which operands never carry a gradient by definition (the
``detach`` stop, a ``where`` condition, integer indices, the world behind a UDF);
``nondiff_reason`` says why a node has no gradient, for a clear error when one is
requested through it. Both read the registry.
"""

from __future__ import annotations

from ..errors import CompileError
from ..ir import registry
from ..ir.ops import Op
from . import ops as O


def vjp(node, k, g, ins, out):
    """The adjoint of operand ``k`` of ``node`` (the registry's rule, built with the api's ops)."""
    rule = registry.op(node.op).vjp
    if rule is None:
        raise CompileError(f"no gradient rule for op {node.op.value} (tensor {node.name!r})")
    return rule(O, node, k, g, ins, out)


def stop_edge(node, k) -> bool:
    """Operand ``k`` of ``node`` never carries a gradient (a stop defined by the API)."""
    return registry.of(node).stops_at(k)


def nondiff_reason(node):
    """Why ``node`` has no gradient (None if it is differentiable)."""
    d = registry.of(node)
    why = d.nondiff(node) if d.nondiff else None
    if why:
        return why
    if registry.op(node.op).vjp is None and node.op not in (Op.ACCESS, Op.MERGE):
        return f"op {node.op.value} has no gradient rule"
    return None


def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` (NumPy broadcasting in reverse)."""
    return registry.unbroadcast(O, g, shape)


def ones_like(x):
    """Ones with the shape (and points) of ``x``; never NaN, whatever ``x`` holds."""
    return registry.ones_like(O, x)
