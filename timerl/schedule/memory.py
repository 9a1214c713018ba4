"""The memory plan, folded into the schedule: frees and donation.

Every stored point of a node gets a free statement ``F<n>[x]`` placed at the time of
its last reader under the computed schedule (the lexicographic maximum of its
readers' times: after every reader, and as early as that allows), with the trailing
time dim set past the reader's execution. Donation: a ``donor`` op (registry traits) may
write its result into an ``owning`` operand's buffer when, under the schedule, it is that
point's last reader (checked with isl for every instance), shapes and dtypes agree, and
every reader of the buffer is ``non_aliasing``.

Storage (:func:`storage_plan`): from the pairs of points each node holds live together
(:class:`LivePairs`), a block or ring for nodes read by slices (:func:`storage_kinds`), one array
when it never holds two blocks (:func:`single_blocks`), and a slot or cells addressed by an
integer for the others (:func:`slot_nodes`).
"""

from __future__ import annotations

import dataclasses

import islpy as isl
import numpy as np
import sympy

from ..ir import registry
from ..ir.ops import Op, Slice, is_basis
from ..ir.polyhedral import sample, stmt
from .model import access_g


def free_name(n) -> str:
    return f"F{n}"


def _ndims(T: isl.UnionMap) -> int:
    out = []
    T.foreach_map(lambda m: out.append(m.dim(isl.dim_type.out)))
    return out[0]


def _set_last(prog, n, k):
    a = ", ".join(f"a{j}" for j in range(n))
    b = ", ".join([f"a{j}" for j in range(n - 1)] + [str(k)])
    return isl.UnionMap(f"{{ [{a}] -> [{b}] }}")


def last_reads(prog, pdg, analysis, problem, T, views=None, only=None) -> dict:
    """node -> isl.Map ``S<n>[x] -> time of its last reader`` (stored nodes with readers).

    ``views`` (:func:`views`): a node whose stored value shares an operand's buffer keeps that
    buffer alive, so its readers count as readers of the operand's points it covers (through
    views of views too): the operand is freed after them, and no op is handed its buffer
    while a view of it lives. ``only``: compute these nodes' only."""
    views = views or {}
    out = {}
    for p in problem.of if only is None else only:
        if pdg.rec(p).op is Op.SINK:
            continue
        rt = None
        for a in reader_maps(pdg, analysis, problem, p, views):
            u = isl.UnionMap.from_map(a.intersect_range(analysis.demand[p]).reverse()).apply_range(T)
            rt = u if rt is None else rt.union(u)
        if rt is None or rt.is_empty():
            continue
        ms = []
        rt.lexmax().foreach_map(ms.append)
        (out[p],) = ms
    return out


def reader_maps(pdg, analysis, problem, p, views, depth=0):
    """``{ S<reader's group>[y] -> S<p>[x] }`` maps: what each reader of ``p`` reads, and what the
    readers of each view of ``p`` read of ``p`` through it."""
    maps = []
    for c, e in pdg.consumers(p):
        if c not in problem.of:
            continue
        maps.append(access_g(analysis, problem.of, c, p, e.pos))
        if views.get(c) and depth < 16:
            through = analysis.model.access(c, p, e.pos).intersect_domain(analysis.demand[c])
            maps += [a.apply_range(through) for a in reader_maps(pdg, analysis, problem, c, views, depth + 1)]
    return maps


#: movement ops whose numpy rule returns a view of the operand (reshape of a contiguous array,
#: transpose, broadcast, basic indexing)
VIEW_OPS = (Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SLICE)


