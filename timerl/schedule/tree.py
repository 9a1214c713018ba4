"""The schedule tree: isl's AST lowered into loops, guards, sequences, executions and frees.

It prints as readable Python-like code (``str(tree)``) and renders as Python source
(:func:`render_py`) that the interpreter compiles once: loops become Python loops and
each statement instance is one call of a precompiled closure.
"""

from __future__ import annotations

import dataclasses

import islpy as isl

_NT = isl.ast_node_type
_OP = isl.ast_expr_op_type


@dataclasses.dataclass
class Loop:
    it: str
    init: str
    stop: str | None  # exclusive upper bound, or None with ``cond`` for a while loop
    step: int
    body: object
    cond: str = ""


@dataclasses.dataclass
class Guard:
    cond: str
    then: object
    other: object = None


@dataclasses.dataclass
class Seq:
    children: list


@dataclasses.dataclass
class Call:
    # "exec" | "free" | "tick" (progress, see ticked) | swaps (timerl.schedule.spill): "swap_out",
    # "swap_in", "prefetch" (a swap-in that overlaps the next statement), "swap_wait" (its end)
    kind: str
    ident: int  # group id (exec) or node id (the others)
    args: list  # python expressions over loop iterators, one per dim of the statement


_BIN = {_OP.add: "+", _OP.sub: "-", _OP.mul: "*", _OP.div: "//", _OP.fdiv_q: "//", _OP.pdiv_q: "//",
        _OP.pdiv_r: "%", _OP.zdiv_r: "%", _OP.eq: "==", _OP.le: "<=", _OP.lt: "<", _OP.ge: ">=",
        _OP.gt: ">", _OP.and_: "and", _OP.and_then: "and", _OP.or_: "or", _OP.or_else: "or"}


def expr_py(e, params: dict) -> str:
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return str(e.get_val().to_python())
    if t == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        return str(params.get(name, name))
    op = e.get_op_type()
    args = [expr_py(e.get_op_arg(k), params) for k in range(e.get_op_n_arg())]
    if op in _BIN:
        return f"({args[0]} {_BIN[op]} {args[1]})"
    if op == _OP.minus:
        return f"(-{args[0]})"
    if op in (_OP.max, _OP.min):
        return f"{'max' if op == _OP.max else 'min'}({', '.join(args)})"
    if op in (_OP.cond, _OP.select):
        return f"({args[1]} if {args[0]} else {args[2]})"
    raise NotImplementedError(f"isl AST expression {op} is not supported by the schedule lowering")


def _batch_frees(frees: list) -> tuple[list, dict]:
    """Free statements that run at exactly the same times (equal maps up to the statement
    name and the trailing slot) become one AST statement ``B<k>`` that frees them all, in
    their slot order; frees of different values at one time commute. isl's AST generation
    grows steeply with statements, and an RL program frees ~100 values at a handful of
    distinct times."""
    pieces = []
    for f in frees:
        # isl's AST generator can misorder a statement whose schedule has several pieces
        # (islpy 2026.2: a free placed before its last reader, found by tests/fuzz): one
        # statement per piece
        pieces += [isl.Map.from_basic_map(b) for b in f.get_basic_maps()] if f.n_basic_map() > 1 else [f]
    buckets = {}  # key -> [(representative map, [free maps in slot order])]
    for f in pieces:
        n = f.dim(isl.dim_type.out)
        g = f.set_tuple_name(isl.dim_type.in_, "B").project_out(isl.dim_type.out, n - 1, 1)
        for rep, ms in buckets.setdefault((str(g), f.dim(isl.dim_type.in_)), []):
            if rep.is_equal(g):
                ms.append(f)
                break
        else:
            buckets[(str(g), f.dim(isl.dim_type.in_))].append((g, [f]))
    maps, batches, named = [], {}, set()
    for entries in buckets.values():
        for _, ms in entries:
            if len(ms) == 1 and ms[0].get_tuple_name(isl.dim_type.in_) not in named:
                named.add(ms[0].get_tuple_name(isl.dim_type.in_))
                maps.append(ms[0])
                continue
            name = f"B{len(batches)}"
            batches[name] = [int(m.get_tuple_name(isl.dim_type.in_)[1:]) for m in ms]
            maps.append(ms[0].set_tuple_name(isl.dim_type.in_, name))
    return maps, batches


