"""Whole-program passes: each a function ``(prog, pdg, bounds, analysis) -> (pdg, analysis)``.

``PIPELINE`` names them in order. A pass never mutates the graph it is given; it returns
a new one (or the same one when it changes nothing) with an analysis whose demanded sets
describe the new graph. :func:`run_passes` times each as ``pass_<name>``, skips those
switched off with ``compile(passes={name: False})``, and in checking mode runs
:func:`~timerl.passes.verify.verify` on the input and after every pass.

- ``simplify``: exact algebraic identities and constant folding (:mod:`.simplify`);
- ``cse``: one node per distinct computation (:mod:`.cse`);
- ``dce``: drop what no sink or parameter update demands (:mod:`.dce`);
- ``reuse``: a learner's forward ops over a rollout block read the acting activations (:mod:`.reuse`);
- ``vectorize``: a dim that needs no order becomes a leading spatial axis (:mod:`.vectorize`).

Names the scheduler reads (not PDG rewrites): ``"group"`` (one isl statement per group of
ops joined at the same point).
"""

from __future__ import annotations

import time

from ..errors import CompileError
from .cse import cse
from .dce import dce
from .reuse import reuse
from .simplify import simplify
from .vectorize import vectorize
from .verify import VerifyError, verify

PIPELINE = [("simplify", simplify), ("cse", cse), ("dce", dce), ("reuse", reuse), ("vectorize", vectorize)]
SCHEDULER_SWITCHES = ("group",)


def check_switches(switches):
    """``compile(passes=...)``: None or a dict from known pass names to bools."""
    known = {n for n, _ in PIPELINE} | set(SCHEDULER_SWITCHES)
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


def run_passes(prog, pdg, bounds, analysis, switches, times, check=False):
    """Run the enabled passes of ``PIPELINE`` in order; ``check`` verifies the graph around each."""
    switches = dict(switches or {})
    check_switches(switches)
    if check:
        verify(pdg, prog, after="(program as built)")
    for name, fn in PIPELINE:
        if switches.get(name, True) is False:
            continue
        t0 = time.perf_counter()
        pdg, analysis = fn(prog, pdg, bounds, analysis)
        times[f"pass_{name}"] = time.perf_counter() - t0
        if check:
            t0 = time.perf_counter()
            verify(pdg, prog, after=name)
            times["verify"] = times.get("verify", 0.0) + time.perf_counter() - t0
    return pdg, analysis


__all__ = ["PIPELINE", "SCHEDULER_SWITCHES", "VerifyError", "check_switches", "run_passes", "verify"]