def views(pdg, problem, kinds) -> dict:
    """Stored node -> True when its value shares its operands' buffers instead of owning one:
    an access or a placeholder's branch reading a point (the stored array itself; a ring's row
    is a copy) or a slice of a block (rows of the block's array; a ring's or a table's slices are
    copies), and a movement op of :data:`VIEW_OPS` (evaluated by numpy; a statement kernel's
    reshape of one of its operands too, :func:`timerl.runtime.lowered.lower`). It costs no bytes of its own; its
    readers keep the operands' buffers alive (:func:`last_reads`). A node kept in a block or ring
    owns its rows (they are copies)."""
    out = {}
    for c in problem.of:
        node = pdg.rec(c)
        if c in kinds and kinds[c].kind != "points":
            continue
        ins = pdg.inputs(c)
        if not ins or len(node.shapes) != 1:
            continue
        if node.op in (Op.ACCESS, Op.MERGE):
            ok = True
            for p, e in ins:
                st = kinds.get(p)
                if p not in problem.of or len(pdg.rec(p).shapes) > 1:
                    ok = False  # one output of several: a buffer of its own (the others go with the node)
                elif any(isinstance(x, Slice) for x in e.index):
                    ok = ok and st is not None and st.kind == "block"
                else:
                    ok = ok and (st is None or st.kind != "circular")
        elif node.op in VIEW_OPS:  # the lowering keeps those the backend computes as views
            (p, _), = ins
            ok = p in problem.of
        else:
            ok = False
        if ok:
            out[c] = True
    return out


def view_lifetimes(prog, pdg, analysis, problem, T, last: dict, storage="default"):
    """``(views, last)``: the views (:func:`views`, under the storage kinds ``last`` gives) and the
    last readers with each view's readers counted as its operands' (:func:`last_reads`).

    A base whose longer life would cost it its slot, cells or single array (a recurrence whose
    next value is a view of this one, Adam's ``p[k + 1]``) gives up first its views of one point
    (a row read as it is, ``o[i - 1, T]`` read by ``o[i, 0]``), then all of them: it keeps its own
    life, and those readers count their bytes."""
    live0 = LivePairs(analysis, problem, T, last, [])
    kinds0 = storage_kinds(pdg, analysis, problem, live0, storage)
    vs = views(pdg, problem, kinds0)
    bases = sorted({p for c in vs for p, _ in pdg.inputs(c)})
    if not bases:
        return vs, last
    ext = last_reads(prog, pdg, analysis, problem, T, vs, only=bases)

    def degrades(p):
        live1 = LivePairs(analysis, problem, T, {p: ext[p]}, [])
        if live0.along(p) is not None and live1.along(p) is None:
            return True
        own = {p: kinds0[p]} if p in kinds0 else {}
        return bool(single_blocks(live0, own) - single_blocks(live1, own))

    for p in bases:
        if p not in last or p not in ext or ext[p].is_equal(last[p]) or not degrades(p):
            continue
        mine = [(c, e) for c, e in pdg.consumers(p) if c in vs]
        points = [c for c, e in mine if pdg.rec(c).op in (Op.ACCESS, Op.MERGE)
                  and not any(isinstance(x, Slice) for x in e.index)]
        if points and len(points) < len(mine):
            for c in points:
                vs.pop(c, None)
            ext[p] = last_reads(prog, pdg, analysis, problem, T, vs, only=[p]).get(p, last[p])
            if not degrades(p):
                continue
        for c, _ in mine:
            vs.pop(c, None)
        ext[p] = last[p]
    return vs, {**last, **ext}


def inline_frees(pdg, analysis, problem, T, last: dict) -> dict:
    """group id -> nodes freed right after that group's execution at the same point.

    When the last reader of every point ``x`` of ``n`` is the instance of one group at
    the same point ``x`` (typical of values used within a statement), the free needs no
    statement of its own: it is the tail of that execution. The others become isl
    statements (:func:`free_maps`).
    """
    rev = T.reverse()
    byname = {g.name: g for g in problem.groups}
    out = {}
    for p, m in last.items():
        who = isl.UnionMap.from_map(m).apply_range(rev)
        maps = []
        who.foreach_map(maps.append)
        if len(maps) != 1:
            continue
        g = byname[maps[0].get_tuple_name(isl.dim_type.out)]
        if not pdg.rec(p).domain:
            # one point, freed after one instance: a guarded tail of that execution
            rng = maps[0].range()
            if rng.is_singleton():
                out.setdefault(g.gid, []).append((p, sample(rng)))
            continue
        if g.domain != pdg.rec(p).domain:
            continue
        # only where the reader's statement runs exactly at p's points (else the tail would
        # free points p never had)
        if not analysis.demand[p].set_tuple_name(g.name).is_equal(analysis.demand[g.gid].set_tuple_name(g.name)):
            continue
        same = analysis.demand[p].identity().set_tuple_name(isl.dim_type.out, g.name)
        if maps[0].is_equal(same):
            out.setdefault(g.gid, []).append((p, None))
    return out


