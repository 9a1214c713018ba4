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
