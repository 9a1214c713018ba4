"""Demand inside cycles of tensors (timerl.ir.analysis): the worklist's widening of peeled loops.

The worklist starts from every point and removes what nothing reads. A dead chain of point reads
(n-step REINFORCE's running sums in the last training iteration, whose update nothing reads) went
one point a round, T rounds; ``_widen`` closes such a loop with isl in one step. Oracle: the plain
worklist (widening off) gives the same demanded points; and the work (images computed) no longer
grows with T, while without widening it does."""

import importlib

import pytest

import timerl.ir.analysis as A

reinforce = importlib.import_module("timerl.rl.reinforce")


def _analyses(monkeypatch, T, widen=True, **flags):
    """Every analysis the compile of a tiny REINFORCE at ``T`` runs: (demand per node, images computed)."""
    if not widen:
        monkeypatch.setattr(A, "WIDEN_AFTER", 10**9)
    images = [0]
    image = A._image

    def counted(*a):
        images[0] += 1
        return image(*a)

    monkeypatch.setattr(A, "_image", counted)
    out = []
    analyze = A.analyze

    def recorded(*a, **k):
        r = analyze(*a, **k)
        out.append({n: r.demand[n] for n in r.live})
        return r

    # the analysis is imported by name where it runs
    for mod in ("timerl.compiler", "timerl.passes.incrementalize", "timerl.passes.views", "timerl.passes.vectorize"):
        m = importlib.import_module(mod)
        if hasattr(m, "analyze"):
            monkeypatch.setattr(m, "analyze", recorded)
    reinforce.reinforce(total_steps=2 * 2 * T, num_envs=2, num_steps=T, env="trivial", obs_shape=(3, 2, 2),
                        hidden=4, backend="numpy", callback=lambda r: None, **flags)
    monkeypatch.undo()
    return out, images[0]


@pytest.mark.parametrize("flags", [{"nstep": 3}, {}], ids=["nstep", "mc"])
def test_widening_keeps_every_demanded_point(monkeypatch, flags):
    widened, _ = _analyses(monkeypatch, 24, True, **flags)
    plain, _ = _analyses(monkeypatch, 24, False, **flags)
    assert len(widened) == len(plain) >= 2
    for a, b in zip(widened, plain):
        assert a.keys() == b.keys()
        differ = [n for n in a if not a[n].is_equal(b[n])]
        assert not differ, f"demand differs at nodes {differ[:5]}"


def test_demand_work_does_not_grow_with_the_rollout(monkeypatch):
    _, short = _analyses(monkeypatch, 16, True, nstep=3)
    _, long = _analyses(monkeypatch, 64, True, nstep=3)
    _, short_plain = _analyses(monkeypatch, 16, False, nstep=3)
    _, long_plain = _analyses(monkeypatch, 64, False, nstep=3)
    # without widening the dead chain is peeled one point a round: 48 more steps, many more images
    assert long_plain - short_plain > 40 * 20
    assert long - short < (long_plain - short_plain) / 20, (short, long, short_plain, long_plain)
