"""The reference executor: the oracle that defines what every program means.

It evaluates each demanded point of each live node, one at a time, with numpy.
First it builds the point-level dependence DAG by a depth-first walk from the sinks
(points depend only on points, never on values), which gives an evaluation order
(the *demand order*) and a read count per point; then it runs that order, freeing
each value after its last read. Slow by design; obviously correct.
"""

from __future__ import annotations

import sys
import time

import islpy as isl
import numpy as np
import tqdm

from ..errors import CompileError, RuntimeFault
from ..ir import rng
from ..ir.ops import Op, Slice, nbytes
from ..ir.polyhedral import fmt_point
from ..ir.semantics import evaluate
from .checks import checks_finite, finite, nonfinite_fault
from .index import compile_cond, compile_expr, compile_index, projector


class _Ctx:
    __slots__ = ("node", "point", "resolve_fn")

    def __init__(self, node, point, resolve_fn):
        self.node, self.point, self.resolve_fn = node, point, resolve_fn

    def resolve(self, e):
        return self.resolve_fn(e, self.node, self.point)

    def where(self):
        return fmt_point(self.node.domain, self.point)


def enumerate_points(s) -> list[tuple]:
    """The points of an isl set, sorted lexicographically."""
    pts = []
    st = isl.dim_type.set
    # bounds the program never uses stay free parameters; they cannot change the points
    s = s.project_out(isl.dim_type.param, 0, s.dim(isl.dim_type.param))
    s.foreach_point(lambda p: pts.append(tuple(
        p.get_coordinate_val(st, k).to_python() for k in range(p.get_space().dim(st)))))
    pts.sort()
    return pts


class ReferenceSchedule:
    def __init__(self, order, pdg):
        self.order, self.pdg = order, pdg

    def __str__(self):
        lines = ["# reference executor: demand order (point by point)"]
        for n, pt in self.order[:200]:
            node = self.pdg.rec(n)
            where = ", ".join(f"{d.name}={v}" for d, v in zip(node.domain, pt))
            lines.append(f"exec S{n} {node.op.value}:{node.name} [{where}]")
        if len(self.order) > 200:
            lines.append(f"# ... {len(self.order) - 200} more")
        return "\n".join(lines)


