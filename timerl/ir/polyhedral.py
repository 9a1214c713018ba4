"""The isl view of a PDG: statement domains, points, access relations, conditions.

Statement ``S<n>`` is node ``n``; its set variables are the node's dims (``d_<name>``)
and the bounds are isl parameters (``P_<NAME>``), so one model serves every size;
:func:`context` fixes them when a decision needs the values.
"""

from __future__ import annotations

import functools

import islpy as isl
import sympy

from .expr import cond_to_isl, to_isl
from .ops import Op, Slice


def stmt(n) -> str:
    return f"S{n}"


def var(d) -> str:
    return f"d_{d.name}"


def param(b) -> str:
    return f"P_{b.name}"


def isl_names(prog) -> dict:
    names = {d.e: var(d) for d in prog.dims}
    names.update({b.e: param(b) for b in prog.bounds})
    return names


def params_decl(prog) -> str:
    return "[" + ", ".join(param(b) for b in prog.bounds) + "]"


def context(prog, bounds: dict) -> isl.Set:
    """``bounds`` maps bound names to ints; unknown bounds stay free but positive."""
    cons = [f"{param(b)} = {bounds[b.name]}" if b.name in bounds else f"{param(b)} > 0" for b in prog.bounds]
    return isl.Set(f"{params_decl(prog)} -> {{ : {' and '.join(cons) or '0 = 0'} }}")


