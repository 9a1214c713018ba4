"""Random well-formed timerl programs, described as the Python source that builds them.

A :class:`Desc` is a program's dims, bounds and a list of *records*, each a few lines of
timerl code that define one new value ``v<k>`` from earlier ones (or a source). The
builder executes the lines one record at a time inside ``with prog:``, so the source a
failure prints is exactly what ran. Generation draws every choice through a
:class:`Draw` (a seeded ``random.Random`` for the long run, hypothesis for the test
suite) and builds the program as it goes, reading each new value's domain, shape and
dtype from the tensor itself.

Programs are well-formed by construction: shifted reads sit in placeholder branches
that exclude the missing points, slices along a dim are reduced at once, every
placeholder has a catch-all branch. Values stay finite and well-conditioned: each value
carries a bound on its magnitude, and an operand whose bound is too large for an op
(``exp``, ``*``, ``@``) is squashed first (``tanh`` for floats, ``clip`` for ints);
``log``, ``sqrt`` and ``/`` see ``abs(x) + c``.
"""

from __future__ import annotations

import math
import os
import random
import re
from dataclasses import dataclass, field

import numpy as np

import timerl as tl

FLOAT = ("float32", "float64")
NUMERIC = ("float32", "float64", "int64")


# -- draws -------------------------------------------------------------------------------------


class Draw:
    """Every random choice of the generator; ``coin`` is False on the simpler side."""

    def int(self, lo, hi) -> int:
        raise NotImplementedError

    def pick(self, seq):
        seq = list(seq)
        return seq[self.int(0, len(seq) - 1)]

    def coin(self, p=0.5) -> bool:
        return self.int(0, 99) >= 100 - round(100 * p)


class SeedDraw(Draw):
    def __init__(self, seed):
        self.r = random.Random(seed)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)


class HypothesisDraw(Draw):
    def __init__(self, draw):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def int(self, lo, hi):
        return self.draw(self.st.integers(lo, hi))


# -- descriptions --------------------------------------------------------------------------------


def data(seed, shape, dtype):
    """The array of a ``tl.tensor``/``tl.const`` source: floats in [-1, 1), ints in [-3, 3]."""
    r = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return r.uniform(-1, 1, size=shape).astype(dtype)
    return r.integers(-3, 4, size=shape).astype(dtype)


def _udf(fn, dtype):
    def call(*xs):
        return np.asarray(fn(*xs), dtype=dtype)

    return call


# numpy functions the programs call through tl.udf; each keeps the input's shape (the
# "total" ones reduce to a 0-d array) and its dtype
UDFS = {
    "twice_tanh": lambda a: np.tanh(a) * 2 if a.dtype.kind == "f" else a * 2,
    "flip": lambda a: a[..., ::-1],
    "total": lambda a: a.sum(),
    "diff": lambda a, b: a - b,
}


@dataclass(frozen=True)
class Record:
    """Lines of timerl code that define value ``v<k>`` (``k`` the record's position)."""

    lines: tuple
    mag: float = 1.0  # a bound on |v<k>|, for squashing and tolerances
    pool: bool = True  # v<k> may be an operand of later records


@dataclass
class Value:
    name: str
    domain: tuple  # dim names
    shape: tuple
    dtype: str
    mag: float
    pool: bool
    lowp: bool = False  # computed from float32 values: float32 accuracy, whatever its dtype


@dataclass
class Desc:
    """A program: ``dims`` (names, outermost first), ``bounds`` ({"T": 4}), ``records``
    and ``sinks`` (tuples of value names; more than one name makes a multi-tensor sink).
    Its ``repr`` is the program's source, runnable from the repository root."""

    dims: tuple
    bounds: dict
    records: list = field(default_factory=list)
    sinks: list = field(default_factory=list)
    seed: int = 0  # compile(seed=...): random ops must agree across backends for any seed

    def source(self) -> str:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        lines = [
            f"import sys; sys.path.insert(0, {root!r})  # this checkout: its timerl and tests.fuzz",
            "import numpy as np",
            "import timerl as tl",
            "from tests.fuzz.gen import data, UDFS, _udf",
            "",
            f"prog = tl.Program({' '.join(self.dims)!r})",
            f"{', '.join(self.dims)}, = prog.dims",
            f"{', '.join(d.upper() for d in self.dims)}, = prog.bounds",
            "out = {}",
            "with prog:",
        ]
        for rec in self.records:
            lines += ["    " + ln for ln in rec.lines]
        for k, names in enumerate(self.sinks):
            x = names[0] if len(names) == 1 else f"[{', '.join(names)}]"
            lines.append(f"    tl.sink({x}, lambda v, p: out.__setitem__(('s{k}', tuple(p.values())), v.copy()))")
        lines.append(f"prog.compile({self.bounds!r}, backend='reference', seed={self.seed}).run()")
        return "\n".join(lines)

    def __repr__(self):
        return "Desc(\n" + self.source() + "\n)"


