"""Reversing access relations with isl, for autodiff (:mod:`timerl.api.autodiff`).

The api layer knows nothing of isl: :class:`Reverse` answers its questions in sympy.
- ``supports(y, path, cons)``: for every node on the differentiated path, the points that can
  influence the loss ``y`` at its points ``0 <= d < D`` (the loss's box pulled back through the
  access relations of the gradient edges; transitive closure on cycles), kept as isl sets.
- ``pieces(c, pos, p)``: the inverse of the access relation of edge ``pos`` of consumer ``c``
  (restricted to ``c``'s support and ``p``'s points), as disjoint pieces: a sympy condition over
  ``p``'s dims and bounds, and per consumer dim an affine interval ``[lo, hi]`` of ``p``'s dims.
Bounds stay isl parameters: nothing here depends on sizes.
"""

from __future__ import annotations

import islpy as isl
import networkx as nx
import sympy

from .polyhedral import Model, param

DT = isl.dim_type


def _val(v):
    return sympy.Rational(str(v))


class _Syms:
    """isl names -> sympy symbols of the program (dims by position, bounds by name)."""

    def __init__(self, prog):
        self.params = {param(b): b.e for b in prog.bounds}

    def _linear(self, x, dims, in_type, divs):
        """Constant + dims + params + floor(divs) of an isl aff or constraint, in sympy."""
        sp = x.get_space()
        e = _val(x.get_constant_val())
        for k, d in enumerate(dims):
            e += _val(x.get_coefficient_val(in_type, k)) * d.e
        for k in range(sp.dim(DT.param)):
            e += _val(x.get_coefficient_val(DT.param, k)) * self.params[sp.get_dim_name(DT.param, k)]
        for k, div in enumerate(divs):
            c = x.get_coefficient_val(DT.div, k)
            if not c.is_zero():
                e += _val(c) * sympy.floor(self.aff(div, dims))
        return e

    def aff(self, aff, dims):
        e = self._linear(aff, dims, DT.in_, [aff.get_div(k) for k in range(aff.dim(DT.div))])
        return sympy.simplify(e) if e.has(sympy.floor) else sympy.expand(e)

    def constraint(self, c, dims):
        ls = c.get_local_space()
        e = self._linear(c, dims, DT.set, [ls.get_div(k) for k in range(ls.dim(DT.div))])
        return sympy.Eq(e, 0) if c.is_equality() else sympy.Ge(e, 0)

    def cond(self, s, dims):
        """An isl set over ``dims`` as a sympy condition."""
        ors = []
        for bs in s.get_basic_sets():
            ands = [self.constraint(c, dims) for c in bs.get_constraints()]
            ors.append(sympy.And(*ands) if ands else sympy.true)
        return sympy.Or(*ors) if ors else sympy.false


def _pieces(pw):
    out = []
    pw.foreach_piece(lambda s, ma: out.append((s, ma.get_aff(0))))
    return out


def _disjoint(m: isl.Map):
    """Disjoint basic maps covering ``m``."""
    done = []
    work = list(m.coalesce().get_basic_maps())
    while work:
        b = work.pop()
        if b.is_empty():
            continue
        bm = isl.Map.from_basic_map(b)
        hit = None
        for d in done:
            if not bm.intersect(isl.Map.from_basic_map(d)).is_empty():
                hit = d
                break
        if hit is None:
            done.append(b)
        else:
            work.extend(bm.subtract(isl.Map.from_basic_map(hit)).get_basic_maps())
    return done


def _ranges(b, nq):
    """Split basic map ``b`` (producer point -> consumer points) into basic maps in which each
    consumer dim ranges over one affine interval: [(basic map, [(lo aff, hi aff)] per dim)]."""
    out, work = [], [b]
    while work:
        b = work.pop()
        m = isl.Map.from_basic_map(b)
        bounds, split = [], None
        for j in range(nq):
            pj = m.project_out(DT.out, j + 1, nq - j - 1).project_out(DT.out, 0, j)
            lo, hi = _pieces(pj.lexmin_pw_multi_aff()), _pieces(pj.lexmax_pw_multi_aff())
            for pcs in (lo, hi):
                if len(pcs) > 1:
                    split = [s for s, _ in pcs]
                    break
            if split:
                break
            bounds.append((lo[0][1], hi[0][1]))
        if split is None:
            out.append((b, bounds))
            continue
        for s in split:
            for bb in m.intersect_domain(s).get_basic_maps():
                if not bb.is_empty():
                    work.append(bb)
    return out


