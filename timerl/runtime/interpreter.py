"""The interpreter: a lowered program (:mod:`timerl.runtime.lowered`) rendered as Python source.

Each statement becomes one Python function (its steps in order: an op evaluated with numpy's
rules, or one call of a statement kernel), each free one function, and the schedule's loops
plain Python loops calling them; so a run costs one call per statement instance plus the
ops themselves. Values live in one store per node, as the lowered program's buffers say: a
*slot* (one closure variable: the memory plan proved that at most one point is live at a
time, so no key is built or hashed), a block store or circular buffer
(:mod:`timerl.runtime.stores`) whose slice reads are views of one array, a table of
points, or for a node the memory plan spills, a :class:`~timerl.runtime.spill.SpillStore`
that the schedule's swap statements move to disk and back. ``live``/``peak`` count the bytes of
stored values.

:class:`Render` renders a run. Checking and planning are instrumentations of that rendering
(subclasses that override the hooks for reads, writes, frees and values):
:class:`CheckRender` also verifies that every read happens after its write and before its
free, that kernel operands have their declared shapes and that no op turns finite values
into inf/NaN; :class:`PlanRender` only counts bytes (the planned peak, no numpy work).
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import sympy

from ..config import config
from ..errors import RuntimeFault
from ..ir import rng
from ..ir.expr import compile_py, cond_to_py, to_py
from ..ir.ops import Op, Slice
from ..ir.polyhedral import fmt_point
from ..ir.semantics import BINARY, UNARY, evaluate
from ..kernels import cpu, statement
from ..schedule.tree import iterators, outer_loops, render, ticked, trip_count, walk
from .checks import checks_finite, finite, nonfinite_fault
from .loops import INLINED
from .lowered import lower
from .reference import _readonly, call_sink, call_udf
from .spill import SpillSession, SpillStore
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


def fast_ufunc(pdg, n):
    """``(fn, result dtype)`` when numpy evaluates op ``n`` as one direct call, else None."""
    node = pdg.rec(n)
    if node.op not in (Op.UNARY, Op.BINARY):
        return None
    fn = (UNARY if node.op is Op.UNARY else BINARY).get(node.attrs.get("fn"))
    if fn is None:
        return None
    got = _probe(fn, [pdg.rec(p).dtypes[e.out] for p, e in pdg.inputs(n)])
    return None if got is None else (fn, got)


def in_place(pdg, n) -> bool:
    """Whether op ``n`` can write its result into an operand's buffer (a ufunc with ``out=``
    that gives the op's own dtype): a donation to any other op is declined."""
    f = fast_ufunc(pdg, n)
    return f is not None and isinstance(f[0], np.ufunc) and f[1] == np.dtype(pdg.rec(n).dtype)


def nbytes_of(node):
    """The bytes of one point of ``node`` when its shapes are static, else None."""
    total = 0
    for shape, dt in zip(node.shapes, node.dtypes):
        if not all(isinstance(s, int) for s in shape):
            return None
        total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
    return total


class SlotStore:
    """The slots of a rendered program seen as one store: its length is the number of slots
    holding a value; ``clear()`` empties them."""

    def __init__(self, held, drop):
        self._held, self._drop = held, drop

    def __len__(self):
        return self._held()

    def clear(self):
        self._drop()


