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
  (b) *fixed*: an operand whose index does not mention ``d`` (the parameters ``W[i]``): the same
      output of the same producer read at the same index, or two placeholders that hold the same
      value at every demanded point of ``L`` (checked with isl: wherever each takes a branch, both
      read the same output of the same producer at the same points; PPO's ``θ[i, k]`` against its
      acting snapshot ``θ@acting[i]`` when ``k = 0`` is the only update, one epoch of one minibatch); or
  (c) a node already matched to that operand of ``A``, read at its own point;
  with at least one operand of kind (a) or (c);
- the leading axis stays a batch axis: in an elementwise op every batched operand has ``A``'s
  full rank (so broadcasting aligns the new axis with the output's first); in a matmul the ranks
  satisfy the vectorize pass's rule (a batched left operand against a right one of rank at most
  two, and so on); a reduction reads no batched second operand;
- every demanded point of ``L`` reads ``A`` only where ``A`` is already demanded (checked with isl), so
  no acting op runs at a new point.

Rows: the block may reach ``L`` through a reshape merging its two leading axes (``(T, N, ...) ->
(T * N, ...)``) and a take of rows (``take(x, idx, axis=0)``, PPO's shuffled minibatch). Then ``A``
must also act on each row of its first axis on its own (elementwise with fixed operands of lower
rank or one row, a matmul of a left operand of rank two or more against a fixed right one of rank at
most two, a reduction not over axis 0, a reshape keeping axis 0), every stacked operand reaches
``L`` through the same steps (the same take index), and ``L`` becomes that gather of ``A``'s block:
``take(reshape(A[i, 0:T]), idx)`` (the access and reshape over ``A``'s other dims, shared by every
reader; the take where ``L`` was).

Without the take (PPO with one minibatch, read in rollout order: ``shuffle_whole_batch=False``), ``L``
becomes the reshape of ``A``'s block, a view: the learner's forward pass costs nothing, and it holds
no more than the recomputed layers held (the acting activations stay until the backward pass reads
them, instead of the learner's own). Measured on the paper's setting (PPO, 512 x 250, one epoch of
one minibatch, compiled env, numba): 0.242 s an iteration and a planned peak of 274 MB, against
0.309-0.335 s and 292 MB shuffled and recomputed.

The take form is switched off by default (``compile(passes={"reuse_rows": True})`` turns it on): the
gather reads each reused activation in shuffled row order and holds a gathered copy beside the acting
block, and on the numba backend that measured slower than recomputing the layers (PPO, 512 x 250, one
epoch of one minibatch: 0.50-0.62 s per iteration with it against 0.36-0.44 without; the matmuls it
saves run near BLAS speed, while each gathered activation moves a 128000 x 64 array through memory
twice).

Then ``L[p] = stack(A[p, d] for 0 <= d < D)`` (or its gather of rows) at every demanded point ``p``:
by induction over the matched operands, ``L``'s operands are the stacked operands of ``A`` and the op
commutes with stacking (and with gathering rows). The graph is otherwise left alone; nodes that
only the replaced ones read go (the block accesses of the observations, the intermediate layers).
The analysis is carried over: the new nodes are demanded where ``L`` was (projected onto the
access's dims); no other node is read at new points.

Placement: after ``dce`` (so no dead reader keeps a learner op alive) and before ``vectorize``.
Vectorize moves acting ops that are off the acting cycle (PPO's log-probability of the sampled
action) out of the per-step loop into batched ops over the rollout; once there they are no longer
per-step acting nodes and the learner's copies of them cannot be matched. Run first, reuse also
replaces PPO's log-softmax (a reduction and a subtraction per update); REINFORCE's graph is the same
in both orders. Vectorize then re-derives the analysis of the rewritten graph.
"""

from __future__ import annotations

import islpy as isl
import numpy as np
import sympy

from ..ir.analysis import Analysis, live_nodes
from ..ir.expr import to_isl
from ..ir.ops import Edge, Node, Op, Slice
from ..ir.polyhedral import stmt, var
from .cse import freeze
from .rewrite import forward, remodel
from .vectorize import matmul_batches

ELEMENTWISE = frozenset({Op.UNARY, Op.BINARY, Op.WHERE, Op.CAST})
ROWWISE = ELEMENTWISE | {Op.MATMUL, Op.REDUCE, Op.RESHAPE}
KEEP_FLAGS = ("parameter", "requires_grad")

def reuse(prog, pdg, bounds, analysis, ctx=None):
    """Replace learner forward ops by blocks of the matching acting ops (see the module docstring);
    through a gather of rows only with ``compile(passes={"reuse_rows": True})`` (``ctx.switches``)."""
    rows = bool(ctx is not None and ctx.switches.get("reuse_rows", False))
    live = [n for n in analysis.live if n in pdg]
    sub = pdg.subgraph(live)
    matches = {}  # learner node -> (acting node, dim, bound, chain)
    for d in prog.dims:
        if d.bound.name not in bounds:
            continue
        m = _Matcher(prog, sub, bounds, analysis, d, matches, rows)
        for n in sorted(live):
            m.match(n)
    if not matches:
        return pdg, analysis
    out = pdg.copy()
    model = analysis.model
    demand = {n: analysis.demand[n] for n in analysis.live if n in out}
    nxt = [max(out.nodes) + 1]
    shared = {}  # (acting node, steps before a take) -> node over the acting node's other dims

    def add(node, dem):
        n = nxt[0]
        nxt[0] += 1
        out.add_op(n, node)
        demand[n] = dem.set_tuple_name(stmt(n))
        return n

    new = {}
    for L, (A, d, D, chain) in sorted(matches.items()):
        rec, arec = out.rec(L), out.rec(A)
        idx = tuple(Slice(sympy.Integer(0), sympy.Integer(D)) if x is d else x.e for x in arec.domain)
        if not chain:
            a = add(Node(Op.ACCESS, rec.domain, rec.shapes, rec.dtypes, {}, rec.name, rec.index), analysis.demand[L])
            out.add_dep(a, A, Edge(pos=0, out=0, index=idx))
            new[L] = a
            continue
        # a gather of rows: access A[.., 0:D] -> [reshape (D * N, ...)] -> [take rows] over L's domain
        outer = tuple(x for x in arec.domain if x is not d)
        dem_outer = analysis.demand[L].apply(_project(model, L, rec.domain, outer))
        S = tuple(arec.shape)
        key = (A, ())
        if key not in shared:
            a = add(Node(Op.ACCESS, outer, ((D,) + S,), arec.dtypes, {}, arec.name, arec.index), dem_outer)
            out.add_dep(a, A, Edge(pos=0, out=0, index=idx))
            shared[key] = a
        cur, shape = shared[key], (D,) + S
        for k, step in enumerate(chain):
            last = k == len(chain) - 1
            if step[0] == "merge":
                shape = (shape[0] * shape[1],) + shape[2:]
                if last:  # no take: the learner reads the merged block (a view), as a reshape at its own points
                    r = add(Node(Op.RESHAPE, rec.domain, (shape,), arec.dtypes, {"shape": shape}, rec.name, rec.index),
                            analysis.demand[L])
                    out.add_dep(r, cur, Edge(pos=0, out=0, index=tuple(x.e for x in outer)))
                    new[L] = r
                    continue
                key = (A, tuple(chain[: k + 1]))
                if key not in shared:
                    r = add(Node(Op.RESHAPE, outer, (shape,), arec.dtypes, {"shape": shape}, arec.name, arec.index),
                            dem_outer)
                    out.add_dep(r, cur, Edge(pos=0, out=0, index=tuple(x.e for x in outer)))
                    shared[key] = r
                cur = shared[key]
                continue
            _, tk = step
            (_, ex), (ip, ei) = pdg.inputs(tk)
            t = add(Node(Op.TAKE, rec.domain, rec.shapes, rec.dtypes, dict(pdg.rec(tk).attrs), rec.name, rec.index),
                    analysis.demand[L])
            out.add_dep(t, cur, Edge(pos=0, out=0, index=tuple(x.e for x in outer)))
            out.add_dep(t, ip, Edge(pos=1, out=ei.out, index=ei.index))
            new[L] = t
    for L, a in new.items():
        forward(out, L, a)
    after = live_nodes(out)
    out.remove_nodes_from([n for n in set(out.nodes) if n not in after])
    demand = {n: s for n, s in demand.items() if n in out}
    return out, Analysis(remodel(prog, out, bounds, analysis), sorted(demand), demand, analysis.seconds)


def _static(e, subs):
    v = sympy.sympify(e).subs(subs)
    return int(v) if v.is_Integer else None


def _index_map(model, c, cdom, p, pdom, index):
    """{ ``c``'s points (over ``cdom``) -> ``p``'s points (over ``pdom``) at ``index`` (points only) }."""
    vs = ", ".join(var(x) for x in cdom)
    outs = [f"o{k}" for k in range(len(pdom))]
    cons = [f"{o} = {to_isl(e, model.names)}" for o, e in zip(outs, index)]
    m = model.template(f"{{ S[{vs}] -> P[{', '.join(outs)}] : {' and '.join(cons) or '0 = 0'} }}", isl.Map)
    return m.set_tuple_name(isl.dim_type.in_, stmt(c)).set_tuple_name(isl.dim_type.out, stmt(p))


def _project(model, L, ldom, outer):
    """{ ``L``'s points -> the same point over the dims ``outer`` } (named for ``L`` on both sides)."""
    return _index_map(model, L, ldom, L, outer, tuple(x.e for x in outer))


class _Matcher:
    def __init__(self, prog, pdg, bounds, analysis, d, matches, rows=True):
        self.prog, self.pdg, self.analysis, self.d, self.gather_rows = prog, pdg, analysis, d, rows
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
        if a == b:  # structurally equal (PPO: every index compared is): no sympy work
            return True
        return sympy.expand(sympy.sympify(a).subs(self.subs) - sympy.sympify(b).subs(self.subs)) == 0

    def has(self, n):
        return any(x is self.d for x in self.pdg.rec(n).domain)

    def basis(self, e, p):
        return all(not isinstance(x, Slice) and self.same(x, dd.e) for x, dd in zip(e.index, self.pdg.rec(p).domain))

    # -- matching ---------------------------------------------------------------------------------
    def usable(self, n):
        rec = self.pdg.rec(n)
        return rec.op in ROWWISE and len(rec.shapes) == 1 and not any(self.pdg.nodes[n].get(f) for f in KEEP_FLAGS)

    def match(self, L):
        """``(A, chain)``: the acting node ``L`` is (a gather of) the block of, or None (memoized)."""
        if L in self.matches:
            A, d, _, chain = self.matches[L]
            return (A, chain) if d is self.d else None
        if L in self.busy or L in self.failed or not self.usable(L) or self.has(L):
            return None
        self.busy.add(L)
        try:
            for A in self.candidates(L):
                chain = self.matches_at(L, A)
                if chain is not None:
                    self.matches[L] = (A, self.d, self.D, chain)
                    return A, chain
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
                X, out = got[0], got[1]
                return sorted({A for A, eA in pdg.consumers(X)
                               if eA.pos == eL.pos and eA.out == out and A != L and self.has(A)})
            got = self.match(pL) if self.basis(eL, pL) else None
            if got is not None:
                return sorted({A for A, eA in pdg.consumers(got[0]) if eA.pos == eL.pos and self.has(A)})
        return []

    def block(self, pL, eL):
        """``(X, out, k, c, chain)`` when ``pL`` (read at its point by ``L``) is an access reading ``X`` at
        ``c:D+c`` along ``d`` (``X``'s ``k``-th dim) and at points elsewhere, possibly followed by a reshape
        merging its two leading axes and by a take of rows (``chain``: those steps, in order)."""
        pdg = self.pdg
        if eL.out != 0 or not self.basis(eL, pL):
            return None
        chain = []
        rec = pdg.rec(pL)
        if self.gather_rows and rec.op is Op.TAKE and rec.attrs.get("axis") == 0 and not rec.attrs.get("along"):
            (px, ex), _ = pdg.inputs(pL)
            if ex.out != 0 or not self.basis(ex, px) or any(pdg.nodes[pL].get(f) for f in KEEP_FLAGS):
                return None
            chain.append(("take", pL))
            pL, rec = px, pdg.rec(px)
        if rec.op is Op.RESHAPE:  # merging the block's two leading axes (after a take, or alone: a view)
            (px, ex), = pdg.inputs(pL)
            si, so = self.shape(pdg.rec(px).shapes[ex.out]), self.shape(rec.shape)
            if si is None or len(si) < 2 or so != (si[0] * si[1],) + si[2:] or ex.out != 0 or not self.basis(ex, px):
                return None
            chain.append(("merge",))
            pL, rec = px, pdg.rec(px)
        if rec.op is not Op.ACCESS:
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
        return X, eB.out, k, a, tuple(reversed(chain)), eB

    def matches_at(self, L, A):
        """The chain ``L`` reads ``A``'s block through, or None when ``L`` is not ``A`` stacked."""
        pdg = self.pdg
        rl, ra = pdg.rec(L), pdg.rec(A)
        if ra.op is not rl.op or not self.usable(A) or len(ra.shapes) != 1:
            return None
        if tuple(np.dtype(x) for x in rl.dtypes) != tuple(np.dtype(x) for x in ra.dtypes):
            return None
        if not all(x is self.d or x in rl.domain for x in ra.domain):
            return None
        sa = self.shape(ra.shape)
        if sa is None:
            return None
        insL, insA = pdg.inputs(L), pdg.inputs(A)
        if len(insL) != len(insA):
            return None
        batched, ranks, chains = [], [], []
        for (pL, eL), (pA, eA) in zip(insL, insA):
            kind = self.operand(L, pL, eL, pA, eA)
            if kind is None:
                return None
            batched.append(kind is not False)
            if kind is not False:
                chains.append(kind)
            ranks.append(len(pdg.rec(pA).shapes[eA.out]))
        if not chains or any(not self.same_chain(c, chains[0]) for c in chains):
            return None
        chain = chains[0]
        merged = any(s[0] == "merge" for s in chain)
        if self.shape(rl.shape) != self.chained((self.D,) + sa, chain):
            return None
        if merged and not self.rows(A, batched, ranks, sa):
            return None
        if not self.rowwise(rl, ra, batched, ranks, merged):
            return None
        return chain if self.demanded(L, A) else None

    def chained(self, shape, chain):
        for step in chain:
            if step[0] == "merge":
                shape = (shape[0] * shape[1],) + shape[2:]
            else:
                _, (ip, ei) = self.pdg.inputs(step[1])
                ishape = self.shape(self.pdg.rec(ip).shapes[ei.out])
                if ishape is None:
                    return None
                shape = ishape + shape[1:]
        return shape

    def same_chain(self, a, b):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if x[0] != y[0]:
                return False
            if x[0] == "take":
                (_, ex), (ip, ei) = self.pdg.inputs(x[1])
                (_, ey), (jp, ej) = self.pdg.inputs(y[1])
                if ip != jp or ei.out != ej.out or len(ei.index) != len(ej.index) or not all(
                        self.same(u, v) for u, v in zip(ei.index, ej.index)):
                    return False
        return True

    def operand(self, L, pL, eL, pA, eA):
        """The chain (stacked), False (fixed) or None (no match) for one operand pair."""
        got = self.block(pL, eL)
        if got is not None:
            X, out, k, c, chain, eB = got
            if pA != X or eA.out != out:
                return None
            for j, (xb, xa) in enumerate(zip(eB.index, eA.index)):
                if j == k:
                    if isinstance(xa, Slice) or not self.same(xa, self.d.e + c):
                        return None
                elif isinstance(xa, Slice) or not self.same(xa, xb):
                    return None
            return chain
        got = self.match(pL) if self.basis(eL, pL) else None
        if got is not None and got[0] == pA and self.basis(eA, pA) and eL.out == eA.out == 0:
            return got[1]
        if any(isinstance(x, Slice) or self.mentions(x) for x in eA.index) or eL.out != eA.out:
            return None
        if pL == pA and len(eL.index) == len(eA.index) and all(self.same(x, y) for x, y in zip(eL.index, eA.index)):
            return False
        if self.same_value(L, pL, eL, pA, eA):
            return False
        return None

    def same_value(self, L, pL, eL, pA, eA) -> bool:
        """Whether placeholders ``pL`` (read by ``L`` at ``eL``) and ``pA`` (read at ``eA``, written over the
        dims ``L`` shares with the acting node) hold the same value at every demanded point of ``L``:
        wherever a branch of each is taken, both read the same output of the same producer at the same
        points (the acting snapshot of the parameters, ``θ@acting[i]``, against ``θ[i, k]`` where only
        ``k = 0`` is demanded)."""
        pdg, model = self.pdg, self.analysis.model
        if pdg.rec(pL).op is not Op.MERGE or pdg.rec(pA).op is not Op.MERGE or L not in self.analysis.demand:
            return False
        if any(isinstance(x, Slice) for x in eL.index):
            return False
        ldom = pdg.rec(L).domain
        dem = self.analysis.demand[L]
        mL = _index_map(model, L, ldom, pL, pdg.rec(pL).domain, eL.index)
        mA = _index_map(model, L, ldom, pA, pdg.rec(pA).domain, eA.index)

        def regions(m, p):
            out = []
            for q, e in pdg.inputs(p):
                at = dem.intersect(m.intersect_range(model.branch_domain(p, e.pos)).domain())
                if not at.is_empty():
                    out.append((q, e, at))
            return out

        try:
            left, right = regions(mL, pL), regions(mA, pA)
            covered = dem.subtract(dem)
            for q, e, at in left:
                for q2, e2, at2 in right:
                    both = at.intersect(at2)
                    if both.is_empty():
                        continue
                    if q != q2 or e.out != e2.out:
                        return False
                    got = mL.intersect_domain(both).apply_range(model.access(pL, q, e.pos))
                    want = mA.intersect_domain(both).apply_range(model.access(pA, q2, e2.pos))
                    if not got.is_equal(want):
                        return False
                    covered = covered.union(both)
            return dem.is_subset(covered)
        except isl.Error:
            return False

    def rows(self, A, batched, ranks, sa) -> bool:
        """Whether acting node ``A`` acts on each row (index along its first axis) on its own."""
        if not sa:
            return False
        ra = self.pdg.rec(A)
        op, r = ra.op, len(sa)
        ins = self.pdg.inputs(A)
        shapes = [self.shape(self.pdg.rec(p).shapes[e.out]) for p, e in ins]
        if any(s is None for s in shapes):
            return False
        if op in ELEMENTWISE:
            return all((s[0] == sa[0] and len(s) == r) if b else (len(s) < r or s[0] == 1)
                       for b, s in zip(batched, shapes))
        if op is Op.MATMUL:
            return batched == [True, False] and ranks[0] >= 2 and ranks[1] <= 2
        if op is Op.REDUCE:
            return 0 not in ra.attrs["axis"] and not ra.attrs.get("flat") and batched[0]
        if op is Op.RESHAPE:
            return self.shape(ra.attrs["shape"])[0] == shapes[0][0]
        return False

    def rowwise(self, rl, ra, batched, ranks, merged) -> bool:
        """Whether ``rl`` is ``ra`` applied to operands stacked along a new leading axis (``merged``: the
        new axis merged into the first, so ranks and axes stay)."""
        op, r = ra.op, len(ra.shape)
        if op in ELEMENTWISE:
            if freeze(rl.attrs) != freeze(ra.attrs):
                return False
            return all(rk == r for b, rk in zip(batched, ranks) if b)
        if op is Op.MATMUL:
            if freeze(rl.attrs) != freeze(ra.attrs):
                return False
            if merged:
                return True  # rows() checked the shapes
            return matmul_batches(batched, ranks)
        if op is Op.REDUCE:
            if len(batched) > 1 and batched[1]:
                return False
            aa, la = dict(ra.attrs), dict(rl.attrs)
            if aa.get("fn") == "argmax" and (aa.get("flat") or la.get("flat")):
                return False
            shift = 0 if merged else 1
            want = {**aa, "axis": tuple(x % ranks[0] + shift for x in aa["axis"])}
            got = {**la, "axis": tuple(x % (ranks[0] + shift) for x in la["axis"])}
            want.pop("flat", None)
            got.pop("flat", None)
            return freeze(want) == freeze(got)
        if op is Op.RESHAPE:
            rest = {k: v for k, v in ra.attrs.items() if k != "shape"}
            return (self.shape(rl.attrs["shape"]) == self.shape(rl.shape)
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


__all__ = ["reuse"]


reuse.takes_context = True
