"""Small programs that every backend runs; the reference executor is the oracle.

``PROGRAMS[name]()`` builds a fresh program and returns ``(prog, bounds, collect)``:
``prog`` is an uncompiled :class:`timerl.Program`, ``bounds`` its compile bounds, and
``collect`` a dict that a run fills as ``{sink name: {point tuple: numpy value}}``
(points in the sink's domain order, ``()`` for an empty domain). Build again for each
run: stateful UDFs keep their state in the closure of one build, and each sink records a
point only once.

``EXPECTED[name]()`` gives the same structure from plain numpy loops (random programs
use :func:`timerl.ir.rng.draw` with ``seed=0``, the counter-based generator every backend
shares).

    from programs import PROGRAMS, run, assert_close
    for name in PROGRAMS:
        assert_close(run(name, backend="numpy"), run(name, backend="reference"))

Tests import this package as ``programs`` (``tests/`` is on ``sys.path`` under pytest).
"""

from __future__ import annotations

import functools

import numpy as np

from . import recurrences, spatial
from .collect import Collect


def _window(*names):
    return functools.partial(recurrences.build_windows, names), functools.partial(recurrences.expect_windows, names)


PROGRAMS = {
    "returns": recurrences.build_returns,  # g[t] = r[t] + gamma g[t + 1], backward along t
    "env": recurrences.build_env,  # stateful reset/step UDFs, o[i, 0] = o[i - 1, T], o[i, t + 1]
    "nstep": _window("nstep")[0],  # window x[i, t:min(t + n, T)].sum(): learning while acting
    "mc": _window("mc")[0],  # Monte-Carlo discounted sum over x[i, t:T]
    "prefix_mean": _window("prefix_mean")[0],  # x[i, 0:t + 1].mean()
    "const_slices": _window("const_slice", "fixed_slice", "ends")[0],  # x[i, 0:T], x[i, 1:4], x[i, T - 1]
    "outer_slice": _window("outer")[0],  # x[0:I, t]: a slice of the outer dim
    "carry": recurrences.build_carry,  # two-dim recurrence carried across iterations
    "branches": recurrences.build_branches,  # first true branch wins; shift, condition, constant keys
    "random": spatial.build_random,  # uniform, normal, categorical, permutation
    "mlp": spatial.build_mlp,  # tanh(x @ W1 + b1) @ W2 per point and over a whole rollout
    "movement": spatial.build_movement,  # reductions, scans, reshape/concat/stack/take/one_hot
    "per_t": spatial.build_per_t,  # a loss per step read whole, by a constant slice and point by point
}

EXPECTED = {
    "returns": recurrences.expect_returns,
    "env": recurrences.expect_env,
    "nstep": _window("nstep")[1],
    "mc": _window("mc")[1],
    "prefix_mean": _window("prefix_mean")[1],
    "const_slices": _window("const_slice", "fixed_slice", "ends")[1],
    "outer_slice": _window("outer")[1],
    "carry": recurrences.expect_carry,
    "branches": recurrences.expect_branches,
    "random": spatial.expect_random,
    "mlp": spatial.expect_mlp,
    "movement": spatial.expect_movement,
    "per_t": spatial.expect_per_t,
}


def run(name, backend="reference", **compile_kw) -> dict:
    """Build program ``name``, compile it on ``backend``, run it once; return what its sinks saw."""
    prog, bounds, collect = PROGRAMS[name]()
    prog.compile(bounds, backend=backend, **compile_kw).run()
    return collect


def assert_close(got: dict, want: dict, rtol=1e-5, atol=1e-5):
    """Same sinks, same points, values equal (floats within tolerance, ints and bools exactly)."""
    assert sorted(got) == sorted(want), f"sinks differ: {sorted(got)} vs {sorted(want)}"
    for sink in want:
        g, w = got[sink], want[sink]
        assert sorted(g) == sorted(w), f"sink {sink!r}: points differ: {sorted(g)} vs {sorted(w)}"
        for pt in w:
            gv, wv = (g[pt], w[pt]) if isinstance(g[pt], tuple) else ((g[pt],), (w[pt],))
            for a, b in zip(gv, wv):
                a, b = np.asarray(a), np.asarray(b)
                assert a.shape == b.shape, f"sink {sink!r} at {pt}: shape {a.shape} vs {b.shape}"
                if a.dtype.kind == "f" or b.dtype.kind == "f":
                    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"sink {sink!r} at {pt}")
                else:
                    np.testing.assert_array_equal(a, b, err_msg=f"sink {sink!r} at {pt}")


__all__ = ["PROGRAMS", "EXPECTED", "Collect", "run", "assert_close"]