class Render:
    """Python source of a lowered program that runs it (see the module docstring)."""

    inline_blocks = True
    #: how a block array is allocated (the cuda backend: from its device pool)
    EMPTY = "np.empty"
    #: the statement-kernel generator (:mod:`timerl.kernels.statement`; cuda: :mod:`timerl.kernels.cuda`)
    kgen = statement
    #: the class of block stores and rings kept as objects (cuda: on the device)
    block_store = BlockStore
    #: what the statement kernels are, in fault messages
    KERNELS = "numba"

    @staticmethod
    def host_value(a):
        """A kernel's argument as numpy's rules read it, replaying a failed kernel (cuda: copied
        from the device)."""
        return a
    spill_store = SpillStore

    def __init__(self, prog, pdg, bounds, seed, low, backend):
        self.prog, self.pdg, self.bounds, self.seed, self.low, self.backend = prog, pdg, bounds, seed, low, backend
        # spilled nodes keep a SpillStore whatever their kind
        self.spills = {n: b.spill for n, b in low.buffers.items() if b.spill is not None}
        own = {n: b for n, b in low.buffers.items() if b.spill is None}
        self.session = SpillSession() if self.spills else None
        self.slots = sorted(n for n, b in own.items() if b.kind == "slot")
        self.cells = {n: b for n, b in own.items() if b.kind == "cells"}
        # a block store that never holds two blocks: one array in a variable (None between blocks),
        # rows addressed by the coordinate along the block; the instrumented renderers keep the
        # BlockStore object, which also verifies every read against the points it holds
        self.run_arrays = {n: b.storage for n, b in own.items() if b.kind in ("block", "circular") and b.single}
        self.arrays = self.run_arrays if self.inline_blocks else {}
        self.blocks = {n: b.storage for n, b in own.items() if b.kind in ("block", "circular")}
        self.stored = set(low.buffers)
        self.kernels = {}
        self.ns = {"np": np, "gather": gather, "ring_rows": ring_rows, "gather_keys": gather_keys, "RuntimeFault": RuntimeFault,
                   "call_udf": call_udf, "call_sink": call_sink, "ro": _readonly, "evaluate": evaluate, "rng": rng,
                   "min": min, "max": max, "seg_fault": self._seg_fault, "conv_call": self._conv_call}
        self._rendered = {}
        self._assigned = set()  # closure variables assigned by the function being rendered
        self._steps = None  # node -> the step computing it (Render.step_of)
        self._ps = {}  # the slots' own arrays rendered: name -> (shape, dtype)
        self.ns["persist_alloc"] = self.persist_alloc
        self.double = {}  # slot -> the branch reading it as it is (two arrays: persistent_slots)
        self.persist = self.persistent_slots()  # slot -> bytes of its array of its own (held from the start)

    # slots kept in arrays of their own ---------------------------------------------------
    #: a slot a kernel computes gets an array of its own, allocated once, which every execution's
    #: kernel writes into (a parameter ``o<k>``), when it has at most this many bytes: boxing a fresh
    #: array as a kernel result costs about 0.35 us here (22 returned arrays: 8.1 us a call, 22
    #: arrays passed in to be written: 1.1 us), 1,534 of them an iteration of CartPole PPO
    PERSIST_BYTES = 1 << 16
    #: and while all of them together hold at most this many (counted as live from the run's start)
    PERSIST_TOTAL = 4 << 20
    #: the ops whose value may share its operand's buffer (a view of it)
    VIEWISH = frozenset({Op.RESHAPE, Op.PERMUTE, Op.EXPAND, Op.SLICE, Op.ACCESS, Op.MERGE})

    def step_of(self, n):
        """The lowered step computing node ``n`` (None: no step does)."""
        if self._steps is None:
            self._steps = {m: st for s in self.low.statements for st in s.steps
                           for m in (st.members if st.kind == "kernel" else (st.node,))}
        return self._steps.get(n)

    def persistent_slots(self) -> dict:
        """Slot -> bytes: the slots whose kernel writes each value into one array allocated
        once per run (``PS<n>``; see :data:`PERSIST_BYTES`), or into one of two (``self.double``);
        their bytes count as live for the whole run.

        A slot holds one live point at a time (the memory plan's proof, with the readers of its
        views counted as its readers), so the array is free again when the next execution writes
        it, unless something the plan does not see still shares it. So a slot qualifies when no
        UDF or sink reads it (user code may keep the array), no op writes into it (a donation),
        every op that reads it as it is (a placeholder's branch, an access) is a view of the
        memory plan, no kernel stores a movement op of it among its results, and it is not itself
        a view. Only on the numba backend, and not when checking (its kernels return every member).

        A recurrence (an optimizer's ``p[k] = merge(p0, p_new[k - 1])``, ``p_new[k] = f(p[k])``)
        reads the slot through a branch that is not a view (the placeholder ``p`` is a slot of its
        own): ``p[k]`` is ``p_new[k - 1]``'s array while ``p_new[k]`` is computed. Such a slot gets
        two arrays, and each execution writes the one the branch does not hold now
        (:meth:`_double`)."""
        if self.backend != "numba":
            return {}
        out, total = {}, 0
        for s in self.low.statements:
            for st in s.steps:
                if st.kind != "kernel":
                    continue
                for n in st.outputs:
                    node = self.pdg.rec(n)
                    if n not in self.slots or n in self.spills or n in self.low.views or len(node.shapes) != 1 \
                            or not len(node.shape) or node.op in self.VIEWISH:
                        continue
                    k = nbytes_of(node)
                    if k is None or k > self.PERSIST_BYTES:
                        continue
                    aliases = self._aliases(n)
                    if aliases is None or len(aliases) > 1 or (aliases and not self._double(n, st, aliases[0])):
                        continue
                    k *= 1 + len(aliases)
                    if total + k > self.PERSIST_TOTAL:
                        continue
                    if aliases:
                        self.double[n] = aliases[0]
                    out[n] = k
                    total += k
        return out

    def _holds(self, x, c):
        """How reader ``c`` of ``x`` treats ``x``'s array: True when ``c``'s value is that array (an
        op reading it as it is), False when it is not, None when something may keep the array
        beyond ``c``'s execution (user code, a donation, a view a kernel stores)."""
        st = self.step_of(c)
        if st is None:
            return None
        op = self.pdg.rec(c).op
        if st.kind == "kernel":
            todo, seen = [c], set()
            while todo:  # a chain of movement ops inside that kernel, stored by it
                m = todo.pop()
                if m in seen or m not in st.members or self.pdg.rec(m).op not in self.VIEWISH:
                    continue
                if m in st.outputs:
                    return None
                seen.add(m)
                todo += [y for y, _ in self.pdg.consumers(m)]
            return False
        if op in (Op.UDF, Op.SINK) or (st.donate is not None and self.pdg.inputs(c)[st.donate][0] == x):
            return None
        return op in self.VIEWISH and (c not in self.blocks or c in self.spills)  # a block copies its rows

    def _aliases(self, n):
        """The ops that read ``n``'s array as it is without being views of the memory plan (whose
        readers count as ``n``'s: :meth:`persistent_slots`); None when a reader may keep it."""
        out = []
        for c, _ in self.pdg.consumers(n):
            h = self._holds(n, c)
            if h is None:
                return None
            if h and c not in self.low.views:
                out.append(c)
        return out

    def _holders(self, n):
        """The slots whose value may be ``n``'s array itself (ops reading it as it is, those reading
        them, and so on); None when a reader may keep it or a holder is not a slot."""
        out, todo = [], [n]
        while todo:
            x = todo.pop()
            for c, _ in self.pdg.consumers(x):
                h = self._holds(x, c)
                if h is None or (h and c in self.stored and (c not in self.slots or c in self.spills)):
                    return None
                if h and c not in out and c != n:
                    out.append(c)
                    todo.append(c)
        return out

    def _double(self, n, st, c) -> bool:
        """Whether two arrays serve slot ``n``, which ``c`` reads as it is: each execution writes
        the one no slot holding ``n``'s array holds now (:meth:`_holders`, tested when it runs;
        when both are held, a fresh array). ``c`` must be read by ``n``'s own kernel at the point it
        computes: then that execution's ``c[P]``, written just before, holds the latest value, and
        any older value is dead (the slots hold one live point each), so the test passes."""
        node, cn = self.pdg.rec(n), self.pdg.rec(c)
        dims = [d.name for d in node.domain]
        if c not in self.slots or [d.name for d in cn.domain] != dims or self._holders(n) is None:
            return False
        return any(p == c and [str(x) for x in e.index] == dims for m in st.members for p, e in self.pdg.inputs(m))

    def persist_bytes(self) -> int:
        return sum(self.persist.values())

    def persist_array(self, n, suffix="") -> str:
        """The name of slot ``n``'s own array (the compiled loops' renderer shares it; each run
        allocates it anew at its start and drops it at its end: :meth:`persist_alloc`)."""
        name = f"PS{n}{suffix}"
        a = self.ns.get(name)
        if a is None:
            node = self.pdg.rec(n)
            a = np.empty(tuple(node.shape), node.dtype)
            self._ps[name] = (a.shape, a.dtype)
        return self.sym(name, a)

    def fresh_array(self, n) -> str:
        node = self.pdg.rec(n)
        return f"np.empty({tuple(node.shape)}, {self.sym(f'pdt{n}', np.dtype(node.dtype))})"

    @staticmethod
    def same_array(a, b) -> str:
        """Python expression: are ``a`` and ``b`` the same array (compiled loops: of one buffer)."""
        return f"{a} is {b}"

    def persist_alloc(self, on=True):
        """The slots' own arrays allocated (``on``) or dropped, in the rendered namespace."""
        for name, (shape, dt) in self._ps.items():
            self.ns[name] = np.empty(shape, dt) if on else None

    # names ---------------------------------------------------------------------------
    def names(self, domain):
        out = {d.e: f"d_{d.name}" for d in domain}
        out.update({b.e: str(self.bounds[b.name]) for b in self.prog.bounds if b.name in self.bounds})
        return out

    @staticmethod
    def key(dims, own=None):
        """The point key of ``dims``; ``K_`` (built once per execution) for the statement's own."""
        if own is not None and tuple(dims) == tuple(own) and dims:
            return "K_"
        return "(" + "".join(f"d_{d.name}, " for d in dims) + ")"

    def sym(self, name, value):
        self.ns[name] = value
        return name

    def nb(self, n, v):
        """Python expression of the bytes of value ``v`` of node ``n`` (a view: none of its own)."""
        if n in self.low.views:
            return "0"
        node = self.pdg.rec(n)
        k = nbytes_of(node)
        if k is not None:
            return str(k)
        return f"sum(x.nbytes for x in {v})" if len(node.shapes) > 1 else f"{v}.nbytes"

    # reads (hooks) ---------------------------------------------------------------------
    def operand(self, n, p, e, own):
        """Python expression for operand ``e`` of node ``n`` (producer ``p``) in a statement over ``own``."""
        node, pnode = self.pdg.rec(n), self.pdg.rec(p)
        if node.op in (Op.ACCESS, Op.MERGE):
            nm = self.names(node.domain)
            parts = [f"range({to_py(x.start, nm)}, {to_py(x.stop, nm)})" if isinstance(x, Slice) else to_py(x, nm)
                     for x in e.index]
            ent = "(" + "".join(q + ", " for q in parts) + ")"
            if any(isinstance(x, Slice) for x in e.index):
                if p in self.arrays:
                    sl = e.index[self.arrays[p].pos]
                    return self.array_rows(p, to_py(sl.start, nm), to_py(sl.stop, nm), e.out)
                return self.read_slices(n, p, e, ent)
            key = ent
        else:
            key, parts = self.key(pnode.domain, own), [f"d_{d.name}" for d in pnode.domain]
        return self.read_point(n, p, e.out, key, parts)

    def _sfx(self, p, out):
        return f"[{out}]" if len(self.pdg.rec(p).shapes) > 1 else ""

    def cell(self, n, parts=None):
        """The index of a point of cells ``n`` (coordinates ``parts``; None: the node's own point)."""
        b = self.cells[n]
        x = parts[b.pos] if parts is not None else f"d_{self.pdg.rec(n).domain[b.pos].name}"
        return f"({x}) % {b.length}"

    def row(self, n, parts=None):
        """The row of block array ``n`` holding a point (coordinates ``parts``; None: its own)."""
        st = self.arrays[n]
        x = parts[st.pos] if parts is not None else f"d_{self.pdg.rec(n).domain[st.pos].name}"
        off = f"({x}) - {st.lo}" if st.lo else x
        return f"({off}) % {st.length}" if st.kind == "circular" else off

    def avars(self, n):
        """The variables of block array ``n``: one per output."""
        outs = self.arrays[n].outs
        return [f"b{n}"] if len(outs) <= 1 else [f"b{n}_{j}" for j in range(len(outs))]

    def array_bytes(self, n):
        return self.arrays[n].length * nbytes_of(self.pdg.rec(n))

    def array_rows(self, p, a, b, out=0):
        """The rows of block array ``p`` (output ``out``) for the points ``a .. b - 1`` along its
        dim: a view (a ring: a copy, its slots are rewritten)."""
        st, var = self.arrays[p], self.avars(p)[out]
        shape, dt = st.outs[out]
        empty = self.sym(f"e{p}_{out}", np.zeros((0,) + tuple(shape), dt))
        if st.kind == "circular":
            return f"ring_rows({var}, ({a}) - {st.lo}, ({b}) - ({a}), {st.length}, {empty})"
        a, b = (f"({a}) - {st.lo}", f"({b}) - {st.lo}") if st.lo else (a, b)
        return f"({var}[{a}:{b}] if {var} is not None else {empty})"

    def read_point(self, n, p, out, key, parts):
        if p in self.arrays:
            ring = self.arrays[p].kind == "circular"  # a ring's row is written again: a copy
            return f"{self.avars(p)[out]}[{self.row(p, parts)}]" + (".copy()" if ring else "")
        if p in self.slots:
            v = f"v{p}"
        elif p in self.cells:
            v = f"c{p}[{self.cell(p, parts)}]"
        else:
            v = f"s{p}[{key}]"
        return v + self._sfx(p, out)

    def read_slices(self, n, p, e, ent):
        if p in self.blocks or (p in self.spills and self.spills[p].unit == "block"):
            return f"s{p}.gather({ent}{f', {e.out}' if len(self.pdg.rec(p).shapes) > 1 else ''})"
        pnode = self.pdg.rec(p)
        multi = len(pnode.shapes) > 1
        return (f"gather(s{p}, {e.out if multi else None}, {ent}, "
                f"{self.sym(f'sp{p}_{e.out}', pnode.shapes[e.out])}, {self.sym(f'dt{p}_{e.out}', pnode.dtypes[e.out])})")

    # writes and frees (hooks) -------------------------------------------------------------
    def write(self, n, key, v="o"):
        if n in self.spills:
            return [f"live += s{n}.put({key}, {v})"]
        if n in self.arrays:
            names, row = self.avars(n), self.row(n)
            L = self.array_alloc(n)
            L += [f"{var}[{row}] = {v}[{j}]" for j, var in enumerate(names)] if len(names) > 1 else \
                [f"{names[0]}[{row}] = {v}"]
            return L + [f"bn{n} += 1"]
        if n in self.blocks:
            return [f"live += s{n}.put({key}, {v})"]
        if n in self.slots:
            self._assigned.add(f"v{n}")
            return [f"v{n} = {v}"] + self.count(n, v, "+")
        if n in self.cells:
            return [f"c{n}[{self.cell(n)}] = {v}"] + self.count(n, v, "+")
        return [f"s{n}[{key}] = {v}"] + self.count(n, v, "+")

    def count(self, n, v, sign):
        """``live`` raised (``+``) or lowered (``-``) by the bytes of value ``v`` of ``n``: no line
        for a value of no bytes of its own (a view) or in an array of its own (counted from the start)."""
        if n in self.persist:
            return []
        k = self.nb(n, v)
        return [] if k == "0" else [f"live {sign}= {k}"]

    def array_alloc(self, n):
        """The block array of ``n``, allocated when its first point of a block is written."""
        st, names = self.arrays[n], self.avars(n)
        self._assigned.update(names + [f"bn{n}"])
        L = [f"if {names[0]} is None:"]
        for j, (var, (sh, dt)) in enumerate(zip(names, st.outs)):
            L.append(f"    {var} = {self.EMPTY}({(st.length,) + tuple(sh)}, {self.sym(f'dt{n}_{j}', np.dtype(dt))})")
        return L + [f"    live += {self.array_bytes(n)}"]

    def drop(self, n, key, var="v"):
        """Release the value of ``n`` at ``key`` (a free, or a donation handing its buffer over)."""
        if n in self.spills:
            return [f"live -= s{n}.free({key})"]
        if n in self.arrays:  # the block goes with its last live point
            names = self.avars(n)
            self._assigned.update(names + [f"bn{n}"])
            return [f"bn{n} -= 1", f"if bn{n} == 0:"] + [f"    {v} = None" for v in names] + \
                [f"    live -= {self.array_bytes(n)}"]
        if n in self.blocks:
            return [f"live -= s{n}.free({key})"]
        if n in self.slots:  # (a value of no bytes of its own: nothing to count, no test)
            self._assigned.add(f"v{n}")
            less = self.count(n, f"v{n}", "-")
            return [f"if v{n} is not None:", "    " + less[0], f"    v{n} = None"] if less else [f"v{n} = None"]
        if n in self.cells:
            j = self.cell(n)
            less = self.count(n, var, "-")
            return [f"{var} = c{n}[{j}]", f"if {var} is not None:", "    " + less[0], f"    c{n}[{j}] = None"] \
                if less else [f"c{n}[{j}] = None"]
        less = self.count(n, var, "-")
        return [f"{var} = s{n}.pop({key}, None)", f"if {var} is not None:", "    " + less[0]] if less else \
            [f"s{n}.pop({key}, None)"]

    def free(self, n, key):
        return self.drop(n, key)

    def take(self, p, key):
        """A donation: the operand's buffer now holds the consumer's value."""
        return self.drop(p, key, "dv")

    # values (hooks) -----------------------------------------------------------------------
    def value(self, step, own):
        """Lines computing op ``step.node``'s value ``o`` at the statement's point."""
        n = step.node
        node, op = self.pdg.rec(n), self.pdg.rec(n).op
        ins = self.pdg.inputs(n)
        k = self.key(node.domain, own)
        args = [self.operand(n, p, e, own) for p, e in ins]
        L = []
        if op is Op.MERGE:
            nm = self.names(node.domain)
            for j, ((p, e), a) in enumerate(zip(ins, args)):
                c = cond_to_py(sympy.sympify(e.cond), nm) if e.cond is not None else "True"
                if c == "True":  # applies wherever the earlier branches do not: the later ones never run
                    L += ["else:", f"    o = {a}"] if j else [f"o = {a}"]
                    break
                L += [f"{'if' if j == 0 else 'elif'} {c}:", f"    o = {a}"]
            else:
                msg = f"placeholder {node.name!r}: no branch applies at point "
                L += ["else:", f"    raise RuntimeFault({msg!r} + str({k}))"]
        elif op is Op.ACCESS:
            L.append(f"o = {args[0]}")
        elif op is Op.CONST:  # the graph keeps it C-ordered (ir.ops.frozen), as kernels take it
            L.append(f"o = {self.sym(f'const{n}', node.attrs['value'])}")
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
        elif (fast := fast_ufunc(self.pdg, n)) is not None:
            fn, got = fast
            name = self.sym(f"uf{n}", fn)
            if step.donate is not None:
                p, _ = ins[step.donate]
                L.append(f"o = {name}({', '.join(args)}, out={args[step.donate]})")
                L += self.take(p, self.key(self.pdg.rec(p).domain, own))
            else:
                cast = "" if got == node.dtype else f".astype({self.sym(f'dt{n}', np.dtype(node.dtype))})"
                L.append(f"o = {name}({', '.join(args)}){cast}")
        else:
            ctx = self.sym(f"ctx{n}", Ctx(node, self.names(node.domain)))
            L.append(f"{ctx}.point = {k}")
            L.append(f"o = evaluate({self.sym(f'node{n}', node)}, [{', '.join(args)}], 0, {ctx})[0]")
        return L, args

    def op_lines(self, step, own):
        L, _ = self.value(step, own)
        for o in step.outputs:
            L += self.write(o, self.key(self.pdg.rec(o).domain, own))
        return L

    # statement kernels --------------------------------------------------------------------
    def _render(self, seg, returned, outs=()):
        key = (tuple(seg), tuple(returned), tuple(outs))
        if key not in self._rendered:
            self._rendered[key] = self.kgen.render(self.pdg, seg, returned, outs)
        return self._rendered[key]

    def outs(self, step):
        """The outputs a kernel writes straight into their rows of a block array (of one output, at
        least one axis, the row's shape and dtype; not a ring, whose rows are written again while a
        view of an old one may live on)."""
        out = []
        for o in step.outputs:  # (as the run does, also when planning: the planned peak is the run's)
            node, st = self.pdg.rec(o), self.run_arrays.get(o)
            if st is not None and st.kind == "block" and len(node.shapes) == 1 and len(node.shape) and \
                    tuple(st.shape) == tuple(node.shape) and np.dtype(st.dtype) == np.dtype(node.dtype):
                out.append(o)
            elif o in self.persist:
                out.append(o)
        return out

    def returned(self, step):
        """The members a kernel returns as fresh arrays (a run: the stored ones not written in place)."""
        outs = self.outs(step)
        return [o for o in step.outputs if o not in outs]

    def prewarm(self):
        """Render every statement kernel first and compile the new ones in parallel (cpu.prewarm)."""
        cpu.prewarm([self._render(st.members, self.returned(st), self.outs(st))[0]
                     for s in self.low.statements for st in s.steps if st.kind == "kernel"])

    def kernel_peak(self, step):
        """The kernel's own arrays (temporaries and returned ones) count toward the peak while it
        runs, on top of what is stored (:func:`timerl.kernels.statement.transient_bytes`)."""
        src = self._render(step.members, self.returned(step), self.outs(step))[0]
        x = statement.transient_bytes(self.pdg, step.members, src)
        return self.peak_check(f"live + {x}") if x else []

    def peak_check(self, now="live"):
        """Lines raising ``peak`` to ``now`` when it is higher."""
        return [f"if {now} > peak:", f"    peak = {now}"]

    def load_kernel(self, src):
        return cpu.load(src)

    def kernel_call(self, step, own, args, info):
        kid = f"K{step.node}"
        k = self.key(own, own)
        # operands go as they are: numba rejects (TypeError, nothing compiled) one that is not a
        # C-contiguous array of the kernel's dtype, and conv_call converts them and calls again
        return ["try:", f"    r = {kid}({', '.join(args)})",
                "except TypeError:",
                f"    r = conv_call({kid}, {info}, [{', '.join(args)}], {k})",
                "except (IndexError, ValueError, ZeroDivisionError) as err:",
                f"    seg_fault({info}, [{', '.join(args)}], {k}, err)"]

    def kernel_operand(self, p, e, shape, reader, own):
        if not len(shape) and self.pdg.rec(p).op is Op.CONST:
            # a 0-d constant: its (1,)-shaped view once, not a reshape per call
            return self.sym(f"c{p}_1", self.pdg.rec(p).attrs["value"].reshape(1))
        a = self.operand(reader, p, e, own)
        return a if len(shape) else f"{a}.reshape(1)"  # a 0-d value: shape (1,) in a kernel

    def kernel_lines(self, step, own):
        """One statement-kernel call computing ``step.members``; stores its outputs."""
        seg, returned, outs = step.members, self.returned(step), self.outs(step)
        src, ext, consts, dims, keys = self._render(seg, returned, outs)
        kid = f"K{step.node}"
        self.kernels[kid] = src
        self.ns[kid] = self.load_kernel(src)
        readers = {}
        for n in seg:
            for p, e in self.pdg.inputs(n):
                readers.setdefault((p, e.out), n)
        args = [self.kernel_operand(p, e, shape, readers[(p, e.out)], own) for p, e, shape, _ in ext]
        args += [self.sym(f"kc{step.node}_{j}", c) for j, c in enumerate(consts)]
        args += [f"d_{d}" for d in dims]
        for r in keys:  # the random op's key before the point: of the seed and its stream
            args.append(self.sym(f"key{r}", rng.node_key(self.seed, self.pdg.rec(r).attrs)))
        L = []
        for o in outs:  # the kernel writes these into their rows of the block arrays, or a slot's array
            if o in self.double:  # the one of its two arrays no slot holds now (a fresh one if both are)
                a, b = self.persist_array(o, "a"), self.persist_array(o, "b")
                held = [self.read_point(o, x, 0, None, None) for x in [o] + self._holders(o)]
                free = {z: " or ".join(self.same_array(h, z) for h in held) for z in (a, b)}
                L.append(f"q{o} = {a} if not ({free[a]}) else {b} if not ({free[b]}) else {self.fresh_array(o)}")
                args.append(f"q{o}")
                continue
            if o in self.persist:
                args.append(self.persist_array(o))
                continue
            L += self.array_alloc(o)
            args.append(f"{self.avars(o)[0]}[{self.row(o)}]")
        info = self.sym(f"seg{step.node}", (seg, ext))
        L += self.kernel_call(step, own, args, info)
        L += self.kernel_peak(step)
        k = self.key(own, own)
        for o in step.outputs:
            if o in self.persist:
                L += self.write(o, k, f"q{o}" if o in self.double else f"PS{o}")
                continue
            if o in outs:
                L.append(f"bn{o} += 1")
                continue
            L.append(f"o = {self.kernel_result(returned.index(o), tuple(self.pdg.rec(o).shape))}")
            L += self.write(o, k)
        return L

    @staticmethod
    def kernel_result(j, shape):
        """The kernel's ``j``-th returned array as the value stored (a 0-d value: returned as (1,))."""
        return f"r[{j}]" + ("" if len(shape) else ".reshape(())")

    # whole program -------------------------------------------------------------------------
    def statement_fn(self, s):
        self._assigned = set()
        body = self.statement_body(s)
        return self._fn(f"G{s.gid}", ", ".join(f"d_{d.name}" for d in s.domain), body)

    def statement_body(self, s):
        """The lines of one execution of statement ``s`` (its point in ``d_<dim>`` variables)."""
        own = s.domain
        body = []
        for step in s.steps:
            body += self.kernel_lines(step, own) if step.kind == "kernel" else self.op_lines(step, own)
        body += self.peak_check()
        at_points = {}  # frees at the tail of their last reader; those at one point under one test
        for n, at in s.tails:
            if n in self.stored:
                if at is None:
                    body += self.free(n, self.key(self.pdg.rec(n).domain, own))
                else:
                    at_points.setdefault(tuple(at), []).extend(self.free(n, self.key(self.pdg.rec(n).domain, own)))
        for at, lines in at_points.items():
            body.append(f"if {self.key(own, own)} == {at!r}:")
            body += ["    " + ln for ln in lines]
        if own and any("K_" in ln for ln in body):  # the point's key, built once per execution that reads it
            body = [f"K_ = {self.key(own)}"] + body
        return body

    def _fn(self, name, args, body):
        nl = ", ".join(["live", "peak"] + sorted(self._assigned))
        return f"def {name}({args}):\n    nonlocal {nl}\n" + "".join(f"    {ln}\n" for ln in body)

    def free_body(self, n):
        """The lines of the free of ``n`` at the point ``d_<dim>`` (``self._assigned``: what they
        assign); ``pass`` for a value computed inside a kernel and never stored."""
        self._assigned = set()
        return self.free(n, self.key(self.pdg.rec(n).domain)) if n in self.stored else ["pass"]

    def free_fn(self, n):
        body = self.free_body(n)
        return self._fn(f"F{n}", ", ".join(f"d_{d.name}" for d in self.pdg.rec(n).domain), body)

    def inline_free(self, c, iters, inlined):
        """The lines of free call ``c`` written where it runs (in ``run`` or a replay), instead of a
        call of its function: PPO's learner frees about 2,400 values an iteration, and a Python
        call costs more than the test and decrement it runs. Adds the names it assigns to
        ``inlined``. None (call the function) for a cell whose list's name is a loop iterator's."""
        n = c.ident
        if n in self.cells and f"c{n}" in iters:
            return None
        body = self.free_body(n)
        inlined |= self._assigned
        text = "\n".join(body)
        return [f"d_{d.name} = {a}" for d, a in zip(self.pdg.rec(n).domain, c.args)
                if re.search(rf"\bd_{d.name}\b", text)] + body

    def swap_fns(self, n):
        """The swap statements of spilled node ``n`` (:mod:`timerl.schedule.spill`): swap-out per
        point, with the outputs it writes; swap-in, prefetch and wait per unit (a block or a point).
        A swap-in counts toward the peak from when it is issued."""
        sw, node = self.spills[n], self.pdg.rec(n)
        self._assigned = set()
        point = ", ".join(f"d_{d.name}" for d in node.domain)
        unit = ", ".join(f"d_{d}" for d in sw.dims)
        keep = "(" + "".join(f"{k}, " for k in sw.keep) + ")"
        ukey = "(" + "".join(f"d_{d}, " for d in sw.dims) + ")"
        peak = self.peak_check()
        return [self._fn(f"O{n}", point, [f"live -= s{n}.out({self.key(node.domain)}, {keep})"]),
                self._fn(f"I{n}", unit, [f"live += s{n}.fetch({ukey})"] + peak),
                self._fn(f"P{n}", unit, [f"live += s{n}.fetch({ukey}, True)"] + peak),
                self._fn(f"V{n}", unit, [f"s{n}.wait({ukey})"])]

    #: the rendered function each kind of schedule call runs (then its id)
    CALLS = {"exec": "G", "free": "F", "swap_out": "O", "swap_in": "I", "prefetch": "P", "swap_wait": "V",
             "jit": "J"}
    #: whether loops of statement kernels become numba functions (:mod:`timerl.runtime.loops`)
    compile_loops = True

    def source(self) -> str:
        if self.backend == "numba":
            cpu.tune_malloc()
            self.prewarm()
        fns = [self.statement_fn(s) for s in self.low.statements]
        fns += [self.free_fn(n) for n in sorted(set(self.low.frees) | self.stored)]
        fns += [f for n in sorted(self.spills) for f in self.swap_fns(n)]

        tree = ticked(self.low.tree)
        iters, inlined = iterators(tree), {"live", "peak"}

        def call_line(c):
            if c.kind == "tick":  # progress: once per iteration of the outermost loops, when asked for
                return "if tick is not None: tick()"
            if c.kind == "free":
                lines = self.inline_free(c, iters, inlined)
                if lines is not None:
                    return "\n".join(lines)
            return f"{self.CALLS[c.kind]}{c.ident}({', '.join(c.args)})"

        self.loops, self.declined, lc, kept = [], [], None, set()
        if self.backend == "numba" and self.compile_loops and config.compile_loops:
            from .loops import LoopCompiler  # noqa: PLC0415 - imports this module

            lc = LoopCompiler(self)  # loops of statement kernels as numba functions (runtime.loops)
            tree = lc.tree(tree)
            self.loops, self.declined = lc.loops, lc.declined
        body = render(tree, call_line, 1) or ["    pass"]
        if lc is not None:
            kept = lc.kept_cells(body, fns, tree)
            fns += lc.wrappers(call_line, kept)
        slots, cells = self.slot_vars(), self.cell_lists()  # variables (None when empty), lists of cells
        counts = [f"bn{n}" for n in sorted(self.arrays)]  # live points of each block array
        # what holds a value: a slot, a block array (its first output's variable), a cell
        held = [f"(v{n} is not None)" for n in self.slots] + \
            [f"({self.avars(n)[0]} is not None)" for n in sorted(self.arrays)] + \
            [f"int(ch{n}.sum())" if n in kept else f"sum(x is not None for x in c{n})" for n in sorted(self.cells)]
        # the frees written in place assign the state: ``run`` and the replays declare it theirs
        nonlocal_line = f"    nonlocal {', '.join(sorted(inlined))}\n"
        fns = [f.replace(f"\n{INLINED}\n", "\n" + nonlocal_line, 1) for f in fns]
        held0 = self.persist_bytes()  # the slots' own arrays: live from the start to the end of a run
        body += [f"    live -= {held0}", "    persist_alloc(False)"] if held0 else []
        run = "def run(tick=None):\n" + nonlocal_line + "\n".join(body) + "\n"
        nl = f"    nonlocal {', '.join(slots + counts)}\n" if slots + counts else ""
        inner = "\n".join(fns + [run])
        inner += ("def mem():\n    return live, peak\n"
                  f"def reset():\n    nonlocal live, peak\n    live = {held0}\n    peak = {held0}\n"
                  + ("    persist_alloc()\n" if held0 else "")
                  + f"def drop_slots():\n{nl}" + "".join(f"    {v} = None\n" for v in slots)
                  + "".join(f"    {c} = 0\n" for c in counts)
                  + "".join(f"    {c}[:] = [None] * {k}\n" for c, k in cells)
                  + "".join(f"    ch{n}[:] = False\n" for n in sorted(kept)) + "    return None\n"
                  "def held():\n    return " + " + ".join(["0"] + held) + "\n" + self.extra_fns())
        head = f"def make():\n    live = {held0}\n    peak = {held0}\n" + "".join(f"    {v} = None\n" for v in slots) + \
            "".join(f"    {c} = 0\n" for c in counts) + "".join(f"    {c} = [None] * {k}\n" for c, k in cells) + \
            "".join(f"    x{n}, ch{n} = jcells(c{n}, Dc{n})\n" for n in sorted(kept))
        return head + "".join("    " + ln + "\n" for ln in inner.splitlines()) + \
            "    return run, mem, reset, held, drop_slots\n"

    def extra_fns(self) -> str:
        """Functions of an instrumented rendering, beside ``run``."""
        return ""

    def slot_vars(self):
        return [f"v{n}" for n in self.slots] + [v for n in sorted(self.arrays) for v in self.avars(n)]

    def cell_lists(self):
        return [(f"c{n}", b.length) for n, b in sorted(self.cells.items())]

    counts_only = False  # PlanRender: values are byte counts, block stores hold no arrays

    def stores(self):
        for n in self.pdg.nodes:
            if n in self.slots or n in self.cells or n in self.arrays:
                continue
            st = self.blocks.get(n)
            if n in self.spills:
                self.ns[f"s{n}"] = self.spill_store(self.spills[n], self.session, plan=self.counts_only)
                continue
            self.ns[f"s{n}"] = {} if st is None else self.block_store(
                st.pos, st.lo, st.length, st.shape, st.dtype, ring=st.kind == "circular", plan=self.counts_only,
                outs=st.outs)
        # the spill session last: its files go once the stores are cleared
        return [self.ns[f"s{n}"] for n in self.pdg.nodes
                if n not in self.slots and n not in self.cells and n not in self.arrays] + \
            ([self.session] if self.session is not None else [])

    def build(self):
        src = self.source()
        stores = self.stores()
        code = compile(src, "<timerl schedule>", "exec")
        exec(code, self.ns)  # noqa: S102 - our own generated source
        run, mem, reset, held, drop_slots = self.ns["make"]()
        return src, run, mem, reset, stores + [SlotStore(held, drop_slots)]

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

    # faults ---------------------------------------------------------------------------------
    def _where(self, n, k):
        return fmt_point(self.pdg.rec(n).domain, k)

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
            ins = [vals[p] if p in vals else np.asarray(self.host_value(args[pos[(p, e.out)]]),
                                                        self.pdg.rec(p).dtypes[e.out]).reshape(
                self.pdg.rec(p).shapes[e.out]) for p, e in self.pdg.inputs(m)]
            ctx = Ctx(node, self.names(node.domain))
            ctx.point = k
            with np.errstate(all="ignore"):
                vals[m] = np.asarray(evaluate(node, ins, 0, ctx)[0])
            if check_finite and not finite(vals[m]):
                self._nonfinite(m, k, vals[m], ins)
                propagated = True  # an input already held inf/NaN: numpy's rules give it too
        return propagated

    def _nonfinite(self, n, k, out, ins):
        node = self.pdg.rec(n)
        names = [self.pdg.rec(p).name for p, _ in self.pdg.inputs(n)]
        fault = nonfinite_fault(node, self._where(n, k), out, ins or [], names)
        if fault is not None:
            raise fault

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
        raise RuntimeFault(f"the {self.KERNELS} kernel of {[self.pdg.rec(m).name for m in seg]} failed at point "
                           f"({self._where(seg[0], k)}): {err}") from err


