"""Compiled loops: a loop of the schedule rendered as one numba function.

The interpreter (:mod:`timerl.runtime.interpreter`) runs the schedule's loops in Python, one
call of a statement function per statement instance; an acting loop of 128 steps is then a few
thousand crossings from Python into numba and back per iteration. On the numba backend, a loop
whose statements are all statement kernels (and the merges, accesses, constants, data reads and
dim values between them), over
values kept in slots, cells and single block arrays of static shapes, is instead rendered as one
``numba.njit`` function: the statements' bodies inline, written by the same hooks as the
interpreter's (:class:`JitHooks` renders them as numba code), the kernels called from compiled
code. The loop's state crosses into and out of it once per entry of the loop:

- a slot ``v<n>``: its array (a dummy of its type when empty) and ``h<n>``, whether it holds one;
  a 0-d value has shape ``(1,)`` inside, as the kernels take it;
- cells ``c<n>`` (a list): one array ``q<n>`` ``(length, ...)`` and ``ch<n>``, which cells hold a
  value (``c<k>`` inside is the schedule's loop iterator);
- a block array ``b<n>``: the array, ``hb<n>`` (allocated) and ``bn<n>`` (its live points);
- ``live`` and ``peak``, counted exactly as the interpreter counts them.

A kernel that raises, or a placeholder with no branch at a point, ends the compiled loop with an
exception; nothing of its state has been stored back then (but rows written into block arrays,
which are written again with the same values), and the interpreter runs the loop once more from
its start, which raises its own fault naming the tensor and point. The loop has no other exits
and no branches for frees (a free lowers ``live`` by the bytes times the flag): numba's
``try``/``except`` and every return site and branch cost compile time, about 4 s for an acting loop
of six statements instead of 29 s. The functions are written to the kernel cache
(``l_<hash>.py``, :mod:`timerl.kernels.cache`) and compiled with numba's on-disk cache when the
program is compiled, for one signature built from the static shapes; :mod:`timerl.runtime.jhelp`
holds what they share (cached once per machine).

``TIMERL_COMPILE_LOOPS=0`` (``config.compile_loops``) keeps every loop interpreted;
``exe.stats["compiled_loops"]`` lists the loops compiled and ``exe.stats["interpreted_loops"]``
the loops with a statement kernel that were not, with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import sys

import numpy as np
import sympy

from ..config import config
from ..errors import RuntimeFault
from ..ir.ops import Op, Slice
from ..kernels import cpu
from ..schedule.tree import Call, Guard, Loop, Seq, render, walk

def _tup(items) -> str:
    """A tuple expression of ``items``: concatenated tuples of at most 24 (CPython builds a longer
    display through a list, which numba does not compile)."""
    parts = ["(" + "".join(f"{x}, " for x in items[k:k + 24]) + ")" for k in range(0, len(items), 24)]
    return " + ".join(parts) or "()"


class NotCompiled(Exception):
    """Why a loop stays interpreted."""


def _npdt(dt) -> str:
    return f"np.{np.dtype(dt).type.__name__}"


def _nbty(dt, nd, readonly=False):
    import numba  # noqa: PLC0415 - the numpy backend imports this module and never numba

    return numba.types.Array(numba.from_dtype(np.dtype(dt)), nd, "C", readonly=readonly)


#: the longest loop body compiled (PPO's acting loop on CartPole: 349 lines, about 4 s)
MAX_LINES = 800

#: the line a replay function (:meth:`LoopCompiler.wrappers`) holds where ``Render.source`` writes
#: its ``nonlocal`` declaration of the state that the frees written in place assign
INLINED = "    #nonlocal"

#: the ops a compiled loop evaluates itself (the others run in statement kernels or stay in Python)
JIT_OPS = (Op.ACCESS, Op.MERGE, Op.CONST, Op.DATA, Op.DIM_VALUE)


class JitHooks:
    """The renderer's hooks (:class:`timerl.runtime.interpreter.Render`) as numba code: reads,
    writes and frees of slots, cells and block arrays as the module docstring keeps them; any other
    store or op raises :class:`NotCompiled`."""

    # state -------------------------------------------------------------------------------
    def _use(self, n, how="r"):
        """The kind of store of ``n`` (``slot``, ``cell`` or ``array``), recorded as loop state
        with how the loop uses it: ``r`` read, ``w`` written, ``d`` freed."""
        from .interpreter import nbytes_of  # noqa: PLC0415 - the interpreter imports this module

        node = self.pdg.rec(n)
        if n in self.spills:
            raise NotCompiled(f"{node.name!r} is spilled to disk")
        if len(node.shapes) != 1:
            raise NotCompiled(f"{node.name!r} has several outputs")
        if nbytes_of(node) is None:
            raise NotCompiled(f"{node.name!r} has a shape known only at run time")
        kind = "slot" if n in self.slots else "cell" if n in self.cells else "array" if n in self.arrays else None
        if kind is None:
            raise NotCompiled(f"{node.name!r} is kept in a table of points")
        self._jstate.setdefault(n, [kind, set()])[1].add(how)
        return kind

    def sym(self, name, value):
        self.ns[name] = value
        self._jconst[name] = value
        return name

    def _jarray(self, name, value):
        """A constant array as a parameter of the loop: a writeable C-contiguous copy, of the type of
        the slot it may be stored in."""
        return self.sym(name, np.require(value, requirements=["C", "W"]))  # graph arrays are frozen: copied

    def nb(self, n, v):
        from .interpreter import nbytes_of  # noqa: PLC0415

        if n in self.low.views:
            return "0"
        k = nbytes_of(self.pdg.rec(n))
        if k is None:
            raise NotCompiled(f"{self.pdg.rec(n).name!r} has a shape known only at run time")
        return str(k)

    @staticmethod
    def peak_check(now="live"):
        return [f"peak = max(peak, {now})"]  # one block, not two

    def fresh_array(self, n):
        node = self.pdg.rec(n)
        return f"np.empty({tuple(node.shape)}, {_npdt(node.dtype)})"

    @staticmethod
    def same_array(a, b):
        return f"{a}.ctypes.data == {b}.ctypes.data"  # numba has no ``is`` for arrays

    # reads --------------------------------------------------------------------------------
    def read_slices(self, n, p, e, ent):
        raise NotCompiled(f"{self.pdg.rec(p).name!r} is read by slices from a table of points")

    def array_rows(self, p, a, b, out=0):
        self._use(p)
        st = self.arrays[p]
        if st.kind == "circular":
            raise NotCompiled(f"{self.pdg.rec(p).name!r} is read by slices of a circular buffer")
        a, b = (f"({a}) - {st.lo}", f"({b}) - {st.lo}") if st.lo else (a, b)
        return f"b{p}[{a}:{b}]"

    def _row(self, n, row):
        """Row ``row`` of block array ``n`` as an array (a 0-d point: its (1,) slice)."""
        return f"b{n}[{row}]" if len(self.pdg.rec(n).shape) else f"b{n}[({row}):({row}) + 1]"

    def read_point(self, n, p, out, key, parts):
        kind = self._use(p)
        if kind == "array":
            return self._row(p, self.row(p, parts)) + (".copy()" if self.arrays[p].kind == "circular" else "")
        if kind == "slot":
            return f"v{p}"
        return f"q{p}[{self.cell(p, parts)}]"

    # writes and frees -----------------------------------------------------------------------
    def write(self, n, key, v="o"):
        kind = self._use(n, "w")
        if kind == "array":
            return self.array_alloc(n) + [f"put({self._row(n, self.row(n))}, {v})", f"bn{n} += 1"]
        if kind == "slot":
            return [f"v{n} = {v}", f"h{n} = True"] + self.count(n, v, "+")
        j = self.cell(n)
        return [f"put(q{n}[{j}], {v})", f"ch{n}[{j}] = True"] + self.count(n, v, "+")

    def array_alloc(self, n):
        self._use(n, "w")
        st = self.arrays[n]
        sh, dt = st.outs[0]
        return [f"if not hb{n}:", f"    b{n} = np.empty({(st.length,) + tuple(sh)}, {_npdt(dt)})", f"    hb{n} = True",
                f"    live += {self.array_bytes(n)}"]

    def drop(self, n, key, var="v"):
        kind = self._use(n, "d")
        if kind == "array":  # the block goes with its last live point
            sh, dt = self.arrays[n].outs[0]
            return [f"bn{n} -= 1", f"if bn{n} == 0:", f"    hb{n} = False",
                    f"    b{n} = np.empty({(0,) + tuple(sh)}, {_npdt(dt)})", f"    live -= {self.array_bytes(n)}"]
        held = f"h{n}" if kind == "slot" else f"ch{n}[{self.cell(n)}]"
        # no branch: a loop of a few hundred frees compiles in half the time; a slot in an array of
        # its own is counted from the run's start (Render.persistent_slots)
        k = "0" if n in self.persist else self.nb(n, "")
        return ([] if k == "0" else [f"live -= {k} * {held}"]) + [f"{held} = False"]

    def take(self, p, key):
        raise NotCompiled(f"an op writes into the buffer of {self.pdg.rec(p).name!r}")

    # values ---------------------------------------------------------------------------------
    def value(self, step, own):
        n = step.node
        node = self.pdg.rec(n)
        if node.op not in JIT_OPS:
            raise NotCompiled(f"{node.name!r} ({node.op.name.lower()}) is evaluated by numpy's rules")
        zero = not len(node.shape)  # a 0-d value is a (1,) array here
        if node.op is Op.CONST:
            return [f"o = {self._jarray(f'jconst{n}', node.attrs['value'].reshape(1) if zero else node.attrs['value'])}"], []
        if node.op is Op.DIM_VALUE:
            return [f"o = np.empty(1, np.int64)", f"o[0] = d_{node.attrs['dim']}"], []
        if node.op is Op.DATA:  # its array's leading axes are the points (a 0-d value: one more of 1)
            arr = node.attrs["array"]
            name = self._jarray(f"jdata{n}", arr.reshape(arr.shape + (1,)) if zero else arr)
            return [f"o = {name}" if not node.domain else f"o = {name}[{self.key(node.domain, own)}]"], []
        for p, e in self.pdg.inputs(step.node):
            if np.dtype(self.pdg.rec(p).dtypes[e.out]) != np.dtype(node.dtype):
                raise NotCompiled(f"{node.name!r} reads {self.pdg.rec(p).name!r} of another dtype")
        L, args = super().value(step, own)
        # no branch holds the point: the loop stops, and the interpreter runs it again to name it
        return [ln.split("raise RuntimeFault(")[0] + 'raise ValueError("no branch")' if "raise RuntimeFault(" in ln
                else ln for ln in L], args

    def kernel_operand(self, p, e, shape, reader, own):
        if not len(shape) and self.pdg.rec(p).op is Op.CONST:
            return self.sym(f"c{p}_1", self.pdg.rec(p).attrs["value"].reshape(1))
        return self.operand(reader, p, e, own)  # a 0-d value already has shape (1,) here

    @staticmethod
    def kernel_result(j, shape):
        return f"r[{j}]"

    def kernel_call(self, step, own, args, info):
        # through the kernel's address, not its name: its code is not compiled again in the loop's
        # (jhelp.kcall); a kernel's exception ends the loop (replayed: LoopCompiler.wrappers)
        from . import jhelp  # noqa: PLC0415 - imports numba

        ka = self.sym(f"ka{step.node}", jhelp.address(self.ns[f"K{step.node}"]))
        return [f"r = kcall({ka}, KT{step.node}, {_tup(args)})"]

    # each step's value in its own variable: numba types a name once over the whole function, and
    # ``o`` and ``r`` hold values of every type the loop computes
    def kernel_lines(self, step, own):
        return [re.sub(r"\b([or])\b", rf"\g<1>{step.node}", ln) for ln in super().kernel_lines(step, own)]

    def op_lines(self, step, own):
        return [re.sub(r"\bo\b", f"o{step.node}", ln) for ln in super().op_lines(step, own)]

    # one call of the schedule ---------------------------------------------------------------
    def jit_call(self, c):
        if c.kind == "exec":
            s = self._jstmts[c.ident]
            self._assigned = set()
            pre = [f"d_{d.name} = {a}" for d, a in zip(s.domain, c.args)]
            return "\n".join(pre + self.statement_body(s))
        if c.kind == "free":
            node = self.pdg.rec(c.ident)
            pre = [f"d_{d.name} = {a}" for d, a in zip(node.domain, c.args)]
            body = self.free(c.ident, self.key(node.domain)) if c.ident in self.stored else ["pass"]
            return "\n".join(pre + body)
        raise NotCompiled(f"a {c.kind} statement runs inside it")


@dataclasses.dataclass
class CompiledLoop:
    """One loop rendered as numba code: its function's source and signature, its state."""

    index: int
    iterator: str
    outer: tuple  # the iterators of the loops around it (its first parameters)
    statements: list  # the group ids it executes
    cells: list  # the cells it reads or writes (rebuilt as lists after it)
    ins: list  # (parameter, numba type, Python argument) after the outer iterators
    outs: list  # (returned name, Python line storing it back or None)
    src: str
    sig: tuple
    loop: Loop  # the schedule's loop, run by the interpreter when the compiled one raises
    inside: list = dataclasses.field(default_factory=list)  # the slots it does not return (LoopCompiler._inside)


