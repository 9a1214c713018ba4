"""Bad inputs of issue 10 item 4: each is one clear error at the user's call.

Every message names the tensor (its ``name=`` or this file's line) or the argument, the
offending value, and what to pass instead. CLI errors exit 2 with one line.
"""

import datetime
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import timerl as tl
from timerl.cli import main
from timerl.rl.common import ArgError

ROOT = pathlib.Path(__file__).resolve().parents[1]
HERE = r"test_bad_inputs\.py:\d+"
BACKENDS = ["reference", "numpy", "numba", "cuda"]  # cuda: in the simulator (tests/conftest.py)


def prog_t():
    prog = tl.Program("t")
    return prog, prog.dims[0], prog.bounds[0]


def data_x(t):
    return tl.tensor(np.arange(4.0, dtype="float32"), (t,), name="x")


# -- operands that are not numbers -----------------------------------------------------------------

BAD_VALUES = [
    ("abc", r"'abc' \(a str\)"),
    (None, r"None \(a NoneType\)"),
    ({"a": 1}, r"\{'a': 1\} \(a dict\)"),
    (["a", "b"], r"\['a', 'b'\] \(a list\) of dtype <U1: strings"),
    (object(), r"<object object at .*> \(an object\)"),
    (1j, r"1j \(a complex\)"),
    (np.array([1 + 2j]), r"array\(\[1\.\+2\.j\]\) \(a ndarray\) of dtype complex128: complex numbers"),
]

OPS = [
    ("x + v", lambda x, v: x + v, r"right operand of \+ \(with tensor 'x'\)"),
    ("v + x", lambda x, v: v + x, r"left operand of \+ \(with tensor 'x'\)"),
    ("x - v", lambda x, v: x - v, r"right operand of - \(with tensor 'x'\)"),
    ("x * v", lambda x, v: x * v, r"right operand of \* \(with tensor 'x'\)"),
    ("x / v", lambda x, v: x / v, r"right operand of / \(with tensor 'x'\)"),
    ("x ** v", lambda x, v: x ** v, r"right operand of \*\* \(with tensor 'x'\)"),
    ("x < v", lambda x, v: x < v, r"right operand of < \(with tensor 'x'\)"),
    ("x == v", lambda x, v: x == v, r"right operand of == \(with tensor 'x'\)"),
    ("x @ v", lambda x, v: x.reshape(1, 1) @ v, r"right operand of @"),
    ("tl.maximum", lambda x, v: tl.maximum(x, v), r"tl.maximum at .*argument 1 \(with tensor 'x'\)"),
    ("tl.minimum", lambda x, v: tl.minimum(v, x), r"tl.minimum at .*argument 0 \(with tensor 'x'\)"),
    ("tl.where a", lambda x, v: tl.where(x > 0, v, x), r"tl.where at .*argument a"),
    ("tl.where b", lambda x, v: tl.where(x > 0, x, v), r"tl.where at .*argument b"),
    ("tl.where c", lambda x, v: tl.where(v, x, x), r"tl.where at .*the condition c"),
    ("tl.clip lo", lambda x, v: tl.clip(x, v, 1.0), r"tl.clip of tensor 'x' at .*lo"),
    ("tl.clip hi", lambda x, v: tl.clip(x, 0.0, v), r"tl.clip of tensor 'x' at .*hi"),
    ("tl.exp", lambda x, v: tl.exp(v), r"tl.exp at .*its argument"),
    ("tl.tanh", lambda x, v: tl.tanh(v), r"tl.tanh at .*its argument"),
    ("discounted_sum", lambda x, v: x[0:4].discounted_sum(v), r"discounted sum of tensor .* gamma"),
    ("take", lambda x, v: x.take(v), r"take of tensor 'x' at .*the index"),
    ("tl.stack", lambda x, v: tl.stack([x, v]), r"tl.stack at .*entry 1"),
    ("tl.concat", lambda x, v: tl.concat([v, x.reshape(1)]), r"tl.concat at .*entry 0"),
]


