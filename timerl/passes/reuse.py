"""Activation reuse: a learner's forward pass over a rollout block reads the acting activations.

An acting step computes, per point ``(i, t)``, ``A[i, t] = f(X[i, t], W[i])`` (policy layers over
the observation at the acting parameters). A learner written on slices recomputes the same layers
on the whole rollout, ``L[i] = f(X[i, 0:T], W[i])``, with shape ``(T,) + shape(A)``. When ``f`` is
applied row by row along the new leading axis, ``L[i]`` *is* the block ``A[i, 0:T]``: the pass
replaces ``L`` by an ``ACCESS`` of ``A`` over that block (the construct ``x[i, 0:T]`` builds),
so the learner's forward ops disappear and whatever read them (log-probabilities, the backward
pass) reads the stored acting activations instead.

The rule, for a dim ``d`` with a known bound ``D``: learner node ``L`` matches acting node ``A`` when
- both are pure ops of the same kind (``ROWWISE``: elementwise, matmul, reductions, reshapes; no
  random op, UDF, sink, merge or access), with the same dtypes, ``A``'s domain has ``d`` and ``L``'s
  domain holds ``A``'s other dims, and neither is flagged ``parameter`` or ``requires_grad``;
- ``L``'s attributes are ``A``'s batched by one leading axis (reduction axes shifted by one, a reshape's
  target shape ``(D,) + shape``; the rest equal) and ``L``'s shape is ``(D,) + shape(A)``;
- each operand of ``L`` is, against the operand of ``A`` at the same position,
  (a) a *block*: an access reading ``X`` at ``c:D+c`` along ``d`` and elsewhere at the entries ``A``
      reads ``X`` at, which read ``d`` at ``d + c`` (so the block stacks ``A``'s operand over
      ``0 <= d < D``), of shape ``(D,) + shape``; or
  (b) *fixed*: the same output of the same producer read at the same index, which does not mention
      ``d`` (the parameters ``W[i]``): the same value at every ``d``; or
  (c) a node already matched to that operand of ``A``, read at its own point;
  with at least one operand of kind (a) or (c);
- the leading axis stays a batch axis: in an elementwise op every batched operand has ``A``'s
  full rank (so broadcasting aligns the new axis with the output's first); in a matmul the ranks
  satisfy the vectorize pass's rule (a batched left operand against a right one of rank at most
  two, and so on); a reduction reads no batched second operand;
- every demanded point of ``L`` reads ``A`` only where ``A`` is already demanded (checked with isl), so
  no acting op runs at a new point.

Then ``L[p] = stack(A[p, d] for 0 <= d < D)`` at every demanded point ``p``: by induction over the
matched operands, ``L``'s operands are the stacked operands of ``A``, and the op commutes with
stacking. The graph is otherwise left alone; nodes that only the replaced ones read go (the block
accesses of the observations, the intermediate layers). The analysis is carried over: the new
access is demanded where ``L`` was; no other node is read at new points.

PPO is not matched (see ``NOT_MATCHED``): its learner reads the parameters ``θ[i, k]`` of the
update recurrence, not the acting snapshot ``θ@acting[i]``, and its observations through a
shuffle (``take(reshape(o[i, 0:T]), perm)``), so neither (a) nor (b) holds.
"""

from __future__ import annotations

import islpy as isl
import networkx as nx
import numpy as np
import sympy

from ..ir.analysis import Analysis, live_nodes
from ..ir.ops import Edge, Node, Op, Slice
from ..ir.polyhedral import stmt, var
from .cse import freeze
from .rewrite import forward, remodel

ELEMENTWISE = frozenset({Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST})
ROWWISE = ELEMENTWISE | {Op.MATMUL, Op.REDUCE, Op.RESHAPE}
KEEP_FLAGS = ("parameter", "requires_grad")

