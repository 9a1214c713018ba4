"""Checking mode's non-finite detection: the first op making inf/NaN from finite inputs raises.

Every backend names the user's tensor, the point and the op; values from the user's own
data and ops that only propagate an inf/NaN do not raise; without checking mode nothing
raises (the values are IEEE's, as numpy's).
"""

import numpy as np
import pytest

import timerl as tl

BACKENDS = ["reference", "numpy", "numba", "cuda"]  # cuda: in the simulator (tests/conftest.py)


def _log_prog(shape=(3,)):
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.ones((4,) + shape, "float32")
    x[2, ..., -1] = 0.0                        # log(0) = -inf at t = 2, the last element
    got = {}
    with prog:
        xt = tl.tensor(x, (t,), name="x")
        y = tl.log(xt * 1.0)
        z = (y * 2.0 + 1.0).sum()
        tl.sink(z, lambda v, p: got.__setitem__(p["t"], float(v)))
    return prog, got


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_nonfinite_op_names_tensor_point_and_op(backend):
    prog, _ = _log_prog()
    exe = prog.compile({"T": 4}, backend=backend, check=True)
    with pytest.raises(tl.RuntimeFault, match=r"non-finite check: unary\.log in tensor 'test_nonfinite\.py:\d+' "
                                              r"produced inf at point \(t = 2\)"):
        exe.run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_variable_turns_the_check_on(backend, monkeypatch):
    prog, _ = _log_prog()
    with tl.config.override(check=True):
        exe = prog.compile({"T": 4}, backend=backend)
    with pytest.raises(tl.RuntimeFault, match="non-finite check"):
        exe.run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_checking_the_values_are_ieee(backend):
    prog, got = _log_prog()
    prog.compile({"T": 4}, backend=backend, check=False).run()
    assert got[2] == -np.inf and got[0] == pytest.approx(3.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_named_tensor_and_nan_and_division(backend):
    prog = tl.Program("i t")
    (i, t), (I, T) = prog.dims, prog.bounds
    a = np.full((2, 3, 2), 2.0, "float32")
    a[1, 1, 0] = 0.0
    with prog:
        num = tl.tensor(a, (i, t), name="num")
        q = tl.tensor(np.zeros((2, 3, 2), "float32") + 1.0, (i, t), name="q") * 0.0
        ratio = (num * q) / (num * 1.0)          # 0 / 0 at (1, 1), element 0
        ratio = tl.tanh(ratio * 1.0)
        tl.sink(ratio, lambda v, p: None)
    exe = prog.compile({"I": 2, "T": 3}, backend=backend, check=True)
    with pytest.raises(tl.RuntimeFault, match=r"binary\.div .*produced NaN at point \(i = 1, t = 1\)"):
        exe.run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_data_with_inf_and_propagation_do_not_raise(backend):
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.array([[1.0, -np.inf], [0.5, 2.0]], "float32")     # a masked logit, the user's data
    got = {}
    with prog:
        xt = tl.tensor(x, (t,), name="logits")
        p = tl.exp(xt - xt.max())                               # exp(-inf) = 0: finite
        y = xt * 2.0 + 1.0                                      # -inf from -inf: propagated, not produced
        tl.sink([p.sum(), y.max()], lambda v, pt: got.__setitem__(pt["t"], (float(v[0]), float(v[1]))))
    prog.compile({"T": 2}, backend=backend, check=True).run()
    assert got[0][0] == pytest.approx(1.0) and got[1][1] == pytest.approx(5.0)


def test_numba_kernel_culprit_is_found_inside_the_fused_chain():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    x = np.ones((4, 2, 3), "float32")
    x[2, :, -1] = 0.0                          # 0 / 0 at t = 2, the last column
    with prog:
        xt = tl.tensor(x, (t,), name="x")
        tl.sink(((xt * 2.0) / (xt * 1.0) + 1.0) * 3.0, lambda v, p: None)
    exe = prog.compile({"T": 4}, backend="numba", check=True)
    src = "".join(exe.plan.kernels.values())
    assert exe.stats["kernels"] == 1 and "/" in src      # the division sits inside the fused kernel
    with pytest.raises(tl.RuntimeFault, match=r"binary\.div .*NaN at point \(t = 2\).*2 of 6 elements"):
        exe.run()


def test_udf_producing_nan_from_finite_inputs_is_named():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.arange(3, dtype="float32"), (t,), name="x")

        def bad_env(a):
            return np.sqrt(a - 1.0)       # NaN at t = 0, from a finite input

        (y,) = tl.udf(bad_env, [x], [()], ["float32"])
        tl.sink(y, lambda v, p: None)
    with np.errstate(invalid="ignore"):
        exe = prog.compile({"T": 3}, backend="numpy", check=True)
        with pytest.raises(tl.RuntimeFault, match=r"udf .*NaN at point \(t = 0\)"):
            exe.run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_inf_turned_finite_later_in_a_fused_chain_is_still_caught(backend):
    """1 / (x * 1e30 * 1e30): the product overflows to inf and the division makes it 0; numba fuses
    all three into one kernel, which must still report the multiplication."""
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.array([[1.0, 1e9], [1.0, 2.0]], "float32"), (t,), name="x")
        tl.sink(1.0 / (x * 1e30 * 1e30) + 0.5, lambda v, p: None)
    exe = prog.compile({"T": 2}, backend=backend, check=True, passes={"simplify": False})
    if backend == "numba":
        assert exe.stats["kernels"] == 1
    with pytest.raises(tl.RuntimeFault, match=r"binary\.mul .*produced inf at point \(t = 0\)"):
        exe.run()