@pytest.mark.parametrize("value, shown", BAD_VALUES, ids=[repr(v)[:12] for v, _ in BAD_VALUES])
@pytest.mark.parametrize("desc, op, who", OPS, ids=[o[0] for o in OPS])
def test_operand_that_is_not_a_number(desc, op, who, value, shown):
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        with pytest.raises(TypeError, match=f"{who}.* is {shown}.*pass a tensor, a number or a numeric") as err:
            op(x, value)
    assert isinstance(err.value, tl.ShapeError) and isinstance(err.value, tl.ArgTypeError)
    if "with tensor" in who or "tl.exp" in who:
        assert "test_bad_inputs.py:" in str(err.value)


def test_list_of_tensors_as_operand_says_stack():
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        with pytest.raises(tl.ArgTypeError, match=r"'x'.*a list holding tensors; combine tensors with tl.stack"):
            x + [x, x]


def test_numeric_operands_still_work():
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        for v in (2, 2.5, True, np.float32(2), np.array([1.0, 2.0, 3.0, 4.0]), [1, 2, 3, 4]):
            x + v
        tl.clip(x, 0, 1.0), tl.where(x > 0, 1.0, x), tl.exp(1.0)


# -- tensor data of the wrong kind -----------------------------------------------------------------------

BAD_DATA = [
    (np.array(["a", "b", "c", "d"]), r"dtype <U1: strings"),
    (np.array([None, 1, 2, 3], dtype=object), r"dtype object: Python objects"),
    (np.zeros(4, complex), r"dtype complex128: complex numbers"),
    (np.array(["2020-01-01"] * 4, dtype="datetime64[D]"), r"dtype datetime64\[D\]: datetimes .*astype\('int64'\)"),
    (np.array([datetime.timedelta(1)] * 4, dtype="timedelta64[s]"), r"dtype timedelta64\[s\]: timedeltas"),
]


@pytest.mark.parametrize("data, shown", BAD_DATA, ids=["str", "object", "complex", "datetime", "timedelta"])
def test_tensor_data_of_the_wrong_kind(data, shown):
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(tl.ArgTypeError, match=rf"tl.tensor 'obs': the data has {shown}.*bool, int or float"):
            tl.tensor(data, (t,), name="obs")
        with pytest.raises(TypeError, match=rf"tl.tensor at {HERE}: the data has {shown}"):
            tl.tensor(data, (t,))


def test_tensor_data_that_is_not_an_array():
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(tl.ArgTypeError, match=r"tl.tensor 'obs': the data is \['a', 'b'\]"):
            tl.tensor(["a", "b"], (t,), name="obs")
        with pytest.raises(tl.ArgTypeError, match=r"tl.tensor 'obs': the data is None"):
            tl.tensor(None, (), name="obs")
        x = data_x(t)
        with pytest.raises(tl.ArgTypeError, match=r"tl.tensor 'y': the data is already a tensor \('x'\)"):
            tl.tensor(x, (t,), name="y")


@pytest.mark.parametrize("value, shown", [("abc", r"'abc' \(a str\)"), (None, r"None \(a NoneType\)"),
                                          ([["a"]], r"strings"), (2j, "complex")])
def test_const_of_a_non_number(value, shown):
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(tl.ArgTypeError, match=rf"tl.const 'c': the value is .*{shown}"):
            tl.const(value, name="c")
        with pytest.raises(tl.ArgTypeError, match=rf"tl.const at {HERE}: the value is .*{shown}"):
            tl.const(value)


def test_const_value_that_does_not_broadcast_to_its_shape():
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(tl.ShapeError, match=r"tl.const 'c': a value of shape \(2,\) does not broadcast to "
                                                r"shape=\(3,\)"):
            tl.const([1.0, 2.0], shape=(3,), name="c")


# -- shapes ---------------------------------------------------------------------------------------------