class ReferenceExecutable:
    backend = "reference"

    def __init__(self, prog, pdg, bounds, seed, analysis, compile_seconds, check=False):
        self.prog, self.pdg, self.bounds, self.seed = prog, pdg, bounds, seed
        self.check = check  # non-finite detection (timerl.runtime.checks)
        self.analysis = analysis
        self.stats = {"peak_bytes": 0, "peak_host_bytes": 0, "compile_seconds": dict(compile_seconds),
                      "run_seconds": 0.0, "kernels": 0, "swapped_bytes": 0,
                      "spilled_bytes": 0, "swap_seconds": 0.0}
        t0 = time.perf_counter()
        self._prepare()
        self.order, self.reads = self._plan()
        self.stats["compile_seconds"]["plan"] = time.perf_counter() - t0
        self.schedule = ReferenceSchedule(self.order, pdg)

    # compile-time preparation ---------------------------------------------------------
    def _prepare(self):
        pdg, b, prog = self.pdg, self.bounds, self.prog
        self.inputs = {}
        for n in self.analysis.live:
            node = pdg.rec(n)
            ins = []
            for p, e in pdg.inputs(n):
                pnode = pdg.rec(p)
                if node.op is Op.ACCESS or (node.op is Op.MERGE):
                    f = compile_index(e.index, node.domain, b, prog)
                else:
                    f = projector(node.domain, pnode.domain)
                cond = compile_cond(e.cond, node.domain, b, prog) if e.cond is not None else None
                ins.append((p, e, f, cond))
            self.inputs[n] = ins
        # UDFs sharing a state key: a chain in (point, program order)
        self.prev_state = {}
        groups = {}
        ndims = len(prog.dims)
        for n in self.analysis.live:
            node = pdg.rec(n)
            if node.op is Op.UDF and node.attrs.get("state") is not None:
                for pt in enumerate_points(self.analysis.demand[n]):
                    full = [-1] * ndims
                    for d, v in zip(node.domain, pt):
                        full[d.position] = v
                    groups.setdefault(node.attrs["state"], []).append((tuple(full), n, pt))
        for insts in groups.values():
            insts.sort()
            for a, c in zip(insts, insts[1:]):
                self.prev_state[(c[1], c[2])] = (a[1], a[2])
        self._exprs = {}

    def _deps(self, n, pt):
        """(producer, points) this instance reads, per operand, plus state order."""
        node = self.pdg.rec(n)
        deps = []
        if node.op is Op.MERGE:
            for p, e, f, cond in self.inputs[n]:
                if cond(pt):
                    deps.append((p, e, [f(pt)], None))
                    return deps
            raise CompileError(f"placeholder {node.name!r} has no branch at {pt}")
        for p, e, f, _ in self.inputs[n]:
            if node.op is Op.ACCESS:
                ent = f(pt)
                ranges = [r for r in ent if isinstance(r, range)]
                if not ranges:
                    deps.append((p, e, [ent], None))
                else:
                    pts = [()]
                    for r in ent:
                        pts = [q + (v,) for q in pts for v in (r if isinstance(r, range) else (r,))]
                    deps.append((p, e, pts, tuple(len(r) for r in ranges)))
                    if not pts:  # an empty slice: the producer's spatial shape, at a point of its own
                        self.empty_shape[(n, pt, e.pos)] = tuple(r.start if isinstance(r, range) else r
                                                                 for r in ent)
            else:
                deps.append((p, e, [f(pt)], None))
        return deps

    def _plan(self):
        """Depth-first walk from the sinks: evaluation order and read counts."""
        order, reads, state = [], {}, {}
        DONE, ACTIVE = 2, 1
        sinks = [n for n in self.analysis.live if self.pdg.rec(n).op is Op.SINK]
        sinks += [n for n in self.pdg.roots() if n not in sinks]
        self.deps, self.empty_shape = {}, {}
        for s in sinks:
            for pt in enumerate_points(self.analysis.demand[s]):
                stack = [((s, pt), None)]
                while stack:
                    key, it = stack.pop()
                    if it is None:
                        if state.get(key) == DONE:
                            continue
                        if state.get(key) == ACTIVE:
                            raise CompileError(f"cycle of reads through tensor {self.pdg.rec(key[0]).name!r} at {key[1]}")
                        state[key] = ACTIVE
                        deps = self._deps(*key)
                        self.deps[key] = deps
                        flat = [(p, q) for p, _, qs, _ in deps for q in qs]
                        if key in self.prev_state:
                            flat.append(self.prev_state[key])
                        for d in flat:
                            reads[d] = reads.get(d, 0) + (0 if d == self.prev_state.get(key) else 1)
                        it = iter(flat)
                    for d in it:
                        if state.get(d) != DONE:
                            if state.get(d) == ACTIVE:
                                path = [k for k, _ in stack] + [key]
                                cyc = path[path.index(d):] if d in path else [d]
                                names = ", ".join(dict.fromkeys(repr(self.pdg.rec(n).name) for n, _ in cyc))
                                raise CompileError(
                                    f"a cycle of reads has no order in which every point is computed before it "
                                    f"is read; tensors on the cycle: {names} (point {d[1]})")
                            stack.append((key, it))
                            stack.append((d, None))
                            break
                    else:
                        state[key] = DONE
                        order.append(key)
        return order, reads

    # run -----------------------------------------------------------------------------------
    def _resolve(self, e, node, pt):
        k = (e, node.domain)
        if k not in self._exprs:
            self._exprs[k] = compile_expr(e, node.domain, self.bounds, self.prog)
        return int(self._exprs[k](pt))

    def run(self, progress=False):
        t0 = time.perf_counter()
        vals, live_bytes, peak = {}, 0, 0
        remaining = dict(self.reads)
        bar = tqdm.tqdm(total=len(self.order), desc="timerl (reference)", unit="point", file=sys.stderr,
                        dynamic_ncols=True) if progress else None
        for key in self.order:
            n, pt = key
            node = self.pdg.rec(n)
            ins = []
            for p, e, qs, shape in self.deps[key]:
                got = [vals[(p, q)][e.out] for q in qs]
                if shape is None:
                    ins.append(got[0])
                elif got:
                    ins.append(np.stack(got).reshape(shape + got[0].shape))
                else:
                    pnode = self.pdg.rec(p)
                    spatial = _concrete(pnode.shapes[e.out], self, pnode, self.empty_shape[(n, pt, e.pos)])
                    ins.append(np.zeros(shape + spatial, pnode.dtypes[e.out]))
            out = self._eval(n, node, pt, ins)
            if self.check and out is not None and checks_finite(node) and not finite(out):
                self._nonfinite(n, node, pt, out, ins)
            if out is not None:
                vals[key] = out
                live_bytes += sum(o.nbytes for o in out)
                peak = max(peak, live_bytes)
            for p, _, qs, _ in self.deps[key]:
                for q in qs:
                    d = (p, q)
                    remaining[d] -= 1
                    if remaining[d] == 0:
                        live_bytes -= sum(o.nbytes for o in vals.pop(d))
            if out is not None and remaining.get(key, 0) == 0:
                live_bytes -= sum(o.nbytes for o in vals.pop(key))
            if bar is not None:
                bar.update()
        if bar is not None:
            bar.close()
        self.stats["peak_bytes"] = peak
        self.stats["run_seconds"] = time.perf_counter() - t0
        return self

    def _nonfinite(self, n, node, pt, out, ins):
        names = [self.pdg.rec(p).name for p, _ in self.pdg.inputs(n)]
        fault = nonfinite_fault(node, fmt_point(node.domain, pt), out, ins, names)
        if fault is not None:
            raise fault

    def _eval(self, n, node, pt, ins):
        op = node.op
        if op is Op.SINK:
            vs = [_readonly(v) for v in ins]
            point = {d.name: int(v) for d, v in zip(node.domain, pt)}
            call_sink(node, vs if node.attrs["multi"] else vs[0], point)
            return None
        if op in (Op.MERGE, Op.ACCESS):
            return (ins[0],)
        if op is Op.DATA:
            return (np.asarray(node.attrs["array"][pt]),)
        if op is Op.DIM_VALUE:
            return (np.asarray(pt[0], dtype=np.int64),)
        if op is Op.RANDOM:
            logits = ins[0][None] if ins else None
            v = rng.draw(node.attrs["dist"], self.seed, node.attrs["stream"], np.asarray([pt], dtype=np.int64),
                         _concrete(node.shape, self, node, pt), node.dtype, node.attrs, logits)
            return (v[0],)
        if op is Op.UDF:
            return call_udf(node, ins, pt)
        ctx = _Ctx(node, pt, self._resolve)
        try:
            return evaluate(node, ins, 0, ctx)
        except (ValueError, IndexError, ZeroDivisionError, FloatingPointError) as e:
            raise RuntimeFault(f"{node.op.value} in tensor {node.name!r} failed at {ctx.where()}: {e}") from e


