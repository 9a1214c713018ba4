"""Spilling under ``memory_budget`` (issue 12, item 4): when no schedule or storage choice fits the
budget, the memory plan swaps rollout data to files and back (swap-out, swap-in and prefetch
statements in the schedule); values stay those of the unconstrained run, the planned peak stays
the measured one, a budget below what spilling reaches is refused with the least that works, and
the spill files go however the run ends."""

from __future__ import annotations

import importlib
import os
import re

import numpy as np
import pytest

import timerl as tl
from timerl import cli
from timerl.config import Config
from timerl.runtime import spill


def _rollout(fail_at=None, I=2, T=12, N=4, D=256):
    """REINFORCE's shape in small: an environment UDF steps observations ``obs[i, t + 1]`` and
    returns a reward; returns ``G`` run backward over the rollout; the learner reads the whole
    rollout ``obs[i, 0:T]`` after the acting loop. The UDF's outputs live until the returns read
    the reward, ``obs`` until the learner: both wait long for late readers. ``fail_at``: the
    ``(i, t)`` at which the UDF raises it (an exception instance)."""
    prog = tl.Program("i t")
    (i, t), (Ib, Tb) = prog.dims, prog.bounds
    start = np.random.default_rng(0).standard_normal((I, N, D)).astype("float32")
    out, seen = {}, {"i": 0, "t": 0, "spill": None}

    def step(x):
        if fail_at is not None and (seen["i"], seen["t"]) == fail_at[0]:
            seen["spill"] = sorted(os.listdir(tl.config.config.spill_dir))
            raise fail_at[1]
        seen["t"] += 1
        if seen["t"] == T:
            seen["i"], seen["t"] = seen["i"] + 1, 0
        return np.tanh(x * 0.9 + 0.1).astype("float32"), x.mean(axis=1).astype("float32")

    with prog:
        o = tl.placeholder((N, D), "float32", (i, t), name="obs")
        o[i, 0] = tl.tensor(start, (i,), name="start")
        nxt, r = tl.udf(step, [o], [(N, D), (N,)], ["float32", "float32"])
        o[i, t + 1] = nxt
        g = tl.placeholder((N,), "float32", (i, t), name="G")
        g[i, Tb - 1] = r
        g[i, t] = r + 0.9 * g[i, t + 1]
        loss = (o[i, 0:T].sum(axis=2) * g[i, 0:T]).sum()
        tl.sink(loss, lambda v, p: out.__setitem__(p["i"], v.copy()), name="loss")
    return prog, {Ib: I, Tb: T}, out, seen


#: the rollout's compile switch for the tests of swapping a UDF's points: with each output read
#: through an access of its own (the default) only the reward waits for the returns, too little to
#: swap; read from the UDF's node, the whole tuple waits (observation included)
HELD = {"split_outputs": False}


def _least(err) -> int:
    m = re.search(r"pass memory_budget>=(\d+)", str(err))
    assert m, str(err)
    return int(m.group(1))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_budget_that_needs_spilling_keeps_the_values_and_the_peak(backend, tmp_path):
    prog, bounds, out, _ = _rollout()
    free = prog.compile(bounds, backend=backend, passes=HELD)
    free.run()
    want, peak = dict(out), free.stats["peak_bytes"]
    assert free.stats["spilled_bytes"] == 0
    budget = int(0.6 * peak)
    exe = prog.compile(bounds, backend=backend, memory_budget=budget, passes=HELD)
    text = str(exe.schedule)
    assert "spill S" in text and "swap out " in text and ("swap in " in text or "prefetch " in text)
    out.clear()
    with tl.config.override(spill_dir=str(tmp_path)):
        exe.run()
    assert out.keys() == want.keys() and all(np.array_equal(out[k], want[k]) for k in want)
    assert exe.stats["peak_bytes"] == exe.planned_peak() <= budget
    assert exe.stats["spilled_bytes"] > 0 and exe.stats["swapped_bytes"] >= exe.stats["spilled_bytes"]
    assert exe.stats["swap_seconds"] >= 0
    assert os.listdir(tmp_path) == []  # the run's spill directory is gone