def ring_rows(arr, a, n, length, empty):
    """Rows ``a .. a + n - 1`` (modulo ``length``) of a circular buffer, copied."""
    if n <= 0 or arr is None:
        return empty.copy()
    a %= length
    if a + n <= length:
        return arr[a:a + n].copy()
    return np.concatenate((arr[a:], arr[:a + n - length]))


class CheckRender(Render):
    """A run that also checks the schedule and the values (``compile(check=True)``).

    Block stores stay :class:`~timerl.runtime.stores.BlockStore` objects here, which track the
    point each row holds.

    Every read verifies that its point was written and not yet freed (or overwritten in a
    ring or slot), every free that its point was written; kernel operands are held to the
    shapes the kernel was compiled for; kernels return every member so an inf/NaN made
    inside one is found (replayed with numpy to name the op)."""

    inline_blocks = False
    compile_loops = False  # every read and free checked in Python
    #: the kernel results the non-finite check reads (cuda: copied to the host)
    RESULTS = "r"

    def __init__(self, *a):
        super().__init__(*a)
        self.ns.update(chk=self._chk, slot_chk=self._slot_chk, chk_many=self._chk_many, bad_free=self._bad_free,
                       chk_shape=self._chk_shape, finite=finite, nonfinite=self._nonfinite,
                       chain_fault=self._chain_fault)

    def slot_vars(self):
        return super().slot_vars() + [f"k{n}" for n in self.slots]

    def cell_lists(self):  # the key each cell holds, beside it
        return super().cell_lists() + [(f"ck{n}", b.length) for n, b in sorted(self.cells.items())]

    def read_point(self, n, p, out, key, parts):
        if p in self.slots:
            return f"slot_chk(v{p}, k{p}, fr{p}, {key}, {p}, {n})" + self._sfx(p, out)
        if p in self.cells:
            j = self.cell(p, parts)
            return f"slot_chk(c{p}[{j}], ck{p}[{j}], fr{p}, {key}, {p}, {n})" + self._sfx(p, out)
        return f"chk(s{p}, fr{p}, {key}, {p}, {n})" + self._sfx(p, out)

    def read_slices(self, n, p, e, ent):
        return f"chk_many(s{p}, fr{p}, gather_keys({ent}), {p}, {n}) or " + super().read_slices(n, p, e, ent)

    def write(self, n, key, v="o"):
        L = super().write(n, key, v)
        if n in self.slots:
            self._assigned.add(f"k{n}")
            L.append(f"k{n} = {key}")
        if n in self.cells:
            L.append(f"ck{n}[{self.cell(n)}] = {key}")
        return L + [f"fr{n}.discard({key})"]

    def drop(self, n, key, var="v"):
        # only the point asked for: a slot holding another point keeps it
        if n in self.slots:
            self._assigned.update((f"v{n}", f"k{n}"))
            return [f"if k{n} == {key}:", f"    live -= {self.nb(n, f'v{n}')}", f"    v{n} = None",
                    f"    k{n} = None"]
        if n in self.cells:
            j = self.cell(n)
            return [f"if ck{n}[{j}] == {key}:", f"    live -= {self.nb(n, f'c{n}[{j}]')}", f"    c{n}[{j}] = None",
                    f"    ck{n}[{j}] = None"]
        return super().drop(n, key, var)

    def free(self, n, key):
        if n in self.slots:
            bad = f"    if k{n} != {key}: bad_free({n}, {key}, k{n})"
        elif n in self.cells:
            j = self.cell(n)
            bad = f"    if ck{n}[{j}] != {key}: bad_free({n}, {key}, ck{n}[{j}])"
        else:
            bad = f"    if {key} not in s{n}: bad_free({n}, {key})"
        return [f"if {key} not in fr{n}:", bad, f"    fr{n}.add({key})"] + self.drop(n, key)

    def take(self, p, key):
        return self.drop(p, key, "dv") + [f"fr{p}.add({key})"]

    def op_lines(self, step, own):
        L, args = self.value(step, own)
        n = step.node
        node = self.pdg.rec(n)
        k = self.key(node.domain, own)
        if step.outputs and checks_finite(node):
            if step.donate is not None:  # the input buffer is overwritten: judge the inputs before the op
                L.insert(0, f"fin_in = finite([{', '.join(args)}])")
                L += ["if not finite(o) and fin_in:", f"    nonfinite({n}, {k}, o, None)"]
            else:
                L += ["if not finite(o):", f"    nonfinite({n}, {k}, o, [{', '.join(args)}])"]
        for o in step.outputs:
            L += self.write(o, self.key(self.pdg.rec(o).domain, own))
        return L

    def returned(self, step):
        return list(step.members)  # every member: an inf/NaN made and lost inside is still seen

    def persistent_slots(self):
        return {}  # every member returned

    def outs(self, step):
        return []

    def kernel_operand(self, p, e, shape, reader, own):
        # the kernel indexes each operand by its declared shape: hold it to that
        a = f"chk_shape({self.operand(reader, p, e, own)}, {self.sym(f'shp{p}_{e.out}', tuple(shape))}, {p}, {reader})"
        return a if len(shape) else f"{a}.reshape(1)"

    def kernel_call(self, step, own, args, info):
        k = self.key(own, own)
        return super().kernel_call(step, own, args, info) + [
            f"if not finite({self.RESULTS}):", f"    chain_fault({info}, r, [{', '.join(args)}], {k})"]

    def stores(self):
        out = super().stores()
        for n in self.pdg.nodes:
            self.ns[f"fr{n}"] = set()
        return out + [self.ns[f"fr{n}"] for n in self.pdg.nodes]

    def _chk(self, store, freed, k, p, n):
        if k in store:
            return store[k]
        what = "after it was freed" if k in freed else "before it was written"
        if isinstance(store, BlockStore) and store.holder(k) is not None:
            what = (f"after its circular-buffer slot was overwritten by the point at "
                    f"{self.blocks[p].dim} = {store.holder(k)}")
        self._bad_read(p, k, n, what)

    def _slot_chk(self, v, held, freed, k, p, n):
        if held == k:
            return v
        what = "after it was freed" if k in freed else "before it was written"
        if held is not None:
            what = f"after its slot was overwritten by the point ({self._where(p, held)})"
        self._bad_read(p, k, n, what)

    def _bad_read(self, p, k, n, what):
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

    def _chain_fault(self, seg_ext, r, args, k):
        """A statement kernel produced inf/NaN: find its first op that did so from finite inputs (numpy rules)."""
        if self._replay(seg_ext, args, k, True):
            return
        seg = seg_ext[0]
        raise RuntimeFault(f"non-finite check: the {self.KERNELS} kernel of {[self.pdg.rec(m).name for m in seg]} produced "
                           f"inf/NaN at point ({self._where(seg[0], k)}) where numpy's rules give finite values "
                           "(a backend defect: please report it with this program)")

    def _bad_free(self, n, k, held=None):
        what = "before it was written"
        if held is not None:
            what = f"after its slot was overwritten by the point ({self._where(n, held)})"
        raise RuntimeFault(f"schedule check: tensor {self.pdg.rec(n).name!r} is freed at point ({self._where(n, k)}) "
                           f"{what}")


