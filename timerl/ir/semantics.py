"""What each op computes, in numpy: ``evaluate(node, ins, nb, ctx) -> tuple of arrays``.

``nb`` leading axes of every input are batch axes (points evaluated together, of size
B or 1, broadcast against each other); the rest are the spatial axes of the node's
operands. The reference executor calls these with ``nb == 0``; vectorized backends with
``nb >= 1``. ``ctx.resolve(entry)`` turns a symbolic shape entry into an int.
Sources that depend on the point (DATA, DIM_VALUE, RANDOM) and the recurrence/world ops
(ACCESS, MERGE, UDF, SINK) are evaluated by the executors themselves.

The rules are the registry's (``registry.op(op).np``; an elementwise function's numpy
function is ``registry.elementwise(fn).np``); ``eval_rules``, ``UNARY`` and ``BINARY``
are views of it for the modules that read them.
"""

from __future__ import annotations

from . import registry
from .ops import Op

eval_rules = {d.op: d.np for d in registry.entries() if d.np is not None}
UNARY = {fn: registry.unary(fn).np for fn in registry.fns(Op.UNARY)}
BINARY = {fn: registry.binary(fn).np for fn in registry.fns(Op.BINARY)}


def evaluate(node, ins, nb, ctx):
    fn = eval_rules.get(node.op)
    if fn is None:
        raise NotImplementedError(f"no numpy rule for op {node.op.value} (tensor {node.name!r})")
    return fn(node, ins, nb, ctx)


__all__ = ["BINARY", "UNARY", "eval_rules", "evaluate"]