# -- building ------------------------------------------------------------------------------------


class Builder:
    """Runs records against a live program and keeps the values they define."""

    def __init__(self, dims, bounds):
        self.desc = Desc(tuple(dims), dict(bounds))
        self.prog = tl.Program(" ".join(dims))
        self.ns = {"tl": tl, "np": np, "data": data, "UDFS": UDFS, "_udf": _udf}
        for d, b in zip(self.prog.dims, self.prog.bounds):
            self.ns[d.name], self.ns[b.name] = d, b
        self.values: list[Value] = []

    def add(self, rec: Record) -> Value:
        name = f"v{len(self.values)}"
        with self.prog:
            exec("\n".join(rec.lines), self.ns)  # noqa: S102 - the generator's own source
        t = self.ns[name]
        refs = {int(k) for ln in rec.lines for k in re.findall(r"\bv(\d+)\b", ln)} - {len(self.values)}
        lowp = t.dtype in (np.float32, np.float16) or any(self.values[k].lowp for k in refs)
        shape = tuple(s if isinstance(s, int) else str(s) for s in t.shape)
        v = Value(name, tuple(d.name for d in t.domain), shape, t.dtype.name, rec.mag, rec.pool, lowp)
        self.desc.records.append(rec)
        self.values.append(v)
        return v

    def sink(self, names, collect):
        """``tl.sink`` of the named values, reporting to ``collect("s<k>")``."""
        k = len(self.desc.sinks)
        self.desc.sinks.append(tuple(names))
        x = [self.ns[n] for n in names]
        with self.prog:
            tl.sink(x[0] if len(x) == 1 else x, collect(f"s{k}"))


def build(desc: Desc, collect):
    """A fresh program from ``desc`` whose sinks report to ``collect("s<k>")``.

    Returns ``(prog, scales)``, ``scales[sink name] = (mag, lowp)``: a bound on the magnitude
    of its values, and whether they were computed from float32 values (for tolerances)."""
    b = Builder(desc.dims, desc.bounds)
    for rec in desc.records:
        b.add(rec)
    mags = {}
    for k, names in enumerate(desc.sinks):
        vs = [b.values[int(n[1:])] for n in names]
        mags[f"s{k}"] = (max(v.mag for v in vs), any(v.lowp for v in vs))
        b.sink(names, collect)
    return b.prog, mags


# -- generation ----------------------------------------------------------------------------------

CAPS = {"exp": 3.0, "mul": 6.0, "matmul": 3.0, "pow": 4.0, "rec": 4.0, "reduce": 50.0, "any": 200.0}
UNARY = ("neg", "exp", "log", "tanh", "sigmoid", "relu", "sqrt", "abs", "sign", "square", "clip")
BINARY = ("add", "sub", "mul", "div", "minimum", "maximum", "floordiv", "mod", "pow")
INT_BINARY = ("add", "sub", "mul", "minimum", "maximum", "floordiv", "mod")
CMP = ("<", "<=", ">", ">=", "==", "!=")


