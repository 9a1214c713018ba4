"""Symbolic dims, bounds, index expressions and conditions.

An index expression is a sympy expression over dim symbols and bound symbols built
from ``+ - *`` with ints, ``//`` and ``%`` by ints, ``min`` and ``max``. It is printed
to isl syntax for analysis (:func:`to_isl`) and to Python source for run time
(:func:`to_py`), so nothing evaluates sympy while a program runs.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

import sympy

from ..errors import CompileError


def _sym(x: Any) -> sympy.Expr:
    if isinstance(x, Expr):
        return x.e
    if isinstance(x, bool):
        raise TypeError("a bool is not an index expression")
    if isinstance(x, (int,)) or (hasattr(x, "__index__") and not isinstance(x, float)):
        return sympy.Integer(int(x))
    raise TypeError(
        f"index expressions combine only with ints, dims and bounds, not {type(x).__name__}"
    )


class Expr:
    """An index expression over dims and bounds (e.g. ``t + 1``, ``T - 1``, ``tl.min(t + 5, T)``)."""

    __slots__ = ("e",)
    __hash__ = object.__hash__

    def __init__(self, e):
        self.e = sympy.sympify(e)

    # arithmetic ------------------------------------------------------------------
    def _bin(self, other, f):
        try:
            o = _sym(other)
        except TypeError:
            return NotImplemented
        return Expr(f(self.e, o))

    def __add__(self, o):
        """``e + k``: an index expression (``t + 1``, ``T - 1``)."""
        return self._bin(o, lambda a, b: a + b)

    def __radd__(self, o):
        """``k + e``."""
        return self._bin(o, lambda a, b: b + a)

    def __sub__(self, o):
        """``e - k``: an index expression."""
        return self._bin(o, lambda a, b: a - b)

    def __rsub__(self, o):
        """``k - e``."""
        return self._bin(o, lambda a, b: b - a)

    def __mul__(self, o):
        """``e * k`` by an int."""
        return self._bin(o, lambda a, b: a * b)

    def __rmul__(self, o):
        """``k * e``."""
        return self._bin(o, lambda a, b: b * a)

    def __neg__(self):
        """``-e``."""
        return Expr(-self.e)

    def __floordiv__(self, o):
        """``e // k`` by a positive int (floor division)."""
        if not isinstance(o, int) or o <= 0:
            raise TypeError("an index expression may only be floor-divided by a positive int")
        return Expr(sympy.floor(self.e / o))

    def __mod__(self, o):
        """``e % k`` by a positive int, e.g. ``(k % M) == 0`` in a branch condition."""
        if not isinstance(o, int) or o <= 0:
            raise TypeError("an index expression may only be taken modulo a positive int")
        return Expr(sympy.Mod(self.e, o))

    # comparisons build conditions ---------------------------------------------------
    def _cmp(self, other, f, ident=None):
        try:
            o = _sym(other)
        except TypeError:
            return NotImplemented
        return Cond(f(self.e, o), ident)

    def __eq__(self, o):
        """``e == x``: a :class:`Cond`. For two dims or bounds, ``bool(a == b)`` is ``a is b`` (so ``t in
        x.domain`` and dict keys work); ``bool()`` of any other condition is a ``TypeError``.
        """
        ident = (self is o) if isinstance(self, (Dim, Bound)) and isinstance(o, (Dim, Bound)) else None
        return self._cmp(o, sympy.Eq, ident)

    def __ne__(self, o):
        """``e != x``: a :class:`Cond` (for two dims or bounds, ``bool()`` is ``a is not b``)."""
        ident = (self is not o) if isinstance(self, (Dim, Bound)) and isinstance(o, (Dim, Bound)) else None
        return self._cmp(o, sympy.Ne, ident)

    def __lt__(self, o):
        """``e < x``: a :class:`Cond` (``t < T - 1``)."""
        return self._cmp(o, sympy.Lt)

    def __le__(self, o):
        """``e <= x``: a :class:`Cond`."""
        return self._cmp(o, sympy.Le)

    def __gt__(self, o):
        """``e > x``: a :class:`Cond` (``x[t > 0] = ...``)."""
        return self._cmp(o, sympy.Gt)

    def __ge__(self, o):
        """``e >= x``: a :class:`Cond`."""
        return self._cmp(o, sympy.Ge)

    def __bool__(self):
        raise TypeError("an index expression has no truth value")

    def __repr__(self):
        return str(self.e)


class Dim(Expr):
    """A symbolic dim of a program (e.g. the iteration ``i`` or timestep ``t``)."""

    __slots__ = ("name", "position", "program", "bound")
    __hash__ = object.__hash__

    def __init__(self, name: str, position: int, program):
        super().__init__(sympy.Symbol(name, integer=True))
        self.name, self.position, self.program = name, position, program
        self.bound = Bound(self)

    def __repr__(self):
        return self.name


class Bound(Expr):
    """The exclusive upper bound of a dim (``T`` for ``t``); its value is given at compile."""

    __slots__ = ("name", "dim")
    __hash__ = object.__hash__

    def __init__(self, dim: Dim):
        self.name = dim.name.upper()
        super().__init__(sympy.Symbol(self.name, integer=True, positive=True))
        self.dim = dim

    def __repr__(self):
        return self.name


