"""Whole-program passes: each a function ``(prog, pdg, bounds, analysis) -> (pdg, analysis)``.

``PIPELINE`` names them in order. A pass never mutates the graph it is given; it returns
a new one (or the same one when it changes nothing) with an analysis whose demanded sets
describe the new graph. :func:`run_passes` times each as ``pass_<name>``, skips those
switched off with ``compile(passes={name: False})``, and in checking mode runs
:func:`~timerl.passes.verify.verify` on the input and after every pass.

Rewrites (the graph changes):

- ``simplify``: exact algebraic identities and constant folding (:mod:`.simplify`);
- ``cse``: one node per distinct computation (:mod:`.cse`);
- ``dce``: drop what no sink or parameter update demands (:mod:`.dce`);
- ``reuse``: a learner's forward ops over a rollout block read the acting activations (:mod:`.reuse`;
  through a gather of rows, PPO's shuffled minibatch, only with the option ``reuse_rows``);
- ``incrementalize``: a sum over a whole dim of values that stream along it becomes a running
  accumulator, and what feeds it stays per step (:mod:`.incrementalize`);
- ``vectorize``: a dim that needs no order becomes a leading spatial axis (:mod:`.vectorize`);
- ``views``: a permute or reshape read by several ops becomes one per reader, taken where it is
  read (a transpose read over more dims moves into its reader's domain), and each read output of a
  several-output UDF gets an access of its own unless ``split_outputs`` is switched off (:mod:`.views`).

Annotations (the graph is the same, with a record in ``pdg.graph`` that later stages only read):

- ``group``: the isl statements, groups of ops joined at the same point (``pdg.graph["groups"]``,
  read by the scheduler; :mod:`.group`); off, every node is a statement of its own;
- ``fuse``: each group's statement-kernel segments on the numba backend
  (``pdg.graph["segments"]``, read by the lowering; :mod:`.fuse`); off, every member runs in
  the interpreter.

An annotation describes the graph it is on, so the annotating passes come last, ``group``
before ``fuse``; :func:`run_passes` drops the annotations from a graph a rewrite returns (a
pipeline reordered by hand cannot leave a stale one). A pass with ``takes_context`` set also
receives a :class:`PassContext` (the backend being compiled for: ``fuse`` needs it).
"""

from __future__ import annotations

import dataclasses
import time

from ..errors import CompileError
from .group import GROUPS, JOINS, SEGMENTS
from .cse import cse
from .dce import dce
from .fuse import fuse
from .group import group
from .incrementalize import incrementalize
from .reuse import reuse
from .simplify import simplify
from .vectorize import vectorize
from .views import views
from .verify import VerifyError, verify

PIPELINE = [("simplify", simplify), ("cse", cse), ("dce", dce), ("reuse", reuse), ("incrementalize", incrementalize),
            ("vectorize", vectorize), ("views", views),
            ("group", group), ("fuse", fuse)]
ANNOTATIONS = (GROUPS, JOINS, SEGMENTS)  # the pdg.graph keys the annotating passes write
ANNOTATING = ("group", "fuse")
#: switches of a pass's variant (``compile(passes={"reuse_rows": True})``) and their defaults, which
#: :func:`run_passes` puts in the :class:`PassContext` (a pass reads ``ctx.switches[name]``)
OPTION_DEFAULTS = {"reuse_rows": False, "incrementalize_all": False, "split_outputs": True}
OPTIONS = tuple(OPTION_DEFAULTS)
# switches the scheduler read before grouping became a pass; none now (kept for callers)
SCHEDULER_SWITCHES = ()


@dataclasses.dataclass(frozen=True)
class PassContext:
    """What a pass with ``takes_context`` learns beyond the program: the backend compiled for
    (None when the passes run without one) and, for a backend that compiles statement kernels,
    its generator's test ``renderable(pdg, node, dims)`` (the compiler driver passes it: passes
    never import a backend)."""

    backend: str | None = None
    renderable: object = None
    switches: dict = dataclasses.field(default_factory=dict)  # compile(passes=...) as given


def check_switches(switches):
    """``compile(passes=...)``: None or a dict from known pass names to bools."""
    known = {n for n, _ in PIPELINE} | set(OPTIONS)
    if switches is None:
        return
    if not isinstance(switches, dict):
        raise CompileError(f"compile(passes={switches!r}): pass a dict from pass name to True/False, "
                           f"e.g. passes={{'cse': False}}; passes are {', '.join(sorted(known))}")
    for k, v in switches.items():
        if k not in known:
            raise CompileError(f"unknown pass {k!r} in compile(passes=...); passes are {', '.join(sorted(known))}")
        if not isinstance(v, bool):
            raise CompileError(f"compile(passes=...): the switch of pass {k!r} is {v!r}; use True or False")


def run_passes(prog, pdg, bounds, analysis, switches, times, check=False, ctx=None):
    """Run the enabled passes of ``PIPELINE`` in order; ``check`` verifies the graph around each.
    ``ctx``: the :class:`PassContext` (the ``fuse`` pass records nothing without a kernel generator)."""
    switches = dict(switches or {})
    check_switches(switches)
    ctx = dataclasses.replace(ctx or PassContext(), switches={**OPTION_DEFAULTS, **switches})
    if check:
        verify(pdg, prog, after="(program as built)", analysis=analysis)
    for name, fn in PIPELINE:
        if switches.get(name, True) is False:
            continue
        t0 = time.perf_counter()
        before = pdg
        if getattr(fn, "takes_context", False):
            pdg, analysis = fn(prog, pdg, bounds, analysis, ctx)
        else:
            pdg, analysis = fn(prog, pdg, bounds, analysis)
        if name not in ANNOTATING and pdg is not before and any(k in pdg.graph for k in ANNOTATIONS):
            pdg = _without_annotations(pdg, before)  # a rewrite after an annotating pass: the record is stale
        times[f"pass_{name}"] = time.perf_counter() - t0
        if check:
            t0 = time.perf_counter()
            verify(pdg, prog, after=name, analysis=analysis)
            times["verify"] = times.get("verify", 0.0) + time.perf_counter() - t0
    return pdg, analysis


def _without_annotations(pdg, before):
    """``pdg`` without the annotations, never touching ``before``'s (a view shares its dict)."""
    if pdg.graph is before.graph:
        pdg = pdg.copy()
    for k in ANNOTATIONS:
        pdg.graph.pop(k, None)
    return pdg


__all__ = ["ANNOTATIONS", "OPTIONS", "OPTION_DEFAULTS", "PIPELINE", "SCHEDULER_SWITCHES", "PassContext", "VerifyError", "check_switches",
           "run_passes", "verify"]