def free_maps(prog, pdg, analysis, problem, T, last: dict) -> list:
    """The free statements' schedule: ``F<n>[x] -> (last reader time..., 1 + k)``."""
    n = _ndims(T)
    maps = []
    for k, (p, m) in enumerate(sorted(last.items())):
        f = isl.UnionMap.from_map(m).apply_range(_set_last(prog, n, 1 + k))
        fm = []
        f.foreach_map(fm.append)
        for x in fm:
            maps.append(x.set_tuple_name(isl.dim_type.in_, free_name(p)))
    return maps


def donations(prog, pdg, analysis, problem, T, last: dict) -> dict:
    """consumer node -> operand position whose buffer it may write its result into."""
    out = {}
    tm = {}
    T.foreach_map(lambda m: tm.__setitem__(m.get_tuple_name(isl.dim_type.in_), m))
    order = {n: k for g in problem.groups for k, n in enumerate(g.members)}
    for c in problem.of:
        node = pdg.rec(c)
        if not registry.of(node).has("donor"):
            continue
        if not all(isinstance(s, int) for s in node.shape) or len(node.shape) == 0:
            continue
        for p, e in pdg.inputs(c):
            pn = pdg.rec(p)
            if p not in last or not registry.op(pn.op).has("owning") or pn.domain != node.domain:
                continue
            if tuple(pn.shapes[e.out]) != tuple(node.shape) or np.dtype(pn.dtypes[e.out]) != np.dtype(node.dtype):
                continue
            if not is_basis(e, pn.domain):
                continue
            readers = [q for q, _ in pdg.consumers(p) if q in problem.of]
            if not all(registry.op(pdg.rec(q).op).has("non_aliasing") for q in readers):
                continue
            # another reader in the same group at the same point that runs after c
            if any(q != c and problem.of.get(q) == problem.of[c] and order[q] > order[c]
                   for q, _ in pdg.consumers(p)):
                continue
            a = access_g(analysis, problem.of, c, p, e.pos)
            when = isl.UnionMap.from_map(a).apply_range(isl.UnionMap.from_map(last[p]))
            mine = isl.UnionMap.from_map(tm[stmt(problem.of[c])]).intersect_domain(
                isl.UnionSet.from_set(analysis.demand[c].set_tuple_name(stmt(problem.of[c]))))
            if when.is_equal(mine):
                out[c] = e.pos
                break
    return out


# -- storage kinds --------------------------------------------------------------------------

STORAGE_MODES = ("default", "block", "points")


@dataclasses.dataclass
class Storage:
    """How the points of one tensor are stored (nodes without an entry: a dict of points)."""

    node: int
    name: str
    kind: str  # "block" | "circular" | "points"
    pos: int = -1  # domain position of the dim the block runs along
    dim: str = ""
    lo: int = 0  # first index along that dim
    length: int = 0  # block length (block) or slots (circular)
    shape: tuple = ()
    dtype: str = ""
    why: str = ""
    outs: tuple = ()  # ((shape, dtype), ...) per output of the node (a UDF may have several)

    def header(self) -> str:
        head = f"store S{self.node} {self.name!r}: "
        if len(self.outs) > 1:  # several outputs: each output's shape and dtype
            each = ", ".join(f"{sh} {dt}" for sh, dt in self.outs)
            if self.kind == "block":
                return head + f"block along {self.dim} ({self.length} x [{each}])"
            if self.kind == "circular":
                return head + f"circular along {self.dim}, {self.length} slots x [{each}]"
        if self.kind == "block":
            return head + f"block along {self.dim} ({self.length} x {self.shape}) {self.dtype}"
        if self.kind == "circular":
            return head + f"circular along {self.dim}, {self.length} slots x {self.shape} {self.dtype}"
        return head + "points" + (f" ({self.why})" if self.why else "")


