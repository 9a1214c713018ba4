"""Index expressions and conditions compiled to Python closures (no sympy at run time)."""

from __future__ import annotations

import sympy

from ..ir.expr import compile_py, cond_to_py, to_py
from ..ir.ops import Slice


def _names(domain, bounds: dict, prog) -> dict:
    names = {d.e: f"d_{d.name}" for d in domain}
    for b in prog.bounds:
        if b.name in bounds:
            names[b.e] = str(int(bounds[b.name]))
    return names


def _args(domain):
    return [f"d_{d.name}" for d in domain]


def compile_index(index, domain, bounds, prog):
    """A function from a point of ``domain`` (tuple) to a tuple of ints and ranges."""
    names = _names(domain, bounds, prog)
    parts = []
    for ent in index:
        if isinstance(ent, Slice):
            parts.append(f"range({to_py(ent.start, names)}, {to_py(ent.stop, names)})")
        else:
            parts.append(to_py(ent, names))
    src = "(" + "".join(p + ", " for p in parts) + ")"
    f = compile_py(src, _args(domain))
    return lambda pt: f(*pt)


def compile_cond(cond, domain, bounds, prog):
    names = _names(domain, bounds, prog)
    f = compile_py(cond_to_py(sympy.sympify(cond), names), _args(domain))
    return lambda pt: f(*pt)


def compile_expr(expr, domain, bounds, prog):
    names = _names(domain, bounds, prog)
    f = compile_py(to_py(sympy.sympify(expr), names), _args(domain))
    return lambda pt: f(*pt)


def projector(src_domain, dst_domain):
    """Map a point of ``src_domain`` to its coordinates on ``dst_domain`` (a subset)."""
    pos = [[k for k, d in enumerate(src_domain) if d is e][0] for e in dst_domain]
    if pos == list(range(len(src_domain))):
        return lambda pt: pt
    return lambda pt: tuple(pt[k] for k in pos)
