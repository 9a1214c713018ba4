"""The programs of tests/programs on the reference executor, against plain numpy loops."""

import pytest

from programs import EXPECTED, PROGRAMS, assert_close, run


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_numpy(name):
    assert_close(run(name, backend="reference"), EXPECTED[name]())


def test_registry_is_complete():
    assert sorted(PROGRAMS) == sorted(EXPECTED)
    prog, bounds, collect = PROGRAMS["returns"]()
    assert isinstance(bounds, dict) and collect == {"g": {}}


@pytest.mark.parametrize("name", ["env", "random"])
def test_reruns_repeat(name):
    prog, bounds, collect = PROGRAMS[name]()
    exe = prog.compile(bounds, backend="reference")
    exe.run()
    first = {k: dict(v) for k, v in collect.items()}
    for v in collect.values():
        v.clear()
    if name == "env":  # a rerun calls the UDFs again: their state continues, so only shapes repeat
        exe.run()
        assert all(sorted(collect[k]) == sorted(first[k]) for k in first)
        return
    exe.run()
    assert_close(collect, first, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["returns", "env", "carry", "branches", "nstep", "mc"])
def test_recurrences_are_ordered_without_isl_scheduling(name, monkeypatch):
    """The dims-first order test covers forward, backward and carried recurrences, so the
    analysis never hands them to isl's scheduler (slow on whole RL programs)."""
    from timerl.ir import analysis

    def fail(*a, **k):
        raise AssertionError("isl scheduling was needed")

    monkeypatch.setattr(analysis, "_has_affine_order", fail)
    prog, bounds, _ = PROGRAMS[name]()
    prog.compile(bounds, backend="reference")


def test_inner_update_loop_without_the_middle_dim(monkeypatch):
    """A recurrence over (i, k) next to data over (i, t), like PPO's epochs: ordered by i then k."""
    import numpy as np

    import timerl as tl
    from timerl.ir import analysis

    monkeypatch.setattr(analysis, "_has_affine_order", lambda *a: (_ for _ in ()).throw(AssertionError("isl")))
    X = np.arange(6, dtype="float32").reshape(2, 3)
    prog = tl.Program("i t k")
    i, t, k = prog.dims
    I, T, K = prog.bounds
    got = {}
    with prog:
        x = tl.tensor(X, (i, t), name="x")
        p = tl.placeholder((), "float32", (i, k), name="p")
        p[0, 0] = tl.const(0.0)
        p[i, 0] = p[i - 1, K]
        p[i, k + 1] = p * 0.5 + x[i, 0:T].sum()
        tl.sink(p, lambda v, pt: got.__setitem__((pt["i"], pt["k"]), float(v)))
    prog.compile({"I": 2, "T": 3, "K": 2}, backend="reference").run()
    v, want = 0.0, {}
    for a in range(2):
        for b in range(2):
            want[(a, b)] = v
            v = v * 0.5 + X[a].sum()
    assert got == pytest.approx(want)
