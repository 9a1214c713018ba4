"""``Program.compile``'s entry: the driver is :mod:`timerl.compiler`."""

from __future__ import annotations

from ..compiler import BACKENDS, compile_program

__all__ = ["BACKENDS", "compile_program"]
