"""Vectorization: a dim ``d`` becomes a leading spatial axis of the ops that need no order along it.

For each program dim, innermost first: an op over ``d`` that lies on no cycle advancing along
``d`` (no recurrence through it within one iteration of the dims outside ``d``) is computed once
for all ``0 <= d < D``: its domain loses ``d``, its shape gains a leading axis of length ``D`` and
its axis arguments shift by one (``x[i, t] @ W[i]`` over ``(i, t)`` becomes ``x[i, 0:T] @ W[i]``
over ``(i,)``). A learner written per step (``loss[t] = f(params, obs[t])`` read as
``loss[i, 0:T]``) so runs as one statement per iteration, like the same program written on slices.

Which ops (``candidates``): the dim's bound is a known int; the op has ``d``, one output, shapes
(its own and its operands') free of ``d``, demanded points that are all of ``0 <= d < D`` at every demanded point of the other
dims (checked with isl), and is not a random op, UDF, sink, parameter, or an op on such a cycle
(the strongly connected parts of the PDG once the edges carried by an outer dim, ``x[i - 1]``, are
removed); placeholders only when every branch condition has one truth value over ``0 <= d < D``
and no kept branch shifts along ``d``; accesses only when ``d`` is read at ``d`` and nowhere else
(no other slice). An op is kept only while it is *useful*: some vectorized op reads it, or an
access reads it through a constant slice along ``d`` (so nothing runs per point that did not
before, beyond the ops at the boundary), and only in a connected part of at least ``MIN_OPS``
computing ops (not data, dim values or accesses). Conditions that cannot be proven leave the op alone.

Edges (Tempo's rule): both ends vectorized: the ``d`` entry disappears from the index; only the
consumer: it reads the producer at ``0:D`` through an access (or its branch broadcasts a producer
without ``d``); only the producer: an access reading ``0:D`` or a constant slice ``a:b`` reads the
whole array (then a ``SLICE`` of ``a:b``), every other reader reads a ``TAKE`` of element ``d``
(data and dim values are kept as they were for those readers). Operands of lower rank are
reshaped so NumPy broadcasting lines up their leading axes.

The pass rebuilds the analysis (isl demand) of the rewritten graph, once per dim it changes.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import sympy

from ..ir.analysis import analyze, live_nodes
from ..ir.ops import Edge, Node, Op, Slice, frozen, is_basis
from .incrementalize import STREAM
from .rewrite import forward

I64 = np.dtype("int64")
SUPPORTED = frozenset({Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST, Op.REDUCE, Op.SCAN, Op.MATMUL, Op.RESHAPE,
                       Op.PERMUTE, Op.EXPAND, Op.CONCAT, Op.SLICE, Op.TAKE, Op.ONE_HOT, Op.DATA, Op.DIM_VALUE,
                       Op.ACCESS, Op.MERGE})
KEEP_FLAGS = ("parameter", "requires_grad")
MIN_OPS = 3  # a connected part of fewer computing ops stays per point (gathers and takes would cost more)
PADDED = frozenset({Op.BINARY, Op.WHERE})  # operands broadcast: a batched operand of lower rank is padded


def vectorize(prog, pdg, bounds, analysis):
    """Vectorize every dim it can, innermost first (see the module docstring)."""
    for d in reversed(prog.dims):
        got = vectorize_dim(prog, pdg, bounds, analysis, d)
        if got is not None:
            pdg, analysis = got
    return pdg, analysis


def vectorize_dim(prog, pdg, bounds, analysis, d):
    """``(pdg, analysis)`` with ``d`` vectorized where it can be, or None when nothing changes."""
    if d.bound.name not in bounds:
        return None
    V = _Vectorizer(prog, pdg, bounds, analysis, d)
    chosen = V.choose()
    if not chosen:
        return None
    out = V.rewrite(chosen)
    return out, analyze(prog, out, bounds)


def _subs(bounds, prog):
    return {b.e: sympy.Integer(bounds[b.name]) for b in prog.bounds if b.name in bounds}


class _Vectorizer:
    def __init__(self, prog, pdg, bounds, analysis, d):
        self.prog, self.bounds, self.analysis, self.d = prog, bounds, analysis, d
        self.live = [n for n in analysis.live if n in pdg]
        self.pdg = pdg.subgraph(self.live)
        self.D = int(bounds[d.bound.name])
        self.bsubs = _subs(bounds, prog)
        self.conds = {}  # merge -> [(edge, new cond)] of the branches it keeps

    # -- which ops -----------------------------------------------------------------------------
    def has(self, n) -> bool:
        return any(x is self.d for x in self.pdg.rec(n).domain)

    def dpos(self, n):
        return [k for k, x in enumerate(self.pdg.rec(n).domain) if x is self.d][0]

    def mentions(self, ent) -> bool:
        de = self.d.e
        if isinstance(ent, Slice):
            return de in sympy.sympify(ent.start).free_symbols or de in sympy.sympify(ent.stop).free_symbols
        return de in sympy.sympify(ent).free_symbols

    def static(self, e):
        v = sympy.sympify(e).subs(self.bsubs)
        return int(v) if v.is_Integer else None

    def cyclic(self) -> set:
        """Nodes on a cycle of reads within one iteration of the dims outside ``d``."""
        pdg, outer = self.pdg, self.prog.dims[: self.d.position]
        g = nx.DiGraph()
        g.add_nodes_from(pdg.nodes)
        for c, p, dd in pdg.edges(data=True):
            if not self._carried(c, p, dd["edge"], outer):
                g.add_edge(c, p)
        out = set()
        for scc in nx.strongly_connected_components(g):
            if len(scc) > 1 or g.has_edge(next(iter(scc)), next(iter(scc))):
                out |= scc
        return out

    def _carried(self, c, p, e, outer) -> bool:
        """Whether the read provably reads an earlier iteration of the outer dims (``x[i - 1]``)."""
        cdom, pdom = self.pdg.rec(c).domain, self.pdg.rec(p).domain
        for o in outer:
            if o not in cdom or o not in pdom:
                return False
            ent = e.index[[k for k, x in enumerate(pdom) if x is o][0]]
            if isinstance(ent, Slice):
                return False
            diff = sympy.sympify(ent) - o.e
            if diff == 0:
                continue
            return bool(diff.is_Integer and diff < 0)
        return False

    def full_demand(self, n) -> bool:
        """Demanded at every ``0 <= d < D`` wherever demanded, and nowhere else along ``d``."""
        dem = self.analysis.demand.get(n)
        if dem is None or dem.is_empty():
            return False
        box = self.analysis.model.box_set(n)
        import islpy as isl

        pos = self.dpos(n)
        spread = dem.eliminate(isl.dim_type.set, pos, 1).intersect(box)
        return dem.is_subset(box) and spread.is_subset(dem)

    def shape_ok(self, n) -> bool:
        node = self.pdg.rec(n)
        if len(node.shapes) != 1:
            return False
        return all(self.d.e not in sympy.sympify(s).free_symbols for s in node.shape)

    def candidate(self, n, cyc) -> bool:
        node, pdg = self.pdg.rec(n), self.pdg
        if node.op not in SUPPORTED or not self.has(n) or n in cyc:
            return False
        if any(pdg.nodes[n].get(f) for f in KEEP_FLAGS) or not self.shape_ok(n):
            return False
        if pdg.nodes[n].get(STREAM) == self.d.name:
            return False  # the incrementalize pass keeps it per step (an accumulator adds it in)
        if node.op is Op.DIM_VALUE and node.attrs["dim"] != self.d.name:
            return False
        if not self.full_demand(n):
            return False
        ins = pdg.inputs(n)
        if any(len(pdg.rec(p).shapes) <= e.out for p, e in ins):
            return False
        if any(self.d.e in sympy.sympify(s).free_symbols for p, e in ins for s in pdg.rec(p).shapes[e.out]):
            return False  # a ragged operand (a window x[t:T]) has no leading axis of length D
        if node.op is Op.ACCESS:
            return self._access_ok(n, ins)
        if node.op is Op.MERGE:
            return self._merge_ok(n, ins)
        return self._op_ok(n, node, ins)

    def _access_ok(self, n, ins) -> bool:
        (p, e), = ins
        hits = [k for k, ent in enumerate(e.index) if self.mentions(ent)]
        if len(hits) != 1 or isinstance(e.index[hits[0]], Slice) or sympy.sympify(e.index[hits[0]]) != self.d.e:
            return False
        return not any(isinstance(ent, Slice) for ent in e.index)

    def _merge_ok(self, n, ins) -> bool:
        pos = self.dpos(n)
        kept = []
        for p, e in ins:
            c = self._cond(e.cond)
            if c is None:
                return False
            if c is sympy.false:
                continue
            if tuple(e.shift) and int(e.shift[pos]) != 0:
                return False
            kept.append((p, e, c))
            if c is sympy.true:
                break
        if not kept or not any(self.has(p) for p, _, _ in kept):
            return False
        self.conds[n] = kept
        return True

    def _cond(self, cond):
        """``cond`` with bounds substituted and every atom over ``d`` replaced by its one truth value
        on ``0 <= d < D``; None when an atom's value varies along ``d`` (or cannot be decided)."""
        if cond is None:
            return sympy.true
        c = sympy.sympify(cond).subs(self.bsubs)
        if c in (sympy.true, sympy.false) or self.d.e not in c.free_symbols:
            return c
        atoms = [a for a in c.atoms(sympy.core.relational.Relational) if self.d.e in a.free_symbols]
        rep = {}
        for a in atoms:
            v = self._atom(a)
            if v is None:
                return None
            rep[a] = v
        c = c.xreplace(rep)
        c = sympy.simplify_logic(c) if c.free_symbols else c
        if self.d.e in getattr(c, "free_symbols", set()):
            return None
        return c

    def _atom(self, a):
        x = sympy.expand(a.lhs - a.rhs)
        de = self.d.e
        coeff = x.coeff(de)
        rest = sympy.expand(x - coeff * de)
        if not coeff.is_Integer or not rest.is_Integer or de in rest.free_symbols:
            return None
        vals = set()
        if isinstance(a, (sympy.Eq, sympy.Ne)):
            hit = coeff != 0 and (-rest) % coeff == 0 and 0 <= int(-rest / coeff) < self.D
            if coeff == 0:
                vals = {bool(rest == 0)}
            elif not hit:
                vals = {False}
            else:
                vals = {True, False} if self.D > 1 else {True}
            vals = vals if isinstance(a, sympy.Eq) else {not v for v in vals}
        else:
            for dv in (0, self.D - 1):
                vals.add(bool(a.subs(de, dv)))
        if len(vals) != 1:
            return None
        return sympy.true if vals.pop() else sympy.false

    def _op_ok(self, n, node, ins) -> bool:
        op = node.op
        bat = [self.has(p) for p, _ in ins]
        rk = [len(self.pdg.rec(p).shapes[e.out]) for p, e in ins]
        if op in (Op.DATA, Op.DIM_VALUE):
            return True
        if not any(bat):
            return False
        if op in (Op.UNARY, Op.CAST, Op.RESHAPE, Op.PERMUTE, Op.ONE_HOT, Op.SLICE, Op.BINARY, Op.WHERE):
            return True
        if op is Op.EXPAND:
            return True
        if op is Op.REDUCE:
            if node.attrs.get("flat") and node.attrs["fn"] == "argmax":
                return False
            return len(ins) == 1 or not bat[1]
        if op is Op.SCAN:
            return len(ins) == 1 or not bat[1]
        if op is Op.CONCAT:
            return all(bat)
        if op is Op.MATMUL:
            return matmul_batches(bat, rk)
        if op is Op.TAKE:
            if node.attrs["along"]:
                return all(bat) and rk[0] == rk[1]
            if bat[0] and not bat[1]:
                return True
            return not bat[0] and bat[1] and node.attrs["axis"] == 0
        return False

    def choose(self) -> set:
        cyc = self.cyclic()
        V = {n for n in self.pdg.nodes if self.candidate(n, cyc)}
        changed = True
        while changed:
            changed = False
            for n in sorted(V):
                if not self._keeps(n, V):
                    V.discard(n)
                    changed = True
            for part in nx.connected_components(self.pdg.subgraph(V).to_undirected(as_view=True)):
                ops = [n for n in part if self.pdg.rec(n).op not in (Op.DATA, Op.DIM_VALUE, Op.ACCESS)]
                if len(ops) < MIN_OPS:
                    V -= part
                    changed = True
        return V

    def _keeps(self, n, V) -> bool:
        pdg = self.pdg
        node = pdg.rec(n)
        if node.op is Op.ACCESS:
            (p, e), = pdg.inputs(n)
            if p in V:
                k = [k for k, ent in enumerate(e.index) if self.mentions(ent)][0]
                if pdg.rec(p).domain[k] is not self.d:
                    return False
        for c, e in pdg.consumers(n):
            if c in V:
                return True
            if self._slice_reader(c, n, e):
                return True
        return False

    def _slice_reader(self, c, p, e):
        """``(a, b)`` when consumer ``c`` is an access reading ``p`` at a constant slice ``a:b`` along ``d``
        and at points elsewhere, else None."""
        if self.pdg.rec(c).op is not Op.ACCESS:
            return None
        k = self.dpos(p)
        ent = e.index[k]
        if not isinstance(ent, Slice) or any(isinstance(x, Slice) for j, x in enumerate(e.index) if j != k):
            return None
        a, b = self.static(ent.start), self.static(ent.stop)
        if a is None or b is None or not 0 <= a <= b <= self.D:
            return None
        return a, b

    # -- rewriting -----------------------------------------------------------------------------------
    def rewrite(self, V):
        src = self.pdg
        g = self.g = src.copy()
        self.next = max(src.nodes) + 1
        self.full, self.padded, self.expanded, self.dimval = {}, {}, {}, None
        new = {}  # vectorized node id of each member of V
        for n in sorted(V):
            node = src.rec(n)
            if node.op in (Op.DATA, Op.DIM_VALUE):
                new[n] = self._add(self._vec_source(node))
            else:
                new[n] = n
        self.new = new
        # the members' own records and operands
        for n in sorted(V):
            node = src.rec(n)
            if node.op in (Op.DATA, Op.DIM_VALUE):
                continue
            g.nodes[n]["node"] = self._vec_record(n, node)
            for _, p, k in list(g.out_edges(n, keys=True)):
                g.remove_edge(n, p, k)
            self._operands(n, node, V)
        # readers outside V of members of V
        for p in sorted(V):
            for c, e in src.consumers(p):
                if c in V:
                    continue
                self._outside_reader(c, p, e)
        self._drop_identities()
        live = live_nodes(g)
        g.remove_nodes_from([n for n in list(g.nodes) if n not in live])
        return g

    def _drop_identities(self):
        """Accesses that now read their producer whole at the same point (``x[i, 0:T]`` of a vectorized
        ``x``) hand their readers to the producer."""
        g = self.g
        for c in sorted(g.nodes):
            node = g.rec(c)
            if node.op is not Op.ACCESS:
                continue
            (p, e), = g.inputs(c)
            prod = g.rec(p)
            if p == c or prod.domain != node.domain or not is_basis(e, prod.domain):
                continue
            if prod.dtypes[e.out] != node.dtype or self._shape(prod.shapes[e.out]) != self._shape(node.shape):
                continue
            forward(g, c, p, out=e.out)
            g.remove_node(c)

    def _add(self, node) -> int:
        n = self.next
        self.next += 1
        self.g.add_op(n, node)
        return n

    def _shape(self, shape):
        out = []
        for s in shape:
            v = self.static(s)
            out.append(v if v is not None else s)
        return tuple(out)

    def _vshape(self, shape):
        return (self.D,) + self._shape(shape)

    def _without(self, domain):
        return tuple(x for x in domain if x is not self.d)

    def _vec_source(self, node) -> Node:
        if node.op is Op.DATA:
            arr = node.attrs["array"]
            k = [j for j, x in enumerate(node.domain) if x is self.d][0]
            moved = np.moveaxis(arr, k, len(node.domain) - 1)
            return Node(Op.DATA, self._without(node.domain), (self._vshape(node.shape),), node.dtypes,
                        {**node.attrs, "array": moved}, node.name, node.index)
        val = frozen(np.arange(self.D, dtype=node.dtype))
        return Node(Op.CONST, (), ((self.D,),), node.dtypes, {"value": val}, node.name, node.index)

    def _vec_record(self, n, node) -> Node:
        op, a = node.op, dict(node.attrs)
        shape = self._vshape(node.shape)
        if op is Op.REDUCE:
            a["axis"] = tuple(x + 1 for x in a["axis"])
        elif op is Op.SCAN or op is Op.CONCAT:
            a["axis"] = a["axis"] + 1
        elif op is Op.TAKE:
            (px, ex), _ = self.pdg.inputs(n)
            if self.has(px):
                a["axis"] = a["axis"] + 1
        elif op in (Op.RESHAPE, Op.EXPAND):
            a["shape"] = shape
        elif op is Op.PERMUTE:
            a["axes"] = (0,) + tuple(x + 1 for x in a["axes"])
        elif op is Op.SLICE:
            a["key"] = (slice(None),) + tuple(a["key"])
        return Node(op, self._without(node.domain), (shape,), node.dtypes, a, node.name, node.index)

    def _operands(self, n, node, V):
        """Edges of vectorized node ``n`` (its old edges are gone from ``self.g``)."""
        src, g = self.pdg, self.g
        out_rank = len(node.shape)
        if node.op is Op.MERGE:
            for pos, (p, e, c) in enumerate(self.conds[n]):
                shift = tuple(x for x, y in zip(e.shift, node.domain) if y is not self.d) if tuple(e.shift) else ()
                if self.has(p):
                    if p in V:
                        tgt, idx, out = self.new[p], self._drop(e.index, p), e.out
                    else:
                        tgt, out = self._full(p, e.out), 0
                        idx = self._drop(e.index, p)
                else:
                    tgt, idx, out = self._expand(p, e.out), e.index, 0
                g.add_dep(n, tgt, Edge(pos=pos, out=out, index=idx, cond=c, shift=shift))
            return
        for p, e in src.inputs(n):
            if node.op is Op.ACCESS:
                k = [k for k, ent in enumerate(e.index) if self.mentions(ent)][0]
                if p in V:
                    idx = tuple(x for j, x in enumerate(e.index) if j != k)
                    g.add_dep(n, self.new[p], Edge(pos=e.pos, out=e.out, index=idx))
                else:
                    idx = tuple(Slice(sympy.Integer(0), sympy.Integer(self.D)) if j == k else x
                                for j, x in enumerate(e.index))
                    g.add_dep(n, p, Edge(pos=e.pos, out=e.out, index=idx))
                continue
            if not self.has(p):
                g.add_dep(n, p, Edge(pos=e.pos, out=e.out, index=e.index))
                continue
            if p in V:
                tgt, out = self.new[p], e.out
            else:
                tgt, out = self._full(p, e.out), 0
            rank = len(src.rec(p).shapes[e.out])
            pad = out_rank - rank if node.op in PADDED or node.op is Op.EXPAND else 0
            if pad > 0:
                tgt, out = self._pad(tgt, out, pad), 0
            g.add_dep(n, tgt, Edge(pos=e.pos, out=out, index=self._basis(tgt)))

    def _basis(self, n):
        return tuple(x.e for x in self.g.rec(n).domain)

    def _drop(self, index, p):
        k = self.dpos(p)
        return tuple(x for j, x in enumerate(index) if j != k)

    def _full(self, p, out) -> int:
        """An access reading ``p`` at ``0:D`` along ``d`` (shared per producer output)."""
        key = (p, out)
        if key not in self.full:
            node = self.pdg.rec(p)
            dom = self._without(node.domain)
            idx = tuple(Slice(sympy.Integer(0), sympy.Integer(self.D)) if x is self.d else x.e for x in node.domain)
            rec = Node(Op.ACCESS, dom, (self._vshape(node.shapes[out]),), (node.dtypes[out],), {},
                       node.name, node.index)
            a = self._add(rec)
            self.g.add_dep(a, p, Edge(pos=0, out=out, index=idx))
            self.full[key] = a
        return self.full[key]

    def _pad(self, n, out, k) -> int:
        """A reshape of batched ``n`` to ``(D,) + (1,) * k + shape``, so it broadcasts from the right."""
        key = (n, out, k)
        if key not in self.padded:
            node = self.g.rec(n)
            shape = (node.shapes[out][0],) + (1,) * k + tuple(node.shapes[out][1:])
            r = self._add(Node(Op.RESHAPE, node.domain, (shape,), (node.dtypes[out],), {"shape": shape},
                               node.name, node.index))
            self.g.add_dep(r, n, Edge(pos=0, out=out, index=self._basis(n)))
            self.padded[key] = r
        return self.padded[key]

    def _expand(self, p, out) -> int:
        """``p`` (without ``d``) broadcast to ``(D,) + shape``: a placeholder branch's value."""
        key = (p, out)
        if key not in self.expanded:
            node = self.pdg.rec(p)
            shape = self._vshape(node.shapes[out])
            x = self._add(Node(Op.EXPAND, node.domain, (shape,), (node.dtypes[out],), {"shape": shape},
                               node.name, node.index))
            self.g.add_dep(x, p, Edge(pos=0, out=out, index=self._basis(p)))
            self.expanded[key] = x
        return self.expanded[key]

    def _dim_value(self) -> int:
        if self.dimval is None:
            self.dimval = self._add(Node(Op.DIM_VALUE, (self.d,), ((),), (I64,), {"dim": self.d.name},
                                         f"dim_value({self.d.name})", -1))
        return self.dimval

    def _outside_reader(self, c, p, e):
        """Consumer ``c`` (not vectorized) of vectorized ``p``: read the whole array, a constant slice
        of it, or element ``d`` of it."""
        g, src = self.g, self.pdg
        ab = self._slice_reader(c, p, e)
        source = src.rec(p).op in (Op.DATA, Op.DIM_VALUE)
        if source and ab is None:
            return  # the original data or dim value stays for readers of single points
        key = [k for _, q, k, dd in g.out_edges(c, keys=True, data=True) if q == p and dd["edge"] is e]
        g.remove_edge(c, p, key[0])
        if ab is not None:
            a, b = ab
            idx = self._drop(e.index, p)
            g.add_dep(c, self.new[p], Edge(pos=e.pos, out=e.out, index=idx))
            if (a, b) != (0, self.D):
                cn = src.rec(c)
                whole = Node(Op.ACCESS, cn.domain, (self._vshape(src.rec(p).shape),), cn.dtypes, {}, cn.name,
                             cn.index)
                g.nodes[c]["node"] = whole
                sl = self._add(Node(Op.SLICE, cn.domain, cn.shapes, cn.dtypes,
                                    {"key": (slice(a, b),) + (slice(None),) * len(src.rec(p).shape)},
                                    cn.name, cn.index))
                for r, _, k2, dd in list(g.in_edges(c, keys=True, data=True)):
                    g.remove_edge(r, c, k2)
                    g.add_dep(r, sl, dd["edge"])
                g.add_dep(sl, c, Edge(pos=0, out=0, index=tuple(x.e for x in cn.domain)))
                for flag in ("root",):
                    if g.nodes[c].get(flag):
                        g.nodes[sl][flag] = True
            return
        g.add_dep(c, self._element(p), Edge(pos=e.pos, out=0, index=e.index, cond=e.cond, shift=e.shift))

    def _element(self, p) -> int:
        """A take of element ``d`` of vectorized ``p``: ``p``'s old value at each of its old points."""
        key = ("take", p)
        if key not in self.full:
            node = self.pdg.rec(p)
            x = self._add(Node(Op.TAKE, node.domain, node.shapes, node.dtypes, {"axis": 0, "along": False},
                               node.name, node.index))
            self.g.add_dep(x, p, Edge(pos=0, out=0, index=tuple(y.e for y in self._without(node.domain))))
            self.g.add_dep(x, self._dim_value(), Edge(pos=1, out=0, index=(self.d.e,)))
            self.full[key] = x
        return self.full[key]


__all__ = ["vectorize", "vectorize_dim"]


def matmul_batches(batched, ranks) -> bool:
    """Whether a matmul whose operands gain a leading axis (``batched``: per operand; ``ranks``:
    their ranks before) keeps that axis a batch axis of the product (numpy's matmul rules)."""
    (ba, bb), (ra, rb) = batched, ranks
    if ba and bb:
        return ra >= 2 and ra == rb
    if ba:
        return rb <= 2 or rb <= ra
    return rb >= 2 and ra <= rb