class Gen:
    """Draws records one at a time; each becomes the next ``v<k>`` of a live program."""

    def __init__(self, draw: Draw, dims, bounds):
        self.d = draw
        self.b = Builder(dims, bounds)
        self.dims = tuple(dims)

    # values ---------------------------------------------------------------------------------
    @property
    def values(self):
        return self.b.values

    def bound(self, dim):
        return self.b.desc.bounds[dim.upper()]

    def pick(self, pred=lambda v: True, kinds="fi"):
        vs = [v for v in self.values if v.pool and np.dtype(v.dtype).kind in kinds and pred(v)]
        return self.d.pick(vs) if vs else None

    def add(self, lines, mag, pool=True) -> Value:
        if isinstance(lines, str):
            lines = [lines]
        return self.b.add(Record(tuple(lines), float(min(mag, 1e30)), pool))

    def nxt(self):
        return f"v{len(self.values)}"

    # sources --------------------------------------------------------------------------------
    def subdomain(self, within=None):
        within = self.dims if within is None else within
        return tuple(d for d in self.dims if d in within and self.d.coin(0.6))

    def shape(self):
        return tuple(self.d.pick((1, 2, 3, 4)) for _ in range(self.d.int(0, 2)))

    def source(self, domain=None, shape=None, dtype=None) -> Value:
        domain = self.subdomain() if domain is None else domain
        shape = self.shape() if shape is None else tuple(shape)
        dtype = dtype or self.d.pick(NUMERIC if self.d.coin(0.3) else ("float32",))
        v = self.nxt()
        kind = self.d.int(0, 3) if dtype == "float32" else self.d.int(0, 1)
        dom = f"({''.join(x + ', ' for x in domain)})"
        if kind == 0 or (kind == 1 and domain):
            full = tuple(self.bound(x) for x in domain) + shape
            return self.add(f"{v} = tl.tensor(data({self.d.int(0, 9999)}, {full}, {dtype!r}), domain={dom})",
                            1.0 if dtype != "int64" else 3.0)
        if kind == 1:
            return self.add(f"{v} = tl.const(data({self.d.int(0, 9999)}, {shape}, {dtype!r}))",
                            1.0 if dtype != "int64" else 3.0)
        if kind == 2:
            return self.add(f"{v} = tl.random.uniform({shape}, domain={dom}, low=-1.0, high=1.0)", 1.0)
        return self.add(f"{v} = tl.random.normal({shape}, domain={dom})", 6.0)

    def compatible(self, shape, to=False, grow=False):
        """A shape that broadcasts with ``shape`` (``to``: whose broadcast is ``shape`` itself;
        ``grow``: likely larger than ``shape``)."""
        if grow:
            out = [self.d.pick((2, 3)) if s == 1 and self.d.coin(0.6) else s for s in shape]
            if len(out) < 3 and (out == list(shape) or self.d.coin(0.5)):
                out.insert(0, self.d.pick((2, 3, 4)))
            return tuple(out)
        out = [1 if self.d.coin(0.4) else (self.d.pick((2, 3)) if s == 1 and not to and self.d.coin(0.3) else s)
               for s in shape]
        while out and self.d.coin(0.3):
            out.pop(0)
        if not to and self.d.coin(0.2) and len(out) == len(shape) < 3:
            out.insert(0, self.d.pick((1, 2, 3)))
        return tuple(out)

    def operand(self, pred=lambda v: True, kinds="fi", spatial=False, domain=False):
        """An existing value, or a fresh source when none fits (or by chance).

        ``spatial``: with at least one spatial axis; ``domain``: with at least one dim."""
        def fits(v):
            return pred(v) and (v.shape != () or not spatial) and (v.domain != () or not domain)

        v = self.pick(fits, kinds) if self.d.coin(0.8) else None
        if v is not None:
            return v
        dom = self.subdomain()
        if domain and not dom:
            dom = (self.d.pick(self.dims),)
        shape = self.shape()
        if spatial and not shape:
            shape = (self.d.pick((1, 2, 3, 4)),)
        return self.source(domain=dom, shape=shape, dtype="float32" if "i" not in kinds else None)

    def squash(self, v: Value, cap) -> Value:
        if v.mag <= cap:
            return v
        if np.dtype(v.dtype).kind == "f":
            return self.add(f"{self.nxt()} = tl.tanh({v.name})", 1.0)
        return self.add(f"{self.nxt()} = tl.clip({v.name}, -3, 3)", 3.0)

    def partner(self, a: Value, kinds="fi", to=False, grow=False) -> Value:
        """A value whose shape broadcasts with ``a``'s, sometimes a fresh source of a mixed shape."""
        def fits(v):
            try:
                s = np.broadcast_shapes(v.shape, a.shape)
            except ValueError:
                return False
            return len(s) <= 3 and (not to or s == a.shape)

        v = self.pick(fits, kinds) if self.d.coin(0.6) and not grow else None
        if v is None:
            v = self.source(shape=self.compatible(a.shape, to, grow), dtype=None if "i" in kinds else "float32")
        return v

    # indexing -------------------------------------------------------------------------------
    def key(self, v: Value, dim, entry):
        ents = [entry if x == dim else x for x in v.domain]
        return f"{v.name}[{', '.join(ents)}]" if ents else v.name

    # records --------------------------------------------------------------------------------
    def step(self):
        kind = self.d.pick(("source", "unary", "unary", "binary", "binary", "chain", "chain", "where", "reduce", "scan",
                            "astype", "matmul", "window", "point", "shift", "forward", "backward", "branches",
                            "udf", "movement", "dimval", "cmp", "draw", "gather"))
        getattr(self, "r_" + kind)()

    def r_source(self):
        self.source()

    def r_dimval(self):
        dim = self.d.pick(self.dims)
        self.add(f"{self.nxt()} = tl.dim_value({dim})", self.bound(dim), pool=True)

    def r_unary(self):
        fn = self.d.pick(UNARY)
        a = self.operand(kinds="fi")
        v, x = self.nxt(), a.name
        if fn == "exp":
            a = self.squash(a, CAPS["exp"])
            v = self.nxt()
            self.add(f"{v} = tl.exp({a.name})", math.exp(a.mag))
        elif fn in ("log", "sqrt"):
            mag = math.log(a.mag + 1) if fn == "log" else math.sqrt(a.mag + 1)
            self.add(f"{v} = tl.{fn}(tl.abs({x}) + 0.5)", max(1.0, mag))
        elif fn == "neg":
            self.add(f"{v} = -{x}", a.mag)
        elif fn == "square":
            a = self.squash(a, CAPS["pow"])
            self.add(f"{self.nxt()} = {a.name} ** 2", a.mag ** 2)
        elif fn == "clip":
            self.add(f"{v} = tl.clip({x}, -0.5, 0.75)", 1.0)
        else:
            mag = a.mag if fn in ("relu", "abs") else 1.0
            self.add(f"{v} = tl.{fn}({x})", mag)

    def r_binary(self):
        a = self.operand(kinds="fi")
        b = self.partner(a)
        ints = np.dtype(a.dtype).kind == "i" and np.dtype(b.dtype).kind == "i"
        fn = self.d.pick(INT_BINARY if ints else BINARY)
        if fn in ("mul", "pow"):
            a, b = self.squash(a, CAPS["mul"]), self.squash(b, CAPS["mul"])
        x, y, v = a.name, b.name, self.nxt()
        if self.d.coin(0.15):  # a Python scalar operand (weak in promotion)
            y = repr(self.d.pick((0.5, 2, -1.5, 3))) if fn not in ("floordiv", "mod", "pow") else "2"
            mb = abs(float(y))
        else:
            mb = b.mag
        if fn == "add":
            self.add(f"{v} = {x} + {y}", a.mag + mb)
        elif fn == "sub":
            self.add(f"{v} = {x} - {y}", a.mag + mb)
        elif fn == "mul":
            self.add(f"{v} = {x} * {y}", a.mag * mb)
        elif fn == "div":
            self.add(f"{v} = {x} / (tl.abs({y}) + 0.5)" if y == b.name else f"{v} = {x} / {y}", 2 * a.mag + 2)
        elif fn in ("minimum", "maximum"):
            self.add(f"{v} = tl.{fn}({x}, {y})", max(a.mag, mb))
        elif fn == "floordiv":
            self.add(f"{v} = {x} // (tl.abs({y}) + 1)" if y == b.name else f"{v} = {x} // {y}", a.mag + 1)
        elif fn == "mod":
            self.add(f"{v} = {x} % (tl.abs({y}) + 1)" if y == b.name else f"{v} = {x} % {y}", mb + 1)
        else:  # pow: a non-negative base
            self.add(f"{v} = (tl.abs({x}) + 0.5) ** 2" if y != b.name or ints else
                     f"{v} = (tl.abs({x}) + 0.5) ** tl.clip({y}, -2, 2)", (a.mag + 0.5) ** 2 + 4)

    def r_chain(self):
        """Several elementwise ops in one expression, tensors only (no Python scalars): what the
        numba backend fuses into one kernel, over operands of mixed broadcast shapes."""
        a = self.operand(kinds="f")
        expr, mag, shape = a.name, a.mag, a.shape
        for _ in range(self.d.int(2, 5)):
            if self.d.coin(0.4):
                fn = self.d.pick(("neg", "tanh", "abs", "relu", "exp"))
                if fn == "exp":
                    expr, mag = f"tl.exp(tl.tanh({expr}))", math.e
                elif fn == "neg":
                    expr = f"(-{expr})"
                else:
                    expr, mag = f"tl.{fn}({expr})", (1.0 if fn == "tanh" else mag)
                continue
            b = self.partner(Value("", (), shape, "float32", mag, True), kinds="f", grow=self.d.coin(0.3))
            b = self.squash(b, CAPS["mul"])
            fn = self.d.pick(("add", "sub", "mul", "div", "minimum", "maximum"))
            x, y = (expr, b.name) if self.d.coin(0.5) else (b.name, expr)
            if fn in ("mul", "div") and mag > CAPS["mul"]:
                expr, mag = f"tl.tanh({expr})", 1.0
                x, y = (expr, b.name) if x != b.name else (b.name, expr)
            if fn == "div":
                expr, mag = f"({x} / tl.exp(tl.tanh({y})))", 3 * max(mag, b.mag)
            elif fn in ("minimum", "maximum"):
                expr, mag = f"tl.{fn}({x}, {y})", max(mag, b.mag)
            else:
                op = {"add": "+", "sub": "-", "mul": "*"}[fn]
                expr, mag = f"({x} {op} {y})", (mag * b.mag if fn == "mul" else mag + b.mag)
            shape = tuple(np.broadcast_shapes(shape, b.shape))
        self.add(f"{self.nxt()} = {expr}", mag)

    def r_draw(self):
        """Random ops with operands or integer outputs: categorical samples, permutations."""
        if self.d.coin(0.5):
            logits = self.squash(self.operand(kinds="f", spatial=True), CAPS["exp"])
            dom = self.subdomain()
            self.add(f"{self.nxt()} = tl.random.categorical({logits.name}, domain=({''.join(x + ', ' for x in dom)}))",
                     logits.shape[-1])
        else:
            dom = self.subdomain()
            n = self.d.int(1, 4)
            self.add(f"{self.nxt()} = tl.random.permutation({n}, domain=({''.join(x + ', ' for x in dom)}))", n)

    def r_gather(self):
        """``take``/``one_hot`` with int indices kept in range by ``%``; ``concat``/``stack``."""
        a = self.operand(spatial=True)
        kind = self.d.pick(("take", "one_hot", "concat", "stack"))
        v = self.nxt()
        if kind in ("take", "one_hot"):
            n = a.shape[0] if kind == "take" else self.d.int(1, 4)
            idx = self.pick(lambda x: len(x.shape) <= 1, kinds="i")
            if idx is None:
                idx = self.source(shape=self.d.pick(((), (2,))), dtype="int64")
            v = self.nxt()
            if kind == "take":
                self.add(f"{v} = {a.name}.take({idx.name} % {n}, axis=0)", a.mag)
            else:
                self.add(f"{v} = tl.one_hot({idx.name} % {n}, {n})", 1.0)
        elif kind == "concat":
            b = self.source(shape=(self.d.int(1, 3),) + a.shape[1:], dtype=a.dtype)
            self.add(f"{self.nxt()} = tl.concat([{a.name}, {b.name}], axis=0)", max(a.mag, b.mag))
        else:
            b = self.partner(a, kinds=np.dtype(a.dtype).kind, to=True)
            ax = self.d.int(0, len(a.shape))
            self.add(f"{self.nxt()} = tl.stack([{a.name}, {b.name}.expand{a.shape}], axis={ax})", max(a.mag, b.mag))

    def r_cmp(self):
        a = self.operand()
        b = self.partner(a)
        self.add(f"{self.nxt()} = {a.name} {self.d.pick(CMP)} {b.name}", 1.0)

    def r_where(self):
        a = self.operand()
        b = self.partner(a)
        c = self.pick(lambda v: _bcast(v.shape, a.shape, b.shape), kinds="b")
        cond = c.name if c is not None and self.d.coin(0.5) else f"{a.name} > {b.name}"
        x, y = (a.name, b.name) if self.d.coin(0.5) else (b.name, f"{a.name} * 0.5")
        self.add(f"{self.nxt()} = tl.where({cond}, {x}, {y})", max(a.mag, b.mag))

    def r_reduce(self):
        a = self.operand(spatial=True)
        a = self.squash(a, CAPS["reduce"])
        fn = self.d.pick(("sum", "mean", "max", "min", "std", "logsumexp", "argmax"))
        n = int(np.prod(a.shape))
        if fn == "argmax":
            axis = self.d.pick([None] + list(range(len(a.shape))))
        else:
            axis = self.d.pick([None] + list(range(len(a.shape))) + ([(0, 1)] if len(a.shape) > 1 else []))
        keep = self.d.coin(0.3)
        mag = {"sum": n * a.mag, "logsumexp": a.mag + math.log(n + 1), "argmax": max(a.shape)}.get(fn, a.mag)
        self.add(f"{self.nxt()} = {a.name}.{fn}(axis={axis!r}, keepdims={keep})", mag)

    def r_scan(self):
        a = self.squash(self.operand(spatial=True), CAPS["reduce"])
        fn = self.d.pick(("cumsum", "discounted_sum", "discounted_cumsum"))
        axis = self.d.int(-len(a.shape), len(a.shape) - 1)
        n = a.shape[axis]
        gamma = self.d.pick((0.9, 0.5, 1.0))
        arg = f"axis={axis}" if fn == "cumsum" else f"{gamma}, axis={axis}"
        self.add(f"{self.nxt()} = {a.name}.{fn}({arg})", n * a.mag)

    def r_astype(self):
        a = self.operand(kinds="fib")
        to = self.d.pick([d for d in NUMERIC if d != a.dtype])
        if np.dtype(a.dtype).kind == "f" and to == "int64":
            a = self.squash(a, 50.0)
            self.add(f"{self.nxt()} = ({a.name} * 3).astype({to!r})", 3 * a.mag)
        else:
            self.add(f"{self.nxt()} = {a.name}.astype({to!r})", a.mag)

    def r_matmul(self):
        a = self.squash(self.operand(kinds="f", spatial=True), CAPS["matmul"])
        k, n = a.shape[-1], self.d.pick((1, 2, 3))
        shape = (k, n) if self.d.coin(0.8) else (k,)
        b = self.source(shape=shape, dtype=self.d.pick(FLOAT) if self.d.coin(0.3) else "float32")
        x, y = (a.name, b.name)
        self.add(f"{self.nxt()} = {x} @ {y}", k * a.mag * b.mag)

    def r_movement(self):
        a = self.operand(spatial=True)
        kind = self.d.pick(("transpose", "reshape", "expand", "spatial", "unsqueeze"))
        v = self.nxt()
        if kind == "transpose" and len(a.shape) >= 2:
            self.add(f"{v} = {a.name}.transpose()", a.mag)
        elif kind == "reshape":
            self.add(f"{v} = {a.name}.reshape(-1)", a.mag)
        elif kind == "expand" and 1 in a.shape:
            shape = tuple(self.d.pick((2, 3)) if s == 1 else s for s in a.shape)
            self.add(f"{v} = {a.name}.expand{shape}", a.mag)
        elif kind == "spatial":
            k = self.d.int(0, a.shape[0] - 1)
            self.add(f"{v} = {a.name}.spatial[{k}]" if self.d.coin(0.5) else f"{v} = {a.name}.spatial[{k}:]", a.mag)
        else:
            self.add(f"{v} = {a.name}.unsqueeze({self.d.int(0, len(a.shape))})", a.mag)

    def r_udf(self):
        a = self.operand(kinds="fi")
        fn = self.d.pick(("twice_tanh", "flip", "total", "diff"))
        dt = a.dtype
        if fn == "flip" and not a.shape:
            fn = "twice_tanh"
        if fn == "diff":
            b = self.partner(a, kinds="f" if np.dtype(dt).kind == "f" else "i", to=True)
            dt = np.result_type(np.dtype(a.dtype), np.dtype(b.dtype)).name
            v = self.nxt()
            self.add(f"{v}, = tl.udf(_udf(UDFS['diff'], {dt!r}), [{a.name}, {b.name}], [{a.shape}], [{dt!r}])",
                     a.mag + b.mag)
            return
        shape, v = (() if fn == "total" else a.shape), self.nxt()
        mag = {"twice_tanh": 2.0 if np.dtype(dt).kind == "f" else 2 * a.mag, "flip": a.mag}.get(
            fn, a.mag * max(1, int(np.prod(a.shape))))
        self.add(f"{v}, = tl.udf(_udf(UDFS[{fn!r}], {dt!r}), [{a.name}], [{shape}], [{dt!r}])", mag)

    def r_window(self):
        a = self.operand(domain=True)
        a = self.squash(a, CAPS["reduce"])
        dim = self.d.pick(a.domain)
        D, B = self.bound(dim), dim.upper()
        kind = self.d.pick(("fwd", "prefix", "suffix", "const", "trail", "empty"))
        n = self.d.int(1, 3)
        ent = {"fwd": f"{dim}:tl.min({dim} + {n}, {B})", "prefix": f"0:{dim} + 1", "suffix": f"{dim}:{B}",
               "trail": f"tl.max({dim} - {n - 1}, 0):{dim} + 1"}.get(kind)
        if kind == "empty":  # empty at some points: sums give 0, mean NaN (max/min would fault)
            ent = self.d.pick((f"{dim} + 1:{B}", f"0:{dim}", f"{dim} + 1:tl.min({dim} + {n + 1}, {B})"))
            red = self.d.pick(("sum(axis=0)", "mean(axis=0)", "discounted_sum(0.9, axis=0)",
                               "cumsum(axis=0).sum(axis=0)"))
            self.add(f"{self.nxt()} = {self.key(a, dim, ent)}.{red}", a.mag * D)
            return
        if ent is None:
            lo = self.d.int(0, D - 1)
            hi = self.d.int(lo + 1, D)
            ent = self.d.pick((f"{lo}:{hi}", f"0:{B}", f"{lo}:{B}"))
        if kind != "const" and self.d.coin(0.15):  # a variable-length value, only for sinks
            self.add(f"{self.nxt()} = {self.key(a, dim, ent)}", a.mag, pool=False)
            return
        red = self.d.pick(("sum", "mean", "max", "min", "discounted_sum", "cumsum", "std"))
        call = {"discounted_sum": "discounted_sum(0.9, axis=0)", "cumsum": "cumsum(axis=0).max(axis=0)",
                "std": "std(axis=0)"}.get(red, f"{red}(axis=0)")
        self.add(f"{self.nxt()} = {self.key(a, dim, ent)}.{call}", a.mag * D)

    def r_point(self):
        a = self.operand(domain=True)
        dim = self.d.pick(a.domain)
        D, B = self.bound(dim), dim.upper()
        ent = self.d.pick(("0", f"{B} - 1", f"tl.min({dim} + 1, {B} - 1)", f"tl.max({dim} - 2, 0)",
                           str(self.d.int(0, D - 1))))
        self.add(f"{self.nxt()} = {self.key(a, dim, ent)}", a.mag)

    def base_for(self, shape, domain, dtype) -> Value:
        """A value that a placeholder of this shape, domain and dtype can take as a branch."""
        v = self.pick(lambda v: set(v.domain) <= set(domain) and _to(v.shape, shape), kinds="fi")
        if v is None or self.d.coin(0.4):
            if self.d.coin(0.3):
                return self.add(f"{self.nxt()} = tl.const({self.d.pick((0.0, 1.0, -2.0, 3))}, dtype={dtype!r})", 3.0)
            v = self.source(domain=self.subdomain(domain), shape=self.compatible(shape, to=True), dtype=dtype)
        return v

    def placeholder(self, shape, dtype, domain):
        p = f"p{len(self.values)}"
        return p, f"{p} = tl.placeholder({shape}, {dtype!r}, ({''.join(x + ', ' for x in domain)}))"

    def pkey(self, domain, dim, entry):
        return ", ".join(entry if x == dim else x for x in domain)

    def r_shift(self):
        """``p[d < k] = base; p = a[d - k]`` (or ``a[d + k]`` with the last ``k`` points from ``base``)."""
        a = self.operand(kinds="fi", domain=True)
        dim = self.d.pick(a.domain)
        D, B = self.bound(dim), dim.upper()
        k = self.d.int(1, 2)
        base = self.base_for(a.shape, a.domain, a.dtype)
        p, decl = self.placeholder(a.shape, a.dtype, a.domain)
        if self.d.coin(0.5):
            first = (f"{p}[{self.pkey(a.domain, dim, '0')}] = {base.name}" if k == 1 and self.d.coin(0.5)
                     else f"{p}[{dim} < {k}] = {base.name}")
            read = self.key(a, dim, f"{dim} - {k}")
        else:
            first = (f"{p}[{self.pkey(a.domain, dim, B + ' - 1')}] = {base.name}" if k == 1 and self.d.coin(0.5)
                     else f"{p}[{dim} > {B} - {k + 1}] = {base.name}")
            read = self.key(a, dim, f"{dim} + {k}")
        self.add([decl, first, f"{p}[{', '.join(a.domain)}] = {read}", f"{self.nxt()} = {p}"], max(a.mag, base.mag))

    def r_forward(self):
        """``p[d < k] = init; p[d + k] = body(p, o)``: a forward recurrence (carried across ``i`` too);
        or the same written with a condition, ``p[d >= k] = body(p[d - k], o); p = init``."""
        o = self.operand(kinds="fi")
        dim = self.d.pick(self.dims)
        dom = tuple(x for x in self.dims if x in o.domain or x == dim)
        float_ = np.dtype(o.dtype).kind == "f"
        o = self.squash(o, CAPS["rec"])
        init = self.base_for(o.shape, dom, o.dtype)
        p, decl = self.placeholder(o.shape, o.dtype, dom)
        carry = dim == "t" and dom == ("i", "t") and self.d.coin(0.5)
        # k = 2 needs D >= 2: else the init branch (d < 2) would cover an extension point
        k = 1 if carry or self.bound(dim) < 2 else self.d.pick((1, 1, 2))
        cond = not carry and self.d.coin(0.25)
        prev = f"{p}[{self.pkey(dom, dim, f'{dim} - {k}')}]" if cond else p
        c = self.d.pick((0.5, -0.9, 0.75))
        body = self.d.pick(("lin", "tanh", "max")) if float_ else self.d.pick(("add", "max"))
        rhs = {"lin": f"{prev} * {c} + {o.name}", "tanh": f"tl.tanh({prev} * {c} + {o.name})",
               "max": f"tl.maximum({prev}, {o.name})", "add": f"{prev} + {o.name}"}[body]
        lines = [decl]
        if self.d.coin(0.3):  # the body as a value of its own, read by the branch
            lines.append(f"q{len(self.values)} = {rhs}")
            rhs = f"q{len(self.values)}"
        if cond:
            lines += [f"{p}[{dim} >= {k}] = {rhs}", f"{p}[{', '.join(dom)}] = {init.name}"]
        else:
            if carry:
                lines += [f"{p}[0, 0] = {init.name}", f"{p}[i, 0] = {p}[i - 1, T]"]
            elif k == 1:
                lines.append(f"{p}[{self.pkey(dom, dim, '0')}] = {init.name}")
            else:
                lines.append(f"{p}[{dim} < {k}] = {init.name}")
            lines.append(f"{p}[{self.pkey(dom, dim, f'{dim} + {k}')}] = {rhs}")
        lines.append(f"{self.nxt()} = {p}")
        n = self.bound(dim) * (self.bound("i") if carry else 1) + 2
        mag = {"lin": init.mag + 10 * o.mag, "tanh": max(1.0, init.mag), "max": max(init.mag, o.mag),
               "add": init.mag + n * o.mag}[body]
        v = self.add(lines, mag)
        if not cond and self.d.coin(0.4):  # a shift-extension point p[.., D + k - 1]
            ext = f"{dim.upper()}" if k == 1 or self.d.coin(0.5) else f"{dim.upper()} + 1"
            self.add(f"{self.nxt()} = {self.key(v, dim, ext)}", mag)

    def r_backward(self):
        """``g[d >= D - k] = last; g = r + c g[d + k]``: a backward recurrence (discounted returns)."""
        r = self.squash(self.operand(kinds="f"), CAPS["rec"])
        dim = self.d.pick(self.dims)
        dom = tuple(x for x in self.dims if x in r.domain or x == dim)
        last = self.base_for(r.shape, dom, r.dtype) if self.d.coin(0.5) else r
        p, decl = self.placeholder(r.shape, r.dtype, dom)
        c = self.d.pick((0.9, 0.5, -0.75))
        B = dim.upper()
        k = self.d.pick((1, 1, 2))
        first = f"{p}[{self.pkey(dom, dim, B + ' - 1')}]" if k == 1 else f"{p}[{dim} >= {B} - {k}]"
        self.add([decl, f"{first} = {last.name}",
                  f"{p}[{', '.join(dom)}] = {r.name} + {c} * {p}[{self.pkey(dom, dim, f'{dim} + {k}')}]",
                  f"{self.nxt()} = {p}"], last.mag + 10 * r.mag)

    def r_branches(self):
        """Ordered conditional branches; the first whose condition holds wins."""
        a = self.operand(kinds="fi")
        b = self.partner(a, kinds="fi")
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        dim = self.d.pick(self.dims)
        dom = tuple(x for x in self.dims if x in a.domain or x in b.domain or x == dim)
        dtype = a.dtype
        p, decl = self.placeholder(shape, dtype, dom)
        k = self.d.int(0, 2)
        other = [x for x in dom if x != dim]
        cond = self.d.pick([f"({dim} % 2) == 0", f"{dim} > {k}", f"{dim} == {k}", f"~({dim} < {k})"]
                           + ([f"({dim} > {k}) & ({other[0]} == 0)", f"({dim} == 0) | ({other[0]} > 0)"]
                              if other else []))
        lines = [decl, f"{p}[{cond}] = {a.name}"]
        mag = max(a.mag, b.mag)
        if self.d.coin(0.4):
            prev = self.key(Value(p, dom, shape, dtype, 0, True), dim, dim + " - 1")
            lines.append(f"{p}[({dim} % 2) == 1] = {prev} * 0.5")
        lines += [f"{p}[{', '.join(dom)}] = {b.name}", f"{self.nxt()} = {p}"]
        self.add(lines, mag)


def _bcast(*shapes):
    try:
        return len(np.broadcast_shapes(*shapes)) <= 3
    except ValueError:
        return False


def _to(shape, target):
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def generate(draw: Draw, max_records=10) -> Desc:
    """A random program: dims ``t`` or ``i t``, tiny bounds, up to ``max_records`` draws, some sinks."""
    dims = ("i", "t") if draw.coin(0.6) else ("t",)
    bounds = {d.upper(): draw.int(1, 3 if d == "i" else 5) for d in dims}
    g = Gen(draw, dims, bounds)
    for _ in range(draw.int(1, max_records)):
        g.step()
    desc = g.b.desc
    vals = g.values
    sinks = [(vals[-1].name,)] + [(v.name,) for v in vals[:-1] if draw.coin(0.4)]
    if len(vals) > 1 and draw.coin(0.2):
        sinks.append((vals[draw.int(0, len(vals) - 2)].name, vals[-1].name))
    desc.sinks = sinks
    desc.seed = draw.pick((0, 0, 1, 12345))
    return desc