def _pieces(swaps: list, batches: dict) -> list:
    """The swap statements' maps (``(kind, node, map)``), one AST statement per piece (as for the
    frees), each named ``X<k>`` in ``batches``: name -> the ``(kind, node)`` it runs."""
    maps = []
    for kind, n, m in swaps:
        for b in m.make_disjoint().get_basic_maps():  # (isl's pieces may overlap: a swap would run twice)
            name = f"X{len(batches)}"
            batches[name] = [(kind, n)]
            maps.append(isl.Map.from_basic_map(b).set_tuple_name(isl.dim_type.in_, name))
    return maps


def build_tree(T: isl.UnionMap, frees: list, ctx: isl.Set, bounds: dict, swaps=()):
    """isl's AST of the executions ``T``, the free statements ``frees`` (maps
    ``F<n>[x] -> time``) and the swaps (``(kind, node, map)``, :mod:`timerl.schedule.spill`),
    lowered to the schedule tree; bounds stay isl parameters fixed by ``ctx`` and become their
    values in the tree."""
    maps, batches = _batch_frees(frees)
    batches = {name: [("free", n) for n in ns] for name, ns in batches.items()}
    maps += _pieces(list(swaps), batches)
    full = T
    for f in maps:
        full = full.union(isl.UnionMap.from_map(f))
    ast = isl.AstBuild.from_context(ctx).node_from_schedule_map(full)
    return from_ast(ast, {f"P_{k}": v for k, v in bounds.items()}, batches)


def from_ast(node, params: dict, batches: dict | None = None):
    """Walk isl's AST (for / if / block / user) into the schedule tree."""
    t = node.get_type()
    if t == _NT.block:
        ch = node.block_get_children()
        return Seq([from_ast(ch.get_at(k), params, batches) for k in range(ch.n_ast_node())])
    if t == _NT.for_:
        it = expr_py(node.for_get_iterator(), params)
        init = expr_py(node.for_get_init(), params)
        inc = node.for_get_inc().get_val().to_python()
        cond = node.for_get_cond()
        body = from_ast(node.for_get_body(), params, batches)
        if cond.get_type() == isl.ast_expr_type.op and cond.get_op_type() in (_OP.le, _OP.lt):
            lhs = cond.get_op_arg(0)
            if lhs.get_type() == isl.ast_expr_type.id and expr_py(lhs, params) == it:
                rhs = expr_py(cond.get_op_arg(1), params)
                stop = rhs if cond.get_op_type() == _OP.lt else _plus1(rhs)
                return Loop(it, init, stop, inc, body)
        return Loop(it, init, None, inc, body, cond=expr_py(cond, params))
    if t == _NT.if_:
        cond = expr_py(node.if_get_cond(), params)
        other = from_ast(node.if_get_else_node(), params, batches) if node.if_has_else_node() else None
        return Guard(cond, from_ast(node.if_get_then_node(), params, batches), other)
    if t == _NT.mark:
        return from_ast(node.mark_get_node(), params, batches)
    if t == _NT.user:
        e = node.user_get_expr()
        name = e.get_op_arg(0).get_id().get_name()
        args = [expr_py(e.get_op_arg(k), params) for k in range(1, e.get_op_n_arg())]
        if batches and name in batches:
            calls = [Call(kind, n, list(args)) for kind, n in batches[name]]
            return calls[0] if len(calls) == 1 else Seq(calls)
        return Call("exec" if name[0] == "S" else "free", int(name[1:]), args)
    raise NotImplementedError(f"isl AST node {t} is not supported by the schedule lowering")


def _plus1(s: str) -> str:
    try:
        return str(int(s) + 1)
    except ValueError:
        return f"{s} + 1"


def walk(tree):
    """Every Call of the tree, in program order."""
    if isinstance(tree, Call):
        yield tree
    elif isinstance(tree, Seq):
        for c in tree.children:
            yield from walk(c)
    elif isinstance(tree, Loop):
        yield from walk(tree.body)
    elif isinstance(tree, Guard):
        yield from walk(tree.then)
        if tree.other is not None:
            yield from walk(tree.other)


def iterators(tree) -> set:
    """The names of the loop iterators of the tree."""
    if isinstance(tree, Loop):
        return {tree.it} | iterators(tree.body)
    if isinstance(tree, Seq):
        return set().union(*(iterators(c) for c in tree.children))
    if isinstance(tree, Guard):
        return iterators(tree.then) | (iterators(tree.other) if tree.other is not None else set())
    return set()


def top_level(tree) -> list:
    """The statements at the top of the tree, nested sequences flattened (isl's AST nests blocks)."""
    if not isinstance(tree, Seq):
        return [tree]
    return [x for c in tree.children for x in top_level(c)]


def outer_loops(tree) -> list:
    """The loops at the top of the tree: the schedule's outermost dim, in which progress is counted."""
    return [c for c in top_level(tree) if isinstance(c, Loop)]