def _bounds_of(e):
    """Candidate bounds of a slice end: the args of a min/max, else the end itself."""
    e = sympy.sympify(e)
    return list(e.args) if isinstance(e, (sympy.Min, sympy.Max)) else [e]


def _windowed(sl) -> bool:
    """A slice whose length is at most a constant (``t:t+n``, ``t-n:t``, ``t:min(t+n, T)``)."""
    return any((u - lo).is_Integer for u in _bounds_of(sl.stop) for lo in _bounds_of(sl.start))


def _renamed_domain(um, name):
    maps = []
    um.foreach_map(lambda m: maps.append(m.set_tuple_name(isl.dim_type.in_, name)))
    out = isl.UnionMap.from_map(maps[0])
    for m in maps[1:]:
        out = out.union(isl.UnionMap.from_map(m))
    return out


def storage_kinds(pdg, analysis, problem, live, mode="default") -> dict:
    """node -> :class:`Storage` for every stored node read by slices.

    Slices along one dim ``d`` (every slice read of the node slices the same dim, no
    other): a block store along ``d``, or, when every slice has a constant length and
    the schedule never holds points further apart than the ring along ``d`` (computed
    with isl from write and free times), a circular buffer of that many slots. Mode
    ``"block"`` never picks a ring, ``"points"`` keeps every node a point store (the
    alternatives ``memory_budget`` tries).
    """
    out = {}
    for p in problem.of:
        node = pdg.rec(p)
        slices = [(e.index, c) for c, e in pdg.consumers(p) if c in problem.of
                  and pdg.rec(c).op in (Op.ACCESS, Op.MERGE) and any(isinstance(x, Slice) for x in e.index)]
        if not slices:
            continue
        st = Storage(p, node.name, "points")
        out[p] = st
        dims = {k for idx, _ in slices for k, x in enumerate(idx) if isinstance(x, Slice)}
        if mode == "points":
            st.why = "alternative tried for memory_budget"
            continue
        if node.op is Op.SINK or not all(isinstance(s, int) for shape in node.shapes for s in shape):
            st.why = "outputs of dynamic shape"
            continue
        if len(dims) != 1:
            st.why = "slices along several dims"
            continue
        if p not in live.last:
            st.why = "never freed"
            continue
        (pos,) = dims
        dem = analysis.demand[p].intersect_params(problem.ctx)
        lo, hi = dem.dim_min_val(pos), dem.dim_max_val(pos)
        if not (lo.is_int() and hi.is_int()):
            st.why = "unbounded along the sliced dim"
            continue
        st.kind, st.pos, st.dim = "block", pos, node.domain[pos].name
        st.lo, st.length = lo.to_python(), hi.to_python() - lo.to_python() + 1
        st.shape, st.dtype = tuple(node.shape), str(np.dtype(node.dtype))
        st.outs = tuple((tuple(sh), str(np.dtype(dt))) for sh, dt in zip(node.shapes, node.dtypes))
        if mode == "default" and all(_windowed(idx[pos]) for idx, _ in slices):
            n = live.ring(p, pos)
            if n is not None and n < st.length:
                st.kind, st.length = "circular", n
    return out