def test_a_budget_below_what_spilling_reaches_is_refused_with_the_least_that_works():
    prog, bounds, out, _ = _rollout()
    free = prog.compile(bounds, backend="numpy", passes=HELD)
    free.run()
    want, peak = dict(out), free.stats["peak_bytes"]
    with pytest.raises(tl.CompileError, match="cannot be met") as err:
        prog.compile(bounds, backend="numpy", memory_budget=peak // 4, passes=HELD)
    least = _least(err.value)
    assert isinstance(err.value, tl.BudgetError) and err.value.least == least
    assert peak // 4 < least < peak
    exe = prog.compile(bounds, backend="numpy", memory_budget=least, passes=HELD)
    # both kinds of swap: the rollout block (one swap-in per block, read by the learner's slice)
    # and the UDF's points (one per point, read back by the returns: the reward only)
    units = sorted(sw.unit for sw in exe.schedule.spills.values())
    assert units == ["block", "point"]
    out.clear()
    exe.run()
    assert all(np.array_equal(out[k], want[k]) for k in want)
    assert exe.stats["peak_bytes"] == exe.planned_peak() <= least
    with pytest.raises(tl.CompileError, match=f"pass memory_budget>={least}"):
        prog.compile(bounds, backend="numpy", memory_budget=least - 1, passes=HELD)


def test_a_swap_out_writes_only_the_outputs_read_late():
    """The returns read the UDF's reward late, never its observation: a swapped-out point writes
    the reward only (the observation's later readers read the block ``obs``)."""
    prog, bounds, _, _ = _rollout()
    exe = prog.compile(bounds, backend="numpy", passes=HELD,
                       memory_budget=int(0.6 * prog.compile(bounds, backend="numpy", passes=HELD).planned_peak()))
    (udf,) = [sw for sw in exe.schedule.spills.values() if sw.unit == "point"]
    assert udf.keep == ("False", "True")
    exe.run()
    assert 0 < exe.stats["spilled_bytes"] <= 2 * 12 * udf.outs[1][0][0] * 4  # rewards of one rollout, two at most


@pytest.mark.parametrize("ahead", [False, True])
def test_the_checked_run_verifies_every_read_of_a_spilled_value(ahead, monkeypatch):
    """Every read comes after its swap-in (a prefetch's after its wait), every swap-out after the
    reads before it. ``ahead``: every prefetch reads on the worker thread (else only large ones)."""
    if ahead:
        monkeypatch.setattr(spill, "ASYNC_BYTES", 0)
    prog, bounds, out, _ = _rollout()
    free = prog.compile(bounds, backend="numpy")
    free.run()
    want = dict(out)
    least = _least_budget(prog, bounds)
    with tl.config.override(check=True):
        exe = prog.compile(bounds, backend="numpy", memory_budget=least)
    assert "prefetch " in str(exe.schedule)
    for _ in range(2):  # a second run starts afresh
        out.clear()
        exe.run()
        assert all(np.array_equal(out[k], want[k]) for k in want)


def _least_budget(prog, bounds):
    with pytest.raises(tl.CompileError) as err:
        prog.compile(bounds, backend="numpy", memory_budget=1)
    return _least(err.value)


def test_a_block_row_no_late_reader_reads_is_freed_not_swapped():
    """The prefixes ``v[0:t]`` read after the loop that writes ``v`` never read its last row: that
    row is freed after its early reader, the others go out and come back as one block (found by
    the fuzzer: the row was swapped out after its free)."""
    prog = tl.Program("i t")
    (i, t), (Ib, Tb) = prog.dims, prog.bounds
    out = {}
    with prog:
        u = tl.random.normal((3, 4), domain=(i,))
        v = tl.tensor(np.arange(5, dtype="float32").reshape(5, 1), domain=(t,), name="v")
        tl.sink(tl.stack([u, v.expand(3, 4)], axis=1), lambda x, p: out.__setitem__(("a", *p.values()), x.copy()))
        tl.sink(v[0:t].discounted_sum(0.9, axis=0), lambda x, p: out.__setitem__(("b", *p.values()), x.copy()))
    bounds = {Ib: 1, Tb: 5}
    prog.compile(bounds, backend="reference").run()
    want = dict(out)
    least = _least_budget(prog, bounds)
    with tl.config.override(check=True):
        exe = prog.compile(bounds, backend="numpy", memory_budget=least)
    assert [sw.name for sw in exe.schedule.spills.values()] == ["v"]
    out.clear()
    exe.run()
    assert out.keys() == want.keys() and all(np.allclose(out[k], want[k]) for k in want)


@pytest.mark.parametrize("raised", [RuntimeError("env crashed"), KeyboardInterrupt()])
def test_spill_files_are_removed_when_the_run_raises(raised, tmp_path):
    prog, bounds, _, seen = _rollout(fail_at=((1, 3), raised))
    least = _least_budget(prog, bounds)
    exe = prog.compile(bounds, backend="numpy", memory_budget=least)
    # the UDF's error reaches the caller as a RuntimeFault naming it; Ctrl-C as it is
    with tl.config.override(spill_dir=str(tmp_path)), \
            pytest.raises(tl.RuntimeFault if isinstance(raised, Exception) else KeyboardInterrupt):
        exe.run()
    assert seen["spill"] and seen["spill"][0].startswith("timerl-spill-")  # there were files when it raised
    assert os.listdir(tmp_path) == []


def test_reinforce_under_a_budget_matches_the_unconstrained_run():
    # the per-step learner (_MC): the block-written one reads every observation at once at its peak,
    # and at these sizes nothing else is held then
    kw = {**_MC, "backend": "numpy"}
    free = tl.rl.reinforce(**kw)
    free.run()
    budget = int(0.75 * free.stats["peak_bytes"])
    exe = tl.rl.reinforce(**kw, memory_budget=budget)
    exe.run()
    assert exe.schedule.spills and exe.stats["spilled_bytes"] > 0
    assert [r["loss"] for r in exe.history.rows] == [r["loss"] for r in free.history.rows]
    assert exe.stats["peak_bytes"] == exe.planned_peak() <= budget


# the host trivial env (its observations come out of a UDF): with the compiled env the budget search
# takes several times longer to compile (more statements, an isl AST per spill candidate)
_MC = {"env": "trivial", "compiled_env": False, "num_envs": 4, "num_steps": 64, "obs_shape": (3, 8, 8), "hidden": 4,
       "layers": 1,
       "total_steps": 4 * 64 * 2, "per_step": True}


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_monte_carlo_reinforce_per_step_runs_in_a_quarter_of_its_unconstrained_peak(backend):
    """Monte-Carlo returns need the whole rollout, so the observations wait for the learner: with
    the loss per step the gradient is added one step after another, and each step's observation
    waits on disk instead (a point store swapped out after acting, back before its learner step)."""
    free = tl.rl.reinforce(**_MC, backend=backend)
    free.run()
    budget = free.planned_peak() // 4
    exe = tl.rl.reinforce(**_MC, backend=backend, memory_budget=budget)
    exe.run()
    assert exe.stats["spilled_bytes"] >= 4 * 64 * 3 * 8 * 8 * 4  # at least every observation of one rollout
    assert exe.stats["peak_bytes"] == exe.planned_peak() <= budget
    assert [(r["loss"], r["entropy"]) for r in exe.history.rows] == \
        [(r["loss"], r["entropy"]) for r in free.history.rows]
    assert free.stats["peak_bytes"] == free.planned_peak()


def test_a_view_shared_by_the_acting_step_and_a_late_learner_step_would_pin_the_observations():
    """The ``views`` pass gives the learner its own flattened observation: with one shared view
    (taken by the acting step, read again by the learner a rollout later) the observations cannot go
    to disk (no swap is planned for them); with a view per reader they can."""
    from timerl.ir.ops import Op
    from timerl.schedule.spill import plan_swap

    def shared_views_and_obs_swap(exe):
        plan, pdg = exe.plan, exe.pdg
        obs, = [n for n in plan.buffers if pdg.rec(n).name.startswith("reinforce.o ")]
        shared = [n for n in pdg.nodes if pdg.rec(n).op in (Op.RESHAPE, Op.PERMUTE)
                  and len({c for c, _ in pdg.consumers(n)}) > 1]
        return shared, plan_swap(pdg, exe.analysis, plan.problem, plan.T, plan.buffers[obs], plan.views,
                                 len(plan.frees), exe.bounds)

    on = tl.rl.reinforce(**_MC, backend="numpy")
    off = on.program.compile(bounds=on.bounds, backend="numpy", passes={"incrementalize_all": True, "views": False})
    shared, swap = shared_views_and_obs_swap(on)
    assert shared == [] and swap is not None and swap.unit == "point"
    shared, swap = shared_views_and_obs_swap(off)
    assert shared and swap is None


def test_a_refused_block_written_monte_carlo_reinforce_points_at_the_per_step_learner(monkeypatch):
    mod = importlib.import_module("timerl.rl.reinforce")

    def refuse(*a, **k):
        raise tl.BudgetError("memory_budget=1000 bytes cannot be met: ...; pass memory_budget>=5000", 5000)

    monkeypatch.setattr(mod, "compile_algorithm", refuse)
    for kw, hint in [({}, True), ({"per_step": False}, True), ({"per_step": True}, False), ({"nstep": 4}, False)]:
        with pytest.raises(tl.CompileError) as err:
            tl.rl.reinforce(**kw, memory_budget=1000)
        assert _least(err.value) == err.value.least == 5000
        assert ("per_step=True (--per-step True)" in str(err.value)) == hint, kw


def test_per_step_flag_is_a_switch_left_to_the_algorithm_unless_given():
    for argv, want in [([], None), (["--per-step", "True"], True), (["--per-step", "false"], False)]:
        ns = cli.build_parser().parse_args(["train", "reinforce", *argv])
        assert cli._algo_kwargs(ns, "reinforce").get("per_step") == want
    mod = importlib.import_module("timerl.rl.reinforce")
    args = mod.Args()
    assert not mod._per_step(args) and mod._per_step(mod.Args(nstep=4))
    assert mod._per_step(mod.Args(per_step=True)) and not mod._per_step(mod.Args(nstep=4, per_step=False))


def test_memory_budget_flag_takes_bytes_or_a_suffix(capsys):
    for text, n in [("1000", 1000), ("300M", 300 << 20), ("1.5G", 3 << 29), ("64k", 64 << 10), ("512KiB", 512 << 10)]:
        assert cli.parse_bytes(text) == n
    ns = cli.build_parser().parse_args(["train", "reinforce", "--memory-budget", "2M"])
    assert cli._algo_kwargs(ns, "reinforce")["memory_budget"] == 2 << 20
    for bad in ("lots", "-5", "0", "3X", "M"):
        assert cli.main(["train", "reinforce", "--memory-budget", bad]) == 2
        assert "argument --memory-budget: expected a positive number of bytes" in capsys.readouterr().err
    with pytest.raises(tl.rl.ArgError, match="--memory-budget must be a positive number of bytes"):
        tl.rl.reinforce(memory_budget=-1)


def test_spill_dir_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TIMERL_SPILL_DIR", str(tmp_path))
    assert Config().spill_dir == str(tmp_path)