SHAPE_MAKERS = [
    ("placeholder", lambda s, t: tl.placeholder(s, "float32", (t,), name="p"), r"tl.placeholder 'p'"),
    ("zeros", lambda s, t: tl.zeros(s, name="z"), r"tl.zeros 'z'"),
    ("ones", lambda s, t: tl.ones(s, domain=(t,), name="o"), r"tl.ones 'o'"),
    ("const", lambda s, t: tl.const(1.0, shape=s, name="c"), r"tl.const 'c'"),
    ("uniform", lambda s, t: tl.random.uniform(s, domain=(t,)), rf"tl.random.uniform at {HERE}"),
    ("normal", lambda s, t: tl.random.normal(s), rf"tl.random.normal at {HERE}"),
    ("reshape", lambda s, t: tl.zeros((4,), name="z").reshape(s), r"reshape of tensor 'z'"),
    ("expand", lambda s, t: tl.zeros((1,), name="z").expand(s), r"broadcast_to of tensor 'z'"),
    ("udf", lambda s, t: tl.udf(lambda: 0, [], [s], ["float32"], name="env"), r"tl.udf '<lambda>' 'env'"),
    ("Parameter", lambda s, t: tl.nn.Parameter(s, domain=(t,), name="w"), r"tl.nn.Parameter 'w'"),
]


@pytest.mark.parametrize("what, make, who", SHAPE_MAKERS, ids=[m[0] for m in SHAPE_MAKERS])
def test_negative_shape_entry(what, make, who):
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(tl.ShapeError, match=rf"{who}: (shape|out_shapes\[0\]) \(2, -3\) has the negative entry -3; "
                                                r"shape entries are ints >= 0"):
            make((2, -3), t)


@pytest.mark.parametrize("entry, shown", [(2.5, r"2\.5 \(a float\)"), (True, r"True \(a bool\)"),
                                          ("4", r"'4' \(a str\)"), (None, r"None \(a NoneType\)")])
@pytest.mark.parametrize("what, make, who", SHAPE_MAKERS, ids=[m[0] for m in SHAPE_MAKERS])
def test_non_int_shape_entry(what, make, who, entry, shown):
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(TypeError, match=rf"{who}.*\(2, {shown.split(' ')[0]}\) has the entry {shown}; shape "
                                            r"entries are .*ints >= 0") as err:
            make((2, entry), t)
    assert isinstance(err.value, tl.ShapeError)


def test_reshape_minus_one_once():
    prog, t, T = prog_t()
    with prog:
        z = tl.zeros((4,), name="z")
        assert z.reshape(-1, 2).shape == (2, 2)
        with pytest.raises(tl.ShapeError, match=r"reshape of tensor 'z': shape \(-1, -1\) has more than one -1"):
            z.reshape(-1, -1)
        with pytest.raises(tl.ShapeError, match=r"reshape of tensor 'z': shape \(-2, -2\) has the negative entry -2"):
            z.reshape(-2, -2)


@pytest.mark.parametrize("make, pattern, exc", [
    (lambda: tl.arange(-1), rf"tl.arange at {HERE}: n=-1 must be an int >= 0", tl.ShapeError),
    (lambda: tl.arange(2.5), rf"tl.arange at {HERE}: n=2.5 \(a float\) must be an int >= 0", tl.ArgTypeError),
    (lambda: tl.arange(True), r"n=True \(a bool\)", tl.ArgTypeError),
    (lambda: tl.random.permutation(-2), rf"tl.random.permutation at {HERE}: n=-2 must be an int >= 0", tl.ShapeError),
    (lambda: tl.one_hot(tl.const(1, name="a"), 0), r"tl.one_hot of 'a': n=0 must be an int >= 1", tl.ShapeError),
    (lambda: tl.nn.Linear(4, -2), rf"tl.nn.Linear at {HERE}: n_out=-2 must be an int >= 1", tl.ShapeError),
    (lambda: tl.nn.Linear(4.5, 2, name="L"), r"tl.nn.Linear 'L': n_in=4.5 \(a float\)", tl.ArgTypeError),
    (lambda: tl.nn.MLP([4, "a", 2]), rf"tl.nn.MLP at {HERE}: sizes\[1\]='a' \(a str\)", tl.ArgTypeError),
    (lambda: tl.nn.MLP(4), r"sizes=4 must be a list of at least two layer widths", tl.ArgTypeError),
    (lambda: tl.zeros((4,), name="z").sum(axis="a"), r"axis 'a' \(a str\) for tensor 'z' must be an int",
     tl.ArgTypeError),
])
def test_counts_and_axes(make, pattern, exc):
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(exc, match=pattern):
            make()