def ticked(tree):
    """A copy of ``tree`` whose outermost loops end each iteration with a ``tick`` call."""

    def tick(c):
        return dataclasses.replace(c, body=Seq([c.body, Call("tick", -1, [])])) if isinstance(c, Loop) else c

    return Seq([tick(c) for c in top_level(tree)])


def trip_count(loop: Loop) -> int | None:
    """Iterations of an outermost loop (its bounds are numbers there), None for a while loop."""
    if loop.stop is None:
        return None
    ns = {"__builtins__": {}, "min": min, "max": max}
    lo, hi = (int(eval(e, ns)) for e in (loop.init, loop.stop))  # noqa: S307 - isl's own bound expressions
    return len(range(lo, hi, loop.step))


def render(tree, call_line, indent=0) -> list[str]:
    """Lines of Python-like code; ``call_line(call)`` renders one statement instance."""
    pad = "    " * indent
    if isinstance(tree, Seq):
        out = []
        for c in tree.children:
            out += render(c, call_line, indent)
        return out
    if isinstance(tree, Loop):
        if tree.stop is None:
            head = [f"{pad}{tree.it} = {tree.init}", f"{pad}while {tree.cond}:"]
            return head + render(tree.body, call_line, indent + 1) + [f"{pad}    {tree.it} += {tree.step}"]
        rng = f"{tree.init}, {tree.stop}" + (f", {tree.step}" if tree.step != 1 else "")
        return [f"{pad}for {tree.it} in range({rng}):"] + render(tree.body, call_line, indent + 1)
    if isinstance(tree, Guard):
        out = [f"{pad}if {tree.cond}:"] + render(tree.then, call_line, indent + 1)
        if tree.other is not None:
            out += [f"{pad}else:"] + render(tree.other, call_line, indent + 1)
        return out
    if isinstance(tree, Call):
        return [pad + ln for ln in call_line(tree).split("\n")]
    raise TypeError(tree)


#: how the schedule prints each kind of swap statement
SWAP_LINES = {"swap_out": "swap out {}  # S{}, to disk", "swap_in": "swap in {}  # S{}, from disk",
              "prefetch": "prefetch {}  # S{}, from disk while the next statement runs",
              "swap_wait": "wait for {}  # S{}, prefetched"}


class ScheduleTree:
    """The program's schedule: ``str()`` shows loops, executions, frees and swaps.

    ``swaps``: node -> the names of the dims its swap-ins run over (a block's: all but the
    block's dim)."""

    def __init__(self, tree, groups, pdg, donated=None, inline=None, swaps=None):
        self.tree, self.pdg, self.inline = tree, pdg, inline or {}
        self.groups = {g.gid: g for g in groups}
        self.donated = donated or {}
        self.swaps = swaps or {}

    def _line(self, call):
        if call.kind == "exec":
            g = self.groups[call.ident]
            where = ", ".join(f"{d.name}={a}" for d, a in zip(g.domain, call.args))
            ops = "; ".join(self._op(n) for n in g.members)
            line = f"exec S{g.gid}[{where}]  # {ops}"
            for n, at in self.inline.get(g.gid, ()):
                if at is None:
                    line += f"\nfree {self.pdg.rec(n).name}[{where}]  # S{n}, after its last reader"
                else:
                    cond = " and ".join(f"{a} == {v}" for a, v in zip(call.args, at)) or "True"
                    line += f"\nif {cond}: free {self.pdg.rec(n).name}[]  # S{n}, after its last reader"
            return line
        node = self.pdg.rec(call.ident)
        if call.kind in SWAP_LINES:
            dims = [d.name for d in node.domain] if call.kind == "swap_out" else self.swaps[call.ident]
            where = ", ".join(f"{d}={a}" for d, a in zip(dims, call.args))
            return SWAP_LINES[call.kind].format(f"{node.name}[{where}]", call.ident)
        where = ", ".join(f"{d.name}={a}" for d, a in zip(node.domain, call.args))
        return f"free {node.name}[{where}]  # S{call.ident}"

    def _op(self, n):
        node = self.pdg.rec(n)
        s = f"%{n} {node.op.value}"
        if "fn" in node.attrs and isinstance(node.attrs["fn"], str):
            s += f".{node.attrs['fn']}"
        s += f" {node.name}"
        if n in self.donated:
            s += f" (in place of operand {self.donated[n]})"
        return s

    def calls(self):
        """Every statement execution (``Call``) in the tree, in order."""
        return list(walk(self.tree))

    def __str__(self):
        return "\n".join(render(self.tree, self._line)) + "\n"

    __repr__ = __str__
