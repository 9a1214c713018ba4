"""The interpreter: the schedule tree lowered once into Python source and compiled.

Each group statement becomes one Python function (its members' evaluations in order,
index expressions inlined as Python arithmetic), each free one function, and the
schedule's loops plain Python loops calling them; so a run costs one call per
statement instance plus the ops themselves. Values live in one store per node: a dict
from point to array, or, where the memory plan chose it (``kinds``), a block store or
circular buffer (:mod:`timerl.runtime.stores`) whose slice reads are views of one array;
``live``/``peak`` count the bytes of stored values (a block's whole allocation while live).

Modes: ``"run"`` evaluates; ``"check"`` also verifies that every read happens after
its write and before its free; ``"plan"`` only counts bytes (the planned peak, no
numpy work).
"""

from __future__ import annotations

import itertools

import numpy as np
import sympy

from ..errors import RuntimeFault
from ..ir import rng
from ..ir.expr import compile_py, cond_to_py, to_py
from ..ir.ops import Op, Slice
from ..ir.polyhedral import fmt_point
from ..ir.semantics import BINARY, UNARY, evaluate
from ..kernels import cpu, statement
from ..schedule.tree import outer_loops, render, ticked, trip_count, walk
from .checks import checks_finite, finite, nonfinite_fault
from .reference import _readonly, call_sink, call_udf
from .stores import BlockStore


class Ctx:
    """What op rules ask of the executor: the current point and symbolic sizes there."""

    __slots__ = ("node", "point", "_fns", "_names")

    def __init__(self, node, names):
        self.node, self.point, self._fns, self._names = node, (), {}, names

    def resolve(self, e):
        f = self._fns.get(e)
        if f is None:
            f = self._fns[e] = compile_py(to_py(sympy.sympify(e), self._names), [f"d_{d.name}" for d in self.node.domain])
        return int(f(*self.point))

    def where(self):
        return fmt_point(self.node.domain, self.point)


def gather(store, out, ent, spatial, dtype):
    """Stack the points a slice read covers into ``(len, ...) + spatial``."""
    lens = tuple(len(r) for r in ent if isinstance(r, range))
    pts = itertools.product(*[r if isinstance(r, range) else (r,) for r in ent])
    got = [store[q] for q in pts] if out is None else [store[q][out] for q in pts]
    if got:
        return np.stack(got).reshape(lens + np.shape(got[0]))
    return np.zeros(lens + tuple(s if isinstance(s, int) else 0 for s in spatial), dtype)


def gather_keys(ent):
    return list(itertools.product(*[r if isinstance(r, range) else (r,) for r in ent]))


def _probe(fn, dtypes):
    try:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*[np.ones(1, d) for d in dtypes])).dtype
    except Exception:  # noqa: BLE001 - no fast path for this op
        return None