class Cond:
    """A condition over dims and bounds (``t == 0``, ``t > 0``), combined with ``& | ~``."""

    __slots__ = ("c", "_ident")
    __hash__ = object.__hash__

    def __init__(self, c, ident=None):
        self.c = sympy.sympify(c)
        self._ident = ident

    def __and__(self, o):
        """``c & d``: both conditions hold."""
        return Cond(sympy.And(self.c, as_cond(o).c))

    __rand__ = __and__

    def __or__(self, o):
        """``c | d``: either condition holds."""
        return Cond(sympy.Or(self.c, as_cond(o).c))

    __ror__ = __or__

    def __invert__(self):
        """``~c``: the condition does not hold."""
        return Cond(sympy.Not(self.c))

    def __bool__(self):
        if self._ident is None:
            raise TypeError(
                "a condition over dims has no truth value; use it as a placeholder key "
                "(x[t > 0] = ...) or build a bool tensor with tl.dim_value(t) > 0"
            )
        return self._ident

    def __repr__(self):
        return str(self.c)


def as_cond(x) -> Cond:
    if isinstance(x, Cond):
        return x
    if isinstance(x, bool):
        return Cond(sympy.true if x else sympy.false)
    raise TypeError(f"expected a condition over dims, got {type(x).__name__}")


def min(a, b) -> Expr:  # noqa: A001 - public name tl.min
    return Expr(sympy.Min(_sym(a), _sym(b)))


def max(a, b) -> Expr:  # noqa: A001 - public name tl.max
    return Expr(sympy.Max(_sym(a), _sym(b)))


def is_index_like(x) -> bool:
    return isinstance(x, Expr) or (isinstance(x, int) and not isinstance(x, bool))


def symbols_of(e) -> set:
    return set(sympy.sympify(e).free_symbols)


# -- printing -----------------------------------------------------------------------


def _affine_parts(e):
    """Split a rational affine sympy expression into (lcm of denominators, integer expr)."""
    e = sympy.expand(e)
    dens = [sympy.fraction(t.as_coeff_Mul()[0])[1] for t in sympy.Add.make_args(e)]
    lcm = 1
    for d in dens:
        lcm = lcm * int(d) // math.gcd(lcm, int(d))
    return lcm, sympy.expand(e * lcm)


def _print(e, names: dict, py: bool) -> str:
    """Print an index expression; ``names`` maps symbols to target variable names."""
    p = lambda x: _print(x, names, py)  # noqa: E731
    if isinstance(e, sympy.Integer) or isinstance(e, int):
        return str(int(e))
    if isinstance(e, sympy.Symbol):
        return names.get(e, e.name)
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(p(a) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:
            raise CompileError(f"index expression {e} is not affine with integer coefficients")
        if isinstance(rest, sympy.Mul):
            raise CompileError(f"index expression {e} is not affine (product of symbols)")
        return f"({int(coeff)}*{p(rest)})"
    if isinstance(e, sympy.floor):
        lcm, num = _affine_parts(e.args[0])
        return f"({p(num)} // {lcm})" if py else f"floor(({p(num)})/{lcm})"
    if isinstance(e, sympy.Mod):
        a, k = e.args
        return f"({p(a)} % {int(k)})" if py else f"(({p(a)}) mod {int(k)})"
    if isinstance(e, (sympy.Min, sympy.Max)):
        f = "min" if isinstance(e, sympy.Min) else "max"
        out = p(e.args[0])
        for a in e.args[1:]:
            out = f"{f}({out}, {p(a)})"
        return out
    raise CompileError(f"unsupported index expression {e}")


_REL = {sympy.Eq: "=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
_PYREL = {sympy.Eq: "==", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}


def _print_cond(c, names: dict, py: bool) -> str:
    c = sympy.logic.boolalg.to_nnf(c, simplify=False) if isinstance(c, sympy.logic.boolalg.Not) else c
    pc = lambda x: _print_cond(x, names, py)  # noqa: E731
    if c is sympy.true or c is True:
        return "True" if py else "0 = 0"
    if c is sympy.false or c is False:
        return "False" if py else "1 = 0"
    if isinstance(c, sympy.And):
        return "(" + " and ".join(pc(a) for a in c.args) + ")"
    if isinstance(c, sympy.Or):
        return "(" + " or ".join(pc(a) for a in c.args) + ")"
    if isinstance(c, sympy.Not):
        inner = c.args[0]
        if isinstance(inner, sympy.And):
            return pc(sympy.Or(*[sympy.Not(a) for a in inner.args]))
        if isinstance(inner, sympy.Or):
            return pc(sympy.And(*[sympy.Not(a) for a in inner.args]))
        return pc(inner.negated)
    if isinstance(c, sympy.Ne):
        a, b = _print(c.lhs, names, py), _print(c.rhs, names, py)
        return f"({a} != {b})" if py else f"({a} < {b} or {a} > {b})"
    for rel, sym in (_PYREL if py else _REL).items():
        if isinstance(c, rel):
            return f"({_print(c.lhs, names, py)} {sym} {_print(c.rhs, names, py)})"
    raise CompileError(f"unsupported condition {c}")


def to_isl(e, names: dict | None = None) -> str:
    return _print(sympy.sympify(e), names or {}, py=False)


def to_py(e, names: dict | None = None) -> str:
    return _print(sympy.sympify(e), names or {}, py=True)


def cond_to_isl(c, names: dict | None = None) -> str:
    return _print_cond(sympy.sympify(c), names or {}, py=False)


def cond_to_py(c, names: dict | None = None) -> str:
    return _print_cond(sympy.sympify(c), names or {}, py=True)


def compile_py(src: str, argnames: list[str]):
    """Compile a Python expression over ``argnames`` into a function (run-time index code)."""
    code = f"lambda {', '.join(argnames)}: {src}" if argnames else f"lambda: {src}"
    return eval(code, {"min": builtins.min, "max": builtins.max})
