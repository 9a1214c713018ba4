"""Checking mode's value checks (``check=True`` / ``TIMERL_CHECK=1``), shared by every executor.

Non-finite detection, in the spirit of JAX's ``debug_nans`` and PyTorch's anomaly mode:
the first op that produces ``inf`` or ``NaN`` from finite inputs raises a
``RuntimeFault`` naming the user's tensor, the point and the op. Sources (constants,
data, random draws) and pass-through ops (placeholder branches, accesses, sinks) are
not checked: a non-finite value there is the user's own data, and an op whose inputs
already hold one only propagates it.
"""

from __future__ import annotations

import numpy as np

from ..errors import RuntimeFault
from ..ir import registry


def checks_finite(node) -> bool:
    """Whether checking mode checks this op's outputs for inf/NaN (float outputs of computing ops:
    not ``source`` or ``passthrough`` ones)."""
    rule = registry.op(node.op)
    if rule.has("source") or rule.has("passthrough"):
        return False
    return any(np.dtype(d).kind in "fc" for d in node.dtypes)


def finite(v) -> bool:
    """True unless ``v`` (an array, a scalar, or a tuple/list of them) holds an inf or a NaN."""
    if isinstance(v, (tuple, list)):
        return all(finite(x) for x in v)
    a = np.asarray(v)
    return a.dtype.kind not in "fc" or bool(np.isfinite(a).all())


def describe(node) -> str:
    fn = node.attrs.get("fn")
    return f"{node.op.value}.{fn}" if isinstance(fn, str) else node.op.value


def nonfinite_fault(node, where, out, ins, in_names) -> RuntimeFault | None:
    """The fault for ``node`` producing ``out`` from ``ins`` at ``where``, or None when an input is non-finite."""
    if not all(finite(v) for v in ins):
        return None
    if registry.op(node.op).has("reduction") and any(np.asarray(v).size == 0 for v in ins):
        return None  # a reduction of an empty slice: NaN (mean) or -inf (logsumexp) is its defined value
    outs = out if isinstance(out, (tuple, list)) else (out,)
    bad = [np.asarray(o) for o in outs if not finite(o)]
    what = "NaN" if any(np.isnan(b).any() for b in bad) else "inf"
    count = sum(int((~np.isfinite(b)).sum()) for b in bad)
    size = sum(b.size for b in bad)
    src = f" from finite inputs ({', '.join(repr(n) for n in in_names)})" if in_names else ""
    return RuntimeFault(
        f"non-finite check: {describe(node)} in tensor {node.name!r} produced {what} at point ({where}){src}: "
        f"{count} of {size} elements; look for log or sqrt of values <= 0, division by zero or exp overflow there "
        "(the check runs with check=True or TIMERL_CHECK=1)")