def gradient_sccs(path, cons) -> list:
    """The strongly connected components of the gradient graph (edge consumer -> producer for
    every ``cons[p]`` entry) over ``path``, in topological order: [(sorted members, cyclic)]."""
    sub = nx.DiGraph()
    sub.add_nodes_from(path)
    for p, cs in cons.items():
        for c, _ in cs:
            sub.add_edge(c, p)
    cond = nx.condensation(sub)
    out = []
    for scc in nx.topological_sort(cond):
        members = sorted(cond.nodes[scc]["members"])
        out.append((members, len(members) > 1 or sub.has_edge(members[0], members[0])))
    return out


class Reverse:
    """isl questions of one backward pass, answered in sympy."""

    def __init__(self, prog, pdg):
        self.prog, self.pdg = prog, pdg
        self.model = Model(prog, pdg, {})
        self.syms = _Syms(prog)
        self.S = {}

    def box(self, n):
        return self.model.box(n)

    def seed_cond(self, y, strict=True):
        """Where the loss ``y`` counts (``0 <= d < D``) as a condition over its points, or
        None when that is all of its points (``strict=False``: all of them that influence the
        loss, its support, where every point outside ``0 <= d < D`` lies)."""
        pts, box = self.model.points(y), self.model.box_set(y)
        if not strict or pts.is_subset(box):
            return None
        return self.syms.cond(box.gist(pts), self.pdg.rec(y).domain)

    def supports(self, y, path, cons):
        """Compute the supports of the nodes on ``path``; ``cons[p]`` lists the gradient
        edges (consumer, edge) into ``p``."""
        self.y = y
        self.sccs = gradient_sccs(path, cons)
        self.S = self._supports(cons) if path else {}

    def pieces(self, c, pos, p, strict=True):
        """(``covers``, pieces) of the reversed edge, or None where no point of ``p`` is read:
        ``covers`` says one piece holds at every point of ``p`` (``strict=False``: at every point of
        ``p``'s support, the only points where an adjoint that is not a requested gradient is
        read); each piece is (sympy condition over ``p``'s dims, [(lo, hi) sympy per dim of ``c``])."""
        model = self.model
        acc = model.access(c, p, pos).intersect_domain(self.S[c])
        rev = acc.reverse().intersect_domain(model.points(p)).coalesce()
        if rev.is_empty():
            return None
        pts = model.points(p)
        cdims, pdims = self.pdg.rec(c).domain, self.pdg.rec(p).domain
        out = []
        for b in _disjoint(rev):
            for bb, bounds in _ranges(b, len(cdims)):
                dom = isl.Set.from_basic_set(bb.domain())
                cond = self.syms.cond(dom.gist(pts), pdims)
                rng = [(self.syms.aff(lo, pdims), self.syms.aff(hi, pdims)) for lo, hi in bounds]
                out.append((dom, cond, rng))
        need = pts if strict else self.S[p]
        covers = len(out) == 1 and need.is_subset(out[0][0])
        return covers, [(cond, rng) for _, cond, rng in out]

    # supports ------------------------------------------------------------------------------------
    def _supports(self, cons):
        model = self.model
        S = {}
        y = self.y
        for members, cyclic in self.sccs:
            incoming = {}
            for n in members:
                pts = model.points(n)
                s = model.box_set(n).intersect(pts) if n == y else pts.subtract(pts)
                for c, e in cons.get(n, []):
                    if c not in members:
                        s = s.union(S[c].apply(model.access(c, n, e.pos)))
                incoming[n] = s.coalesce()
            if not cyclic:
                S.update(incoming)
            else:
                S.update(self._support_cycle(members, cons, incoming))
        return S

    def _support_cycle(self, members, cons, incoming):
        model = self.model
        R = None
        for p in members:
            for c, e in cons.get(p, []):
                if c in members:
                    m = isl.UnionMap.from_map(model.access(c, p, e.pos))
                    R = m if R is None else R.union(m)
        seed = None
        for s in incoming.values():
            u = isl.UnionSet.from_set(s)
            seed = u if seed is None else seed.union(u)
        closure, exact = R.transitive_closure()
        reach = seed.union(seed.apply(closure)).coalesce()
        dem = {}
        for n in members:
            sp = model.points(n).get_space()
            dem[n] = reach.extract_set(sp).intersect(model.points(n)).coalesce()
        if not exact:
            for _ in range(1000):
                changed = False
                for n in members:
                    s = incoming[n]
                    for c, e in cons.get(n, []):
                        if c in members:
                            s = s.union(dem[c].apply(model.access(c, n, e.pos)))
                    s = s.intersect(dem[n]).coalesce()
                    if not s.is_equal(dem[n]):
                        dem[n], changed = s, True
                if not changed:
                    break
        return dem
