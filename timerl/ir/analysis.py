"""Demand-driven domains and validation with isl.

:func:`analyze` finds what every live node must compute (its *demanded* points,
propagated backwards from sinks and parameter updates through the access relations)
and checks the program: reads outside a producer's points, points with no branch,
and cycles of reads that no order can compute.

Inside a cycle of tensors (a strongly connected part of the PDG) demand is a worklist
fixpoint over isl sets (a small loop being peeled one point a round is closed with isl's
transitive closure instead: :func:`_widen`), and the existence of an order is decided by the cheapest test
that settles it: loops over the program dims (each ascending or descending), then isl's
scheduler, then a depth-first search over the finite points under the bounds.
"""

from __future__ import annotations

import dataclasses
import time

import islpy as isl
import networkx as nx
import sympy

from ..errors import CompileError
from .expr import symbols_of
from .ops import Op, Slice
from .polyhedral import Model, fmt_point, sample


@dataclasses.dataclass
class Analysis:
    model: Model
    live: list  # node ids that something demands, in creation order
    demand: dict  # node id -> isl.Set of demanded points
    seconds: float = 0.0


def live_nodes(pdg) -> set:
    roots = pdg.roots()
    live = set(roots)
    for r in roots:
        live |= nx.descendants(pdg, r)
    return live


def required_bounds(prog, pdg, live) -> dict:
    """Bound name -> the first tensor that needs it."""
    need = {}
    names = {b.e: b.name for b in prog.bounds}
    for n in sorted(live):
        node = pdg.rec(n)
        for d in node.domain:
            need.setdefault(d.bound.name, node.name)
        syms = set()
        for _, e in pdg.inputs(n):
            for ent in e.index:
                syms |= symbols_of(ent.start) | symbols_of(ent.stop) if isinstance(ent, Slice) else symbols_of(ent)
            if e.cond is not None:
                syms |= symbols_of(e.cond)
        for shp in node.shapes:
            for s in shp:
                if not isinstance(s, int):
                    syms |= symbols_of(s)
        for s in syms:
            if s in names:
                need.setdefault(names[s], node.name)
    return need


def resolve_bounds(prog, pdg, bounds: dict, live) -> dict:
    """Check the user's bounds: known keys, positive ints, every needed bound present."""
    out = {}
    for k, v in bounds.items():
        if hasattr(k, "dim") and hasattr(k, "name") and k.dim.program is not prog:
            raise CompileError(f"bound {k.name} in compile(bounds=...) belongs to another tl.Program; use this "
                               f"program's bounds ({', '.join(b.name for b in prog.bounds)}) or their names")
        if hasattr(k, "bound") and hasattr(k, "program"):
            raise CompileError(f"compile(bounds=...) is keyed by bounds, not dims: write {k.bound.name} (or "
                               f"{k.bound.name!r}) instead of {k.name}")
        name = k.name if hasattr(k, "name") and hasattr(k, "dim") else k
        if not isinstance(name, str) or name not in {b.name for b in prog.bounds}:
            raise CompileError(
                f"unknown bound {k!r} in compile(bounds=...); the program's bounds are "
                f"{', '.join(b.name for b in prog.bounds)}"
            )
        if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__") or int(v) <= 0:
            raise CompileError(f"bound {name} must be a positive int, got {v!r}")
        out[name] = int(v)
    for name, who in required_bounds(prog, pdg, live).items():
        if name not in out:
            raise CompileError(f"bound {name} is required (tensor {who!r} needs it); pass bounds={{{name!r}: ...}}")
    for n in live:
        node = pdg.rec(n)
        if node.op is Op.DATA:
            arr = node.attrs["array"]
            for k, d in enumerate(node.domain):
                if arr.shape[k] != out[d.bound.name]:
                    raise CompileError(
                        f"tensor {node.name!r}: its data has length {arr.shape[k]} along dim {d.name} but "
                        f"bound {d.bound.name} = {out[d.bound.name]}; data must have exactly the points "
                        f"0..{d.bound.name}-1"
                    )
    return out


def _edges_into(pdg, live, n):
    return [(c, e) for c, e in pdg.consumers(n) if c in live]


def _image(model, c, p, e, dem_c):
    return dem_c.apply(model.access(c, p, e.pos))