def _concrete(shape, exe, node, pt):
    return tuple(s if isinstance(s, int) else exe._resolve(s, node, pt) for s in shape)


def _readonly(v):
    v = np.asarray(v)
    v = v.view()
    v.setflags(write=False)
    return v


def call_sink(node, value, point):
    """Call a sink's function; an exception it raises becomes a RuntimeFault naming the sink and the point."""
    try:
        node.attrs["fn"](value, point)
    except Exception as e:  # noqa: BLE001 - the user's function failed; say where (KeyboardInterrupt passes)
        where = fmt_point(node.domain, point.values())
        of = ", ".join(repr(n) for n in node.attrs.get("of", ()))
        of = f"tensors {of}" if node.attrs.get("multi") else f"tensor {of}"
        raise RuntimeFault(f"sink {node.attrs.get('fn_name', 'fn')!r} ({node.name}) of {of} raised at "
                           f"{where}: {type(e).__name__}: {e}") from e


def call_udf(node, ins, pt, batch=None):
    """Call a UDF and check what it returns against its declared outputs."""
    fn, batched = node.attrs["fn"], node.attrs["batched"]
    # ``fresh``: timerl's own host-env wrappers (timerl.rl.envs._fresh) return new arrays and never
    # write their inputs, so neither read-only views nor copies are needed
    fresh = getattr(fn, "fresh", False)
    args = ins if fresh and not batched else [_readonly(v[None] if batched and batch is None else v) for v in ins]
    n_out = node.attrs["n_out"]
    try:
        res = fn(*args)
    except Exception as e:  # noqa: BLE001 - the user's function failed; say where (KeyboardInterrupt passes)
        raise RuntimeFault(f"{_udf(node)} raised at {_at(node, pt)}: {type(e).__name__}: {e}") from e
    if res is None and n_out:
        raise RuntimeFault(f"{_udf(node)} returned None at {_at(node, pt)}; declared {n_out} output(s): "
                           f"{_declared(node)} (return the arrays)")
    res = (res,) if n_out == 1 and not isinstance(res, (tuple, list)) else tuple(() if res is None else res)
    if batch is None and not batched and len(res) == n_out:
        # the common case, checked cheaply (an env step runs once per step): arrays of the declared
        # static shapes and dtypes, copied so the UDF can reuse its buffers
        for r, shape, dt in zip(res, node.shapes, node.dtypes):
            if type(r) is not np.ndarray or r.dtype != dt or r.shape != shape:
                break
        else:
            return res if fresh else tuple(r.copy() for r in res)
    if len(res) != n_out:
        raise RuntimeFault(f"{_udf(node)} returned {len(res)} values at {_at(node, pt)}, declared {n_out}: "
                           f"{_declared(node)}")
    out = []
    for k, (r, shape, dt) in enumerate(zip(res, node.shapes, node.dtypes)):
        if r is None:
            raise RuntimeFault(f"{_udf(node)} output {k} is None at {_at(node, pt)}; declared {tuple(shape)} {dt}")
        try:
            r = np.asarray(r)
        except (ValueError, TypeError) as e:
            raise RuntimeFault(f"{_udf(node)} output {k} at {_at(node, pt)} is not an array ({e}); declared "
                               f"{tuple(shape)} {dt}") from e
        if batched and batch is None:
            if r.ndim == 0:
                raise RuntimeFault(f"{_udf(node)} (batched) output {k} at {_at(node, pt)} is a scalar; a batched "
                                   f"UDF returns arrays with a leading batch axis, declared (batch,) + {tuple(shape)}")
            r = r[0]
        want = tuple(shape) if batch is None else tuple(batch) + tuple(shape)
        if r.shape != want and all(isinstance(s, int) for s in shape):
            raise RuntimeFault(f"{_udf(node)} output {k} has shape {r.shape} at {_at(node, pt)}, "
                               f"declared {tuple(shape)}")
        if r.dtype.kind not in "biuf":
            raise RuntimeFault(f"{_udf(node)} output {k} has dtype {r.dtype} at {_at(node, pt)}, declared {dt}; "
                               "return bool, int or float arrays")
        try:
            out.append(np.array(r, dtype=dt))
        except (ValueError, TypeError) as e:
            raise RuntimeFault(f"{_udf(node)} output {k} of dtype {r.dtype} at {_at(node, pt)} does not convert "
                               f"to the declared {dt}: {e}") from e
    return tuple(out)


# the parts of a UDF's error messages, formatted only when one is raised (call_udf runs once per point)
def _udf(node) -> str:
    return f"udf {node.attrs['fn_name']!r} ({node.name})"


def _at(node, pt) -> str:
    return fmt_point(node.domain, pt) if pt is not None else "its points"


def _declared(node) -> str:
    n = node.attrs["n_out"]
    return ", ".join(f"{tuple(s)} {d}" for s, d in zip(node.shapes[:n], node.dtypes[:n]))


__all__ = ["ReferenceExecutable", "Slice", "nbytes"]