class LivePairs:
    """The pairs of points of each stored node that the schedule holds together: ``x -> y``,
    ``x != y``, with ``W(x) <= W(y) <= F(x)`` (``y`` written between ``x``'s write and its free),
    computed with isl once per node and read by every storage decision (a ring's length, a
    slot, cells, a block array)."""

    def __init__(self, analysis, problem, T, last: dict, free_stmts: list):
        self.analysis, self.problem, self.T, self.last = analysis, problem, T, last
        self.frees = {}
        for m in free_stmts:
            p = int(m.get_tuple_name(isl.dim_type.in_)[1:])
            u = isl.UnionMap.from_map(m)
            self.frees[p] = u if p not in self.frees else self.frees[p].union(u)
        self._deltas = {}

    def deltas(self, p):
        """``{y - x}`` over the pairs (an isl set over ``p``'s domain), or None when there are none."""
        if p not in self._deltas:
            a, pr = self.analysis, self.problem
            dem = a.demand[p].set_tuple_name(stmt(pr.of[p]))
            W = _renamed_domain(self.T.intersect_domain(isl.UnionSet.from_set(dem)), "X")
            F = _renamed_domain(self.frees[p] if p in self.frees else isl.UnionMap.from_map(self.last[p]), "X")
            C = W.lex_le_union_map(W).intersect(W.lex_le_union_map(F).reverse())
            C = C.subtract(isl.UnionSet.from_set(a.demand[p].set_tuple_name("X")).identity())
            C = C.intersect_params(pr.ctx)
            self._deltas[p] = None if C.is_empty() else isl.Set.from_union_set(C.deltas())
        return self._deltas[p]

    def ring(self, p, pos):
        """Least ring length along dim ``pos`` so that no point of ``p`` is written while one that
        many steps away along ``pos`` (same other coordinates) is live; None if unbounded."""
        d = self.deltas(p)
        if d is None:
            return 1
        for k in range(d.dim(isl.dim_type.set)):
            if k != pos:
                d = d.fix_val(isl.dim_type.set, k, 0)
        return 1 if d.is_empty() else _spread(d, pos)

    def along(self, p):
        """``(pos, n)``: every pair differs along dim ``pos`` only, by less than ``n``; ``(-1, 1)``:
        no pairs; None: pairs differ along several dims (or without bound)."""
        d = self.deltas(p)
        if d is None:
            return (-1, 1)
        for pos in range(d.dim(isl.dim_type.set)):
            if _along(d, pos):
                n = _spread(d, pos)
                return None if n is None else (pos, n)
        return None


def _spread(d, pos):
    """``max |v[pos]| + 1`` over the set ``d``, None if unbounded."""
    hi, lo = d.dim_max_val(pos), d.dim_min_val(pos)
    if not (hi.is_int() and lo.is_int()):
        return None
    return max(hi.to_python(), -lo.to_python()) + 1


def _along(d, pos) -> bool:
    """Every vector of the set ``d`` is zero outside coordinate ``pos``."""
    along = d
    for k in range(d.dim(isl.dim_type.set)):
        if k != pos:
            along = along.fix_val(isl.dim_type.set, k, 0)
    return d.is_subset(along)


def slot_nodes(pdg, problem, live, inline: dict, kinds: dict) -> dict:
    """Point stores addressed by an integer: node -> ``(pos, n)``, the node's live points kept in
    ``n`` slots indexed by the point's coordinate ``pos`` modulo ``n`` (``n == 1``: one slot,
    no index; ``pos`` is then -1).

    No pair of points live together (:class:`LivePairs`): one slot. Every pair differs along one
    dim only, by at most ``n - 1``: ``n`` slots along it never hold two live points. A value read
    only by its own statement at its own point (freed at the tail of that execution) needs no
    check, nor does a node of one point. Nodes read by slices keep their storage kind; a node
    never freed, and one whose live points differ along several dims, keeps a table of points.
    """
    own = {p for gid, ns in inline.items() for p, at in ns if at is None and problem.of.get(p) == gid}
    out = {}
    for p in problem.of:
        node = pdg.rec(p)
        if node.op is Op.SINK or p in kinds:
            continue
        if not node.domain or p in own:
            out[p] = (-1, 1)
        elif p in live.last:
            got = live.along(p)
            if got is not None:
                out[p] = got
    return out


def single_blocks(live, kinds: dict) -> set:
    """Block stores and circular buffers that never hold two blocks at once: every pair of
    points live together differs only along the block's dim. Each is one array addressed by
    that coordinate, with no table of blocks."""
    out = set()
    for p, st in kinds.items():
        if st.kind in ("block", "circular") and p in live.last:
            d = live.deltas(p)
            if d is None or _along(d, st.pos):
                out.add(p)
    return out


def storage_plan(pdg, analysis, problem, live, inline: dict, mode="default"):
    """``(kinds, slots, single)``: :func:`storage_kinds`, :func:`slot_nodes`, :func:`single_blocks`."""
    kinds = storage_kinds(pdg, analysis, problem, live, mode)
    return kinds, slot_nodes(pdg, problem, live, inline, kinds), single_blocks(live, kinds)