def analyze(prog, pdg, bounds: dict, extra_seeds: dict | None = None) -> Analysis:
    t0 = time.perf_counter()
    live = live_nodes(pdg)
    model = Model(prog, pdg, bounds)
    seeds = {n: model.box_set(n) for n in pdg.roots()}
    for n, s in (extra_seeds or {}).items():
        seeds[n] = seeds[n].union(s) if n in seeds else s
    sub = pdg.subgraph(live)
    cond = nx.condensation(sub)
    demand: dict = {}
    for scc in nx.topological_sort(cond):
        members = cond.nodes[scc]["members"]
        incoming = {}
        for n in members:
            s = seeds.get(n, model.points(n).subtract(model.points(n)))
            for c, e in _edges_into(pdg, live, n):
                if c not in members:
                    s = s.union(_image(model, c, n, e, demand[c]))
            incoming[n] = s.coalesce()
        cyclic = len(members) > 1 or sub.has_edge(next(iter(members)), next(iter(members)))
        if not cyclic:
            demand.update(incoming)
        else:
            demand.update(_demand_cycle(model, pdg, live, members, incoming))
        for n in members:
            _check_reads(model, pdg, live, n, demand)
    for n in live:
        if pdg.rec(n).op is Op.MERGE:
            _check_branches(model, pdg, n, demand[n])
        _check_shapes(model, pdg, n, demand[n], bounds)
    return Analysis(model, sorted(live), demand, time.perf_counter() - t0)


def _intra(model, pdg, live, members):
    um = None
    for c in members:
        for p, e in pdg.inputs(c):
            if p in members:
                m = isl.UnionMap.from_map(model.access(c, p, e.pos))
                um = m if um is None else um.union(m)
    return um


def _demand_cycle(model, pdg, live, members, incoming):
    """Demand inside a cycle of tensors: the greatest subset of their points that is closed
    under "demanded from outside, or read by a demanded point" (a worklist fixpoint that
    starts from all points and removes what nothing reads; no transitive closure of the whole
    cycle, whose cost explodes on whole RL programs, but of a small loop of nodes whose demand
    keeps shrinking, a dead chain the worklist would peel one point a round: :func:`_widen`).
    It differs from the least such set only by points on cycles of point reads, which the
    order check then reports."""
    dem = {n: model.points(n) for n in members}
    readers = {n: [(c, e) for c, e in _edges_into(pdg, live, n) if c in members] for n in members}
    producers = {n: {p for p, _ in pdg.inputs(n) if p in members} for n in members}
    work = set(members)
    changes = dict.fromkeys(members, 0)
    while work:
        n = min(work)
        work.discard(n)
        s = incoming[n]
        for c, e in readers[n]:
            s = s.union(_image(model, c, n, e, dem[c]))
        s = s.intersect(dem[n]).coalesce()
        if not s.is_equal(dem[n]):
            dem[n] = s
            work |= producers[n]
            changes[n] += 1
            if changes[n] % WIDEN_AFTER == 0:
                work |= _widen(model, readers, producers, members, incoming, dem, changes, n)
    if _dim_order(model, pdg, members, dem):
        return dem
    R = _intra(model, pdg, live, members)
    if not _has_affine_order(dem, R):
        # no affine order; a valid point order may still exist: decide on the finite points
        dem = _point_demand(model, pdg, members, dem, incoming)
    return dem


#: a node of a cycle whose demand has shrunk this many times is on a chain being peeled one point a
#: round (:func:`_widen`)
WIDEN_AFTER = 4
#: the largest loop of nodes :func:`_widen` closes with isl (the closure of a whole RL program's
#: reads is what the worklist avoids)
WIDEN_NODES = 8


