"""Errors users see. Every message names the user's tensor (its `name=` or source line)."""

from __future__ import annotations

import os
import sys

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


class CompileError(Exception):
    """A program that cannot be compiled: missing bound, bad read, cycle, unsupported dependence."""


class BudgetError(CompileError):
    """A ``memory_budget`` no plan meets; ``least`` is the least planned peak (bytes) one does."""

    def __init__(self, message, least: int):
        super().__init__(message)
        self.least = least


class ShapeError(ValueError):
    """Spatial shapes or dtypes that do not combine."""


class ArgTypeError(ShapeError, TypeError):
    """An argument of a type or dtype timerl cannot compute with (a str, None, a dict, string data,
    an unknown dtype name, a float shape entry). Both a ``tl.ShapeError`` and a ``TypeError``."""


class RuntimeFault(RuntimeError):
    """An error raised while running a compiled program (e.g. max over an empty slice)."""


# entry points: past them the call stack holds only the `timerl` command's launcher
_ENTRY_FILES = (os.path.join(_PKG_DIR, "cli.py"), os.path.join(_PKG_DIR, "__main__.py"))


def caller_site() -> str | None:
    """The first source line outside the timerl package on the current call stack, or None
    when there is none: under the ``timerl`` command the only frames outside the package
    are its launcher (the console script, runpy), which no user wrote."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if fn in _ENTRY_FILES:
            return None
        if not fn.startswith(_PKG_DIR + os.sep):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return None


def user_site() -> str:
    """The first source line outside the timerl package on the current call stack."""
    return caller_site() or "<unknown>"