# -- domains ------------------------------------------------------------------------------------------------

DOMAIN_MAKERS = [
    ("placeholder", lambda d: tl.placeholder((), "float32", d, name="p"), "tl.placeholder 'p'"),
    ("tensor", lambda d: tl.tensor(np.zeros((3, 3), "float32"), d, name="p"), "tl.tensor 'p'"),
    ("zeros", lambda d: tl.zeros((), domain=d, name="p"), "tl.zeros 'p'"),
    ("uniform", lambda d: tl.random.uniform((), domain=d), f"tl.random.uniform at {HERE}"),
    ("Parameter", lambda d: tl.nn.Parameter((2,), domain=d, name="p"), "tl.nn.Parameter 'p'"),
]


@pytest.mark.parametrize("what, make, who", DOMAIN_MAKERS, ids=[m[0] for m in DOMAIN_MAKERS])
def test_bad_domains(what, make, who):
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    other = tl.Program("t")
    with prog:
        with pytest.raises(TypeError, match=rf"{who}: domain='t' \(a str\) is not a tuple of dims; pass e\.g\. "
                                            r"domain=\(i, t\) with i, t = prog.dims"):
            make("t")
        with pytest.raises(tl.ArgTypeError, match=rf"{who}: domain entry 3 \(an int\) is not a dim"):
            make((t, 3))
        with pytest.raises(tl.ArgTypeError, match=rf"{who}: domain entry T is a bound, not a dim; use its dim t"):
            make((T,))
        with pytest.raises(tl.ShapeError, match=rf"{who}: dim t appears twice in domain \(t, t\)"):
            make((t, t))
        with pytest.raises(tl.CompileError, match=rf"{who}: domain dim t belongs to another tl.Program; use the "
                                                  r"dims of the program being built \(i, t\)"):
            make((other.dims[0],))


# -- dtypes -------------------------------------------------------------------------------------------------

ACCEPTED = r"use one of bool, int8, .*, float32, float64"


@pytest.mark.parametrize("make, who, shown", [
    (lambda x: tl.placeholder((), "flot32", name="p"), "tl.placeholder 'p'", "'flot32'"),
    (lambda x: x.astype("foo"), "astype of tensor 'x'", "'foo'"),
    (lambda x: x.astype(None), "astype of tensor 'x'", "None"),
    (lambda x: tl.zeros((), dtype="f32", name="z"), "tl.zeros 'z'", "'f32'"),
    (lambda x: tl.const(1, dtype="flaot", name="c"), "tl.const 'c'", "'flaot'"),
    (lambda x: tl.random.uniform((), dtype="x"), f"tl.random.uniform at {HERE}", "'x'"),
    (lambda x: tl.one_hot(tl.const(1, name="a"), 3, dtype="y"), "tl.one_hot of 'a'", "'y'"),
    (lambda x: tl.udf(lambda v: v, [x], [()], ["flt"], name="u"), "tl.udf '<lambda>' 'u'", "'flt'"),
])
def test_unknown_dtype_names_the_argument_and_lists_dtypes(make, who, shown):
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        with pytest.raises(TypeError, match=rf"{who}: (out_dtypes\[0\]|dtype)={shown} is not a dtype; {ACCEPTED}"):
            make(x)


def test_unsupported_dtype():
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        with pytest.raises(tl.ArgTypeError, match=rf"astype of tensor 'x': dtype='U3' \(<U3\) is not supported; "
                                                  rf"{ACCEPTED}"):
            x.astype("U3")
        with pytest.raises(tl.ArgTypeError, match=r"dtype=<class 'complex'> \(complex128\) is not supported"):
            tl.placeholder((), complex, name="p")


# -- programs ------------------------------------------------------------------------------------------------