class PlanRender(Render):
    """Counts bytes only: every value is its byte count (the planned peak; no numpy work, no
    kernels). It stores exactly what the run stores.

    With ``target[0]`` set to a peak, the first time the count reaches it ``at_peak`` gets the
    bytes each node holds then (the memory plan's swaps are chosen among those)."""

    counts_only = True
    inline_blocks = False
    compile_loops = False  # counts bytes in Python: nothing to gain, the peak's target checked

    def __init__(self, *a):
        super().__init__(*a)
        self.ns.update(target=[None], at_peak=[])

    def peak_check(self, now="live"):
        return super().peak_check(now) + ["    if target[0] is not None and peak >= target[0] and not at_peak:",
                                          "        at_peak.append(holding())"]

    def extra_fns(self) -> str:
        """``holding()``: node -> bytes it holds now (values are byte counts here)."""
        parts = [f"{n}: (v{n} or 0)" for n in self.slots]
        parts += [f"{n}: sum(x for x in c{n} if x is not None)" for n in sorted(self.cells)]
        for n in self.pdg.nodes:
            if n in self.spills:
                parts.append(f"{n}: s{n}.held_bytes()")
            elif n in self.blocks:
                parts.append(f"{n}: sum(b[3] for b in s{n}.blocks.values())")
            elif n in self.stored and n not in self.slots and n not in self.cells:
                parts.append(f"{n}: sum(s{n}.values())")
        return "def holding():\n    return {" + ", ".join(parts) + "}\n"

    def read_point(self, n, p, out, key, parts):
        return "0"

    def read_slices(self, n, p, e, ent):
        return "0"

    def nb(self, n, v):
        return v

    def bytes_expr(self, n):
        if n in self.low.views:
            return "0"
        node = self.pdg.rec(n)
        nb, dyn = 0, []
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
        return " + ".join([str(nb)] + dyn)

    def op_lines(self, step, own):
        n = step.node
        if not step.outputs:
            return []
        L = [f"o = {self.bytes_expr(n)}"]
        if step.donate is not None:
            p, _ = self.pdg.inputs(n)[step.donate]
            L += self.take(p, self.key(self.pdg.rec(p).domain, own))
        return L + self.write(n, self.key(self.pdg.rec(n).domain, own))

    def kernel_lines(self, step, own):  # the bytes of the outputs the run stores; the other members never are
        L = self.kernel_peak(step)
        for o in step.outputs:
            L += [f"o = {self.bytes_expr(o)}"] + self.write(o, self.key(own, own))
        return L

    def source(self):
        backend, self.backend = self.backend, "numpy"  # no kernels to compile
        try:
            return super().source()
        finally:
            self.backend = backend



