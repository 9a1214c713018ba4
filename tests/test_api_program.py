"""Programs, dims and bounds: names, identity semantics, conditions, compile arguments."""

import numpy as np
import pytest

import timerl as tl


def test_program_dims_and_bounds():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    assert isinstance(i, tl.Dim) and isinstance(I, tl.Bound)
    assert (i.name, t.name, I.name, T.name) == ("i", "t", "I", "T")
    assert prog.dim("t") is t and prog.bound("T") is T
    assert tl.Program(["a", "b"]).dims[1].name == "b"
    with pytest.raises(KeyError):
        prog.dim("x")
    with pytest.raises(ValueError):
        tl.Program("t t")


def test_dim_identity_semantics():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    other = tl.Program("i t").dims[1]
    assert bool(t == t) and not bool(t != t)
    assert not bool(t == i) and bool(t != i)
    assert not bool(t == other)  # same name, another program
    assert bool(T == T) and not bool(T == I) and not bool(t == T)
    with prog:
        x = tl.placeholder((), "float32", (i, t))
    assert t in x.domain and T not in x.domain and other not in x.domain
    assert x.domain == (i, t) and x.domain != (t, i)
    d = {t: 1, i: 2, T: 3}
    assert d[t] == 1 and d[i] == 2 and d[T] == 3 and len({t, t, i}) == 2
    assert [i, t].index(t) == 1


@pytest.mark.parametrize("make", [lambda t, T: t > 0, lambda t, T: t < T - 1, lambda t, T: (t + 1) == T,
                                  lambda t, T: t == 0, lambda t, T: t != 0, lambda t, T: (t > 0) & (t < 3),
                                  lambda t, T: ~(t > 0)])
def test_other_conditions_have_no_truth_value(make):
    prog = tl.Program("t")
    c = make(prog.dims[0], prog.bounds[0])
    assert isinstance(c, tl.Cond)
    with pytest.raises(TypeError, match="truth value"):
        bool(c)


def test_index_arithmetic():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    for e in (t + 1, 1 + t, t - 2, 2 - t, 3 * t, t * 3, t // 2, t % 3, tl.min(t + 5, T - 1), tl.max(t - 1, 0), -t):
        assert isinstance(e, tl.Expr)
    with pytest.raises(TypeError):
        t // 0
    with pytest.raises(TypeError):
        t + 0.5
    with pytest.raises(TypeError):
        bool(t + 1)


def test_conditions_are_not_tensors():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        x = tl.tensor(np.zeros(3, "float32"), (t,))
        with pytest.raises(TypeError, match="dim_value"):
            tl.where(t > 0, x, x)


def test_compile_bounds_by_name_or_object():
    prog = tl.Program("t")
    (t,), (T,) = prog.dims, prog.bounds
    with prog:
        x = tl.tensor(np.arange(4, dtype="float32"), (t,))
        tl.sink(x, lambda v, p: None)
    assert prog.compile({T: 4}, backend="reference").bounds == {"T": 4}
    assert prog.compile({"T": 4}, backend="reference").bounds == {"T": 4}


def test_ops_outside_program_fail():
    with pytest.raises(tl.CompileError, match="with prog"):
        tl.zeros(3)


def test_pdg_records_nodes_and_edges():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        r = tl.tensor(np.zeros((2, 3), "float32"), (i, t), name="r")
        g = tl.placeholder((), "float32", (i, t), name="g")
        g[i, T - 1] = r
        g[i, t] = r + 0.5 * g[i, t + 1]
        tl.sink(g, lambda v, p: None)
    pdg = prog.pdg
    names = {pdg.rec(n).name for n in pdg.nodes}
    assert {"r", "g"} <= names
    gid = g.nid
    ins = pdg.inputs(gid)
    assert [e.pos for _, e in ins] == [0, 1]
    assert str(ins[0][1].cond) == "Eq(t, T - 1)" and ins[1][1].cond is not None
    dot = pdg.to_dot()
    assert dot.startswith("digraph") and "g" in dot and "->" in dot
    assert "merge" in str(pdg)
    assert len(pdg.roots()) == 1