def _widen(model, readers, producers, members, incoming, dem, changes, n) -> set:
    """Shrink a peeled loop's demand in one step; returns the nodes to revisit.

    Starting from all points, the worklist removes a dead chain of point reads one point a round:
    a running sum along ``t`` in a training iteration whose update nothing reads (the last one)
    loses its point at ``T - 1``, then ``T - 2``, ... (n-step REINFORCE at T = 1000: 1,000 rounds
    around its three-node loop, 2 s of its compile). ``L``, the nodes of ``members`` that shrank
    again and again and read each other in a loop through ``n``, is small: the points of ``L``
    that anything needs are those demanded from outside ``L`` (``incoming`` and the images of the
    current demand of readers outside ``L``) and whatever reaches them by reads inside ``L``, i.e.
    that base under the transitive closure of ``L``'s access relations (isl's closure of a few
    maps, exact or an over-approximation: either keeps every needed point). Each node's demand
    is intersected with that set. The result is still a fixpoint between the least and the
    greatest one (the worklist goes on from it); it drops only points on cycles of point reads
    inside ``L`` that nothing outside reads."""
    busy = {m for m in members if changes[m] >= WIDEN_AFTER // 2}
    g = nx.DiGraph()
    g.add_nodes_from(busy)
    g.add_edges_from((c, m) for m in busy for c, _ in readers[m] if c in busy)
    L = next(c for c in nx.strongly_connected_components(g) if n in c)
    if (len(L) < 2 and not g.has_edge(n, n)) or len(L) > WIDEN_NODES:
        return set()
    R = base = None
    for m in L:
        b = incoming[m]
        for c, e in readers[m]:
            if c in L:  # a read inside the loop: its relation, closed below
                a = isl.UnionMap.from_map(model.access(c, m, e.pos))
                R = a if R is None else R.union(a)
            else:  # a reader outside: what its current demand reads
                b = b.union(_image(model, c, m, e, dem[c]))
        b = isl.UnionSet.from_set(b)
        base = b if base is None else base.union(b)
    closure, _ = R.transitive_closure()  # inexact: an over-approximation, which keeps every needed point
    need = base.union(base.apply(closure)).coalesce()
    out = set()
    for m in L:
        s = need.extract_set(dem[m].get_space()).intersect(dem[m]).coalesce()
        if not s.is_equal(dem[m]):
            dem[m] = s
            out |= producers[m] | {m}
        changes[m] = 0
    return out


def _cycle_msg(names, at=""):
    uniq = list(dict.fromkeys(names))
    return (
        "a cycle of reads has no order in which every point is computed before it is read; "
        f"tensors on the cycle: {', '.join(repr(x) for x in uniq)}{at}"
    )


def _dim_order(model, pdg, members, dem) -> bool:
    """A cheap sufficient test that the demanded points of a cycle of tensors have an order:
    loops over the program dims, outermost first, each ascending or descending, with the
    reads not carried by the outer loops forming an acyclic graph of tensors at the end.
    Reads that need more (a dim some member lacks, mixed directions) return False and
    leave the question to isl."""
    prog = model.prog
    edges = []
    for c in members:
        for p, e in pdg.inputs(c):
            if p in members:
                m = model.access(c, p, e.pos).intersect_domain(dem[c]).intersect_range(dem[p])
                if not m.is_empty():
                    edges.append((c, p, m))
    return _dim_order_level(model, pdg, set(members), edges, 0, prog)


def _dim_map(model, pdg, c, p, d, rel) -> isl.Map:
    """{ S<c>[...] -> S<p>[...] : consumer's d <rel> producer's d }."""
    cd, pd = pdg.rec(c).domain, pdg.rec(p).domain
    outs = [f"o{k}" for k in range(len(pd))]
    qv = f"d_{d.name}"
    rv = outs[[k for k, x in enumerate(pd) if x is d][0]]
    m = model.template(f"{{ S[{', '.join('d_' + x.name for x in cd)}] -> P[{', '.join(outs)}] : {qv} {rel} {rv} }}",
                       isl.Map)
    return m.set_tuple_name(isl.dim_type.in_, f"S{c}").set_tuple_name(isl.dim_type.out, f"S{p}")


def params_decl_of(model):
    return "[" + ", ".join(f"P_{b.name}" for b in model.prog.bounds) + "]"


def _dim_order_level(model, pdg, members, edges, depth, prog) -> bool:
    g = nx.DiGraph()
    g.add_nodes_from(members)
    g.add_edges_from((p, c) for c, p, _ in edges)
    for scc in nx.strongly_connected_components(g):
        if len(scc) == 1 and not g.has_edge(next(iter(scc)), next(iter(scc))):
            continue
        if depth == len(prog.dims):
            return False
        d = prog.dims[depth]
        if all(d not in pdg.rec(n).domain for n in scc):
            # no member has d (PPO's update loop over (i, k) at the level of t): order by the dims further in
            inner = [x for x in edges if x[0] in scc and x[1] in scc]
            if not _dim_order_level(model, pdg, scc, inner, depth + 1, prog):
                return False
            continue
        if any(d not in pdg.rec(n).domain for n in scc):
            return False
        inner, up, down = [], False, False
        for c, p, m in edges:
            if c not in scc or p not in scc:
                continue
            up = up or not m.intersect(_dim_map(model, pdg, c, p, d, ">")).is_empty()
            down = down or not m.intersect(_dim_map(model, pdg, c, p, d, "<")).is_empty()
            if up and down:
                return False
            same = m.intersect(_dim_map(model, pdg, c, p, d, "="))
            if not same.is_empty():
                inner.append((c, p, same))
        if not _dim_order_level(model, pdg, scc, inner, depth + 1, prog):
            return False
    return True


def _has_affine_order(dem, R) -> bool:
    """Whether isl finds a schedule that computes every demanded point before its readers."""
    dom = None
    for d in dem.values():
        u = isl.UnionSet.from_set(d)
        dom = u if dom is None else dom.union(u)
    if dom is None or dom.is_empty():
        return True
    dep = R.intersect_domain(dom).intersect_range(dom).reverse()
    sc = isl.ScheduleConstraints.on_domain(dom).set_validity(dep)
    try:
        return sc.compute_schedule() is not None
    except isl.Error:
        return False


def _map_pairs(m) -> list:
    """The (source point, target point) pairs of a finite isl map."""
    n_in = m.dim(isl.dim_type.in_)
    w = m.wrap().project_out(isl.dim_type.param, 0, m.dim(isl.dim_type.param))
    out = []
    st = isl.dim_type.set
    w.foreach_point(lambda p: out.append(tuple(p.get_coordinate_val(st, k).to_python()
                                               for k in range(p.get_space().dim(st)))))
    return [(v[:n_in], v[n_in:]) for v in out]


def _point_demand(model, pdg, members, dem, incoming) -> dict:
    """Exact demand and cycle check on the finite points of a cycle of tensors: the points
    reachable from the outside demand through point reads, searched depth first; a point
    that reads itself through others is a CompileError naming the tensors on that cycle."""
    reads = {}
    for c in members:
        for p, e in pdg.inputs(c):
            if p in members:
                m = model.access(c, p, e.pos).intersect_domain(dem[c]).intersect_range(dem[p])
                for a, b in _map_pairs(m):
                    reads.setdefault((c, a), []).append((p, b))
    starts = [(n, pt) for n in sorted(members) for pt in _set_points(incoming[n])]
    state, path = {}, []
    for start in starts:
        if state.get(start):
            continue
        stack = [(start, iter(reads.get(start, ())))]
        state[start] = 1
        path.append(start)
        while stack:
            key, it = stack[-1]
            for nxt in it:
                if state.get(nxt) == 1:
                    cyc = path[path.index(nxt):]
                    n0, pt0 = cyc[0]
                    raise CompileError(_cycle_msg([pdg.rec(n).name for n, _ in cyc],
                                                  f" (at {fmt_point(pdg.rec(n0).domain, pt0)})"))
                if not state.get(nxt):
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(reads.get(nxt, ()))))
                    break
            else:
                state[key] = 2
                path.pop()
                stack.pop()
    out = {}
    for n in members:
        pts = [pt for (m, pt) in state if m == n]
        s = dem[n].subtract(dem[n])
        for pt in pts:
            cons = " and ".join(f"{model_var} = {v}" for model_var, v in zip(_vars(pdg, n), pt))
            s = s.union(isl.Set(f"{{ S{n}[{', '.join(_vars(pdg, n))}] : {cons or '0 = 0'} }}").align_params(
                s.get_space()))
        out[n] = s.intersect(dem[n]).coalesce()
    return out


