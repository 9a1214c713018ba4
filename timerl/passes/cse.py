"""Common-subexpression elimination: one node per distinct computation.

Two nodes compute the same value at every point when they have the same op, attributes,
domain, output shapes and dtypes, and read the same outputs of the same producers at the
same indices (conditions and shifts included, for placeholder branches). Constants
compare by value (bit for bit: ``0.0`` and ``-0.0`` differ), data by the identity of its
array. Producers are compared after merging, so the pass repeats until nothing merges
(the graph has cycles: a recurrence reads itself; two separate but identical recurrences
are not merged, which is safe).

Never merged: ``stateful`` ops (UDFs and sinks: side effects, state; random ops: each
draws its own stream), ``unshared`` ones (dim values: free to recompute; the registry's
``TRAITS`` says why), and nodes flagged ``parameter`` or ``requires_grad`` (the user's
handles on them). The survivor is the earliest created
node, so errors keep naming the tensor the user wrote first; its demand becomes the union
of the merged nodes' demands.
"""

from __future__ import annotations

import numpy as np

from ..ir import registry
from ..ir.ops import Op
from .rewrite import forward, reanalysed

KEEP_FLAGS = ("parameter", "requires_grad")


def freeze(v):
    """A hashable stand-in for an attribute value, equal exactly when the values are."""
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return ("scalar", v.dtype.str, v.tobytes())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(freeze(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, freeze(x)) for k, x in v.items())))
    if isinstance(v, slice):
        return ("slice", freeze(v.start), freeze(v.stop), freeze(v.step))
    if isinstance(v, np.dtype):
        return ("dtype", v.str)
    if isinstance(v, float):
        return ("float", np.float64(v).tobytes())  # 0.0 != -0.0, nan == nan
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return v


def _root(canon, n):
    while n in canon:
        n = canon[n]
    return n


def _key(pdg, n, canon):
    node = pdg.rec(n)
    if node.op is Op.DATA:
        attrs = ("id", id(node.attrs["array"]))
    else:
        attrs = freeze(node.attrs)
    ins = tuple((_root(canon, p), e.pos, e.out, e.index, e.cond, tuple(e.shift)) for p, e in pdg.inputs(n))
    shapes = tuple(tuple(s) for s in node.shapes)
    return (node.op, attrs, node.domain, shapes, tuple(np.dtype(d).str for d in node.dtypes), ins)


def mergeable(pdg, n) -> bool:
    data = pdg.nodes[n]
    rule = registry.op(pdg.rec(n).op)
    return not (rule.has("stateful") or rule.has("unshared")) and not any(data.get(f) for f in KEEP_FLAGS)


def cse(prog, pdg, bounds, analysis):
    """Merge nodes that compute the same values (see the module docstring)."""
    live = set(analysis.live)
    cands = sorted(n for n in pdg.nodes if n in live and mergeable(pdg, n))
    canon = {}  # removed node -> survivor
    while True:
        seen, merged = {}, False
        for n in cands:
            if n in canon:
                continue
            k = _key(pdg, n, canon)
            a = seen.setdefault(k, n)
            if a != n:
                canon[n] = a
                merged = True
        if not merged:
            break
    if not canon:
        return pdg, analysis
    out = pdg.copy()
    canon = {b: _root(canon, b) for b in canon}
    for b, a in sorted(canon.items()):
        forward(out, b, a)
    out.remove_nodes_from(canon)
    return out, reanalysed(prog, out, bounds, analysis, canon)


__all__ = ["cse", "freeze", "mergeable"]