def two_programs():
    other = tl.Program("t")
    ot = other.dims[0]
    with other:
        y = tl.tensor(np.zeros(4, "float32"), (ot,), name="y")
    prog, t, T = prog_t()
    return prog, t, T, y


def test_tensor_of_another_program_with_a_constant():
    prog, t, T, y = two_programs()
    with prog:
        with pytest.raises(tl.CompileError, match=rf"at {HERE}: tensor 'y' belongs to another tl.Program than the "
                                                  r"one of the enclosing `with`"):
            y + 1.0
        with pytest.raises(tl.CompileError, match=r"tensor 'y' belongs to another tl.Program"):
            tl.exp(y)
    assert len(y.prog.pdg) == 1  # nothing was added to y's program


@pytest.mark.parametrize("use", [
    lambda x, y, t: x + y,
    lambda x, y, t: tl.where(x > 0, y, x),
    lambda x, y, t: tl.sink(y, lambda v, p: None),
    lambda x, y, t: tl.sink([x, y], lambda v, p: None),
    lambda x, y, t: tl.udf(lambda v: v, [y], [()], ["float32"]),
    lambda x, y, t: y[t - 1],
], ids=["binary", "where", "sink", "sink-list", "udf", "index"])
def test_tensor_of_another_program_used_here(use):
    prog, t, T, y = two_programs()
    with prog:
        x = data_x(t)
        with pytest.raises(tl.CompileError, match=r"'y'.* belong"):
            use(x, y, t)


def test_branch_value_of_another_program():
    prog, t, T, y = two_programs()
    with prog:
        p = tl.placeholder((), "float32", (t,), name="acc")
        with pytest.raises(tl.CompileError, match=r"placeholder 'acc': the branch value 'y' belongs to another "
                                                  r"tl.Program"):
            p[t] = y


def test_ops_outside_with_prog():
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
    with pytest.raises(tl.CompileError, match=rf"at {HERE}: an op on tensor 'x' is created outside `with prog:`"):
        x + 1
    with pytest.raises(tl.CompileError, match=r"an op on tensor 'x' is created outside `with prog:`"):
        x[t - 1]
    with pytest.raises(tl.CompileError, match=r"inside `with prog:`"):
        tl.zeros(())


def test_dim_value_checks():
    prog, t, T = prog_t()
    other = tl.Program("t")
    with prog:
        with pytest.raises(tl.ArgTypeError, match=rf"tl.dim_value at {HERE}: 't' \(a str\) is not a dim"):
            tl.dim_value("t")
        with pytest.raises(tl.CompileError, match=r"dim t belongs to another tl.Program"):
            tl.dim_value(other.dims[0])


def test_program_dims():
    with pytest.raises(TypeError, match=r"tl.Program\(dims\): dims must be a string like \"i t\".* got 5"):
        tl.Program(5)
    with pytest.raises(ValueError, match=r"dim names must be identifiers like i or t, got 'a-b'"):
        tl.Program("a-b")


# -- compile bounds ---------------------------------------------------------------------------------------


def _simple():
    prog, t, T = prog_t()
    with prog:
        tl.sink(data_x(t), lambda v, p: None)
    return prog


@pytest.mark.parametrize("bounds, pattern", [
    ([4], r"compile\(bounds=\[4\]\): bounds must be a dict keyed by tl.Bound objects or their names \(T\), "
          r"e\.g\. bounds=\{'T': 10\}"),
    ("T", r"compile\(bounds='T'\): bounds must be a dict"),
    (4, r"compile\(bounds=4\): bounds must be a dict"),
])
def test_bounds_must_be_a_dict(bounds, pattern):
    with pytest.raises(tl.CompileError, match=pattern):
        _simple().compile(bounds, backend="reference")
    prog = tl.Program("t")  # checked before "no sink"
    with pytest.raises(tl.CompileError, match=pattern.replace("(T)", "(T)")):
        prog.compile(bounds, backend="reference")