def _vars(pdg, n):
    return [f"d_{d.name}" for d in pdg.rec(n).domain]


def _set_points(s) -> list:
    out = []
    st = isl.dim_type.set
    s = s.project_out(isl.dim_type.param, 0, s.dim(isl.dim_type.param))
    s.foreach_point(lambda p: out.append(tuple(p.get_coordinate_val(st, k).to_python()
                                               for k in range(p.get_space().dim(st)))))
    return out


def _check_reads(model, pdg, live, p, demand):
    """Every point a consumer reads from ``p`` must be one of ``p``'s points."""
    pts = model.unlimited_points(p)
    for c, e in _edges_into(pdg, live, p):
        acc = model.access(c, p, e.pos)
        # reads from the consumer's demanded points, without the domain restriction
        img = demand[c].apply(acc)
        bad = img.subtract(pts)
        if bad.is_empty():
            continue
        where = demand[c].intersect(acc.intersect_range(bad).domain())
        prod, cons = pdg.rec(p), pdg.rec(c)
        one = isl.Set.from_point(where.sample_point())
        pt = sample(one)
        rd = sample(one.apply(acc).subtract(pts))
        raise CompileError(
            f"tensor {prod.name!r} is read at index {e.index_str()} outside its points at "
            f"{fmt_point(cons.domain, pt)} (in {cons.name}): that reads point "
            f"({fmt_point(prod.domain, rd)}); "
            "exclude that point with a placeholder branch or change the index"
        )