class Model:
    """isl sets and maps of one program's PDG, computed on demand and cached."""

    def __init__(self, prog, pdg, bounds: dict):
        self.prog, self.pdg = prog, pdg
        self.names = isl_names(prog)
        self.ctx = context(prog, bounds)
        self._templates = {}

    # points ------------------------------------------------------------------------
    @functools.lru_cache(maxsize=None)
    def box(self, n) -> tuple:
        """Per dim of node ``n``: (lo, hi) sympy bounds of its points, or None if unlimited."""
        node = self.pdg.rec(n)
        if node.op is Op.MERGE:
            ext = {}
            for _, e in self.pdg.inputs(n):
                for d, k in zip(node.domain, e.shift or ()):
                    ext[d.name] = max(ext.get(d.name, 0), k)
            return tuple((sympy.Integer(0), d.bound.e + ext.get(d.name, 0)) for d in node.domain)
        if node.op in (Op.DATA, Op.RANDOM) and not self.pdg.inputs(n):
            return tuple((sympy.Integer(0), d.bound.e) for d in node.domain)
        if node.op in (Op.CONST, Op.DIM_VALUE):
            return tuple(None for _ in node.domain)
        if node.op is Op.ACCESS:
            (p, e), = self.pdg.inputs(n)
            pdom = self.pdg.rec(p).domain
            pbox = dict(zip([d.name for d in pdom], self.box(p)))
            out = []
            for d in node.domain:
                k = [j for j, pd in enumerate(pdom) if pd is d][0]
                ent = e.index[k]
                unshifted = not isinstance(ent, Slice) and sympy.sympify(ent) == d.e
                out.append(pbox[d.name] if unshifted else (sympy.Integer(0), d.bound.e))
            return tuple(out)
        # intersection of the operands' points along each dim (a RANDOM's own domain is 0..D-1)
        out = {d.name: None for d in node.domain}
        if node.op is Op.RANDOM:
            own = {d.name for d in node.domain} - {d.name for p, _ in self.pdg.inputs(n) for d in self.pdg.rec(p).domain}
            for nm in own:
                out[nm] = (sympy.Integer(0), self.prog.dim(nm).bound.e)
        for p, _ in self.pdg.inputs(n):
            for d, iv in zip(self.pdg.rec(p).domain, self.box(p)):
                if iv is None:
                    continue
                cur = out[d.name]
                out[d.name] = iv if cur is None else (sympy.Max(cur[0], iv[0]), sympy.Min(cur[1], iv[1]))
        return tuple(out[d.name] for d in node.domain)

    def _tuple(self, n) -> str:
        return f"{stmt(n)}[{', '.join(var(d) for d in self.pdg.rec(n).domain)}]"

    def _box_cons(self, n, box=None) -> list[str]:
        cons = []
        for d, iv in zip(self.pdg.rec(n).domain, box or self.box(n)):
            if iv is not None:
                cons.append(f"{to_isl(iv[0], self.names)} <= {var(d)} < {to_isl(iv[1], self.names)}")
        return cons

    def _set(self, n, cons) -> isl.Set:
        # parsed once per (dims, constraints) and renamed: many nodes share both
        vs = ", ".join(var(d) for d in self.pdg.rec(n).domain)
        return self.template(f"{{ S[{vs}] : {' and '.join(cons) or '0 = 0'} }}").set_tuple_name(stmt(n))

    def template(self, body: str, cls=isl.Set):
        """``body`` (an isl set or map over the program's parameters) parsed once, within the context."""
        key = (body, cls)
        out = self._templates.get(key)
        if out is None:
            out = self._templates[key] = cls(f"{params_decl(self.prog)} -> {body}").intersect_params(self.ctx)
        return out

    @functools.lru_cache(maxsize=None)
    def points(self, n) -> isl.Set:
        """All points of node ``n`` (unlimited dims are limited to 0..D-1 here)."""
        node = self.pdg.rec(n)
        box = tuple(iv if iv is not None else (sympy.Integer(0), d.bound.e) for d, iv in zip(node.domain, self.box(n)))
        return self._set(n, self._box_cons(n, box))

    @functools.lru_cache(maxsize=None)
    def unlimited_points(self, n) -> isl.Set:
        return self._set(n, self._box_cons(n))

    def box_set(self, n) -> isl.Set:
        """``0 <= d < D`` on every dim of node ``n`` (what a sink demands)."""
        node = self.pdg.rec(n)
        return self._set(n, [f"0 <= {var(d)} < {param(d.bound)}" for d in node.domain])

    # conditions and accesses ------------------------------------------------------------
    @functools.lru_cache(maxsize=None)
    def branch_domain(self, n, pos) -> isl.Set:
        """Points of merge ``n`` where branch ``pos`` is the first whose condition holds."""
        conds = {e.pos: e.cond for _, e in self.pdg.inputs(n)}
        s = self._set(n, [cond_to_isl(conds[pos], self.names)])
        for j in range(pos):
            s = s.subtract(self._set(n, [cond_to_isl(conds[j], self.names)]))
        return s.intersect(self.points(n))

    def cond_set(self, n, cond) -> isl.Set:
        return self._set(n, [cond_to_isl(cond, self.names)])

    @functools.lru_cache(maxsize=None)
    def access(self, c, p, pos) -> isl.Map:
        """{ consumer point -> producer points it reads } for operand ``pos`` of ``c``."""
        e = [e for q, e in self.pdg.inputs(c) if e.pos == pos][0]
        pdom = self.pdg.rec(p).domain
        outs = [f"o{k}" for k in range(len(pdom))]
        cons = []
        for o, ent in zip(outs, e.index):
            if isinstance(ent, Slice):
                cons.append(f"{to_isl(ent.start, self.names)} <= {o} < {to_isl(ent.stop, self.names)}")
            else:
                cons.append(f"{o} = {to_isl(ent, self.names)}")
        vs = ", ".join(var(d) for d in self.pdg.rec(c).domain)
        m = self.template(f"{{ S[{vs}] -> P[{', '.join(outs)}] : {' and '.join(cons) or '0 = 0'} }}", isl.Map)
        m = m.set_tuple_name(isl.dim_type.in_, stmt(c)).set_tuple_name(isl.dim_type.out, stmt(p))
        dom = self.branch_domain(c, pos) if self.pdg.rec(c).op is Op.MERGE else self.points(c)
        return m.intersect_domain(dom)


def sample(s) -> tuple:
    """One point of a non-empty isl set, as a tuple of ints."""
    pt = s.sample_point()
    st = isl.dim_type.set
    return tuple(pt.get_coordinate_val(st, k).to_python() for k in range(pt.get_space().dim(st)))


def fmt_point(domain, pt) -> str:
    return ", ".join(f"{d.name} = {v}" for d, v in zip(domain, pt)) or "its only point"