def test_bounds_keyed_by_a_dim_or_another_programs_bound():
    prog = _simple()
    t = prog.dims[0]
    with pytest.raises(tl.CompileError, match=r"keyed by bounds, not dims: write T \(or 'T'\) instead of t"):
        prog.compile({t: 4}, backend="reference")
    with pytest.raises(tl.CompileError, match=r"bound T in compile\(bounds=\.\.\.\) belongs to another tl.Program"):
        prog.compile({tl.Program("t").bounds[0]: 4}, backend="reference")
    prog.compile({"T": np.int64(4)}, backend="reference").run()


# -- UDFs and sinks at run time, on every backend -------------------------------------------------------------


def _udf_prog(fn, out_shapes=((),), out_dtypes=("float32",)):
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        outs = tl.udf(fn, [x], list(out_shapes), list(out_dtypes))
        tl.sink(list(outs), lambda v, p: None)
    return prog


def env_step(v):
    return env_step.impl(v)


UDF_CASES = [
    (lambda v: None, r"returned None at t = 0; declared 1 output\(s\): \(\) float32"),
    (lambda v: (v, v), r"returned 2 values at t = 0, declared 1: \(\) float32"),
    (lambda v: np.zeros(3), r"output 0 has shape \(3,\) at t = 0, declared \(\)"),
    (lambda v: "abc", r"output 0 has dtype <U3 at t = 0, declared float32"),
    (lambda v: np.array(None), r"output 0 has dtype object at t = 0, declared float32"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("impl, pattern", UDF_CASES, ids=["None", "count", "shape", "str", "object"])
def test_udf_returns_something_else_than_declared(backend, impl, pattern):
    env_step.impl = impl
    exe = _udf_prog(env_step).compile({"T": 4}, backend=backend)
    with pytest.raises(tl.RuntimeFault, match=rf"udf 'env_step' \({HERE}\) {pattern}"):
        exe.run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_udf_that_raises_is_a_chained_fault(backend):
    def env_step(v):
        if int(v) == 2:
            raise ValueError("env exploded")
        return v

    exe = _udf_prog(env_step).compile({"T": 4}, backend=backend)
    with pytest.raises(tl.RuntimeFault, match=rf"udf 'env_step' \({HERE}\) raised at t = 2: ValueError: env "
                                              r"exploded") as err:
        exe.run()
    assert isinstance(err.value.__cause__, ValueError)


def _sink_prog(fn, name=None):
    prog, t, T = prog_t()
    with prog:
        tl.sink(data_x(t) * 2, fn, name=name)
    return prog


@pytest.mark.parametrize("backend", BACKENDS)
def test_sink_that_raises_is_a_chained_fault_naming_its_tensor_and_point(backend):
    def log_value(v, p):
        if p["t"] == 2:
            raise KeyError("missing")

    exe = _sink_prog(log_value).compile({"T": 4}, backend=backend)
    with pytest.raises(tl.RuntimeFault, match=rf"sink 'log_value' \({HERE}\) of tensor '{HERE}' raised at t = 2: "
                                              r"KeyError: 'missing'") as err:
        exe.run()
    assert isinstance(err.value.__cause__, KeyError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sink_of_several_tensors_names_them(backend):
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        tl.sink([x, x * 2], lambda v, p: 1 / 0)
    with pytest.raises(tl.RuntimeFault, match=rf"of tensors 'x', '{HERE}' raised at t = 0: ZeroDivisionError"):
        prog.compile({"T": 4}, backend=backend).run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_keyboard_interrupt_is_not_wrapped(backend):
    def stop(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _sink_prog(stop).compile({"T": 4}, backend=backend).run()
    with pytest.raises(KeyboardInterrupt):
        _udf_prog(stop).compile({"T": 4}, backend=backend).run()


# -- command line ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, match", [
    (["bench", "ppo", "--iterations", "0"], "--iterations must be a positive int, got 0"),
    (["bench", "reinforce", "--iterations", "-3"], "--iterations must be a positive int, got -3"),
    (["bench", "ppo", "--iterations", "2.5"], "argument --iterations: invalid int value: '2.5'"),
    (["bench", "ppo", "--num-envs", "0"], "--num-envs must be a positive int, got 0"),
    (["bench", "ppo", "--num-steps", "-1"], "--num-steps must be a positive int, got -1"),
    (["train", "ppo", "--total-steps", "100"], "--total-steps 100 is less than one iteration"),
    (["bench", "ppo", "--epochs", "0"], "--epochs must be a positive int, got 0"),
    (["train", "ppo", "--minibatches", "0"], "--minibatches must be a positive int, got 0"),
    (["bench", "ppo", "--minibatches", "3"], "--minibatches 3 must divide --num-envs x --num-steps = 1024"),
    (["show", "pdg", "ppo", "--hidden", "0"], "--hidden must be a positive int, got 0"),
    (["train", "reinforce", "--layers", "-1"], "--layers must be a positive int, got -1"),
    (["bench", "reinforce", "--nstep", "0"], "--nstep must be an int >= 1, got 0"),
    (["train", "ppo", "--lr", "-0.1"], "--lr must be a positive number, got -0.1"),
    (["bench", "ppo", "--gamma", "1.5"], "--gamma must be in [0, 1], got 1.5"),
    (["show", "schedule", "reinforce", "--gamma", "-0.1"], "--gamma must be in [0, 1], got -0.1"),
    (["train", "ppo", "--gae-lambda", "2"], "--gae-lambda must be in [0, 1], got 2.0"),
    (["bench", "ppo", "--gae-lambda", "-0.5"], "--gae-lambda must be in [0, 1], got -0.5"),
    (["show", "pdg", "reinforce", "--seed", "-1"], "--seed must be an int >= 0, got -1"),
])
def test_cli_user_errors_exit_2_with_one_line(argv, match, capsys):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("timerl: error: ") and match in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_bench_iterations_0_from_the_shell():
    proc = subprocess.run([sys.executable, "-m", "timerl", "bench", "ppo", "--iterations", "0"], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "TIMERL_DEBUG": "0"})
    assert proc.returncode == 2
    assert proc.stderr == "timerl: error: --iterations must be a positive int, got 0\n"


def test_cli_debug_shows_the_traceback():
    with tl.config.override(debug=True):
        with pytest.raises(ArgError, match="--iterations must be a positive int"):
            main(["bench", "ppo", "--iterations", "0"])


def test_sink_and_udf_functions_that_cannot_take_their_arguments():
    prog, t, T = prog_t()
    with prog:
        x = data_x(t)
        with pytest.raises(TypeError, match=rf"tl.sink at {HERE}: fn <lambda>\(v\) cannot be called with 2 "
                                            r"positional argument\(s\) \(value, point\)"):
            tl.sink(x, lambda v: None)
        with pytest.raises(TypeError, match=r"tl.udf '<lambda>' 'env': fn <lambda>\(a, b\) cannot be called with 1 "
                                            r"positional argument\(s\) \(one array per input, 1 input\(s\)\)"):
            tl.udf(lambda a, b: a, [x], [()], ["float32"], name="env")
        tl.sink(x, print)  # no signature to check
        tl.udf(lambda *a: a[0], [x, x], [()], ["float32"])


def test_batched_udf_returning_a_scalar():
    prog, t, T = prog_t()
    with prog:
        (y,) = tl.udf(lambda v: 1.0, [data_x(t)], [()], ["float32"], batched=True)
        tl.sink(y, lambda v, p: None)
    with pytest.raises(tl.RuntimeFault, match=r"udf '<lambda>' .*\(batched\) output 0 at t = 0 is a scalar"):
        prog.compile({"T": 4}, backend="reference").run()


def test_make_env_negative_seed():
    with pytest.raises(tl.rl.envs.EnvError, match=r"seed must be an int >= 0, got -1"):
        tl.rl.make_env("trivial", 2, seed=-1)


def test_domain_string_in_a_one_dim_program():
    prog, t, T = prog_t()
    with prog:
        with pytest.raises(tl.ArgTypeError, match=r"tl.placeholder 'g': domain='t' \(a str\) is not a tuple of dims; "
                                                  r"pass e\.g\. domain=\(t,\) with t, = prog.dims"):
            tl.placeholder((), "float32", "t", name="g")