def _check_branches(model, pdg, n, dem):
    covered = None
    for _, e in pdg.inputs(n):
        s = model.cond_set(n, e.cond)
        covered = s if covered is None else covered.union(s)
    missing = dem if covered is None else dem.subtract(covered)
    if not missing.is_empty():
        pt = sample(missing)
        raise CompileError(
            f"placeholder {pdg.rec(n).name!r} is read at {fmt_point(pdg.rec(n).domain, pt)} but no branch applies there; "
            "add a branch for it (e.g. an initial value x[..., 0] = ...)"
        )


def _shape_pairs(node, shapes):
    """(operand k, axis of k, operand j, axis of j, may broadcast) pairs of spatial entries that
    must agree for ``node`` to be well-formed (only those that involve a symbolic length)."""
    op, out = node.op, []

    def bcast(ks, trailing_skip=0):
        nd = max(len(shapes[k]) - trailing_skip for k in ks)
        for a in range(nd):
            ents = []
            for k in ks:
                j = a - (nd - (len(shapes[k]) - trailing_skip))
                if j >= 0:
                    ents.append((k, j))
            for x, y in zip(ents, ents[1:]):
                out.append((*x, *y, True))

    if op in (Op.BINARY, Op.WHERE):
        bcast(range(len(shapes)))
    elif op is Op.MATMUL and len(shapes) == 2:
        sa, sb = shapes
        if sa and sb:
            out.append((0, len(sa) - 1, 1, len(sb) - 1 if len(sb) == 1 else len(sb) - 2, False))
            if len(sa) > 2 and len(sb) > 2:
                nd = min(len(sa), len(sb)) - 2
                for a in range(1, nd + 1):
                    out.append((0, len(sa) - 2 - a, 1, len(sb) - 2 - a, True))
    elif op is Op.CONCAT:
        ax = node.attrs["axis"]
        for k in range(1, len(shapes)):
            for a in range(len(shapes[0])):
                if a != ax:
                    out.append((0, a, k, a, False))
    return [p for p in out if not all(isinstance(shapes[k][a], int) for k, a in ((p[0], p[1]), (p[2], p[3])))]


def _check_shapes(model, pdg, n, dem, bounds):
    """Symbolic spatial lengths that must agree do agree at every demanded point."""
    node = pdg.rec(n)
    ins = pdg.inputs(n)
    if not ins:
        return
    shapes = [tuple(pdg.rec(p).shapes[e.out]) for p, e in ins]
    for k, a, j, b, may_bcast in _shape_pairs(node, shapes):
        x, y = sympy.sympify(shapes[k][a]), sympy.sympify(shapes[j][b])
        bad = sympy.Ne(x, y)
        if may_bcast:
            bad = sympy.And(bad, sympy.Ne(x, 1), sympy.Ne(y, 1))
        if bad is sympy.false:
            continue
        wrong = dem.intersect(model.cond_set(n, bad))
        if wrong.is_empty():
            continue
        pt = sample(wrong)
        subs = {d.e: v for d, v in zip(node.domain, pt)}
        subs.update({b_.e: bounds[b_.name] for b_ in model.prog.bounds if b_.name in bounds})
        names = [pdg.rec(p).name for p, _ in ins]
        raise CompileError(
            f"in {node.name!r} ({node.op.value}): axis {a} of {names[k]!r} {shapes[k]} has length "
            f"{x.subs(subs)} but axis {b} of {names[j]!r} {shapes[j]} has length {y.subs(subs)} at "
            f"{fmt_point(node.domain, pt)}; their lengths must agree at every point"
        )