def _jin(v, dummy):
    """A slot's value as the compiled loop takes it: a C-contiguous writeable array of its dtype,
    shape (1,) for a 0-d value; the dummy when the slot is empty."""
    if v is None:
        return dummy
    if type(v) is not np.ndarray or v.dtype != dummy.dtype or not v.flags.writeable or not v.flags.c_contiguous:
        v = np.array(v, dummy.dtype)  # a copy: read-only values (constants) and scalars
    return v.reshape(1) if v.ndim == 0 else v


def _jcells(cells, dummy):
    """The cells (a list of values or None) as one array and which of them hold a value."""
    a = np.empty((len(cells),) + dummy.shape[1:], dummy.dtype)
    held = np.zeros(len(cells), np.bool_)
    for j, x in enumerate(cells):
        if x is not None:
            a[j] = x
            held[j] = True
    return a, held


def _jcells_back(cells, a, held, zero):
    cells[:] = [(a[j].reshape(()) if zero else a[j]) if h else None for j, h in enumerate(held.tolist())]


class LoopCompiler:
    """Finds the compilable loops of a schedule tree and renders them (see the module docstring)."""

    def __init__(self, r):
        self.r = r
        jr = object.__new__(type("Jit" + type(r).__name__, (JitHooks, type(r)), {}))
        jr.__dict__ = r.__dict__  # the same renderer's state: its namespace, kernels and stores
        self.jr = jr
        r._jstmts = {s.gid: s for s in r.low.statements}
        self.loops, self.declined = [], []
        self._facts = None  # (owner, frees, tails) of the whole program: LoopCompiler._program_facts
        r.ns.update(jin=_jin, jcells=_jcells, jcells_back=_jcells_back, jfault=self._fault)

    def tree(self, tree, outer=()):
        """``tree`` with each compilable loop replaced by a ``jit`` call of its function."""
        if self._facts is None:
            self._facts = self._program_facts(tree)
        if isinstance(tree, Loop):
            why = self._try(tree, outer)
            if why is None:
                return Call("jit", self.loops[-1].index, list(outer))
            if why:
                self.declined.append({"iterator": tree.it, "reason": why})
            return dataclasses.replace(tree, body=self.tree(tree.body, outer + (tree.it,)))
        if isinstance(tree, Guard):
            return Guard(tree.cond, self.tree(tree.then, outer),
                         None if tree.other is None else self.tree(tree.other, outer))
        if isinstance(tree, Seq):
            return Seq([self.tree(c, outer) for c in tree.children])
        return tree

    def _try(self, loop, outer):
        """None when ``loop`` compiled; else why not ("" for a loop without statement kernels)."""
        r, jr = self.r, self.jr
        calls = list(walk(loop))
        stmts = [r._jstmts[c.ident] for c in calls if c.kind == "exec"]
        if not any(st.kind == "kernel" for s in stmts for st in s.steps):
            return ""
        if any(c.kind not in ("exec", "free") for c in calls):
            kinds = sorted({c.kind for c in calls} - {"exec", "free"})
            return f"it runs {'/'.join(kinds)} statements"
        for s in stmts:
            for st in s.steps:
                node = r.pdg.rec(st.node)
                if st.kind == "op" and node.op not in JIT_OPS:
                    return f"{node.name!r} ({node.op.name.lower()}) is evaluated by numpy's rules"
        r._jstate, r._jconst = {}, {}
        try:
            lines = render(loop, jr.jit_call, 1)
        except NotCompiled as err:
            return str(err)
        limit = config.loop_lines or MAX_LINES
        if len(lines) > limit:
            return (f"its body has {len(lines)} lines, more than {limit} (numba's compile time grows faster than "
                    "a function's length: PPO's learner loop of 1,734 lines takes about 65 s; TIMERL_LOOP_LINES "
                    "raises the limit)")
        inside = self._inside(outer, calls)
        try:
            cl = self._source(loop, outer, lines, sorted({s.gid for s in stmts}), inside)
            fn = self._load(cl)
        except Exception as err:  # noqa: BLE001 - numba's typing: the loop stays interpreted, reported
            return f"numba could not compile it: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
        r.ns[f"L{cl.index}"] = fn
        self.loops.append(cl)
        return None

    def _program_facts(self, tree):
        """What :meth:`_inside` asks of the whole program, once: the statement of each node, each
        node's free calls in ``tree`` and its frees at the tail of a statement ``(gid, point)``."""
        owner, frees, tails = {}, {}, {}
        for s in self.r.low.statements:
            for st in s.steps:
                owner.update({m: s for m in (st.node, *st.members)})
            for n, at in s.tails:
                tails.setdefault(n, []).append((s.gid, at))
        for c in walk(tree):
            if c.kind == "free":
                frees.setdefault(c.ident, []).append(c)
        return owner, frees, tails

    def _inside(self, outer, calls):
        """The slots a call of the loop of ``calls`` writes, reads and frees within itself: the
        statements that write one, every reader (the PDG's edges read it at their own point along
        the dims at ``outer``'s iterators) and every free run in the loop at the same value of each
        iterator around it, so no statement after the loop reads a value of theirs. Their values
        are not returned, only their flags: an array returned by the loop is live through the
        whole function, and LLVM's SROA over a loop of a few hundred such values took most of its
        compile (PPO's learner loop on CartPole: 151 s with them and its kernels linked in, 65 s
        without either)."""
        r, (owner, frees, tails) = self.r, self._facts
        ids = {id(c) for c in calls}
        at = {}  # gid -> {dim name: its argument} of the statements the loop executes, None if at two
        for c in calls:
            if c.kind == "exec":
                got = {d.name: a for d, a in zip(r._jstmts[c.ident].domain, c.args)}
                at[c.ident] = got if at.get(c.ident, got) == got else None

        def same_call(gid, fixed):  # statement gid runs in the loop at the writer's outer iterators
            return at.get(gid) is not None and all(at[gid].get(d) == a for d, a in fixed.items())

        out = []
        for n in sorted(r.slots):
            w, node = owner.get(n), r.pdg.rec(n)
            if w is None or n not in r.stored or at.get(w.gid) is None or \
                    {d.name for d in node.domain} != set(at[w.gid]):
                continue
            fixed = {d: a for d, a in at[w.gid].items() if a in outer}  # the dims at an outer iterator
            if set(fixed.values()) != set(outer) or not (frees.get(n) or tails.get(n)):
                continue
            ok = all(id(c) in ids and all(a == fixed[d.name] for d, a in zip(node.domain, c.args) if d.name in fixed)
                     for c in frees.get(n, []))
            ok = ok and all(p is None and same_call(g, fixed) for g, p in tails.get(n, []))
            for m, e in r.pdg.consumers(n):
                rd = owner.get(m)
                dims = {d.name: d for d in rd.domain} if rd is not None else {}
                ok = ok and rd is not None and same_call(rd.gid, fixed) and len(e.index) == len(node.domain) and all(
                    d.name in dims and not isinstance(ix, Slice) and sympy.sympify(ix) == dims[d.name].e
                    for ix, d in zip(e.index, node.domain) if d.name in fixed)
            if ok:
                out.append(n)
        return out

    def _state(self, inside=()):
        """The loop's parameters ``(name, numba type, Python expression of the argument)`` and what
        it returns ``(name, Python line storing it back)``: a value only read goes in alone; a slot
        or block array the loop assigns also comes back with its flags; cells are one array and
        their flags, changed in place (only their Python list is rebuilt after)."""
        import numba  # noqa: PLC0415 - not on the numpy backend

        r = self.r
        ins = [("live", numba.int64, "live"), ("peak", numba.int64, "peak")]
        outs = [("live", None), ("peak", None)]
        for n, (kind, how) in sorted(r._jstate.items()):
            node = r.pdg.rec(n)
            nd, zero = len(node.shape), not len(node.shape)
            if kind == "slot":
                d = r.sym(f"Dv{n}", np.empty((0,) * max(nd, 1), node.dtype))
                # a value kept inside is never read before the loop writes it: its dummy goes in
                ins.append((f"v{n}", _nbty(node.dtype, max(nd, 1)), d if n in inside else f"jin(v{n}, {d})"))
                if how - {"r"}:
                    ins.append((f"h{n}", numba.boolean, f"v{n} is not None"))
                if n in inside:
                    # held at exit only when never read again (the last point of a recurrence the
                    # program ends after): a stand-in keeps it counted as held, as the interpreter does
                    outs.append((f"h{n}", f"v{n} = {d} if h{n} else None"))
                elif "w" in how:
                    outs += [(f"v{n}", None), (f"h{n}", f"v{n} = {f'v{n}.reshape(())' if zero else f'v{n}'} if h{n} else None")]
                elif "d" in how:
                    outs.append((f"h{n}", f"v{n} = v{n} if h{n} else None"))
            elif kind == "cell":
                d = r.sym(f"Dc{n}", np.empty((0,) + (tuple(node.shape) or (1,)), node.dtype))
                ins += [(f"q{n}", _nbty(node.dtype, 1 + max(nd, 1)), f"x{n}"), (f"ch{n}", _nbty(np.bool_, 1), f"ch{n}")]
            else:
                sh, dt = r.arrays[n].outs[0]
                d = r.sym(f"Db{n}", np.empty((0,) + tuple(sh), dt))
                ins.append((f"b{n}", _nbty(dt, 1 + len(sh)), f"b{n} if b{n} is not None else {d}"))
                if how - {"r"}:
                    ins += [(f"hb{n}", numba.boolean, f"b{n} is not None"), (f"bn{n}", numba.int64, f"bn{n}")]
                    outs += [(f"b{n}", None), (f"hb{n}", f"b{n} = b{n} if hb{n} else None"), (f"bn{n}", None)]
        return ins, outs

    def _source(self, loop, outer, lines, gids, inside):
        import numba  # noqa: PLC0415 - not on the numpy backend

        r = self.r
        text = "\n".join(lines)
        inside = [n for n in inside if n in r._jstate]  # those the loop uses (it writes and frees them)
        ins, outs = self._state(set(inside))
        consts = sorted(nm for nm in r._jconst if re.search(rf"\b{re.escape(nm)}\b", text))
        for nm in consts:
            t = numba.typeof(r._jconst[nm])
            ins.append((nm, t, nm))
        kids = sorted({int(k) for k in re.findall(r"\bKT(\d+)\b", text)})
        state = _tup([nm for nm, _ in outs])
        imports = [f"KT{k} = signature(sys.modules[{cpu.module_name(r.kernels[f'K{k}'])!r}].kernel)" for k in kids]
        params = list(outer) + [nm for nm, _, _ in ins]
        src = "\n".join([
            f"# timerl compiled loop over {loop.it}: statements {', '.join(f'S{g}' for g in gids)}",
            "import sys", "import numpy as np", "import numba", "from timerl.runtime.jhelp import kcall, put, signature", *imports,
            "", "",
            '@numba.njit(cache=True, error_model="numpy", boundscheck=False)',
            f"def loop({', '.join(params)}):", text, f"    return {state}", ""])
        sig = tuple([numba.int64] * len(outer) + [t for _, t, _ in ins])
        cells = [n for n, (kind, _) in sorted(r._jstate.items()) if kind == "cell"]
        return CompiledLoop(len(self.loops), loop.it, tuple(outer), gids, cells, ins, outs, src, sig, loop, inside)

    @staticmethod
    def _load(cl):
        mod = cpu.load_module(cl.src, "l_", "timerl_loop_")
        if mod.loop.signatures:  # the same loop of another program compiled in this process
            return mod.loop
        if config.debug:
            print(f"# timerl compiled loop {mod.__file__}\n{cl.src}")
        # numba's SSA pass recurses once per block along a dominator chain: a loop of a few hundred
        # branches (guards, frees at given points, kernel failures) goes past Python's default limit
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 20000))
        try:
            mod.loop.compile(cl.sig)
        finally:
            sys.setrecursionlimit(limit)
        mod.loop.disable_compile()
        cpu.drop_linking_ir(mod.loop)
        return mod.loop

    def kept_cells(self, body, fns, tree):
        """The cells only compiled loops read and write, kept as their arrays for the whole run
        (``x<n>``, ``ch<n>``): no list built and read back
        around each call of a loop (0.3 ms of an iteration of CartPole PPO, whose acting and
        return loops hold four). A cell that ``run`` or a statement or free it calls touches
        stays a list converted around each call."""
        called = {f"{self.r.CALLS[c.kind]}{c.ident}" for c in walk(tree) if c.kind in self.r.CALLS}
        text = "\n".join(body + [f for f in fns if f[4:f.index("(")] in called])
        return {n for cl in self.loops for n in cl.cells if not re.search(rf"\bc{n}\b", text)}

    def wrappers(self, call_line, kept=()):
        """The Python functions ``J<k>`` that call each compiled loop (inside the rendered
        program's closure): its state in, the loop, its state back. When the compiled loop raises
        (a kernel's check, a point no branch holds), nothing of its state has been stored back
        but the rows it wrote into block arrays, which the interpreter writes again with the same
        values: the interpreter runs the loop from its start, with ``call_line``, and raises its
        own fault naming the tensor and point."""
        r, out = self.r, []
        for cl in self.loops:
            assigned = [nm for nm, _ in cl.outs if nm[0] not in "h"] + \
                [ln.split(" = ")[0] for nm, ln in cl.outs if ln is not None and nm[0] == "h"]
            body = [f"nonlocal {', '.join(sorted(set(assigned), key=assigned.index))}"]
            # a cell kept as arrays: its state before the loop, which a replay starts from
            body += [f"px{n}, ph{n} = x{n}.copy(), ch{n}.copy()" if n in kept else
                     f"x{n}, ch{n} = jcells(c{n}, Dc{n})" for n in cl.cells]
            its = [f"it{j}" for j in range(len(cl.outer))]  # the iterators' names c<k> are also cells'
            body += ["try:", f"    res = L{cl.index}({', '.join(its + [a for _, _, a in cl.ins])})",
                     "except Exception as err:"]
            body += [f"    jcells_back(c{n}, px{n}, ph{n}, {not len(r.pdg.rec(n).shape)})" for n in cl.cells if n in kept]
            body += [f"    R{cl.index}({', '.join(its)})", f"    jfault({cl.index}, err)"]
            body += [f"({', '.join(nm for nm, _ in cl.outs)}, ) = res"]
            body += [ln for _, ln in cl.outs if ln is not None]
            for n in cl.cells:
                if n not in kept:
                    body.append(f"jcells_back(c{n}, x{n}, ch{n}, {not len(r.pdg.rec(n).shape)})")
            out.append(f"def J{cl.index}({', '.join(its)}):\n" + "".join(f"    {ln}\n" for ln in body))
            replay = render(cl.loop, call_line, 1)  # the loop in Python (its iterators: locals of R)
            out.append(f"def R{cl.index}({', '.join(cl.outer)}):\n{INLINED}\n" + "".join(f"{ln}\n" for ln in replay))
        return out

    def _fault(self, k, err):
        """Compiled loop ``k`` raised ``err`` and the interpreter ran the loop again without fault."""
        cl = self.loops[k]
        raise RuntimeFault(f"the compiled loop over {cl.iterator} (statements "
                           f"{', '.join(f'S{g}' for g in cl.statements)}) raised {type(err).__name__}: {err}, "
                           "and the interpreter ran it again without fault (a backend defect: please report "
                           "it with this program; TIMERL_COMPILE_LOOPS=0 runs every loop in Python)") from err