NOT_MATCHED = """\
PPO (epochs=1, minibatches=1) is not rewritten. Two facts would need proving:
1. parameter point equality: the learner reads theta[i, k] (a merge over (i, k): init at i = k = 0,
   theta[i - 1, K] at k = 0, the Adam update at k - 1 otherwise) and the acting step reads
   theta@acting[i] (a merge over (i,): init at i = 0, theta[i - 1, K] otherwise). They agree at every
   demanded learner point only because K = 1 leaves k = 0 the only one, and the proof compares two
   merges branch by branch (same producer, same index, branch regions equal on k = 0);
2. the shuffle commutes with the rows: the learner's observations are take(reshape(o[i, 0:T]),
   idx) of shape (mb, obs), so L = f(take(reshape(block), idx)) must be rewritten to
   take(reshape(A[i, 0:T]), idx), which holds when f acts on each row of the merged (T * N) axis
   alone (an elementwise op whose fixed operands have lower rank, a matmul with a left operand of
   rank two), and the replacement is a gather, not an access.
"""


def reuse(prog, pdg, bounds, analysis):
    """Replace learner forward ops by blocks of the matching acting ops (see the module docstring)."""
    live = [n for n in analysis.live if n in pdg]
    sub = pdg.subgraph(live)
    matches = {}  # learner node -> (acting node, dim)
    for d in prog.dims:
        if d.bound.name not in bounds:
            continue
        m = _Matcher(prog, sub, bounds, analysis, d, matches)
        for n in sorted(live):
            m.match(n)
    if not matches:
        return pdg, analysis
    out = pdg.copy()
    before = live_nodes(out)
    nxt = max(out.nodes) + 1
    new = {}
    for L, (A, d, D) in sorted(matches.items()):
        rec, arec = out.rec(L), out.rec(A)
        acc = Node(Op.ACCESS, rec.domain, rec.shapes, rec.dtypes, {}, rec.name, rec.index)
        out.add_op(nxt, acc)
        idx = tuple(Slice(sympy.Integer(0), sympy.Integer(D)) if x is d else x.e for x in arec.domain)
        out.add_dep(nxt, A, Edge(pos=0, out=0, index=idx))
        new[L] = nxt
        nxt += 1
    for L, a in new.items():
        forward(out, L, a)
    after = live_nodes(out)
    out.remove_nodes_from([n for n in before | set(new.values()) if n not in after])
    demand = {n: analysis.demand[n] for n in analysis.live if n in out}
    for L, a in new.items():
        if a in out:
            demand[a] = analysis.demand[L].set_tuple_name(stmt(a))
    return out, Analysis(remodel(prog, out, bounds, analysis), sorted(demand), demand, analysis.seconds)


def _static(e, subs):
    v = sympy.sympify(e).subs(subs)
    return int(v) if v.is_Integer else None


