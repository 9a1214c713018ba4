"""Checks of the arguments users pass to op constructors: values, dtypes, shapes, domains.

Each check raises at the user's call, with a message that names the tensor (its ``name=``
or the user's source line), the argument and the offending value, and says what to pass.
"""

from __future__ import annotations

import numbers

import numpy as np
import sympy

from ..errors import ArgTypeError, CompileError, ShapeError, user_site
from ..ir.expr import Bound, Dim, Expr

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64")
_KINDS = "biuf"  # bool, signed and unsigned ints, floats
_KIND_HINT = {
    "U": "strings", "S": "bytes", "O": "Python objects (None, strings or mixed values)", "c": "complex numbers",
    "M": "datetimes (convert them with .astype('int64'))", "m": "timedeltas (convert them with .astype('int64'))",
    "V": "structured records",
}


class who:
    """``"tl.placeholder 'obs'"`` or, unnamed, ``"tl.placeholder at train.py:12"``; the user's line is
    looked up only when a message is formatted (from inside the same call, so it is the same line)."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name=None):
        self.kind, self.name = kind, name

    def __str__(self):
        return f"{self.kind} {self.name!r}" if self.name else f"{self.kind} at {user_site()}"

    def __format__(self, spec):
        return format(str(self), spec)


def describe(v) -> str:
    r = repr(v)
    r = r if len(r) <= 40 else r[:37] + "..."
    t = type(v).__name__
    return f"{r} ({'an' if t[0] in 'aeiou' else 'a'} {t})"


def _dtype_problem(dt: np.dtype) -> str | None:
    if dt.kind in _KINDS:
        return None
    return f"dtype {dt}: {_KIND_HINT.get(dt.kind, 'not numbers')}"


def value_array(x, what) -> np.ndarray:
    """``x`` (a number, numeric array or nested list of numbers) as an array; else ``ArgTypeError``.

    ``what`` names the argument in the message, e.g. ``"the right operand of + with tensor 'x'"``,
    or is a function returning that text (called only for a message).
    """
    from .tensor import RecurrentTensor

    if isinstance(x, (bool, int, float)) or (isinstance(x, np.ndarray) and x.dtype.kind in _KINDS):
        return np.asarray(x)
    what = what() if callable(what) else what
    fix = "pass a tensor, a number or a numeric numpy array"
    if x is None or isinstance(x, (str, bytes, dict, set, frozenset, complex)) or (
        not isinstance(x, (numbers.Number, np.ndarray, np.generic, list, tuple))
    ):
        raise ArgTypeError(f"{what} is {describe(x)}; {fix}")
    if isinstance(x, (list, tuple)) and any(isinstance(v, RecurrentTensor) for v in _flat(x)):
        raise ArgTypeError(f"{what} is a {type(x).__name__} holding tensors; combine tensors with tl.stack or "
                           "tl.concat")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ArgTypeError(f"{what} is {describe(x)}, which is not a numeric array ({e}); {fix}") from None
    bad = _dtype_problem(arr.dtype)
    if bad:
        raise ArgTypeError(f"{what} is {describe(x)} of {bad}; {fix} (bool, int or float)")
    return arr


def _flat(xs):
    for v in xs:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def check_data(arr: np.ndarray, what: str):
    """Tensor data must hold bool, int or float values."""
    bad = _dtype_problem(arr.dtype)
    if bad:
        raise ArgTypeError(f"{what}: the data has {bad}; tensors hold bool, int or float values "
                           "(convert it first, e.g. np.asarray(data, dtype='float32'))")


def as_dtype(dtype, what: str, arg: str = "dtype") -> np.dtype:
    """A numpy dtype of bool, int or float kind; an unknown name lists the accepted ones."""
    accepted = f"use one of {', '.join(DTYPES)}"
    if dtype is None or isinstance(dtype, (bool, numbers.Number)):
        raise ArgTypeError(f"{what}: {arg}={dtype!r} is not a dtype; {accepted}")
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise ArgTypeError(f"{what}: {arg}={dtype!r} is not a dtype; {accepted}") from None
    if dt.kind not in _KINDS:
        raise ArgTypeError(f"{what}: {arg}={dtype!r} ({dt}) is not supported; {accepted}")
    return dt


def _is_int(s) -> bool:
    return isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_))


def as_size(n, what: str, arg: str = "n", least: int = 0) -> int:
    """An int count ``>= least`` (``tl.arange(n)``, ``tl.one_hot(idx, n)``)."""
    if not _is_int(n):
        raise ArgTypeError(f"{what}: {arg}={describe(n)} must be an int >= {least}")
    if n < least:
        raise ShapeError(f"{what}: {arg}={int(n)} must be an int >= {least}")
    return int(n)


def as_shape(shape, what: str, arg: str = "shape", symbolic: bool = False, minus_one: bool = False) -> tuple:
    """A tuple of ints >= 0 (or a single int); ``symbolic``: bound expressions allowed;
    ``minus_one``: one entry may be -1 (reshape)."""
    if isinstance(shape, (tuple, list)):
        entries = tuple(shape)
    elif isinstance(shape, np.ndarray) and shape.ndim == 1:
        entries = tuple(shape.tolist())
    else:
        entries = (shape,)
    out = []
    for s in entries:
        if _is_int(s):
            if s < 0 and not (minus_one and s == -1):
                raise ShapeError(f"{what}: {arg} {_fmt(shape)} has the negative entry {int(s)}; shape entries are "
                                 f"ints >= 0{' (or one -1)' if minus_one else ''}")
            out.append(int(s))
        elif symbolic and isinstance(s, Expr) and not isinstance(s, Dim):
            out.append(s.e)
        elif symbolic and isinstance(s, sympy.Expr) and not s.is_number:
            out.append(s)
        else:
            kind = "bound expressions (T, T - 1) or " if symbolic else ""
            raise ArgTypeError(f"{what}: {arg} {_fmt(shape)} has the entry {describe(s)}; shape entries are "
                               f"{kind}ints >= 0")
    if minus_one and sum(1 for s in out if isinstance(s, int) and s == -1) > 1:
        raise ShapeError(f"{what}: {arg} {_fmt(shape)} has more than one -1")
    return tuple(out)


def _fmt(shape):
    return repr(tuple(shape)) if isinstance(shape, list) else repr(shape)


def as_domain(domain, prog, what: str) -> tuple:
    """A tuple of distinct dims of ``prog`` (a single dim is its own domain), in program order."""
    names = ", ".join(d.name for d in prog.dims)
    example = {0: "domain=()", 1: f"domain=({names},) with {names}, = prog.dims"}.get(
        len(prog.dims), f"domain=({names}) with {names} = prog.dims")
    if isinstance(domain, Dim):
        entries = (domain,)
    elif isinstance(domain, (tuple, list)):
        entries = tuple(domain)
    else:
        raise ArgTypeError(f"{what}: domain={describe(domain)} is not a tuple of dims; pass e.g. {example}")
    for d in entries:
        if isinstance(d, Bound):
            raise ArgTypeError(f"{what}: domain entry {d.name} is a bound, not a dim; use its dim {d.dim.name}")
        if not isinstance(d, Dim):
            raise ArgTypeError(f"{what}: domain entry {describe(d)} is not a dim; pass e.g. {example}")
        if d.program is not prog:
            raise CompileError(f"{what}: domain dim {d.name} belongs to another tl.Program; use the dims of the "
                               f"program being built ({names})")
    seen = set()
    for d in entries:
        if id(d) in seen:
            raise ShapeError(f"{what}: dim {d.name} appears twice in domain {entries!r}; list each dim once")
        seen.add(id(d))
    return prog.sort_domain(entries)


def check_program(tensors, what: str | None = None):
    """All tensors belong to one program, the one being built by the innermost ``with prog:``."""
    from .program import building_program

    cur = building_program()
    first = tensors[0].prog if tensors else None
    if cur is first and all(x.prog is first for x in tensors):
        return
    progs = {id(x.prog): x for x in tensors}
    here = f"{what}: " if what else f"at {user_site()}: "
    if len(progs) > 1:
        a, b = list(progs.values())[:2]
        raise CompileError(f"{here}tensors {a.name!r} and {b.name!r} belong to different tl.Programs; build each "
                           "program from its own tensors")
    if cur is None and tensors:
        raise CompileError(f"{here}an op on tensor {tensors[0].name!r} is created outside `with prog:`; build every "
                           "op of a program inside its `with` block")
    if cur is not None and tensors and tensors[0].prog is not cur:
        x = tensors[0]
        raise CompileError(f"{here}tensor {x.name!r} belongs to another tl.Program than the one of the enclosing "
                           f"`with` ({cur!r}); create it inside that program, or build this op inside "
                           f"`with` of its own program")


__all__ = ["DTYPES", "as_domain", "as_dtype", "as_shape", "as_size", "check_data", "check_program", "describe",
           "value_array", "who"]
