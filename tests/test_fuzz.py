"""Differential fuzzing: random well-formed programs agree with the reference executor.

The generator and the checker live in ``tests/fuzz`` (see its ``__main__`` for the long
run: ``python -m tests.fuzz --examples 2000``). Here: the generator's structure first (no
compile), then a fixed, derandomized set of programs on every backend and pass switch.
Defects the fuzzer found have minimal programs in ``tests/test_fuzz_regressions.py``
(a seed names a program only for one version of the generator).
"""

import collections
import re

import numpy as np
import pytest
from fuzz.check import CONFIGS, PASSES, compact, compare, differences, run
from fuzz.gen import HypothesisDraw, SeedDraw, generate
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from timerl.passes import OPTION_DEFAULTS, PIPELINE

programs = st.composite(lambda draw: generate(HypothesisDraw(draw)))


# -- structure (no compile) -------------------------------------------------------------------


def test_generation_is_a_function_of_the_seed():
    assert generate(SeedDraw(7)).source() == generate(SeedDraw(7)).source()
    assert generate(SeedDraw(7)).source() != generate(SeedDraw(8)).source()


def test_generator_covers_every_record_kind():
    kinds = collections.Counter()
    calls = collections.Counter()
    for seed in range(150):
        desc = generate(SeedDraw(seed))
        kinds[desc.dims] += 1
        for rec in desc.records:
            src = "\n".join(rec.lines)
            for what, pat in {"placeholder": r"tl\.placeholder", "shift": r"\[(i|t) - \d\]",
                              "ahead": r"\[(i|t) \+ \d\]",
                              "window": r"\[.*:tl\.min\(", "prefix": r"0:(i|t) \+ 1", "suffix": r"(i|t):(I|T)\]",
                              "carry": r"\[i - 1, T\]", "condition": r"\[[^\]]*(%|>|<|==)", "udf": r"tl\.udf",
                              "random": r"tl\.random", "matmul": r" @ ", "astype": r"astype\('(int64|float64)'",
                              "reduce": r"\.(sum|mean|max|min)\(axis", "scan": r"cumsum|discounted",
                              "float64": "float64", "int64": "int64"}.items():
                calls[what] += bool(re.search(pat, src))
        calls["multi-sink"] += any(len(s) > 1 for s in desc.sinks)
    assert set(kinds) == {("t",), ("i", "t")}
    missing = [k for k in ("placeholder", "shift", "ahead", "window", "prefix", "suffix", "carry", "condition", "udf",
                           "random", "matmul", "astype", "reduce", "scan", "float64", "int64", "multi-sink")
               if calls[k] == 0]
    assert not missing, f"no generated program has {missing}"


def test_every_pass_is_switched_off_somewhere():
    assert set(PASSES) == {n for n, _ in PIPELINE}
    for p in PASSES:
        for backend in ("numpy", "numba"):
            assert (backend, {"passes": {p: False}}) in CONFIGS
    for o, on in OPTION_DEFAULTS.items():
        for backend in ("numpy", "numba"):
            assert (backend, {"passes": {o: not on}}) in CONFIGS
    assert ("numpy", {"check": True}) in CONFIGS


def test_compare_reports_values_dtypes_and_points():
    want = {"s0": {(0,): np.array([1.0, 2.0], "float32")}, "s1": {(): np.array(3)}}
    same = {"s0": {(0,): np.array([1.0, 2.0 + 1e-6], "float32")}, "s1": {(): np.array(3)}}
    assert compare(same, want, {}) == []
    assert compare({**same, "s1": {(): np.array(4)}}, want, {})  # ints are exact
    assert compare({**same, "s0": {(0,): np.array([1.0, 2.01], "float32")}}, want, {})
    assert compare({**same, "s0": {(0,): np.array([1.0, 2.0], "float64")}}, want, {})  # dtypes must agree
    assert compare({**same, "s0": {(1,): np.array([1.0, 2.0], "float32")}}, want, {})  # and the points
    # a float64 value computed from float32 ones is compared at float32's accuracy
    w64 = {"s0": {(): np.array(0.29608434873137296)}}
    g64 = {"s0": {(): np.array(0.2960843441867812)}}
    assert compare(g64, w64, {"s0": (1.0, False)})
    assert compare(g64, w64, {"s0": (1.0, True)}) == []
    nan = {"s0": {(0,): np.array([np.nan, 2.0], "float32")}, "s1": {(): np.array(3)}}
    assert compare(nan, nan, {}) == []


def test_printed_source_runs_and_matches_the_builder():
    desc = generate(SeedDraw(11))
    ns = {}
    exec(compile(desc.source(), "<fuzz source>", "exec"), ns)  # the replay artifact, as printed
    got, _ = run(desc, "reference")
    flat = {(s, pt): v for s, pts in got.items() for pt, v in pts.items()}
    assert sorted(flat, key=str) == sorted(ns["out"], key=str)
    for k, v in flat.items():
        np.testing.assert_array_equal(ns["out"][k], v)


def test_compact_drops_what_no_sink_needs():
    desc = generate(SeedDraw(3))
    small = compact(desc)
    assert len(small.records) <= len(desc.records)
    names = {n for s in small.sinks for n in s}
    assert names <= {f"v{k}" for k in range(len(small.records))}


# -- values against the reference executor ----------------------------------------------------


# the CI set: fixed seeds (each test id names its replay: python -m tests.fuzz --replay SEED)
CI_SEEDS = range(16)


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_seeded_programs_match_reference(seed):
    diffs = differences(generate(SeedDraw(seed)))
    assert not diffs, f"replay: python -m tests.fuzz --replay {seed}\n" + "\n".join(diffs[:10])


@pytest.mark.parametrize("seed", range(4))
def test_seeded_programs_match_reference_on_cuda(seed):
    """The cuda backend (in the simulator) on a few of the CI programs, with its default passes
    (every switch on cuda: ``python -m tests.fuzz --backends cuda``)."""
    diffs = differences(generate(SeedDraw(seed)), [("cuda", {})])
    assert not diffs, f"replay: python -m tests.fuzz --replay {seed} --backends cuda\n" + "\n".join(diffs[:10])


# hypothesis draws the same generator's choices, biased to edge cases (one point, one record);
# derandomized, and no shrinking (each try compiles ~9 times): the failing source is printed whole
@settings(max_examples=8, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(programs())
def test_hypothesis_programs_match_reference(desc):
    diffs = differences(desc)
    assert not diffs, "\n".join(diffs[:10])
