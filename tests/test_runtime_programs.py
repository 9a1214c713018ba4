"""Every program of tests/programs gives the reference executor's values on the interpreter."""

import pytest
from programs import PROGRAMS, assert_close, run

BACKENDS = ["numpy", "numba", "cuda"]  # cuda: in the simulator (tests/conftest.py)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_program_matches_reference(name, backend):
    assert_close(run(name, backend=backend), run(name, backend="reference"))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_checked_and_ungrouped(name):
    # checking mode verifies every read is after its write and before its free
    assert_close(run(name, backend="numpy", check=True, passes={"group": False}), run(name, backend="reference"))
