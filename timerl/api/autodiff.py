"""Symbolic reverse-mode autodiff: backward ops added to the same PDG.

    loss.backward()                 # gradients for every requires_grad tensor and parameter
    gx, gw = tl.grad(loss, [x, w])  # explicit gradients

The adjoint ``ḡ[n]`` of a node is a recurrent tensor over the node's domain: at a point, the
derivative of the sum of the loss over all of its points (``0 <= d < D``) with respect to
the node at that point. For every edge ``c -> p`` (consumer reads producer), the
contribution to ``ḡ[p]`` at a point of ``p`` is the sum, over the consumer points that
read it, of the consumer's vector-Jacobian product (the registry's ``vjp``) there. Those consumer
points come from the isl access relation of the edge, inverted (``access(c, p).reverse()``)
with the bounds left as parameters. The inverse is split into disjoint pieces; in each, every
consumer dim is either one affine point of the producer's dim (an ACCESS at a shifted or
constant point) or an interval (an ACCESS with a slice, then a sum over it). A piece becomes
one branch of a placeholder whose condition is the piece's domain; the placeholder's last
branch is zero. Slice reads (``x[0:T]``, ``x[t:T]``) also gather the element of the read
slice that is the producer point (``take`` at the point's position); a variable slice is
first padded, per consumer point, to the producer's full range so that the slices read
together have one length. Basis edges (elementwise ops, domain broadcasting) and placeholder
branches go through the same code: a dim the producer lacks is an interval (a sum).

Only the points that can influence the loss are differentiated: the *support* of each node
(the loss's points pulled back through the access relations, with isl) restricts the inverse
relation, so a value that a placeholder branch never reads is never evaluated for its
gradient. Recurrences (cycles) get one placeholder per adjoint, which makes the backward
pass a recurrence too (``g[t] = r[t] + γ g[t+1]`` differentiates into a forward recurrence).

The graph grows by a constant number of ops per forward op and edge, never per point.
The isl side (supports, inverted relations as sympy pieces) is :mod:`timerl.ir.reverse`.
"""

from __future__ import annotations

import sympy

from ..errors import CompileError, ShapeError
from ..ir.expr import Cond
from ..ir.ops import Edge, Op, Slice
from ..ir.reverse import Reverse
from . import ops as O
from .grad_rules import nondiff_reason, stop_edge, vjp
from .tensor import RecurrentTensor



# -- public entry points -----------------------------------------------------------------------


def backward(loss):
    """``loss.backward()``: gradients of ``loss`` for every ``requires_grad`` tensor and parameter.

    They accumulate (a second ``backward`` adds to the first) and are read with ``x.grad``.
    """
    if not isinstance(loss, RecurrentTensor):
        raise TypeError("backward() needs a recurrent tensor")
    if tuple(loss.shape) != ():
        raise ShapeError(f"backward(): loss {loss.name!r} must have shape (), got {tuple(loss.shape)}; "
                         "reduce it first (e.g. loss.mean())")
    pdg = loss.prog.pdg
    targets = [n for n in pdg.nodes if pdg.nodes[n].get("requires_grad")]
    if not targets:
        raise CompileError(f"backward() of {loss.name!r}: no tensor requires a gradient "
                           "(create one with tl.tensor(..., requires_grad=True) or use tl.nn modules)")
    grads = _Backward(loss, [RecurrentTensor(loss.prog, n) for n in targets]).run()
    for n, gt in zip(targets, grads):
        old = pdg.nodes[n].get("grad")
        if old is not None:
            gt = RecurrentTensor(loss.prog, old) + gt
        pdg.nodes[n]["grad"] = gt.nid


def grad(y, xs):
    """``tl.grad(y, [x1, x2])``: the gradient of the sum of ``y`` (over its points and
    elements) with respect to each ``x``, as recurrent tensors over the ``x``'s domains."""
    single = isinstance(xs, RecurrentTensor)
    xs = [xs] if single else list(xs)
    for x in xs:
        if not isinstance(x, RecurrentTensor):
            raise TypeError("tl.grad: differentiate with respect to recurrent tensors")
        if x.out != 0:
            raise CompileError(f"tl.grad: {x.name!r} is an output of a UDF, which has no gradient")
    out = _Backward(y, xs).run()
    return out[0] if single else out


def grad_of(x):
    """``x.grad``: the gradient left by ``backward()``."""
    g = x.prog.pdg.nodes[x.nid].get("grad")
    if g is None:
        raise CompileError(f"tensor {x.name!r} has no gradient yet: call loss.backward() first "
                           "(and create it with requires_grad=True)")
    return RecurrentTensor(x.prog, g)


# -- the backward pass ---------------------------------------------------------------------------


