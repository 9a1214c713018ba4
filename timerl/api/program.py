"""Programs: the dims, the bounds, and the PDG recorded while user code runs."""

from __future__ import annotations

import threading

from ..errors import CompileError
from ..ir.expr import Bound, Dim
from ..ir.ops import Node, Op
from ..ir.pdg import PDG
from .naming import label

_local = threading.local()


def building_program():
    """The program of the innermost ``with prog:``, or None outside every one."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def current_program() -> "Program":
    stack = getattr(_local, "stack", None)
    if not stack:
        raise CompileError("timerl ops must be created inside `with prog:` of a tl.Program")
    return stack[-1]


class Program:
    """A recurrent-tensor program over symbolic dims (outermost first).

    >>> prog = Program("i t")
    >>> i, t = prog.dims
    >>> I, T = prog.bounds
    """

    def __init__(self, dims):
        if not isinstance(dims, (str, list, tuple)) or not all(isinstance(n, str) for n in dims):
            raise TypeError(f"tl.Program(dims): dims must be a string like \"i t\" or a sequence of names, "
                            f"got {dims!r}")
        names = dims.split() if isinstance(dims, str) else list(dims)
        bad = [n for n in names if not n.isidentifier()]
        if bad:
            raise ValueError(f"tl.Program(dims): dim names must be identifiers like i or t, got {dims!r}")
        if len(set(names)) != len(names) or not names and not isinstance(dims, (str, list, tuple)):
            raise ValueError(f"dim names must be distinct, got {names}")
        self.dims = tuple(Dim(n, k, self) for k, n in enumerate(names))
        self.bounds = tuple(d.bound for d in self.dims)
        self.pdg = PDG()
        self._count = 0
        self._random_count = 0
        self._sym_to_dim = {d.e: d for d in self.dims}
        self._sym_to_bound = {b.e: b for b in self.bounds}
        self.param_updates = []  # filled by tl.optim: (param node, update node)

    # dims and bounds --------------------------------------------------------------
    def dim(self, name: str) -> Dim:
        """The dim called ``name`` (``prog.dim("t")``); an unknown name is a ``KeyError`` listing the dims."""
        for d in self.dims:
            if d.name == name:
                return d
        raise KeyError(f"program has no dim {name!r}; dims are {[d.name for d in self.dims]}")

    def bound(self, name: str) -> Bound:
        """The bound called ``name`` (``prog.bound("T")``, the upper-cased dim name); unknown: ``KeyError``."""
        for b in self.bounds:
            if b.name == name:
                return b
        raise KeyError(f"program has no bound {name!r}; bounds are {[b.name for b in self.bounds]}")

    def sort_domain(self, dims) -> tuple:
        """``dims`` without repeats, in program order (a dim of another program is a :class:`tl.CompileError`)."""
        uniq = {}
        for d in dims:
            if d.program is not self:
                raise CompileError(f"dim {d.name} belongs to another program")
            uniq[id(d)] = d
        return tuple(sorted(uniq.values(), key=lambda d: d.position))

    # context ------------------------------------------------------------------
    def __enter__(self):
        """``with prog:`` makes this the current program: every tensor created inside belongs to it."""
        if not hasattr(_local, "stack"):
            _local.stack = []
        _local.stack.append(self)
        return self

    def __exit__(self, *exc):
        """Leave ``with prog:``; the program can be re-entered later to add more ops (e.g. sinks)."""
        _local.stack.pop()
        return False

    # graph building -------------------------------------------------------------
    def add(self, op: Op, domain, shapes, dtypes, attrs=None, inputs=(), name=None) -> int:
        """Record a node; ``inputs`` is a list of (producer id, Edge)."""
        n = self._count
        self._count += 1
        attrs = dict(attrs or {})
        node = Node(
            op=op,
            domain=tuple(domain),
            shapes=tuple(tuple(s) for s in shapes),
            dtypes=tuple(dtypes),
            attrs=attrs,
            name=label(name, attrs["fn"] if isinstance(attrs.get("fn"), str) else op.value),
            index=n,
        )
        self.pdg.add_op(n, node)
        for p, e in inputs:
            self.pdg.add_dep(n, p, e)
        return n

    def next_random_stream(self) -> int:
        """The creation index of the next random op (the key of its counter-based stream)."""
        k = self._random_count
        self._random_count += 1
        return k

    # compile ------------------------------------------------------------------------
    def compile(self, bounds=None, backend="numba", seed=0, memory_budget=None, passes=None, check=None):
        """Compile the whole program for ``bounds``; returns an :class:`~timerl.runtime.executable.Executable`.

        Args:
            bounds: a dict from :class:`tl.Bound` objects or their names (``"T"``) to positive ints:
                the bound of every dim in the domain of a tensor a sink or a parameter update needs,
                and of every bound used in an index or condition.
            backend: ``"reference"`` (the point-by-point oracle), ``"numpy"`` (the isl-scheduled
                interpreter), ``"numba"`` (the default: the same with generated, cached njit kernels)
                or ``"cuda"``.
            seed: the seed of every random op (a value depends only on the seed, the op's creation
                index and the point).
            memory_budget: bytes; the compiler picks schedules and storage, and spills values that
                wait long for a late reader (a rollout read by the learner) to files and back, to keep
                the peak of live tensor bytes under it, or raises :class:`tl.CompileError` stating the
                least it can meet. Spill files go under ``TIMERL_SPILL_DIR`` (default: the system's
                temporary directory) and are removed when the run ends, raises or is interrupted.
            passes: a dict from pass name to ``False`` to switch an optimization off (ablation):
                ``"simplify"`` (exact algebraic identities, constant folding), ``"cse"`` (duplicate
                ops merged), ``"dce"`` (what no sink or update needs), ``"vectorize"`` (a dim that
                needs no order becomes a spatial axis), ``"group"`` (one isl statement per group of
                ops joined at one point), ``"fuse"`` (numba: a statement's ops in statement
                kernels). An unknown name is a CompileError.
            check: instrument the run (every read after its write and before its free, no op
                producing inf or NaN from finite inputs) and verify the graph after every pass;
                default ``timerl.config.config.check`` (``TIMERL_CHECK``).

        Raises :class:`tl.CompileError` for a missing or unknown bound, a read outside a tensor's
        points, a point that no branch covers, a cycle, or a dependence the backend does not support.

            exe = prog.compile(bounds={"I": 3, "T": 50}, backend="numpy")
            exe.run()
        """
        from .compile import compile_program

        return compile_program(
            self, {} if bounds is None else bounds, backend=backend, seed=seed, memory_budget=memory_budget,
            passes=passes, check=check,
        )

    def __repr__(self):
        return f"Program({' '.join(d.name for d in self.dims)})"
