"""Random ops: values are a function of (seed, op creation index, point) only."""

import numpy as np
import pytest

import timerl as tl
from programs.collect import Collect


def sample(T=4, seed=0, extra_before=False, make=None):
    prog = tl.Program("i t")
    i, t = prog.dims
    c = Collect()
    with prog:
        if extra_before:
            tl.random.normal((3,), domain=(i, t))  # dead, but it takes creation index 0
        make = make or (lambda: tl.random.uniform((5,), domain=(i, t)))
        u = make()
        tl.sink(u, c("u"))
    prog.compile({"I": 2, "T": T}, backend="reference", seed=seed).run()
    return c["u"]


def test_same_seed_same_values_and_reruns_repeat():
    a, b = sample(), sample()
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    prog = tl.Program("t")
    c = Collect()
    with prog:
        tl.sink(tl.random.normal((3,), domain=prog.dims), c("n"))
    exe = prog.compile({"T": 3}, backend="reference", seed=5)
    exe.run()
    first = dict(c["n"])
    c["n"].clear()
    exe.run()
    assert all((first[k] == c["n"][k]).all() for k in first)


def test_different_seed_points_and_ops_differ():
    a, b = sample(seed=0), sample(seed=1)
    assert not np.allclose(a[(0, 0)], b[(0, 0)])
    vals = np.stack(list(a.values()))
    assert len({v.tobytes() for v in vals}) == len(vals)  # every point its own stream
    assert len(np.unique(vals)) == vals.size
    c = sample(extra_before=True)  # another creation index
    assert not np.allclose(a[(0, 0)], c[(0, 0)])


def test_values_at_a_point_do_not_depend_on_bounds():
    small, big = sample(T=3), sample(T=7)
    for k in small:
        np.testing.assert_array_equal(small[k], big[k])


def test_uniform_range_and_moments():
    prog = tl.Program("t")
    c = Collect()
    with prog:
        u = tl.random.uniform((2000,), domain=prog.dims, low=-2.0, high=3.0)
        z = tl.random.normal((2000,), domain=prog.dims)
        tl.sink([u, z], c("uz"))
    prog.compile({"T": 2}, backend="reference").run()
    u = np.concatenate([v[0] for v in c["uz"].values()])
    z = np.concatenate([v[1] for v in c["uz"].values()])
    assert u.dtype == np.float32 and u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.15 and abs(z.mean()) < 0.1 and abs(z.std() - 1) < 0.1


def test_uniform_float32_never_reaches_high():
    prog = tl.Program("t")
    c = Collect()
    with prog:
        tl.sink(tl.random.uniform((50000,), domain=prog.dims, low=0.0, high=1e-30), c("u"))
    prog.compile({"T": 1}, backend="reference").run()
    assert (c["u"][(0,)] < np.float32(1e-30)).all()


def test_categorical_frequencies_match_softmax():
    logits = np.array([0.0, 1.0, -1.0, 2.0], "float32")
    prog = tl.Program("t")
    c = Collect()
    with prog:
        lg = tl.const(np.broadcast_to(logits, (500, 4)).copy(), name="logits")
        s = tl.random.categorical(lg, domain=prog.dims)
        assert s.shape == (500,) and s.dtype == np.int64 and s.domain == prog.dims
        tl.sink(s, c("s"))
    prog.compile({"T": 8}, backend="reference").run()
    draws = np.concatenate(list(c["s"].values()))
    freq = np.bincount(draws, minlength=4) / draws.size
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(freq, p, atol=0.03)


def test_categorical_over_a_tensor_of_logits():
    prog = tl.Program("t")
    (t,) = prog.dims
    c = Collect()
    with prog:
        lg = tl.tensor(np.array([[0, -50, -50], [-50, -50, 0], [-50, 0, -50]], "float32"), (t,))
        tl.sink(tl.random.categorical(lg), c("a"))
    prog.compile({"T": 3}, backend="reference").run()
    assert [int(c["a"][(k,)]) for k in range(3)] == [0, 2, 1]


def test_permutation_is_a_fresh_permutation_per_point():
    prog = tl.Program("t")
    c = Collect()
    with prog:
        p = tl.random.permutation(10, domain=prog.dims)
        assert p.shape == (10,) and p.dtype == np.int64
        tl.sink(p, c("p"))
    prog.compile({"T": 5}, backend="reference").run()
    perms = [c["p"][(k,)] for k in range(5)]
    for q in perms:
        assert sorted(q.tolist()) == list(range(10))
    assert len({q.tobytes() for q in perms}) == 5


@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_random_without_domain_is_one_value(dist):
    prog = tl.Program("t")
    (t,) = prog.dims
    c = Collect()
    with prog:
        r = getattr(tl.random, dist)((3,))
        assert r.domain == ()
        tl.sink(r + tl.dim_value(t) * 0, c("r"))
    prog.compile({"T": 3}, backend="reference").run()
    assert all((c["r"][(k,)] == c["r"][(0,)]).all() for k in range(3))