class _Backward:
    def __init__(self, y, xs):
        self.prog = y.prog
        self.pdg = y.prog.pdg
        self.y, self.xs = y, xs
        self._targets = {x.nid for x in xs}
        for x in xs:
            if x.prog is not self.prog:
                raise CompileError(f"tl.grad: {x.name!r} belongs to another program")
        self.rev = Reverse(self.prog, self.pdg)
        self.adj = {}
        self.vjps = {}
        self._dv = {}
        self._bounds = {}
        self._zero = {}

    # which nodes are differentiated ----------------------------------------------------------
    def _gedges(self, c):
        if self.pdg.nodes[c].get("parameter"):
            return []  # a parameter's branches (hold, update) are not differentiated through
        node = self.pdg.rec(c)
        return [(p, e) for p, e in self.pdg.inputs(c) if not stop_edge(node, e.pos)]

    def _path(self):
        fwd, stack = {self.y.nid}, [self.y.nid]
        while stack:
            c = stack.pop()
            for p, _ in self._gedges(c):
                if p not in fwd:
                    fwd.add(p)
                    stack.append(p)
        targets = {x.nid for x in self.xs}
        bwd, stack = set(targets), list(targets)
        while stack:
            p = stack.pop()
            for c, e in self.pdg.consumers(p):
                if c not in bwd and c in fwd and not stop_edge(self.pdg.rec(c), e.pos):
                    bwd.add(c)
                    stack.append(c)
        return fwd & bwd

    def _check_differentiable(self, path):
        for n in sorted(path):
            node = self.pdg.rec(n)
            ins = [p for p, _ in self._gedges(n) if p in path]
            if not ins:
                continue
            why = nondiff_reason(node)
            if why is None and node.dtype.kind != "f":
                why = f"its dtype {node.dtype} is not a float"
            if why is not None:
                src = self.pdg.rec(ins[0]).name
                raise CompileError(
                    f"gradient requested through tensor {node.name!r} ({why}), which is not differentiable: "
                    f"the loss {self.y.name!r} depends on it and it depends on {src!r}, which needs a gradient; "
                    "call .detach() on it where no gradient should flow"
                )

    # run --------------------------------------------------------------------------------------
    def run(self):
        y = self.y
        if y.out != 0:
            raise CompileError(f"cannot differentiate {y.name!r}: it is an output of a UDF")
        if y.dtype.kind != "f":
            raise CompileError(f"cannot differentiate {y.name!r}: its dtype {y.dtype} is not a float")
        path = self._path()
        self._check_differentiable(path)
        cons = {}
        for c in path:
            for p, e in self._gedges(c):
                if p in path:
                    cons.setdefault(p, []).append((c, e))
        self.rev.supports(self.y.nid, path, cons)
        with self.prog:
            for members, cyclic in self.rev.sccs:
                if cyclic:
                    for n in members:
                        node = self.pdg.rec(n)
                        self.adj[n] = O.placeholder(node.shape, node.dtype, node.domain,
                                                    name=f"grad({node.name})")
                for n in members:
                    total = self._total(n, cons.get(n, []))
                    if cyclic:
                        ph = self.adj[n]
                        ph[True] = total
                        self._extend(ph, n)
                    else:
                        self.adj[n] = total
            out = []
            for x in self.xs:
                g = self.adj.get(x.nid)
                if g is None:
                    node = x.node
                    g = O.const(0, shape=node.shape if all(isinstance(s, int) for s in node.shape) else (),
                                dtype=node.dtype, domain=node.domain, name=f"grad({node.name})")
                    if tuple(g.shape) != tuple(node.shape):
                        g = O.broadcast_to(g, node.shape)
                out.append(g)
        return out

    def _total(self, n, consumers):
        node = self.pdg.rec(n)
        parts = []
        if n == self.y.nid:
            parts.append(self._seed())
        for c, e in consumers:
            parts.append(self._pullback(c, e, n))
        parts = [p for p in parts if p is not None]
        if not parts:
            return self._zeros(n)
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        if total.dtype != node.dtype:
            total = O.cast(total, node.dtype)
        return total

    def _strict(self, n) -> bool:
        """Must node ``n``'s adjoint be right at every point of ``n``? Only a requested gradient:
        the adjoint of any other node is read only at its support (the pullbacks read their
        consumer's adjoint restricted to the consumer's support), so where a consumer's vjp covers
        that support it is the adjoint as it is, without a placeholder that is zero at the points
        outside (a learner's loss has points at ``k = K``, where the parameters' final values are,
        and no gradient there)."""
        return n in self._targets

    def _zeros(self, n):
        node = self.pdg.rec(n)
        z = O.const(0, dtype=node.dtype, domain=node.domain)
        return O.broadcast_to(z, node.shape) if node.shape else z

    def _zeros_of(self, node):
        """Zeros of ``node``'s shape and dtype over domain (), shared by every zero branch."""
        key = (tuple(map(str, node.shape)), node.dtype)
        if key not in self._zero:
            z = O.const(0, dtype=node.dtype, name="0")
            self._zero[key] = O.broadcast_to(z, node.shape) if node.shape else z
        return self._zero[key]

    def _seed(self):
        """Ones at the loss's points ``0 <= d < D`` (zero at shift-extension points)."""
        node = self.y.node
        one = O.const(1, dtype=node.dtype, domain=node.domain)
        one = O.broadcast_to(one, node.shape) if node.shape else one
        cond = self.rev.seed_cond(self.y.nid, strict=self._strict(self.y.nid))
        if cond is None:
            return one
        ph = O.placeholder(node.shape, node.dtype, node.domain, name=f"grad({node.name})")
        ph[Cond(cond)] = one
        ph[True] = self._zeros_of(node)
        self._extend(ph, self.y.nid)
        return ph

    def _extend(self, ph, n):
        """Give placeholder ``ph`` the shift-extension points of node ``n`` (a zero branch that
        never applies, after the catch-all, makes them points of ``ph``)."""
        node = self.pdg.rec(n)
        for d, iv in zip(node.domain, self.rev.box(n)):
            if iv is None:
                continue
            ext = sympy.simplify(iv[1] - d.bound.e)
            if not ext.is_Integer or int(ext) < 0:
                raise CompileError(f"autodiff: cannot match the points of {node.name!r} along {d.name} ({iv[1]})")
            if int(ext) > 0:
                key = tuple(dd + int(ext) if dd is d else dd for dd in node.domain)
                ph[key] = self._zeros_of(node)

    # vector-Jacobian products ------------------------------------------------------------------
    def _vjp(self, c, e):
        key = (c, e.pos)
        if key in self.vjps:
            return self.vjps[key]
        node = self.pdg.rec(c)
        g = self.adj[c]
        if node.op in (Op.ACCESS, Op.MERGE):
            v = g
        else:
            ins = [RecurrentTensor(self.prog, p, ed.out) for p, ed in self.pdg.inputs(c)]
            out = RecurrentTensor(self.prog, c)
            v = vjp(node, e.pos, g, ins, out)
            pnode = self.pdg.rec(ins[e.pos].nid)
            if v.dtype != pnode.dtype:
                v = O.cast(v, pnode.dtype)
        if tuple(v.domain) != tuple(node.domain):
            v = v + O.const(0, dtype=v.dtype, domain=node.domain)
        self.vjps[key] = v
        return v

    # pulling a consumer's vjp back to the producer's points ----------------------------------------
    def _pullback(self, c, e, p):
        cnode, pnode = self.pdg.rec(c), self.pdg.rec(p)
        got = self.rev.pieces(c, e.pos, p, strict=self._strict(p))
        if got is None:
            return None
        covers, pieces = got
        V = self._vjp(c, e)
        slices = [(k, ent) for k, ent in enumerate(e.index) if isinstance(ent, Slice)] if cnode.op is Op.ACCESS else []
        W = self._pad(V, cnode, pnode, slices, p)
        values = [(cond, self._piece(W, cnode, pnode, slices, rng)) for cond, rng in pieces]
        if covers and values[0][1] is V and tuple(V.domain) == tuple(pnode.domain):
            return V
        ph = O.placeholder(pnode.shape, pnode.dtype, pnode.domain, name=f"grad({pnode.name})")
        for cond, val in values:
            ph[Cond(cond) if cond is not sympy.true else True] = val
        ph[True] = self._zeros_of(pnode)
        self._extend(ph, p)
        return ph

    def _piece(self, W, cnode, pnode, slices, rng):
        """The sum over one piece's consumer points of the consumer's vjp at this producer point."""
        entries, n_int = [], 0
        for d, (lo_e, hi_e) in zip(cnode.domain, rng):
            bad = {s for s in (lo_e.free_symbols | hi_e.free_symbols)
                   if s != d.e and s not in self.prog._sym_to_bound}
            if bad:
                raise CompileError(
                    f"autodiff: the reverse of the read of {pnode.name!r} by {cnode.name!r} couples dim "
                    f"{d.name} with {', '.join(sorted(map(str, bad)))}; this access pattern is not supported"
                )
            if sympy.simplify(hi_e - lo_e) == 0:
                entries.append(lo_e)
            else:
                entries.append(Slice(lo_e, hi_e + 1))
                n_int += 1
        A = self._access(W, entries)
        # the element of each read slice that is this producer point (last axis first)
        for s_k in reversed(range(len(slices))):
            k, ent = slices[s_k]
            d = pnode.domain[k]
            pos = self._dim_node(d)
            if d not in cnode.domain:
                start = self._expr(ent.start, {})
                pos = pos - start
            A = O.take(A, pos, axis=n_int + s_k)
        if n_int:
            A = A.sum(axis=tuple(range(n_int)))
        return A

    def _access(self, W, entries):
        if all(not isinstance(en, Slice) and sympy.sympify(en) == d.e for en, d in zip(entries, W.domain)):
            return W
        kept, lengths = [], []
        for en, d in zip(entries, W.domain):
            syms = (en.start.free_symbols | en.stop.free_symbols) if isinstance(en, Slice) else en.free_symbols
            if d.e in syms:
                kept.append(d)
            if isinstance(en, Slice):
                L = sympy.simplify(sympy.Max(0, en.stop - en.start))
                lengths.append(int(L) if L.is_Integer else L)
        shape = tuple(lengths) + tuple(W.shape)
        nid = self.prog.add(Op.ACCESS, tuple(kept), [shape], [W.dtype],
                            inputs=[(W.nid, Edge(pos=0, out=W.out, index=tuple(entries)))],
                            name=f"{W.name}[{', '.join(map(str, entries))}]")
        return RecurrentTensor(self.prog, nid)

    def _pad(self, V, cnode, pnode, slices, p):
        """Pad each variable-slice axis of ``V`` to the producer's whole range along its dim, so
        the element for producer point ``d`` sits at position ``d`` at every consumer point."""
        for s_k, (k, ent) in enumerate(slices):
            d = pnode.domain[k]
            if d not in cnode.domain:
                continue
            box = self.rev.box(p)[k]
            H = d.bound.e if box is None else sympy.simplify(box[1])
            jv = self._access(self._dim_node(d), [Slice(sympy.Integer(0), H)])
            lo = self._expr(ent.start, {d.e: self._dim_node(d)})
            hi = self._expr(ent.stop, {d.e: self._dim_node(d)})
            idx = O.maximum(O.minimum(jv - lo, hi - lo - 1), 0)
            mask = (jv >= lo) & (jv < hi)
            Wk = O.take(V, idx, axis=s_k)
            rest = Wk.ndim - s_k - 1
            mask = O.reshape(mask, tuple(mask.shape) + (1,) * rest) if rest else mask
            V = O.where(mask, Wk, O.const(0, dtype=V.dtype))
        return V

    # index expressions as tensors -----------------------------------------------------------------
    def _dim_node(self, d):
        if d.name not in self._dv:
            self._dv[d.name] = O.dim_value(d, name=f"dim_value({d.name})")
        return self._dv[d.name]

    def _bound(self, b):
        if b.name not in self._bounds:
            # the value of a bound as a tensor: dim_value(d) at D - 1, plus one
            self._bounds[b.name] = bound_value(b)
        return self._bounds[b.name]

    def _expr(self, e, env):
        e = sympy.sympify(e)
        if e.is_Integer:
            return O.const(int(e), dtype="int64")
        if isinstance(e, sympy.Symbol):
            if e in env:
                return env[e]
            if e in self.prog._sym_to_bound:
                return self._bound(self.prog._sym_to_bound[e])
            if e in self.prog._sym_to_dim:
                return self._dim_node(self.prog._sym_to_dim[e])
        if isinstance(e, sympy.Add):
            out = None
            for a in e.args:
                t = self._expr(a, env)
                out = t if out is None else out + t
            return out
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            if coeff.is_Integer:
                return int(coeff) * self._expr(rest, env)
        if isinstance(e, (sympy.Min, sympy.Max)):
            f = O.minimum if isinstance(e, sympy.Min) else O.maximum
            out = self._expr(e.args[0], env)
            for a in e.args[1:]:
                out = f(out, self._expr(a, env))
            return out
        raise CompileError(f"autodiff: slice bound {e} is not supported in a gradient (use +, -, *, min, max)")




def bound_value(b):
    """The value of bound ``b`` as an int64 tensor of domain (): ``dim_value(d)`` at ``D - 1``, plus 1."""
    dv = O.dim_value(b.dim, name=f"dim_value({b.dim.name})")
    nid = b.dim.program.add(Op.ACCESS, (), [()], [dv.dtype],
                            inputs=[(dv.nid, Edge(pos=0, out=0, index=(b.e - 1,)))], name=f"{b.name} - 1")
    return RecurrentTensor(b.dim.program, nid) + 1


__all__ = ["backward", "bound_value", "grad", "grad_of"]