class _Matcher:
    def __init__(self, prog, pdg, bounds, analysis, d, matches):
        self.prog, self.pdg, self.analysis, self.d = prog, pdg, analysis, d
        self.D = int(bounds[d.bound.name])
        self.subs = {b.e: sympy.Integer(bounds[b.name]) for b in prog.bounds if b.name in bounds}
        self.matches = matches
        self.busy, self.failed = set(), set()

    # -- shapes and indices ---------------------------------------------------------------------
    def shape(self, s):
        out = tuple(_static(x, self.subs) for x in s)
        return None if any(x is None for x in out) else out

    def mentions(self, ent):
        de = self.d.e
        if isinstance(ent, Slice):
            return de in sympy.sympify(ent.start).free_symbols | sympy.sympify(ent.stop).free_symbols
        return de in sympy.sympify(ent).free_symbols

    def same(self, a, b):
        if isinstance(a, Slice) or isinstance(b, Slice):
            return (isinstance(a, Slice) and isinstance(b, Slice) and self.same(a.start, b.start)
                    and self.same(a.stop, b.stop))
        return sympy.expand(sympy.sympify(a).subs(self.subs) - sympy.sympify(b).subs(self.subs)) == 0

    def has(self, n):
        return any(x is self.d for x in self.pdg.rec(n).domain)

    # -- matching ---------------------------------------------------------------------------------
    def usable(self, n):
        rec = self.pdg.rec(n)
        return rec.op in ROWWISE and len(rec.shapes) == 1 and not any(self.pdg.nodes[n].get(f) for f in KEEP_FLAGS)

    def match(self, L):
        """The acting node ``L`` is the block of, or None (memoized in ``self.matches``)."""
        if L in self.matches:
            return self.matches[L][0] if self.matches[L][1] is self.d else None
        if L in self.busy or L in self.failed or not self.usable(L) or self.has(L):
            return None
        self.busy.add(L)
        try:
            for A in self.candidates(L):
                if self.matches_at(L, A):
                    self.matches[L] = (A, self.d, self.D)
                    return A
        finally:
            self.busy.discard(L)
        self.failed.add(L)
        return None

    def candidates(self, L):
        """Acting nodes that read what ``L``'s first non-fixed operand stacks."""
        pdg = self.pdg
        for pL, eL in pdg.inputs(L):
            got = self.block(pL, eL)
            if got is not None:
                X, out, k, c = got
                cands = []
                for A, eA in pdg.consumers(X):
                    if eA.pos == eL.pos and eA.out == out and A != L and self.has(A):
                        cands.append(A)
                return sorted(set(cands))
            A2 = self.match(pL)
            if A2 is not None:
                return sorted({A for A, eA in pdg.consumers(A2) if eA.pos == eL.pos and self.has(A)})
        return []

    def block(self, pL, eL):
        """``(X, out, k, c)`` when ``pL`` (read at its point by ``L``) is an access reading ``X`` at ``c:D+c``
        along ``d`` (``X``'s ``k``-th dim) and at points elsewhere."""
        pdg = self.pdg
        rec = pdg.rec(pL)
        if rec.op is not Op.ACCESS or eL.out != 0 or not self.basis(eL, pL):
            return None
        (X, eB), = pdg.inputs(pL)
        xdom = pdg.rec(X).domain
        ks = [k for k, x in enumerate(xdom) if x is self.d]
        if len(ks) != 1:
            return None
        k = ks[0]
        ent = eB.index[k]
        if not isinstance(ent, Slice) or any(isinstance(x, Slice) or self.mentions(x)
                                             for j, x in enumerate(eB.index) if j != k):
            return None
        a, b = _static(ent.start, self.subs), _static(ent.stop, self.subs)
        if a is None or b is None or b - a != self.D:
            return None
        xs = self.shape(pdg.rec(X).shapes[eB.out])
        if xs is None or self.shape(rec.shape) != (self.D,) + xs:
            return None
        return X, eB.out, k, a

    def basis(self, e, p):
        return all(not isinstance(x, Slice) and self.same(x, dd.e) for x, dd in zip(e.index, self.pdg.rec(p).domain))

    def matches_at(self, L, A) -> bool:
        pdg = self.pdg
        rl, ra = pdg.rec(L), pdg.rec(A)
        if ra.op is not rl.op or not self.usable(A) or len(ra.shapes) != 1:
            return False
        if tuple(np.dtype(x) for x in rl.dtypes) != tuple(np.dtype(x) for x in ra.dtypes):
            return False
        if not all(x is self.d or x in rl.domain for x in ra.domain):
            return False
        sa = self.shape(ra.shape)
        if sa is None or self.shape(rl.shape) != (self.D,) + sa:
            return False
        insL, insA = pdg.inputs(L), pdg.inputs(A)
        if len(insL) != len(insA):
            return False
        batched, ranks = [], []
        for (pL, eL), (pA, eA) in zip(insL, insA):
            kind = self.operand(pL, eL, pA, eA)
            if kind is None:
                return False
            batched.append(kind)
            ranks.append(len(pdg.rec(pA).shapes[eA.out]))
        if not any(batched):
            return False
        if not self.rowwise(rl, ra, batched, ranks):
            return False
        return self.demanded(L, A)

    def operand(self, pL, eL, pA, eA):
        """True (stacked), False (fixed) or None (no match) for one operand pair."""
        got = self.block(pL, eL)
        if got is not None:
            X, out, k, c = got
            if pA != X or eA.out != out:
                return None
            (_, eB), = self.pdg.inputs(pL)
            for j, (xb, xa) in enumerate(zip(eB.index, eA.index)):
                if j == k:
                    if isinstance(xa, Slice) or not self.same(xa, self.d.e + c):
                        return None
                elif isinstance(xa, Slice) or not self.same(xa, xb):
                    return None
            return True
        if self.match(pL) == pA and self.basis(eL, pL) and self.basis(eA, pA) and eL.out == eA.out == 0:
            return True
        if pL == pA and eL.out == eA.out and len(eL.index) == len(eA.index) and not any(
                self.mentions(x) for x in eA.index) and all(self.same(x, y) for x, y in zip(eL.index, eA.index)):
            return False
        return None

    def rowwise(self, rl, ra, batched, ranks) -> bool:
        """Whether ``rl`` is ``ra`` applied to operands stacked along a new leading axis."""
        op, r = ra.op, len(ra.shape)
        if op in ELEMENTWISE:
            if freeze(rl.attrs) != freeze(ra.attrs):
                return False
            return all(rk == r for b, rk in zip(batched, ranks) if b)
        if op is Op.MATMUL:
            if freeze(rl.attrs) != freeze(ra.attrs):
                return False
            (ba, bb), (rka, rkb) = batched, ranks
            if ba and bb:
                return rka >= 2 and rka == rkb
            if ba:
                return rkb <= 2 or rkb <= rka
            return rkb >= 2 and rka <= rkb
        if op is Op.REDUCE:
            if len(batched) > 1 and batched[1]:
                return False
            aa, la = dict(ra.attrs), dict(rl.attrs)
            if aa.get("fn") == "argmax" and (aa.get("flat") or la.get("flat")):
                return False
            want = {**aa, "axis": tuple(x % ranks[0] + 1 for x in aa["axis"])}
            got = {**la, "axis": tuple(x % (ranks[0] + 1) for x in la["axis"])}
            want.pop("flat", None)
            got.pop("flat", None)
            return freeze(want) == freeze(got)
        if op is Op.RESHAPE:
            sa, sl = self.shape(ra.attrs["shape"]), self.shape(rl.attrs["shape"])
            rest = {k: v for k, v in ra.attrs.items() if k != "shape"}
            return (sa is not None and sl == (self.D,) + sa
                    and freeze(rest) == freeze({k: v for k, v in rl.attrs.items() if k != "shape"}))
        return False

    def demanded(self, L, A) -> bool:
        """Every demanded point of ``L`` reads ``A`` at ``0 <= d < D`` only where ``A`` is demanded."""
        dem = self.analysis.demand
        if L not in dem or A not in dem:
            return False
        rl, ra = self.pdg.rec(L), self.pdg.rec(A)
        outs, cons = [], []
        for k, x in enumerate(ra.domain):
            outs.append(f"o{k}")
            cons.append(f"0 <= o{k} < {self.D}" if x is self.d else f"o{k} = {var(x)}")
        vs = ", ".join(var(x) for x in rl.domain)
        m = self.analysis.model.template(f"{{ S[{vs}] -> P[{', '.join(outs)}] : {' and '.join(cons)} }}", isl.Map)
        m = m.set_tuple_name(isl.dim_type.in_, stmt(L)).set_tuple_name(isl.dim_type.out, stmt(A))
        return dem[L].apply(m).is_subset(dem[A])


__all__ = ["NOT_MATCHED", "reuse"]