class Lowering:
    """Renders the Python source of one schedule for one mode."""

    def __init__(self, prog, pdg, bounds, seed, groups, tree, donated, mode="run", backend="numpy", inline=None,
                 kinds=None):
        self.prog, self.pdg, self.bounds, self.seed = prog, pdg, bounds, seed
        self.inline = inline or {}
        # block stores and circular buffers (memory.Storage); every other node: a dict of points
        self.kinds = {n: st for n, st in (kinds or {}).items() if st.kind != "points"}
        # an op never writes in place into a block or ring (other points share the array)
        donated = {c: pos for c, pos in donated.items() if pdg.inputs(c)[pos][0] not in self.kinds}
        self.backend, self.kernels = backend, {}
        self.groups, self.tree, self.donated, self.mode = groups, tree, donated, mode
        self.ns = {"np": np, "gather": gather, "gather_keys": gather_keys, "RuntimeFault": RuntimeFault,
                   "call_udf": call_udf, "call_sink": call_sink, "ro": _readonly, "evaluate": evaluate, "rng": rng,
                   "min": min, "max": max, "seg_fault": self._seg_fault,
                   "conv_call": self._conv_call}
        self.stored = set()
        self._rendered = {}

    # names ---------------------------------------------------------------------------
    def names(self, domain):
        out = {d.e: f"d_{d.name}" for d in domain}
        out.update({b.e: str(self.bounds[b.name]) for b in self.prog.bounds if b.name in self.bounds})
        return out

    @staticmethod
    def key(dims):
        return "(" + "".join(f"d_{d.name}, " for d in dims) + ")"

    def sym(self, name, value):
        self.ns[name] = value
        return name

    # reads ---------------------------------------------------------------------------
    def read(self, n, p, e):
        """Python expression for operand ``e`` of node ``n`` (producer ``p``)."""
        node, pnode = self.pdg.rec(n), self.pdg.rec(p)
        multi = len(pnode.shapes) > 1
        sfx = f"[{e.out}]" if multi and self.mode != "plan" else ""
        if node.op in (Op.ACCESS, Op.MERGE):
            nm = self.names(node.domain)
            parts = []
            for ent in e.index:
                if isinstance(ent, Slice):
                    parts.append(f"range({to_py(ent.start, nm)}, {to_py(ent.stop, nm)})")
                else:
                    parts.append(to_py(ent, nm))
            ent = "(" + "".join(p_ + ", " for p_ in parts) + ")"
            if any(isinstance(x, Slice) for x in e.index):
                if self.mode == "plan":
                    return "0"
                if p in self.kinds:
                    got = f"s{p}.gather({ent})"
                    if self.mode == "check":
                        return f"chk_many(s{p}, fr{p}, gather_keys({ent}), {p}, {n}) or {got}"
                    return got
                if self.mode == "check":
                    return (f"chk_many(s{p}, fr{p}, gather_keys({ent}), {p}, {n}) or "
                            f"gather(s{p}, {e.out if multi else None}, {ent}, "
                            f"{self.sym(f'sp{p}_{e.out}', pnode.shapes[e.out])}, {self.sym(f'dt{p}_{e.out}', pnode.dtypes[e.out])})")
                return (f"gather(s{p}, {e.out if multi else None}, {ent}, "
                        f"{self.sym(f'sp{p}_{e.out}', pnode.shapes[e.out])}, {self.sym(f'dt{p}_{e.out}', pnode.dtypes[e.out])})")
            key = ent
        else:
            key = self.key(pnode.domain)
        if self.mode == "check":
            return f"chk(s{p}, fr{p}, {key}, {p}, {n}){sfx}"
        return f"s{p}[{key}]{sfx}"

    # one node ------------------------------------------------------------------------
    def node_lines(self, n) -> list[str]:
        node, op = self.pdg.rec(n), self.pdg.rec(n).op
        ins = self.pdg.inputs(n)
        k = self.key(node.domain)
        L = []
        fast = self._fast(n, node, ins) if op in (Op.UNARY, Op.BINARY) else None
        if n in self.donated and not fast:
            # only a direct ufunc call writes in place (and _fast declines casts): the plan
            # must count the same bytes as the run
            del self.donated[n]
        if self.mode == "plan":
            return self.plan_lines(n, node, ins, k)
        args = [self.read(n, p, e) for p, e in ins]
        if op is Op.MERGE:
            nm = self.names(node.domain)
            for j, ((p, e), a) in enumerate(zip(ins, args)):
                c = cond_to_py(sympy.sympify(e.cond), nm) if e.cond is not None else "True"
                L.append(f"{'if' if j == 0 else 'elif'} {c}:")
                L.append(f"    o = {a}")
            L.append("else:")
            msg = f"placeholder {node.name!r}: no branch applies at point "
            L.append(f"    raise RuntimeFault({msg!r} + str({k}))")
        elif op is Op.ACCESS:
            L.append(f"o = {args[0]}")
        elif op is Op.CONST:
            L.append(f"o = {self.sym(f'c{n}', node.attrs['value'])}")
        elif op is Op.DATA:
            L.append(f"o = np.asarray({self.sym(f'arr{n}', node.attrs['array'])}[{k}])")
        elif op is Op.DIM_VALUE:
            L.append(f"o = np.asarray(d_{node.attrs['dim']}, dtype=np.int64)")
        elif op is Op.RANDOM:
            L.append(f"o = {self.sym(f'draw{n}', self._draw(n, node))}({k}{', ' + args[0] if args else ''})")
        elif op is Op.UDF:
            L.append(f"o = call_udf({self.sym(f'node{n}', node)}, [{', '.join(args)}], {k})")
            if len(node.shapes) == 1:
                L.append(f"o = o[0] if o else {self.sym(f'z{n}', np.zeros((), node.dtype))}")
        elif op is Op.SINK:
            vs = [f"ro({a})" for a in args]
            v = f"[{', '.join(vs)}]" if node.attrs["multi"] else vs[0]
            pt = "{" + ", ".join(f"'{d.name}': d_{d.name}" for d in node.domain) + "}"
            L.append(f"call_sink({self.sym(f'node{n}', node)}, {v}, {pt})")
            return L
        elif fast:
            fn, cast = fast
            pos = self.donated.get(n)
            if pos is not None:
                p, e = ins[pos]
                pk = self.key(self.pdg.rec(p).domain)
                L.append(f"o = {fn}({', '.join(args)}, out={args[pos]})")
                L.append(f"dv = s{p}.pop({pk}, None)")
                L.append("if dv is not None: live -= dv.nbytes")
                if self.mode == "check":
                    L.append(f"fr{p}.add({pk})")
            else:
                L.append(f"o = {fn}({', '.join(args)})" + (f".astype({cast})" if cast else ""))
        else:
            ctx = self.sym(f"ctx{n}", Ctx(node, self.names(node.domain)))
            L.append(f"{ctx}.point = {k}")
            L.append(f"o = evaluate({self.sym(f'node{n}', node)}, [{', '.join(args)}], 0, {ctx})[0]")
        if self.mode == "check" and checks_finite(node):
            if n in self.donated:  # the input buffer is overwritten: judge the inputs before the op
                L.insert(0, f"fin_in = finite([{', '.join(args)}])")
                L += ["if not finite(o) and fin_in:", f"    nonfinite({n}, {k}, o, None)"]
            else:
                L += ["if not finite(o):", f"    nonfinite({n}, {k}, o, [{', '.join(args)}])"]
        self.stored.add(n)
        if n in self.kinds:
            L.append(f"live += s{n}.put({k}, o)")
        elif len(node.shapes) > 1:
            L += [f"s{n}[{k}] = o", "live += sum(x.nbytes for x in o)"]
        else:
            L += [f"s{n}[{k}] = o", "live += o.nbytes"]
        if self.mode == "check":
            L.append(f"fr{n}.discard({k})")
        return L

    def free_lines(self, n) -> list[str]:
        node = self.pdg.rec(n)
        k = self.key(node.domain)
        nb = "v" if self.mode == "plan" else ("sum(x.nbytes for x in v)" if len(node.shapes) > 1 else "v.nbytes")
        L = []
        if self.mode == "check":
            L += [f"if {k} not in fr{n}:", f"    if {k} not in s{n}: bad_free({n}, {k})", f"    fr{n}.add({k})"]
        if n in self.kinds:
            return L + [f"live -= s{n}.free({k})"]
        return L + [f"v = s{n}.pop({k}, None)", "if v is not None:", f"    live -= {nb}"]

    def _render(self, seg, returned):
        key = (tuple(seg), tuple(returned))
        if key not in self._rendered:
            self._rendered[key] = statement.render(self.pdg, seg, returned)
        return self._rendered[key]

    def segments(self, g):
        """Group ``g``'s kernel segments and glue, as the ``fuse`` pass recorded them
        (``g.segments``, :mod:`timerl.passes.fuse`); without them every member is glue."""
        if g.segments is None:
            return [("glue", n) for n in g.members]
        return g.segments

    def prewarm(self):
        """Render every statement kernel first and compile the new ones in parallel (cpu.prewarm)."""
        srcs = []
        for g in self.groups:
            for kind, seg in self.segments(g):
                if kind == "seg":
                    inseg = set(seg)
                    outputs = [n for n in seg if any(c not in inseg for c, _ in self.pdg.consumers(n))]
                    srcs.append(self._render(seg, list(seg) if self.mode == "check" else outputs)[0])
        cpu.prewarm(srcs)

    def segment_lines(self, seg, g) -> list[str]:
        """One statement-kernel call computing the segment ``seg``; stores the members read outside it.

        In checking mode the kernel returns every member, so an inf/NaN made inside and turned
        finite again later (``1 / exp(x)``) is still seen; a kernel's IndexError (a take out of
        range) is replayed with numpy's rules to name the tensor and the point."""
        inseg = set(seg)
        outputs = [n for n in seg if any(c not in inseg for c, _ in self.pdg.consumers(n))]
        returned = list(seg) if self.mode == "check" else outputs
        for n in seg:  # a kernel writes fresh outputs: no member writes into an operand's buffer
            self.donated.pop(n, None)
        if self.mode == "plan":  # the bytes of the outputs the run stores; the other members never are
            k = self.key(g.domain)
            return [ln for o in outputs for ln in self.plan_lines(o, self.pdg.rec(o), self.pdg.inputs(o), k)]
        src, ext, consts, dims, keys = self._render(seg, returned)
        kern = cpu.load(src)
        kid = f"K{seg[0]}"
        self.kernels[kid] = src
        self.ns[kid] = kern
        readers = {}
        for n in seg:
            for p, e in self.pdg.inputs(n):
                readers.setdefault((p, e.out), n)
        args = []
        for p, e, shape, _ in ext:
            a = self.read(readers[(p, e.out)], p, e)
            if self.mode == "check":  # the kernel indexes each operand by its declared shape: hold it to that
                a = f"chk_shape({a}, {self.sym(f'shp{p}_{e.out}', tuple(shape))}, {p}, {readers[(p, e.out)]})"
            args.append(a if len(shape) else f"{a}.reshape(1)")  # a 0-d value: shape (1,) in a kernel
        for j, c in enumerate(consts):
            args.append(self.sym(f"kc{seg[0]}_{j}", c))
        args += [f"d_{d}" for d in dims]
        for r in keys:  # the random op's key before the point: of the seed and its stream
            args.append(self.sym(f"key{r}", rng.base_key(self.seed, self.pdg.rec(r).attrs["stream"])))
        k = self.key(g.domain)
        info = self.sym(f"seg{seg[0]}", (seg, ext))
        # operands go as they are: numba rejects (TypeError, nothing compiled) one that is not a
        # C-contiguous array of the kernel's dtype, and conv_call converts them and calls again
        L = ["try:", f"    r = {kid}({', '.join(args)})",
             "except TypeError:",
             f"    r = conv_call({kid}, {info}, [{', '.join(args)}], {k})",
             "except (IndexError, ValueError, ZeroDivisionError) as err:",
             f"    seg_fault({info}, [{', '.join(args)}], {k}, err)"]
        if self.mode == "check":
            L += ["if not finite(r):", f"    chain_fault({info}, r, [{', '.join(args)}], {k})"]
        for o in outputs:
            shape = tuple(self.pdg.rec(o).shape)
            L.append(f"o = r[{returned.index(o)}]" + ("" if len(shape) else ".reshape(())"))
            L += [f"live += s{o}.put({k}, o)"] if o in self.kinds else [f"s{o}[{k}] = o", "live += o.nbytes"]
            if self.mode == "check":
                L.append(f"fr{o}.discard({k})")
            self.stored.add(o)
        return L

    def _fast(self, n, node, ins):
        """(function name, cast dtype or None) for a direct ufunc call, or None."""
        table = UNARY if node.op is Op.UNARY else BINARY
        fn = table.get(node.attrs.get("fn"))
        if fn is None:
            return None
        dts = [self.pdg.rec(p).dtypes[e.out] for p, e in ins]
        got = _probe(fn, dts)
        if got is None:
            return None
        name = self.sym(f"uf{n}", fn)
        if n in self.donated and (not isinstance(fn, np.ufunc) or got != node.dtype):
            del self.donated[n]
        return name, (None if got == node.dtype else self.sym(f"dt{n}", np.dtype(node.dtype)))

    def _draw(self, n, node):
        ctx = Ctx(node, self.names(node.domain))
        seed, attrs = self.seed, node.attrs

        def draw(pt, logits=None):
            ctx.point = pt
            shape = tuple(s if isinstance(s, int) else ctx.resolve(s) for s in node.shape)
            v = rng.draw(attrs["dist"], seed, attrs["stream"], np.asarray([pt], dtype=np.int64), shape,
                         node.dtype, attrs, None if logits is None else logits[None])
            return v[0]

        return draw

    def plan_lines(self, n, node, ins, k):
        if node.op is Op.SINK:
            return []
        nb = 0
        dyn = []
        for shape, dt in zip(node.shapes, node.dtypes):
            size = np.dtype(dt).itemsize
            expr = []
            for s in shape:
                if isinstance(s, int):
                    size *= s
                else:
                    expr.append(f"max(0, {to_py(sympy.sympify(s), self.names(node.domain))})")
            if expr:
                dyn.append(f"{size} * " + " * ".join(expr))
            else:
                nb += size
        total = " + ".join([str(nb)] + dyn)
        L = [f"o = {total}"]
        pos = self.donated.get(n)
        if pos is not None:
            p, e = ins[pos]
            L.append(f"dv = s{p}.pop({self.key(self.pdg.rec(p).domain)}, None)")
            L.append("if dv is not None: live -= dv")
        L += [f"live += s{n}.put({k}, o)"] if n in self.kinds else [f"s{n}[{k}] = o", "live += o"]
        self.stored.add(n)
        return L

    # whole program -----------------------------------------------------------------------
    def source(self) -> str:
        fns, bodies = [], {}
        if self.backend == "numba" and self.mode != "plan":
            cpu.tune_malloc()
            self.prewarm()
        for g in self.groups:
            body = bodies[g.gid] = []
            if self.backend == "numba":  # planning too: the plan counts what the run stores
                for kind, x in self.segments(g):
                    body += self.node_lines(x) if kind == "glue" else self.segment_lines(x, g)
            else:
                for n in g.members:
                    body += self.node_lines(n)
            body.append("if live > peak:")
            body.append("    peak = live")
        for g in self.groups:  # frees at the tail of their last reader (every store is known now)
            body = bodies[g.gid]
            for n, at in self.inline.get(g.gid, ()):
                if n in self.stored:
                    if at is None:
                        body += self.free_lines(n)
                    else:
                        body.append(f"if {self.key(g.domain)} == {tuple(at)!r}:")
                        body += ["    " + ln for ln in self.free_lines(n)]
            args = ", ".join(f"d_{d.name}" for d in g.domain)
            if g.domain:  # build the point's key once per execution
                k = self.key(g.domain)
                body = [f"K_ = {k}"] + [ln.replace(k, "K_") for ln in body]
            fns.append(f"def G{g.gid}({args}):\n    nonlocal live, peak\n"
                       + "".join(f"    {ln}\n" for ln in body))
        for n in sorted(set(self.frees) | self.stored):
            node = self.pdg.rec(n)
            args = ", ".join(f"d_{d.name}" for d in node.domain)
            k = self.key(node.domain)
            if n not in self.stored:  # computed inside a kernel and never stored
                fns.append(f"def F{n}({args}):\n    pass\n")
                continue
            if self.mode == "plan":
                nb = "v"
            else:
                nb = "sum(x.nbytes for x in v)" if len(node.shapes) > 1 else "v.nbytes"
            chk = ""
            if self.mode == "check":
                chk = (f"    if {k} in fr{n}: return\n"
                       f"    if {k} not in s{n}: bad_free({n}, {k})\n"
                       f"    fr{n}.add({k})\n")
            if n in self.kinds:
                fns.append(f"def F{n}({args}):\n    nonlocal live\n{chk}    live -= s{n}.free({k})\n")
                continue
            fns.append(f"def F{n}({args}):\n    nonlocal live\n{chk}    v = s{n}.pop({k}, None)\n"
                       f"    if v is not None:\n        live -= {nb}\n")

        def call_line(c):
            if c.kind == "tick":  # progress: once per iteration of the outermost loops, when asked for
                return "if tick is not None: tick()"
            return f"{'G' if c.kind == 'exec' else 'F'}{c.ident}({', '.join(c.args)})"

        body = render(ticked(self.tree), call_line, 1) or ["    pass"]
        run = "def run(tick=None):\n" + "\n".join(body) + "\n"
        inner = "\n".join(fns + [run])
        inner += ("def mem():\n    return live, peak\n"
                  "def reset():\n    nonlocal live, peak\n    live = 0\n    peak = 0\n")
        src = "def make():\n    live = 0\n    peak = 0\n" + "".join(
            "    " + ln + "\n" for ln in inner.splitlines()) + "    return run, mem, reset\n"
        return src

    def progress_units(self):
        """``(ticks, dim)``: how many times ``run(tick)`` calls ``tick`` (the iterations of the
        outermost loops; None if one is a while loop) and the dim they run over."""
        loops = outer_loops(self.tree)
        trips = [trip_count(lp) for lp in loops]
        total = None if None in trips else sum(trips)
        groups = {g.gid: g for g in self.groups}
        for lp in loops:
            for c in walk(lp.body):
                if c.kind == "exec" and lp.it in c.args:
                    return total, groups[c.ident].domain[c.args.index(lp.it)].name
        return total, None

    def build(self, frees):
        self.frees = frees
        src = self.source()
        for n in self.pdg.nodes:
            st = self.kinds.get(n)
            self.ns[f"s{n}"] = {} if st is None else BlockStore(
                st.pos, st.lo, st.length, st.shape, st.dtype, ring=st.kind == "circular", plan=self.mode == "plan")
            self.ns[f"fr{n}"] = set()
        if self.mode == "check":
            self.ns.update(chk=self._chk, chk_many=self._chk_many, bad_free=self._bad_free, chk_shape=self._chk_shape,
                           finite=finite, nonfinite=self._nonfinite, chain_fault=self._chain_fault)
        code = compile(src, "<timerl schedule>", "exec")
        exec(code, self.ns)  # noqa: S102 - our own generated source
        run, mem, reset = self.ns["make"]()
        stores = [self.ns[f"s{n}"] for n in self.pdg.nodes]
        freed = [self.ns[f"fr{n}"] for n in self.pdg.nodes]
        return src, run, mem, reset, stores + freed

    # checking mode ----------------------------------------------------------------------
    def _where(self, n, k):
        return fmt_point(self.pdg.rec(n).domain, k)

    def _chk(self, store, freed, k, p, n):
        if k in store:
            return store[k]
        what = "after it was freed" if k in freed else "before it was written"
        if isinstance(store, BlockStore) and store.holder(k) is not None:
            what = (f"after its circular-buffer slot was overwritten by the point at "
                    f"{self.kinds[p].dim} = {store.holder(k)}")
        raise RuntimeFault(f"schedule check: tensor {self.pdg.rec(p).name!r} is read at point ({self._where(p, k)}) "
                           f"{what}, by {self.pdg.rec(n).name!r}")

    def _chk_many(self, store, freed, ks, p, n):
        for k in ks:
            self._chk(store, freed, k, p, n)
        return None

    def _chk_shape(self, v, want, p, n):
        if np.shape(v) != want:
            raise RuntimeFault(f"shape check: tensor {self.pdg.rec(p).name!r} has shape {np.shape(v)} at run time "
                               f"where its op declares {want}, read by {self.pdg.rec(n).name!r}")
        return v

    def _nonfinite(self, n, k, out, ins):
        node = self.pdg.rec(n)
        names = [self.pdg.rec(p).name for p, _ in self.pdg.inputs(n)]
        fault = nonfinite_fault(node, self._where(n, k), out, ins or [], names)
        if fault is not None:
            raise fault

    def _replay(self, seg_ext, args, k, check_finite):
        """Evaluate a kernel's segment with numpy's rules from the arguments it was called with:
        the op that raises (a take out of range) raises its RuntimeFault here; with
        ``check_finite``, the first op that makes inf/NaN from finite inputs is reported.
        Returns whether some op's input already held inf/NaN."""
        seg, ext = seg_ext
        pos = {(p, e.out): j for j, (p, e, _, _) in enumerate(ext)}
        vals, propagated = {}, False
        for m in seg:
            node = self.pdg.rec(m)
            ins = [vals[p] if p in vals else np.asarray(args[pos[(p, e.out)]], self.pdg.rec(p).dtypes[e.out]).reshape(
                self.pdg.rec(p).shapes[e.out]) for p, e in self.pdg.inputs(m)]
            ctx = Ctx(node, self.names(node.domain))
            ctx.point = k
            with np.errstate(all="ignore"):
                vals[m] = np.asarray(evaluate(node, ins, 0, ctx)[0])
            if check_finite and not finite(vals[m]):
                self._nonfinite(m, k, vals[m], ins)
                propagated = True  # an input already held inf/NaN: numpy's rules give it too
        return propagated

    def _chain_fault(self, seg_ext, r, args, k):
        """A statement kernel produced inf/NaN: find its first op that did so from finite inputs (numpy rules)."""
        if self._replay(seg_ext, args, k, True):
            return
        seg = seg_ext[0]
        raise RuntimeFault(f"non-finite check: the numba kernel of {[self.pdg.rec(m).name for m in seg]} produced "
                           f"inf/NaN at point ({self._where(seg[0], k)}) where numpy's rules give finite values "
                           "(a backend defect: please report it with this program)")

    def _conv_call(self, kern, seg_ext, args, k):
        """Call a statement kernel whose operands were not all C-contiguous arrays of its dtypes
        (a strided view, data of another dtype): converted copies; a kernel error becomes a fault."""
        ext = seg_ext[1]
        args = [np.ascontiguousarray(a, dt).reshape(statement.st(shape)) for a, (_, _, shape, dt) in zip(args, ext)] + \
            list(args[len(ext):])
        try:
            return kern(*args)
        except (IndexError, ValueError, ZeroDivisionError) as err:
            self._seg_fault(seg_ext, args, k, err)

    def _seg_fault(self, seg_ext, args, k, err):
        """A statement kernel raised: replay it with numpy's rules, whose op names the tensor and the point."""
        self._replay(seg_ext, args, k, False)
        seg = seg_ext[0]
        raise RuntimeFault(f"the numba kernel of {[self.pdg.rec(m).name for m in seg]} failed at point "
                           f"({self._where(seg[0], k)}): {err}") from err

    def _bad_free(self, n, k):
        raise RuntimeFault(f"schedule check: tensor {self.pdg.rec(n).name!r} is freed at point ({self._where(n, k)}) "
                           "before it was written")