RENDERERS = {"run": Render, "check": CheckRender, "plan": PlanRender}


def renderer(mode, backend):
    """The renderer class of a mode on a backend (cuda: :mod:`timerl.runtime.gpu`'s)."""
    if backend == "cuda":
        from . import gpu  # noqa: PLC0415 - imports numba.cuda: only for the cuda backend
        return gpu.RENDERERS[mode]
    return RENDERERS[mode]


class Lowering:
    """One plan lowered (:func:`timerl.runtime.lowered.lower`) and rendered for one mode."""

    def __init__(self, prog, pdg, bounds, seed, groups, tree, donated, mode="run", backend="numpy", inline=None,
                 kinds=None, slots=(), single=(), views=(), swaps=None):
        self.prog, self.pdg, self.bounds, self.seed = prog, pdg, bounds, seed
        self.views, self.swaps = set(views), swaps or {}
        self.groups, self.tree, self.mode, self.backend = groups, tree, mode, backend
        self.inline, self.kinds = inline or {}, kinds or {}
        self.slots, self.single = slots, set(single)
        self.donated = dict(donated)
        self.kernels = {}

    @staticmethod
    def segments(g):
        """Group ``g``'s kernel segments and glue, as the ``fuse`` pass recorded them
        (``g.segments``, :mod:`timerl.passes.fuse`); without them every member is glue."""
        if g.segments is None:
            return [("glue", n) for n in g.members]
        return g.segments

    def build(self, frees):
        kernels = self.backend in ("numba", "cuda")
        # cuda: ops outside kernels run on the host on copies, so none writes into an operand's device buffer
        low = lower(self.pdg, self.groups, self.tree, self.donated, self.inline, self.kinds, frees, self.slots,
                    self.segments if kernels else None,
                    (lambda n: False) if self.backend == "cuda" else (lambda n: in_place(self.pdg, n)), self.single,
                    self.views, self.swaps)
        self.lowered, self.donated = low, low.donated
        r = renderer(self.mode, self.backend)(self.prog, self.pdg, self.bounds, self.seed, low, self.backend)
        out = r.build()
        self.kernels, self.ns = r.kernels, r.ns
        self.compiled_loops = [{"iterator": cl.iterator, "statements": cl.statements, "inside": len(cl.inside)}
                               for cl in r.loops]
        self.interpreted_loops = list(r.declined)
        return out

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
